// Logging and invariant checks.
//
// Logs go through spdlog (levels: trace, debug, info, warn, error). A broken
// invariant is a bug: MS_CHECK logs the condition and the source location and
// aborts, in every build type.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/strings.h"

namespace megastore {

// Sets the process-wide log level from its name ("trace", "debug", "info",
// "warn", "error", "off"). Returns false for an unknown name.
bool SetLogLevel(std::string_view level);

// Sends the logs to stderr (spdlog's default is stdout, which is the
// programs' own output: megastored's endpoints, msadmin's reports).
void LogToStderr();

// Sets how log lines look: "text" (the default: time, level, message) or
// "json" (one object per line: time in UTC, level, pid, thread, msg — for
// log collectors). Returns false for an unknown name.
bool SetLogFormat(std::string_view format);

// Keeps the last `n` warnings and errors the process logged, for status
// pages. Call once at start, before other threads log.
void KeepRecentErrors(size_t n = 20);
// Those lines, oldest first (empty if KeepRecentErrors was not called).
std::vector<std::string> RecentErrors();

// The event log of the status console: operator actions and other notable
// events (RecordEvent; the last 200 kept once KeepRecentErrors ran), with
// the recent warnings and errors merged in. RecordEvent also logs at info.
void RecordEvent(std::string_view text);
// Those lines, oldest first, as "YYYY-MM-DD HH:MM:SS.mmm LEVEL text" (UTC;
// LEVEL "info" for an event, else "warning", "error" or "critical").
std::vector<std::string> RecentEvents();

// Lets a call site log at most `per_second` lines a second, so that a peer
// sending garbage cannot fill the disk with warnings. Thread-safe.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(int per_second = 10) : per_second_(per_second) {}
  // True when a line may be logged now; `*suppressed` is then the number of
  // lines refused since the last one let through.
  bool Allow(uint64_t* suppressed);

 private:
  const int per_second_;
  std::atomic<int64_t> window_{0};  // the current second (steady clock)
  std::atomic<int> used_{0};        // lines let through in it
  std::atomic<uint64_t> refused_{0};
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

}  // namespace megastore

#define MS_LOG_TRACE(...) ::spdlog::trace(__VA_ARGS__)
#define MS_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define MS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define MS_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define MS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

// A warning logged at most ten times a second from this call site; the
// next line let through says how many were dropped.
#define MS_LOG_WARN_LIMITED(...)                                                               \
  do {                                                                                         \
    static ::megastore::LogRateLimiter ms_log_limiter_;                                        \
    if (uint64_t ms_suppressed_ = 0; ms_log_limiter_.Allow(&ms_suppressed_)) {                 \
      if (ms_suppressed_ > 0) ::spdlog::warn("({} similar lines suppressed)", ms_suppressed_); \
      ::spdlog::warn(__VA_ARGS__);                                                             \
    }                                                                                          \
  } while (0)

// MS_CHECK(cond) or MS_CHECK(cond, "format {}", args...).
#define MS_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::megastore::CheckFailed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

// Aborts unless `expr` (an absl::Status) is OK.
#define MS_CHECK_OK(expr)                                                               \
  do {                                                                                  \
    const ::absl::Status ms_check_status_ = (expr);                                     \
    if (!ms_check_status_.ok()) [[unlikely]] {                                          \
      ::megastore::CheckFailed(__FILE__, __LINE__, #expr, ms_check_status_.ToString()); \
    }                                                                                   \
  } while (0)
