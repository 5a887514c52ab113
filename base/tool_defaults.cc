#include "base/tool_defaults.h"

#include <cstdlib>
#include <filesystem>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/strings.h"

namespace megastore {

namespace {

// rc key -> (environment variable, whether its value is a path).
const std::map<std::string, std::pair<const char*, bool>>& Keys() {
  static const auto* keys = new std::map<std::string, std::pair<const char*, bool>>{
      {"config", {"MEGASTORE_CONFIG", true}},     {"tls-ca", {"MEGASTORE_TLS_CA", true}},
      {"tls-cert", {"MEGASTORE_TLS_CERT", true}}, {"tls-key", {"MEGASTORE_TLS_KEY", true}},
      {"output", {"MEGASTORE_OUTPUT", false}},
  };
  return *keys;
}

}  // namespace

std::string ToolRcPath() {
  if (const char* rc = std::getenv("MEGASTORE_RC"); rc != nullptr) return rc;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg != '\0')
    return StrCat(xdg, "/megastore/rc");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return StrCat(home, "/.config/megastore/rc");
  return "";
}

absl::Status LoadToolDefaults(const std::string& rc_path) {
  // An empty variable counts as unset, here and in the flags' defaults.
  if (const char* out = std::getenv("MEGASTORE_OUTPUT"); out != nullptr && *out != '\0' &&
                                                         std::string_view(out) != "text" &&
                                                         std::string_view(out) != "json")
    return absl::InvalidArgumentError(
        StrCat("MEGASTORE_OUTPUT=", out, ": the output is text or json"));
  if (rc_path.empty()) return absl::OkStatus();
  std::error_code ec;
  if (!std::filesystem::exists(rc_path, ec)) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadFileToString(rc_path, 64 << 10);
  if (!text.ok()) return absl::InvalidArgumentError(StrCat(rc_path, ": ", text.status().message()));
  const std::filesystem::path dir = std::filesystem::path(rc_path).parent_path();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos)
      line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    auto it = Keys().find(key);
    if (eq == absl::string_view::npos || it == Keys().end())
      return absl::InvalidArgumentError(StrCat(
          rc_path, ":", line_number,
          ": not \"KEY = VALUE\" with KEY one of config, tls-ca, tls-cert, tls-key, output"));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (value.empty())
      return absl::InvalidArgumentError(StrCat(rc_path, ":", line_number, ": ", key, " is empty"));
    const auto [variable, is_path] = it->second;
    if (is_path && std::filesystem::path(value).is_relative()) value = (dir / value).string();
    if (key == "output" && value != "text" && value != "json")
      return absl::InvalidArgumentError(
          StrCat(rc_path, ":", line_number, ": output is text or json, not ", value));
    if (const char* set = std::getenv(variable); set == nullptr || *set == '\0')
      ::setenv(variable, value.c_str(), /*overwrite=*/1);
  }
  return absl::OkStatus();
}

}  // namespace megastore
