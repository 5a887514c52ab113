// The embedded lock service's core: named locks held under leases, on an
// Env's clock (Chubby's role for Megastore's coordinators; DESIGN.md §4).
// A lease not renewed within its length expires and the lock is free again.
//
// This is the in-memory form the simulator and the single-process setups
// use; the lock service with sessions, watches, durable files and the etcd
// back end is issue 8's.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/transport.h"

namespace megastore::storage::lock {

class LockTable {
 public:
  struct Holder {
    bool held = false;
    std::string owner;
    absl::Duration remaining;
  };

  explicit LockTable(Env* env) : env_(env) {}

  // Grants (or renews) `name` to `owner` for `lease` from now if it is free,
  // expired or already `owner`'s. Returns the holder afterwards.
  Holder Acquire(std::string_view name, std::string_view owner, absl::Duration lease);
  Holder Query(std::string_view name);
  // Frees `name` if `owner` holds it.
  void Release(std::string_view name, std::string_view owner);

  // Serves the lock.* methods (lock.proto) for remote callers.
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {"lock.Acquire", "lock.Query", "lock.Release"};

 private:
  struct Lease {
    std::string owner;
    int64_t expires = 0;  // Env monotonic micros
  };
  Holder HolderLocked(std::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const env_;
  absl::Mutex mu_;
  std::map<std::string, Lease, std::less<>> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace megastore::storage::lock
