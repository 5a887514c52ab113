// Transport: request/reply messaging between named nodes (docs/architecture.md).
//
// The replication library, replication servers and coordinators talk to
// each other only through this interface, so the simulator can deliver their
// messages on virtual time with loss, duplication, delay and partitions, and
// production can carry them over the RPC layer (base/rpc/).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace megastore {

// Answers one request exactly once: a reply body, or an error status.
using Responder = absl::AnyInvocable<void(absl::StatusOr<std::string> reply)>;

// A server's entry point for one method. It may answer at once or later,
// from any thread; it must answer (or drop the responder, which the
// transport turns into an error for the caller).
using Handler = std::function<void(std::string request, Responder respond)>;

class Transport {
 public:
  using ReplyCallback = absl::AnyInvocable<void(absl::StatusOr<std::string> reply)>;

  virtual ~Transport() = default;

  // Sends `request` to `method` at node `to`. `done` runs exactly once: with
  // the reply, with the handler's error, or with Unavailable /
  // DeadlineExceeded when no answer came within `timeout`. Callers treat any
  // error other than the handler's own as "the request may or may not have
  // been handled". `done` may run before Call returns.
  virtual void Call(std::string_view to, std::string_view method, std::string request,
                    absl::Duration timeout, ReplyCallback done) = 0;
};

}  // namespace megastore
