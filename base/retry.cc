#include "base/retry.h"

#include <algorithm>

namespace megastore {

Retry::Retry(Env* env, RetryPolicy policy, int64_t deadline)
    : env_(env), policy_(policy), deadline_(deadline), cap_(policy.initial_backoff) {}

bool Retry::StartAttempt() {
  if (!attempts_left()) return false;
  if (attempts_ > 0 && Expired()) return false;
  ++attempts_;
  return true;
}

bool Retry::Expired() const { return deadline_ != 0 && env_->MonotonicMicros() >= deadline_; }

absl::Duration Retry::Left() const {
  if (deadline_ == 0) return absl::InfiniteDuration();
  return absl::Microseconds(std::max<int64_t>(0, deadline_ - env_->MonotonicMicros()));
}

std::optional<absl::Duration> Retry::NextPause() {
  if (!attempts_left() || Expired()) return std::nullopt;
  absl::Duration cap =
      std::clamp(cap_, absl::Microseconds(1), std::max(absl::Microseconds(1), policy_.max_backoff));
  cap_ = std::min(policy_.max_backoff, cap_ * std::max(1.0, policy_.multiplier));
  const absl::Duration left = Left();
  if (cap > left) {
    if (!policy_.shorten_at_deadline) return std::nullopt;
    cap = std::max(left, absl::Microseconds(1));
  }
  if (!policy_.jitter) return cap;
  const uint64_t us = static_cast<uint64_t>(absl::ToInt64Microseconds(cap));
  return absl::Microseconds(static_cast<int64_t>(env_->Random64() % us) + 1);
}

bool Retry::SleepBeforeRetry() {
  std::optional<absl::Duration> pause = NextPause();
  if (!pause) return false;
  env_->SleepFor(*pause);
  return true;
}

bool Retry::ScheduleRetry(std::function<void()> fn) {
  std::optional<absl::Duration> pause = NextPause();
  if (!pause) return false;
  env_->Schedule(*pause, std::move(fn));
  return true;
}

}  // namespace megastore
