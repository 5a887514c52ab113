#include "base/init.h"

#include <google/protobuf/stubs/logging.h>

#include "absl/synchronization/mutex.h"
#include "base/descriptors.h"
#include "base/logging.h"

namespace megastore {

namespace {

// Protobuf's own messages (one per malformed message a peer sends, such as
// a string field that is not UTF-8) go to the process's log, rate-limited,
// instead of straight to stderr without bound.
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_FATAL) {
    MS_LOG_ERROR("protobuf {}:{}: {}", file, line, message);
    return;
  }
  MS_LOG_WARN_LIMITED("protobuf: {}", message);
}

}  // namespace

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&ProtobufLog); }

void InitProcess() {
  LogToStderr();
  RouteProtobufLogs();
  RaiseDescriptorLimit();
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace megastore
