// Reading a JSON gateway request body into its protobuf message, bounded
// before anything expensive happens: the nesting depth is checked by a
// linear scan first (a body nested 20,000 deep would otherwise cost the
// JSON parser tens of seconds of CPU), then protobuf's JSON mapping parses
// it with unknown fields refused.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace google::protobuf {
class Message;
}

namespace megastore::gateway {

inline constexpr int kDefaultMaxJsonDepth = 32;

// InvalidArgument if `json` nests objects and arrays deeper than
// `max_depth` (strings are skipped, escapes included), naming the byte
// offset where the limit is crossed.
absl::Status CheckJsonDepth(std::string_view json, int max_depth);

// Parses `body` into `request`: InvalidArgument naming the message type and
// what is wrong. If `too_deep` is given, it is set when the refusal is the
// nesting limit (callers count those apart).
absl::Status ParseRequest(std::string_view body, google::protobuf::Message* request,
                          int max_depth = kDefaultMaxJsonDepth, bool* too_deep = nullptr);

}  // namespace megastore::gateway
