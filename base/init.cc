#include "base/init.h"

#include "absl/synchronization/mutex.h"
#include "base/descriptors.h"
#include "base/logging.h"

namespace megastore {

void InitProcess() {
  LogToStderr();
  RaiseDescriptorLimit();
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace megastore
