#include "base/buggify.h"

#include <string>

#include "gtest/gtest.h"

namespace megastore::buggify {
namespace {

MS_FAULT_POINT(kTestPointA, "a test fault point");
MS_FAULT_POINT(kTestPointB, "another test fault point");

// Fires `p` n times; how many said yes.
int Count(FaultPoint& p, int n) {
  int fired = 0;
  for (int i = 0; i < n; ++i) fired += p.Fire() ? 1 : 0;
  return fired;
}

TEST(BuggifyTest, NeverFiresOutsideASimulation) {
  Disable();
  EXPECT_FALSE(Enabled());
  EXPECT_EQ(Count(kTestPointA, 10000), 0);
}

TEST(BuggifyTest, APointIsActiveInAboutAQuarterOfTheSeeds) {
  int active = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    Enable(seed, 1.0);  // an active point always fires
    active += kTestPointA.Fire() ? 1 : 0;
  }
  Disable();
  EXPECT_GT(active, 60);
  EXPECT_LT(active, 140);
}

TEST(BuggifyTest, ASeedReplaysTheSameFaults) {
  auto run = [](uint64_t seed) {
    Enable(seed, 0.3);
    std::string fired;
    for (int i = 0; i < 200; ++i) {
      fired += kTestPointA.Fire() ? 'a' : '-';
      fired += kTestPointB.Fire() ? 'b' : '-';
    }
    Disable();
    return fired;
  };
  bool any_fired = false;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::string once = run(seed);
    EXPECT_EQ(once, run(seed)) << seed;
    any_fired |= once.find_first_of("ab") != std::string::npos;
  }
  EXPECT_TRUE(any_fired);  // the comparison above compared something
}

TEST(BuggifyTest, SuspendKeepsEveryPointQuietAndUncounted) {
  uint64_t seed = 1;
  while (true) {  // a seed where A is active
    Enable(seed, 1.0);
    if (kTestPointA.Fire()) break;
    ++seed;
  }
  ResetCounts();
  {
    Suspend quiet;
    EXPECT_FALSE(Enabled());
    EXPECT_EQ(Count(kTestPointA, 100), 0);
  }
  EXPECT_TRUE(Enabled());
  EXPECT_TRUE(kTestPointA.Fire());
  Disable();
  for (const PointStats& s : Stats()) {
    if (s.name == "kTestPointA") {
      EXPECT_EQ(s.evaluated, 1u);  // the one Fire() after the Suspend ended
    }
  }
}

TEST(BuggifyTest, CountsWhatWasAskedAndWhatFired) {
  ResetCounts();
  uint64_t seed = 1;
  while (true) {  // a seed where A is active
    Enable(seed, 1.0);
    if (kTestPointA.Fire()) break;
    ++seed;
  }
  EXPECT_EQ(Count(kTestPointA, 9), 9);
  Disable();
  EXPECT_EQ(Count(kTestPointA, 5), 0);  // not counted: disabled
  bool found = false;
  for (const PointStats& s : Stats()) {
    if (s.name != "kTestPointA") continue;
    found = true;
    EXPECT_EQ(s.what, "a test fault point");
    EXPECT_GE(s.evaluated, 10u);
    EXPECT_EQ(s.fired, 10u);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace megastore::buggify
