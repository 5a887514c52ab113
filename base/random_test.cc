#include "base/random.h"

#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(RandomTest, UniformStaysInRangeAndCoversIt) {
  Random rng(3);
  bool seen[10] = {};
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = rng.Uniform(10);
    ASSERT_LT(v, 10u);
    seen[v] = true;
  }
  for (bool s : seen) EXPECT_TRUE(s);
}

TEST(RandomTest, BytesHaveRequestedLengthAndVary) {
  Random rng(5);
  EXPECT_EQ(rng.Bytes(0).size(), 0u);
  EXPECT_EQ(rng.Bytes(13).size(), 13u);
  EXPECT_NE(rng.Bytes(16), rng.Bytes(16));
}

TEST(RandomTest, NextDoubleIsInUnitInterval) {
  Random rng(9);
  for (int i = 0; i < 1000; ++i) {
    const double d = rng.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

}  // namespace
}  // namespace megastore
