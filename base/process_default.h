// A setting with a process-wide default that a program sets once from its
// flags (limits, TLS files) and that options structs read when built.
#pragma once

#include <utility>

#include "absl/synchronization/mutex.h"

namespace megastore {

template <typename T>
class ProcessDefault {
 public:
  constexpr ProcessDefault() = default;
  void Set(T value) {
    absl::MutexLock lock(&mu_);
    value_ = std::move(value);
  }
  T Get() const {
    absl::MutexLock lock(&mu_);
    return value_;
  }

 private:
  mutable absl::Mutex mu_;
  T value_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace megastore
