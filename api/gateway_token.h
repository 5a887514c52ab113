// The gateway's sealed client-held state: read tokens (where a read stood,
// so a commit can be conditional on it) and query cursors (where the next
// page starts). Both are HMAC-sealed (base/token_mac.h) and web-safe
// base64, so a client can neither forge nor alter one, and neither is
// ever taken for the other. Internal to the gateway (api/gateway.cc).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "api/gateway.pb.h"
#include "base/token_mac.h"
#include "txn/transaction.h"

namespace megastore::gateway {

// The read token of transaction `t`'s read position.
std::string EncodeToken(const TokenMac& mac, const txn::Transaction& t);
// A token a client handed back, opened: InvalidArgument naming read_token
// if it is not base64, was altered, made up or sealed under another key.
absl::StatusOr<ReadToken> DecodeToken(const TokenMac& mac, const std::string& text);

// A query's cursor (the row after which its next page starts; "" for none).
std::string EncodeCursor(const TokenMac& mac, const std::string& cursor);
// A cursor a client handed back ("" for none), or InvalidArgument naming
// cursor.
absl::StatusOr<std::string> DecodeCursor(const TokenMac& mac, const std::string& text);

}  // namespace megastore::gateway
