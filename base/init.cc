#include "base/init.h"

#include "absl/synchronization/mutex.h"

namespace megastore {

void InitProcess() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace megastore
