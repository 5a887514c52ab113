#include "base/logging.h"

#include <cstdlib>

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

void CheckFailed(const char* file, int line, const char* condition,
                 const std::string& message) {
  spdlog::critical("{}:{}: check failed: {}{}{}", file, line, condition,
                   message.empty() ? "" : ": ", message);
  spdlog::shutdown();
  std::abort();
}

}  // namespace megastore
