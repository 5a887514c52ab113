#include "base/delayed_transport.h"

#include <memory>

#include "base/strings.h"

namespace megastore {

DelayedTransport::DelayedTransport(Env* env, Transport* inner, OneWay one_way)
    : env_(env), inner_(inner), one_way_(std::move(one_way)) {}

DelayedTransport::~DelayedTransport() { life_->End(); }

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
    env_->Schedule(timeout, [life = life_, parked, to = std::string(to)] {
      Lifetime::Run(life, [&] {
        (*parked)(absl::DeadlineExceededError(
            StrCat("no reply from ", to, ": its round trip is longer than the timeout")));
      });
    });
    return;
  }
  auto body = std::make_shared<std::string>(std::move(request));
  Env* env = env_;
  env_->Schedule(delay, [env, life = life_, inner = inner_, parked, body, delay, inner_timeout,
                         to = std::string(to), method = std::string(method)] {
    Lifetime::Run(life, [&] {
      inner->Call(to, method, std::move(*body), inner_timeout,
                  [env, life, parked, delay](absl::StatusOr<std::string> reply) {
                    auto r = std::make_shared<absl::StatusOr<std::string>>(std::move(reply));
                    env->Schedule(delay, [life, parked, r] {
                      Lifetime::Run(life, [&] { (*parked)(std::move(*r)); });
                    });
                  });
    });
  });
}

}  // namespace megastore
