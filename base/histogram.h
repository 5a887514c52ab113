// A latency histogram with fixed buckets, for /metrics (Prometheus text
// format: cumulative `le` buckets, _sum and _count). Thread-safe, lock-free.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace megastore {

class LatencyHistogram {
 public:
  // Upper bounds of the buckets, in milliseconds (the last is +Inf).
  static constexpr std::array<double, 13> kBoundsMs = {0.5, 1,   2,   5,    10,   20,   50,
                                                       100, 200, 500, 1000, 5000, 1e300};

  void Observe(int64_t micros) {
    const double ms = static_cast<double>(micros) / 1000.0;
    size_t i = 0;
    while (i + 1 < kBoundsMs.size() && ms > kBoundsMs[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_micros_.fetch_add(micros, std::memory_order_relaxed);
  }

  uint64_t count() const {
    uint64_t n = 0;
    for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
    return n;
  }

  // The Prometheus text of this histogram as `name` (seconds), with
  // `labels` ("" or `key="value",...`) on every line.
  std::string Prometheus(std::string_view name, std::string_view help,
                         std::string_view labels = "") const;
  // Only its samples, for a family with several label sets (one # HELP and
  // # TYPE header before them all).
  std::string PrometheusSamples(std::string_view name, std::string_view labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsMs.size()> counts_{};
  std::atomic<int64_t> sum_micros_{0};
};

}  // namespace megastore
