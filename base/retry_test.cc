#include "base/retry.h"

#include <vector>

#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(RetryTest, CountsAttemptsUpToTheLimit) {
  ManualEnv env;
  Retry retry(&env, RetryPolicy::Jittered(absl::Milliseconds(10), 3));
  int tries = 0;
  while (retry.StartAttempt()) {
    ++tries;
    if (!retry.SleepBeforeRetry()) break;
  }
  EXPECT_EQ(tries, 3);
  EXPECT_EQ(retry.attempts(), 3);
  EXPECT_FALSE(retry.NextPause().has_value());
}

TEST(RetryTest, JitteredPausesStayWithinTheCap) {
  ManualEnv env;
  Retry retry(&env, RetryPolicy::Jittered(absl::Milliseconds(10)));
  for (int i = 0; i < 1000; ++i) {
    std::optional<absl::Duration> p = retry.NextPause();
    ASSERT_TRUE(p.has_value());
    EXPECT_GT(*p, absl::ZeroDuration());
    EXPECT_LE(*p, absl::Milliseconds(10));
  }
}

TEST(RetryTest, ExponentialCapWithoutJitterDoublesToTheCeiling) {
  ManualEnv env;
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(20);
  p.multiplier = 2;
  p.max_backoff = absl::Milliseconds(100);
  p.jitter = false;
  Retry retry(&env, p);
  std::vector<absl::Duration> pauses;
  for (int i = 0; i < 5; ++i) pauses.push_back(*retry.NextPause());
  EXPECT_EQ(pauses, (std::vector<absl::Duration>{absl::Milliseconds(20), absl::Milliseconds(40),
                                                 absl::Milliseconds(80), absl::Milliseconds(100),
                                                 absl::Milliseconds(100)}));
}

TEST(RetryTest, PausesAreCutShortAtTheDeadlineAndThenItGivesUp) {
  ManualEnv env;
  RetryPolicy p;
  p.initial_backoff = p.max_backoff = absl::Milliseconds(30);
  p.jitter = false;
  Retry retry(&env, p, env.MonotonicMicros() + 50'000);
  ASSERT_TRUE(retry.StartAttempt());
  ASSERT_TRUE(retry.SleepBeforeRetry());  // 30 ms
  ASSERT_TRUE(retry.StartAttempt());
  EXPECT_EQ(retry.NextPause(), absl::Milliseconds(20));  // only 20 ms left: the cap shrinks
  env.Advance(absl::Milliseconds(20));
  EXPECT_TRUE(retry.Expired());
  EXPECT_FALSE(retry.NextPause().has_value());
  EXPECT_FALSE(retry.StartAttempt());
  EXPECT_EQ(retry.attempts(), 2);
}

TEST(RetryTest, WithoutShorteningAPausePastTheDeadlineIsNotTaken) {
  ManualEnv env;
  RetryPolicy p;
  p.initial_backoff = p.max_backoff = absl::Milliseconds(30);
  p.jitter = false;
  p.shorten_at_deadline = false;
  Retry retry(&env, p, env.MonotonicMicros() + 50'000);
  ASSERT_TRUE(retry.StartAttempt());
  EXPECT_EQ(retry.NextPause(), absl::Milliseconds(30));
  env.Advance(absl::Milliseconds(30));
  EXPECT_FALSE(retry.NextPause().has_value());  // 30 ms would end past it
}

TEST(RetryTest, TheFirstAttemptAlwaysStarts) {
  ManualEnv env;
  env.Advance(absl::Seconds(1));
  Retry retry(&env, RetryPolicy{}, env.MonotonicMicros());  // already due
  EXPECT_TRUE(retry.Expired());
  EXPECT_TRUE(retry.StartAttempt());
  EXPECT_FALSE(retry.StartAttempt());
}

TEST(RetryTest, ADeadlineOfZeroMeansNone) {
  ManualEnv env;
  Retry retry(&env, RetryPolicy::Jittered(absl::Milliseconds(1), 3), 0);
  EXPECT_FALSE(retry.Expired());
  EXPECT_EQ(retry.Left(), absl::InfiniteDuration());
}

TEST(RetryTest, JitteredPausesNearTheDeadlineLeaveTimeForOneMoreAttempt) {
  ManualEnv env;
  Retry retry(&env, RetryPolicy::Jittered(absl::Milliseconds(50)), env.MonotonicMicros() + 10'000);
  ASSERT_TRUE(retry.StartAttempt());
  for (int i = 0; i < 200; ++i) {
    std::optional<absl::Duration> p = retry.NextPause();
    ASSERT_TRUE(p.has_value());
    EXPECT_LE(*p, absl::Milliseconds(10));  // drawn below the time left, not cut to it
  }
}

TEST(RetryTest, ScheduleRetryRunsOnTheEnvTimer) {
  ManualEnv env;
  Retry retry(&env, RetryPolicy::Jittered(absl::Milliseconds(5), 2));
  ASSERT_TRUE(retry.StartAttempt());
  bool ran = false;
  ASSERT_TRUE(retry.ScheduleRetry([&] { ran = true; }));
  EXPECT_FALSE(ran);
  env.Advance(absl::Milliseconds(5));
  EXPECT_TRUE(ran);
  ASSERT_TRUE(retry.StartAttempt());
  EXPECT_FALSE(retry.ScheduleRetry([] {}));  // out of attempts
}

}  // namespace
}  // namespace megastore
