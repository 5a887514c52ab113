// String building for messages.
//
// Debian's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat does not take std::string_view. StrCat
// here takes anything fmt can format, std::string_view included.
#pragma once

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

// fmt (and so StrCat and the MS_LOG_* macros) formats absl::string_view,
// e.g. absl::Status::message(), like any string.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace megastore {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

// absl::string_view (e.g. absl::Status::message()) as std::string_view.
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }
inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// `s` with the characters HTML gives meaning to (< > & ") escaped.
inline std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// `s` escaped for the inside of a JSON string (quotes, backslashes and
// control characters; other bytes pass through).
inline std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}
inline std::string JsonEscape(absl::string_view s) { return JsonEscape(ToStd(s)); }
inline std::string JsonEscape(const std::string& s) { return JsonEscape(std::string_view(s)); }
inline std::string JsonEscape(const char* s) { return JsonEscape(std::string_view(s)); }

}  // namespace megastore
