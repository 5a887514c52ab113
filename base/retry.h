// Retry: one retry policy for every loop of attempts in the tree — the
// transaction runners (blocking and asynchronous), requests that are safe to
// repeat, and the cell client's stale-location retries.
//
// A Retry counts attempts against RetryPolicy::max_attempts and an
// operation deadline on the Env's monotonic clock, and hands out the pause
// before each retry: a cap that starts at initial_backoff and grows by
// `multiplier` up to max_backoff (and never beyond the time left), drawn
// uniformly from (0, cap] with the Env's seeded randomness ("full jitter",
// so writers that collided spread out) unless jitter is off. Time comes only from the Env, so the
// same code runs on virtual time in the simulator.
//
//   Retry retry(env, policy, deadline);
//   while (retry.StartAttempt()) {
//     absl::Status s = Try();
//     if (s.ok() || !Transient(s)) return s;
//     if (!retry.SleepBeforeRetry()) return s;
//   }
//
// Not thread-safe: one Retry belongs to one operation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/time/time.h"
#include "base/env.h"

namespace megastore {

struct RetryPolicy {
  // Attempts in all, the first included; 0: as many as the deadline allows.
  int max_attempts = 0;
  // The cap of the first pause, its growth per retry, and its ceiling.
  absl::Duration initial_backoff = absl::Milliseconds(20);
  double multiplier = 2.0;
  absl::Duration max_backoff = absl::Milliseconds(500);
  // Pauses drawn from (0, cap]; false: exactly the cap.
  bool jitter = true;
  // The cap is never longer than the time left before the deadline (a
  // jittered pause is drawn below both, so one more attempt still has time),
  // or, when false, a pause that would end past the deadline is not taken:
  // the operation gives up at once.
  bool shorten_at_deadline = true;

  // A constant cap: pauses drawn from (0, max] every time.
  static RetryPolicy Jittered(absl::Duration max, int max_attempts = 0) {
    RetryPolicy p;
    p.max_attempts = max_attempts;
    p.initial_backoff = max;
    p.multiplier = 1.0;
    p.max_backoff = max;
    return p;
  }
};

class Retry {
 public:
  // `deadline`: a time of env->MonotonicMicros(); 0: none.
  Retry(Env* env, RetryPolicy policy, int64_t deadline = 0);

  // Counts the attempt about to start. False if none may: the attempts are
  // used up, or the deadline has passed (past the first attempt, which
  // always starts).
  bool StartAttempt();
  // Attempts started so far, and whether the policy allows another.
  int attempts() const { return attempts_; }
  bool attempts_left() const {
    return policy_.max_attempts <= 0 || attempts_ < policy_.max_attempts;
  }

  // After a failed attempt: the pause before the next one, or nullopt if
  // no next attempt may be made (attempts used up, out of time).
  std::optional<absl::Duration> NextPause();
  // NextPause, slept on the Env (a blocking caller). False if there is no
  // next attempt.
  bool SleepBeforeRetry();
  // NextPause, then `fn` on the Env's timer (an asynchronous caller). False,
  // and `fn` dropped, if there is no next attempt.
  bool ScheduleRetry(std::function<void()> fn);

  int64_t deadline() const { return deadline_; }
  // Whether a deadline was given and has passed.
  bool Expired() const;
  // Time left before the deadline (InfiniteDuration if none).
  absl::Duration Left() const;

 private:
  Env* const env_;
  const RetryPolicy policy_;
  const int64_t deadline_;
  int attempts_ = 0;
  absl::Duration cap_;
};

}  // namespace megastore
