#include "base/histogram.h"

#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(LatencyHistogramTest, BucketsAreCumulativeInSeconds) {
  LatencyHistogram h;
  h.Observe(300);     // 0.3 ms
  h.Observe(15'000);  // 15 ms
  h.Observe(15'000);
  h.Observe(9'000'000);  // 9 s: only +Inf
  EXPECT_EQ(h.count(), 4u);
  const std::string text = h.Prometheus("x_seconds", "test", "op=\"commit\"");
  EXPECT_NE(text.find("# TYPE x_seconds histogram"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{op=\"commit\",le=\"0.0005\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("x_seconds_bucket{op=\"commit\",le=\"0.01\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("x_seconds_bucket{op=\"commit\",le=\"0.02\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("x_seconds_bucket{op=\"commit\",le=\"5\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{op=\"commit\",le=\"+Inf\"} 4\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("x_seconds_sum{op=\"commit\"} 9.0303\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_count{op=\"commit\"} 4\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace megastore
