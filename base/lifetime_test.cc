#include "base/lifetime.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(LifetimeTest, CallbacksRunUntilTheEndAndNotAfter) {
  auto life = std::make_shared<Lifetime>();
  int ran = 0;
  EXPECT_TRUE(Lifetime::Run(life, [&] { ++ran; }));
  {
    Lifetime::Entry outer(life);
    ASSERT_TRUE(outer);
    Lifetime::Entry inner(life);  // nested on one thread
    EXPECT_TRUE(inner);
  }
  life->End();
  EXPECT_TRUE(life->ended());
  EXPECT_FALSE(Lifetime::Run(life, [&] { ++ran; }));
  Lifetime::Entry late(life);
  EXPECT_FALSE(late);
  EXPECT_EQ(ran, 1);
}

TEST(LifetimeTest, TheEndWaitsForACallbackInsideOnAnotherThread) {
  auto life = std::make_shared<Lifetime>();
  absl::Notification inside, release;
  std::atomic<bool> left{false};
  std::thread callback([&] {
    Lifetime::Run(life, [&] {
      inside.Notify();
      release.WaitForNotification();
      left = true;
    });
  });
  inside.WaitForNotification();
  std::atomic<bool> ended{false};
  std::thread ender([&] {
    life->End();
    ended = true;
  });
  // End() refuses new entries at once, but returns only after the callback left.
  while (!life->ended()) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(Lifetime::Run(life, [] {}));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(ended);
  release.Notify();
  ender.join();
  callback.join();
  EXPECT_TRUE(ended);
  EXPECT_TRUE(left);
}

}  // namespace
}  // namespace megastore
