// Small statistics helpers for benchmark reports.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"

namespace megastore::tools {

// The median of `v` (the mean of the middle two for an even count); v must
// not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs `clients` threads doing `op(thread, i)` until `seconds` pass; returns
// operations per second. Stops early with the first error.
template <typename Op>
absl::StatusOr<double> Timed(int clients, double seconds, Env* env, Op op) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0};
  std::vector<absl::Status> errors(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  const int64_t start = env->MonotonicMicros();
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; !stop; ++i) {
        absl::Status s = op(t, i);
        if (!s.ok()) {
          errors[static_cast<size_t>(t)] = s;
          stop = true;
          return;
        }
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  while (!stop && env->MonotonicMicros() - start < static_cast<int64_t>(seconds * 1e6)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (auto& t : threads) t.join();
  const int64_t elapsed = env->MonotonicMicros() - start;
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return static_cast<double>(done.load()) * 1e6 / static_cast<double>(elapsed);
}

}  // namespace megastore::tools
