// Gather: the results of n calls started together, reported once enough of
// them succeeded or all of them answered, whichever comes first.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace megastore {

template <typename T>
class Gather : public std::enable_shared_from_this<Gather<T>> {
 public:
  // results[i] is empty if call i had not answered when `done` ran.
  using Results = std::vector<std::optional<absl::StatusOr<T>>>;

  // Use through a shared_ptr: Slot hands out references to it.
  Gather(size_t n, size_t enough, absl::AnyInvocable<void(Results)> done)
      : results_(n), enough_(enough), done_(std::move(done)) {}

  // The callback of call `i`.
  absl::AnyInvocable<void(absl::StatusOr<T>)> Slot(size_t i) {
    return
        [self = this->shared_from_this(), i](absl::StatusOr<T> r) { self->Set(i, std::move(r)); };
  }
  // Reports at once if there are no calls (n == 0).
  void FinishIfEmpty() {
    if (results_.empty()) Set(0, std::nullopt);
  }

 private:
  void Set(size_t i, std::optional<absl::StatusOr<T>> r) {
    absl::AnyInvocable<void(Results)> done;
    Results copy;
    {
      absl::MutexLock lock(&mu_);
      if (!done_) return;
      if (r) {
        ok_ += r->ok() ? 1 : 0;
        ++answered_;
        results_[i] = std::move(r);
      }
      if (ok_ < enough_ && answered_ < results_.size()) return;
      done = std::move(done_);
      done_ = nullptr;
      copy = results_;
    }
    done(std::move(copy));
  }

  absl::Mutex mu_;
  Results results_ ABSL_GUARDED_BY(mu_);
  const size_t enough_;
  size_t ok_ ABSL_GUARDED_BY(mu_) = 0;
  size_t answered_ ABSL_GUARDED_BY(mu_) = 0;
  absl::AnyInvocable<void(Results)> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace megastore
