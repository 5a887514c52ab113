#include "base/delayed_transport.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "base/strings.h"

namespace megastore {

// What the delay timers hold: they run only while the transport lives.
struct DelayedTransport::State {
  explicit State(Transport* t) : inner(t) {}
  Transport* const inner;
  absl::Mutex mu;
  bool dead ABSL_GUARDED_BY(mu) = false;
  int active ABSL_GUARDED_BY(mu) = 0;

  // Runs `fn` unless the transport is gone.
  template <typename Fn>
  void Enter(Fn fn) {
    {
      absl::MutexLock lock(&mu);
      if (dead) return;
      ++active;
    }
    fn();
    absl::MutexLock lock(&mu);
    --active;
  }
};

DelayedTransport::DelayedTransport(Env* env, Transport* inner, OneWay one_way)
    : env_(env), one_way_(std::move(one_way)), state_(std::make_shared<State>(inner)) {}

DelayedTransport::~DelayedTransport() {
  absl::MutexLock lock(&state_->mu);
  state_->dead = true;
  state_->mu.Await(absl::Condition(
      +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->active == 0; }, state_.get()));
}

void DelayedTransport::Call(std::string_view to, std::string_view method, std::string request,
                            absl::Duration timeout, ReplyCallback done) {
  const absl::Duration delay = one_way_(to);
  if (delay <= absl::ZeroDuration())
    return state_->inner->Call(to, method, std::move(request), timeout, std::move(done));
  // Env timers take copyable functions: park the move-only parts.
  auto parked = std::make_shared<ReplyCallback>(std::move(done));
  const absl::Duration inner_timeout = timeout - 2 * delay;
  if (inner_timeout <= absl::ZeroDuration()) {
    // It could never come back in time: the caller hears so when it would.
    env_->Schedule(timeout, [state = state_, parked, to = std::string(to)] {
      state->Enter([&] {
        (*parked)(absl::DeadlineExceededError(
            StrCat("no reply from ", to, ": its round trip is longer than the timeout")));
      });
    });
    return;
  }
  auto body = std::make_shared<std::string>(std::move(request));
  Env* env = env_;
  env_->Schedule(delay, [env, state = state_, parked, body, delay, inner_timeout,
                         to = std::string(to), method = std::string(method)] {
    state->Enter([&] {
      state->inner->Call(to, method, std::move(*body), inner_timeout,
                         [env, state, parked, delay](absl::StatusOr<std::string> reply) {
                           auto r = std::make_shared<absl::StatusOr<std::string>>(std::move(reply));
                           env->Schedule(delay, [state, parked, r] {
                             state->Enter([&] { (*parked)(std::move(*r)); });
                           });
                         });
    });
  });
}

}  // namespace megastore
