#include "base/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

namespace megastore {

bool SetLogLevel(std::string_view level) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& [name, value] : kLevels) {
    if (name == level) {
      spdlog::set_level(value);
      return true;
    }
  }
  return false;
}

namespace {
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& RecentSink() {
  static auto* sink = new std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>();
  return *sink;
}

// The event log: warnings and errors from the logger, events written into
// it directly by RecordEvent.
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& EventSink() {
  static auto* sink = new std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>();
  return *sink;
}

// %* in a pattern: the message, escaped for a JSON string.
class JsonMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        JsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};
}  // namespace

void LogToStderr() {
  const auto level = spdlog::get_level();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(level);
}

bool SetLogFormat(std::string_view format) {
  std::unique_ptr<spdlog::formatter> formatter;
  if (format == "json") {
    auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    f->add_flag<JsonMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","pid":%P,"thread":%t,"msg":"%*"})");
    formatter = std::move(f);
  } else if (format == "text") {
    formatter = std::make_unique<spdlog::pattern_formatter>();
  } else {
    return false;
  }
  for (auto& sink : spdlog::default_logger()->sinks())
    if (sink != RecentSink() && sink != EventSink()) sink->set_formatter(formatter->clone());
  return true;
}

void RecordEvent(std::string_view text) {
  spdlog::info("{}", text);
  if (const auto& sink = EventSink(); sink != nullptr) {
    spdlog::details::log_msg msg(spdlog::source_loc{}, "", spdlog::level::info,
                                 spdlog::string_view_t(text.data(), text.size()));
    sink->log(msg);
  }
}

std::vector<std::string> RecentEvents() {
  if (!EventSink()) return {};
  // Both rings' lines start with their UTC time: merged in time order.
  std::vector<std::string> out = EventSink()->last_formatted();
  std::vector<std::string> warnings = RecentSink()->last_formatted();
  out.insert(out.end(), warnings.begin(), warnings.end());
  std::stable_sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.compare(0, 23, b, 0, 23) < 0;
  });
  return out;
}

void KeepRecentErrors(size_t n) {
  if (RecentSink()) return;
  auto events = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200);
  // Only RecordEvent writes into it (a flood of a peer's warnings cannot
  // push operators' actions out); RecentEvents adds the warnings.
  events->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      "%Y-%m-%d %H:%M:%S.%e %l %v", spdlog::pattern_time_type::utc));
  EventSink() = events;
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(n);
  sink->set_level(spdlog::level::warn);
  sink->set_formatter(std::make_unique<spdlog::pattern_formatter>("%Y-%m-%d %H:%M:%S.%e %l %v",
                                                                  spdlog::pattern_time_type::utc));
  spdlog::default_logger()->sinks().push_back(sink);
  RecentSink() = sink;
}

std::vector<std::string> RecentErrors() {
  if (!RecentSink()) return {};
  return RecentSink()->last_formatted();
}

bool LogRateLimiter::Allow(uint64_t* suppressed) {
  const int64_t second = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t window = window_.load();
  if (second != window && window_.compare_exchange_strong(window, second)) used_ = 0;
  if (used_.fetch_add(1) >= per_second_) {
    refused_.fetch_add(1);
    return false;
  }
  *suppressed = refused_.exchange(0);
  return true;
}

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  spdlog::critical("{}:{}: check failed: {}{}{}", file, line, condition,
                   message.empty() ? "" : ": ", message);
  spdlog::shutdown();
  std::abort();
}

}  // namespace megastore
