// Logging and invariant checks.
//
// Logs go through spdlog (levels: trace, debug, info, warn, error). A broken
// invariant is a bug: MS_CHECK logs the condition and the source location and
// aborts, in every build type.
#pragma once

#include <spdlog/spdlog.h>

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

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

}  // namespace megastore

#define MS_LOG_TRACE(...) ::spdlog::trace(__VA_ARGS__)
#define MS_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define MS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define MS_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define MS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

// MS_CHECK(cond) or MS_CHECK(cond, "format {}", args...).
#define MS_CHECK(cond, ...)                                              \
  do {                                                                   \
    if (!(cond)) [[unlikely]] {                                          \
      ::megastore::CheckFailed(__FILE__, __LINE__, #cond,                \
                               ::fmt::format("" __VA_ARGS__));           \
    }                                                                    \
  } while (0)

// Aborts unless `expr` (an absl::Status) is OK.
#define MS_CHECK_OK(expr)                                                \
  do {                                                                   \
    const ::absl::Status ms_check_status_ = (expr);                      \
    if (!ms_check_status_.ok()) [[unlikely]] {                           \
      ::megastore::CheckFailed(__FILE__, __LINE__, #expr,                \
                               ms_check_status_.ToString());             \
    }                                                                    \
  } while (0)
