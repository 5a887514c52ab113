// The gateway's counters (/metrics) and its bearer-token file.
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "api/gateway.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore {

void Gateway::Count(const std::string& path, int status, Refusal refusal) {
  std::lock_guard<std::mutex> l(stats_mu_);
  ++stats_.replies[{path, status}];
  switch (refusal) {
    case Refusal::kNone:
      break;
    case Refusal::kTooDeep:
      ++stats_.too_deep;
      break;
    case Refusal::kPageTooLarge:
      ++stats_.page_too_large;
      break;
    case Refusal::kBadReadToken:
      ++stats_.bad_read_token;
      break;
    case Refusal::kWrongMethod:
      ++stats_.wrong_method;
      break;
    case Refusal::kUnauthenticated:
      ++stats_.unauthenticated;
      break;
    case Refusal::kDenied:
      ++stats_.denied;
      break;
  }
}

GatewayStats Gateway::stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  return stats_;
}

std::string GatewayStatsMetrics(const GatewayStats& s) {
  std::string out =
      "# HELP megastore_gateway_replies_total Gateway replies, by endpoint and HTTP status.\n"
      "# TYPE megastore_gateway_replies_total counter\n";
  for (const auto& [key, n] : s.replies)
    out += StrCat("megastore_gateway_replies_total{endpoint=\"", key.first, "\",code=\"",
                  key.second, "\"} ", n, "\n");
  out +=
      "# HELP megastore_gateway_refusals_total Gateway requests refused by a limit or a seal: "
      "json_depth "
      "(--gateway-max-json-depth), page_limit (--gateway-max-page), read_token (forged, altered or "
      "foreign), "
      "method, token (an unknown bearer token), access (the access policy).\n"
      "# TYPE megastore_gateway_refusals_total counter\n";
  out += StrCat("megastore_gateway_refusals_total{reason=\"json_depth\"} ", s.too_deep, "\n",
                "megastore_gateway_refusals_total{reason=\"page_limit\"} ", s.page_too_large, "\n",
                "megastore_gateway_refusals_total{reason=\"read_token\"} ", s.bad_read_token, "\n",
                "megastore_gateway_refusals_total{reason=\"method\"} ", s.wrong_method, "\n",
                "megastore_gateway_refusals_total{reason=\"token\"} ", s.unauthenticated, "\n",
                "megastore_gateway_refusals_total{reason=\"access\"} ", s.denied, "\n");
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> LoadGatewayTokens(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 16 << 20));
  std::map<std::string, std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    constexpr absl::string_view kPrefix = "sha256:";
    if (parts.size() != 2 || parts[0].substr(0, kPrefix.size()) != kPrefix ||
        parts[0].size() != kPrefix.size() + 64 ||
        parts[0].find_first_not_of("0123456789abcdef", kPrefix.size()) != std::string_view::npos)
      return absl::InvalidArgumentError(
          StrCat(path, ":", line_number,
                 ": not \"sha256:HEX PRINCIPAL\" (msadmin acl token writes these lines)"));
    tokens[std::string(parts[0].substr(kPrefix.size()))] = std::string(parts[1]);
  }
  return tokens;
}

}  // namespace megastore
