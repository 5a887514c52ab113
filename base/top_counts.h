// TopCounts: counters per key (e.g. commits and conflicts per entity
// group) for the "hottest ..." lists of status pages. It tracks at most
// `max_keys` keys (the first seen; later ones are not counted) so memory
// stays bounded however many keys pass. Thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace megastore {

template <size_t Kinds>
class TopCounts {
 public:
  explicit TopCounts(size_t max_keys = 100'000) : max_keys_(max_keys) {}

  // Adds `n` to `key`'s counter of `kind`.
  void Add(const std::string& key, size_t kind, uint64_t n = 1) {
    absl::MutexLock lock(&mu_);
    if (std::array<uint64_t, Kinds>* c = FindLocked(key)) (*c)[kind] += n;
  }
  // Raises `key`'s counter of `kind` to `value` if it is lower (a gauge
  // that only grows, e.g. a log's highest position).
  void Raise(const std::string& key, size_t kind, uint64_t value) {
    absl::MutexLock lock(&mu_);
    if (std::array<uint64_t, Kinds>* c = FindLocked(key)) (*c)[kind] = std::max((*c)[kind], value);
  }

  // The `n` keys with the highest nonzero counter of `kind`, highest first,
  // each with all its counters.
  std::vector<std::pair<std::string, std::array<uint64_t, Kinds>>> Top(size_t n,
                                                                       size_t kind) const {
    std::vector<std::pair<std::string, std::array<uint64_t, Kinds>>> out;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, c] : counts_)
        if (c[kind] > 0) out.emplace_back(key, c);
    }
    // Ties in key order (the map's own order is arbitrary).
    std::sort(out.begin(), out.end(), [kind](const auto& a, const auto& b) {
      return a.second[kind] != b.second[kind] ? a.second[kind] > b.second[kind] : a.first < b.first;
    });
    if (out.size() > n) out.resize(n);
    return out;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return counts_.size();
  }

 private:
  std::array<uint64_t, Kinds>* FindLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = counts_.find(key);
    if (it == counts_.end()) {
      if (counts_.size() >= max_keys_) return nullptr;
      it = counts_.emplace(key, std::array<uint64_t, Kinds>{}).first;
    }
    return &it->second;
  }

  const size_t max_keys_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::array<uint64_t, Kinds>> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace megastore
