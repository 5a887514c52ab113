#include "base/logging.h"

#include <spdlog/sinks/ringbuffer_sink.h>

#include <cstdlib>
#include <memory>

namespace megastore {

bool SetLogLevel(std::string_view level) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum>
      kLevels[] = {{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
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
}  // namespace

void KeepRecentErrors(size_t n) {
  if (RecentSink()) return;
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(n);
  sink->set_level(spdlog::level::warn);
  sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  spdlog::default_logger()->sinks().push_back(sink);
  RecentSink() = sink;
}

std::vector<std::string> RecentErrors() {
  if (!RecentSink()) return {};
  return RecentSink()->last_formatted();
}

void CheckFailed(const char* file, int line, const char* condition,
                 const std::string& message) {
  spdlog::critical("{}:{}: check failed: {}{}{}", file, line, condition,
                   message.empty() ? "" : ": ", message);
  spdlog::shutdown();
  std::abort();
}

}  // namespace megastore
