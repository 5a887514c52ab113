#include "tools/megastored/console.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::server {
namespace {

using ::testing::HasSubstr;

// Two samples of one latency histogram, `added` observations per bucket
// between them (cumulative, Prometheus style: le="+Inf" counts them all).
std::vector<MetricsHistory::Sample> Histogram(
    const std::vector<std::pair<std::string, double>>& added) {
  std::vector<MetricsHistory::Sample> samples(2);
  samples[0].unix_micros = 1'000'000'000'000'000;
  samples[1].unix_micros = samples[0].unix_micros + 10'000'000;
  double cumulative = 0;
  for (const auto& [le, n] : added) {
    cumulative += n;
    const std::string key = "megastore_client_commit_seconds_bucket{le=\"" + le + "\"}";
    samples[0].values[key] = 5;  // counts before the interval (all in the first bucket)
    samples[1].values[key] = 5 + cumulative;
  }
  return samples;
}

TEST(ConsoleChartsTest, QuantilesAreTheBucketsUpperBounds) {
  const std::string json =
      ChartsJson(Histogram({{"0.001", 0}, {"0.005", 60}, {"0.05", 40}, {"5", 0}, {"+Inf", 0}}));
  EXPECT_THAT(json, HasSubstr("client p50\",\"points\":[[1000000010.000,5]],\"atLeast\":[]"));
  EXPECT_THAT(json, HasSubstr("client p99\",\"points\":[[1000000010.000,50]],\"atLeast\":[]"));
}

// A p99 beyond the last finite bucket is not known, only its lower bound:
// drawn at that bound and marked as "at least".
TEST(ConsoleChartsTest, AQuantileInTheInfiniteBucketIsMarkedAsALowerBound) {
  const std::string json =
      ChartsJson(Histogram({{"0.001", 0}, {"0.005", 90}, {"5", 0}, {"+Inf", 10}}));
  EXPECT_THAT(json, HasSubstr("client p50\",\"points\":[[1000000010.000,5]],\"atLeast\":[]"));
  EXPECT_THAT(json, HasSubstr("client p99\",\"points\":[[1000000010.000,5000]],\"atLeast\":[0]"));
}

}  // namespace
}  // namespace megastore::server
