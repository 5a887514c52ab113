// CallProto: one protobuf request/reply over a Transport.
#pragma once

#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/transport.h"

namespace megastore {

// Sends `request` to `method` at `node` and parses the reply as `Reply`.
// `done` runs exactly once, with the reply, the transport's or handler's
// error, or DataLoss if the reply does not parse. Like Transport::Call, it
// may run before CallProto returns.
template <typename Reply, typename Request>
void CallProto(Transport* transport, std::string_view node, std::string_view method,
               const Request& request, absl::Duration timeout,
               absl::AnyInvocable<void(absl::StatusOr<Reply>)> done) {
  transport->Call(
      node, method, request.SerializeAsString(), timeout,
      [m = std::string(method), done = std::move(done)](absl::StatusOr<std::string> r) mutable {
        if (!r.ok()) return done(r.status());
        Reply reply;
        if (!reply.ParseFromString(*r))
          return done(absl::DataLossError(absl::StrCat("unparsable reply to ", m)));
        done(std::move(reply));
      });
}

}  // namespace megastore
