#include "base/env.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(ManualEnvTest, TimersFireInDeadlineOrderOnlyWhenTheClockReachesThem) {
  ManualEnv env;
  std::vector<int> fired;
  env.Schedule(absl::Milliseconds(20), [&] { fired.push_back(2); });
  env.Schedule(absl::Milliseconds(10), [&] { fired.push_back(1); });
  const Env::TimerId cancelled = env.Schedule(absl::Milliseconds(15), [&] { fired.push_back(9); });
  EXPECT_TRUE(env.Cancel(cancelled));
  EXPECT_FALSE(env.Cancel(cancelled));
  env.Advance(absl::Milliseconds(9));
  EXPECT_TRUE(fired.empty());
  env.Advance(absl::Milliseconds(11));
  EXPECT_EQ(fired, (std::vector<int>{1, 2}));
}

TEST(ManualEnvTest, TimerSeesItsOwnDeadlineAndMayScheduleMore) {
  ManualEnv env(1000);
  std::vector<int64_t> seen;
  env.Schedule(absl::Microseconds(5), [&] {
    seen.push_back(env.MonotonicMicros());
    env.Schedule(absl::Microseconds(5), [&] { seen.push_back(env.MonotonicMicros()); });
  });
  env.Advance(absl::Microseconds(100));
  EXPECT_EQ(seen, (std::vector<int64_t>{5, 10}));
  EXPECT_EQ(env.MonotonicMicros(), 100);
  EXPECT_EQ(env.NowMicros(), 1100);
}

TEST(ManualEnvTest, WallClockCanJumpBackwardsButMonotonicCannot) {
  ManualEnv env(5000);
  env.SetNowMicros(10);
  EXPECT_EQ(env.NowMicros(), 10);
  EXPECT_EQ(env.MonotonicMicros(), 0);
  env.Advance(absl::Microseconds(3));
  EXPECT_EQ(env.NowMicros(), 13);
}

TEST(ManualEnvTest, SameSeedSameRandomSequence) {
  ManualEnv a(0, 42), b(0, 42), c(0, 43);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.Random64(), b.Random64());
  EXPECT_NE(a.Random64(), c.Random64());
}

TEST(RealEnvTest, ScheduledTimerRunsAndCancelledOneDoesNot) {
  RealEnv env(1);
  absl::Notification done;
  std::atomic<bool> cancelled_ran{false};
  const Env::TimerId id = env.Schedule(absl::Seconds(30), [&] { cancelled_ran = true; });
  env.Schedule(absl::Milliseconds(1), [&] { done.Notify(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(env.Cancel(id));
  EXPECT_FALSE(cancelled_ran);
}

// A timer due before the one the timer thread sleeps for wakes it: the
// early one does not wait for the late one.
TEST(RealEnvTest, AnEarlierTimerWakesTheThreadWaitingForALaterOne) {
  RealEnv env(1);
  env.Schedule(absl::Seconds(60), [] {});
  absl::SleepFor(absl::Milliseconds(20));  // the thread now sleeps for 60 s
  absl::Notification done;
  const absl::Time start = absl::Now();
  env.Schedule(absl::Milliseconds(10), [&] { done.Notify(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Later timers than the one it waits for need no wake-up, and still run.
  absl::Notification later;
  env.Schedule(absl::Milliseconds(30), [] {});
  env.Schedule(absl::Milliseconds(50), [&] { later.Notify(); });
  EXPECT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(20)));
}

// A cancelled timer's function may hold the last reference to something
// whose destructor schedules again: it is destroyed outside the Env's lock.
template <typename E>
void CancelDestroysTheFunctionOutsideTheLock(E& env) {
  struct SchedulesWhenDestroyed {
    Env* env;
    ~SchedulesWhenDestroyed() {
      env->Cancel(env->Schedule(absl::Hours(1), [] {}));
    }
  };
  auto held = std::make_shared<SchedulesWhenDestroyed>(SchedulesWhenDestroyed{&env});
  const Env::TimerId id = env.Schedule(absl::Hours(1), [held] {});
  held.reset();
  EXPECT_TRUE(env.Cancel(id));
}

TEST(ManualEnvTest, CancelDestroysTheFunctionOutsideTheLock) {
  ManualEnv env;
  CancelDestroysTheFunctionOutsideTheLock(env);
}

TEST(RealEnvTest, CancelDestroysTheFunctionOutsideTheLock) {
  RealEnv env(7);
  CancelDestroysTheFunctionOutsideTheLock(env);
}

// Likewise a function that ran: it is destroyed before the timer thread
// takes the lock again (else a destructor that schedules would deadlock it).
TEST(RealEnvTest, ATimersFunctionThatRanIsDestroyedOutsideTheLock) {
  RealEnv env(7);
  absl::Notification destroyed;
  struct SchedulesWhenDestroyed {
    Env* env;
    absl::Notification* destroyed;
    ~SchedulesWhenDestroyed() {
      env->Schedule(absl::ZeroDuration(), [n = destroyed] { n->Notify(); });
    }
  };
  // (Built in place: a temporary copy's destructor would schedule too.)
  std::shared_ptr<SchedulesWhenDestroyed> held(new SchedulesWhenDestroyed{&env, &destroyed});
  env.Schedule(absl::ZeroDuration(), [held] {});
  held.reset();
  EXPECT_TRUE(destroyed.WaitForNotificationWithTimeout(absl::Seconds(20)));
}

// Timers that never ran go with the Env, outside its lock; what they hold
// finds it stopping and schedules nothing (no timer thread started anew on
// a dying Env).
TEST(RealEnvTest, TimersLeftAtItsEndAreDestroyedAndScheduleNothing) {
  auto env = std::make_unique<RealEnv>(7);
  struct SchedulesWhenDestroyed {
    Env* env;
    Env::TimerId* got;
    ~SchedulesWhenDestroyed() {
      *got = env->Schedule(absl::ZeroDuration(), [] {});
    }
  };
  Env::TimerId got = 99;
  std::shared_ptr<SchedulesWhenDestroyed> held(new SchedulesWhenDestroyed{env.get(), &got});
  env->Schedule(absl::Hours(1), [held] {});
  held.reset();
  env.reset();
  EXPECT_EQ(got, 0u);
}

TEST(RealEnvTest, ClocksAreSane) {
  RealEnv env(1);
  // After 2020-01-01 in microseconds.
  EXPECT_GT(env.NowMicros(), int64_t{1577836800} * 1000000);
  const int64_t a = env.MonotonicMicros();
  EXPECT_GE(env.MonotonicMicros(), a);
}

}  // namespace
}  // namespace megastore

namespace megastore {
namespace {

TEST(ManualEnvTest, ConcurrentAdvancesNeverMoveTheClockBackwards) {
  ManualEnv env;
  std::atomic<bool> backwards{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      int64_t last = env.MonotonicMicros();
      for (int i = 0; i < 20000; ++i) {
        env.Advance(absl::Microseconds(1));
        const int64_t now = env.MonotonicMicros();
        if (now < last) backwards = true;
        last = now;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(backwards.load());
  EXPECT_LE(env.MonotonicMicros(), 80000);
  EXPECT_GE(env.MonotonicMicros(), 20000);
}

}  // namespace
}  // namespace megastore
