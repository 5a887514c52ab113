#include "base/init.h"

#include "absl/synchronization/mutex.h"
#include "base/logging.h"

namespace megastore {

void InitProcess() {
  LogToStderr();
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace megastore
