#include "api/gateway_token.h"

#include "absl/strings/escaping.h"
#include "base/strings.h"

namespace megastore::gateway {

std::string EncodeToken(const TokenMac& mac, const txn::Transaction& t) {
  ReadToken token;
  token.set_root(t.group().root());
  token.set_position(t.position().position);
  token.set_timestamp(t.position().timestamp);
  token.set_next_leader(t.position().next_leader);
  token.set_replica(t.position().replica);
  token.set_inconsistent(t.position().latest);
  return absl::WebSafeBase64Escape(mac.Seal(token.SerializeAsString()));
}

absl::StatusOr<ReadToken> DecodeToken(const TokenMac& mac, const std::string& text) {
  std::string sealed;
  if (!absl::WebSafeBase64Unescape(text, &sealed))
    return absl::InvalidArgumentError(
        "read_token: not base64 (pass back the token a read returned, unchanged)");
  absl::StatusOr<std::string> raw = mac.Open(sealed);
  if (!raw.ok()) return absl::InvalidArgumentError(StrCat("read_token: ", raw.status().message()));
  ReadToken token;
  if (!token.ParseFromString(*raw)) return absl::InvalidArgumentError("read_token: unreadable");
  return token;
}

namespace {

// A cursor's payload starts with 0xFF, which no ReadToken encoding does: a
// cursor is never taken for a read token, nor the other way round.
constexpr char kCursorMark = '\xff';

}  // namespace

std::string EncodeCursor(const TokenMac& mac, const std::string& cursor) {
  if (cursor.empty()) return "";
  return absl::WebSafeBase64Escape(mac.Seal(std::string(1, kCursorMark) + cursor));
}

absl::StatusOr<std::string> DecodeCursor(const TokenMac& mac, const std::string& text) {
  if (text.empty()) return std::string();
  std::string sealed;
  if (!absl::WebSafeBase64Unescape(text, &sealed))
    return absl::InvalidArgumentError(
        "cursor: not base64 (pass back the cursor a query returned, unchanged)");
  absl::StatusOr<std::string> raw = mac.Open(sealed);
  if (!raw.ok()) return absl::InvalidArgumentError(StrCat("cursor: ", raw.status().message()));
  if (raw->empty() || (*raw)[0] != kCursorMark)
    return absl::InvalidArgumentError("cursor: not a query cursor");
  return raw->substr(1);
}

}  // namespace megastore::gateway
