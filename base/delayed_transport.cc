#include "base/delayed_transport.h"

#include <memory>

#include "base/strings.h"

namespace megastore {

void DelayedTransport::Call(std::string_view to, std::string_view method, std::string request,
                            absl::Duration timeout, ReplyCallback done) {
  const absl::Duration delay = one_way_(to);
  if (delay <= absl::ZeroDuration())
    return inner_->Call(to, method, std::move(request), timeout, std::move(done));
  // Env timers take copyable functions: park the move-only parts.
  auto parked = std::make_shared<ReplyCallback>(std::move(done));
  const absl::Duration inner_timeout = timeout - 2 * delay;
  if (inner_timeout <= absl::ZeroDuration()) {
    // It could never come back in time: the caller hears so when it would.
    env_->Schedule(timeout, [parked, to = std::string(to)] {
      (*parked)(absl::DeadlineExceededError(
          StrCat("no reply from ", to, ": its round trip is longer than the timeout")));
    });
    return;
  }
  auto body = std::make_shared<std::string>(std::move(request));
  env_->Schedule(delay, [this, parked, body, delay, inner_timeout, to = std::string(to),
                         method = std::string(method)] {
    inner_->Call(to, method, std::move(*body), inner_timeout,
                 [this, parked, delay](absl::StatusOr<std::string> reply) {
                   auto r = std::make_shared<absl::StatusOr<std::string>>(std::move(reply));
                   env_->Schedule(delay, [parked, r] { (*parked)(std::move(*r)); });
                 });
  });
}

}  // namespace megastore
