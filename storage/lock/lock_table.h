// The coordinators' lock table: named locks held under leases, on an Env's
// clock (Chubby's role for Megastore's coordinators; docs/architecture.md). A lease
// not renewed within its length expires and the lock is free again.
//
// Its contract with a holder (coordinator/coordinator.h):
//  * A lease of L granted at time g lasts at least until g + L by this
//    table's clock; a holder that counts it from when it *sent* the request,
//    shortened by the drift margin, never counts longer than the table.
//  * Every grant carries an id (LockReply.grant). Taking a lock that was
//    free — never held, expired, released, or forgotten in a restart — gets
//    a new id; renewing an unexpired lease keeps it. So a holder learns of
//    every moment in which a writer could have found its lock free.
//  * Leases are in memory. A restart forgets them, so a restarted table
//    neither grants nor reports free any lock until every lease its previous
//    incarnation may have granted has run out: the quiet period, the
//    longest lease ever granted (kept in a state file) plus the drift margin.
//    A state file that is missing where one was expected (an upgrade, a lost
//    file) counts as "granted leases up to max_lease". Without a state file
//    nothing is remembered, and the caller passes the quiet period itself
//    (the simulator and tests do).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/transport.h"
#include "storage/lock/lease.h"

namespace megastore::storage::lock {

struct LockTableOptions {
  // Longer leases are refused (InvalidArgument naming both lengths).
  absl::Duration max_lease = absl::Seconds(60);
  double max_clock_drift = kDefaultMaxClockDrift;
  // Where the longest lease granted is kept ("" = nowhere). Open reads it
  // and stays quiet for QuietPeriod(that lease); the table writes it (and
  // syncs it) before granting a longer lease than it records. If it does
  // not exist, Open stays quiet for QuietPeriod(max_lease) — unless
  // `new_directory` says this is the first start in a directory nothing
  // ran in before (then nobody can hold a lease from it).
  std::string state_file;
  bool new_directory = false;
  // Without a state file: how long to stay quiet after the start.
  absl::Duration quiet_period = absl::ZeroDuration();
};

class LockTable {
 public:
  struct Holder {
    bool held = false;
    std::string owner;
    absl::Duration remaining;
    uint64_t grant = 0;
    bool quiet = false;  // the table is in its quiet period: held by nobody it knows
  };

  // A table with no state file and no quiet period (a first start).
  explicit LockTable(Env* env) : LockTable(env, LockTableOptions{}) {}
  // Reads the state file, if any (DataLoss if it is damaged: an operator
  // must look, since a guessed quiet period could break coordinators).
  static absl::StatusOr<std::unique_ptr<LockTable>> Open(Env* env, LockTableOptions options);

  // Grants (or renews) `name` to `owner` for `lease` from now if it is free,
  // expired or already `owner`'s. Returns the holder afterwards; an error if
  // the lease is longer than max_lease or the state file cannot be written.
  absl::StatusOr<Holder> Acquire(std::string_view name, std::string_view owner,
                                 absl::Duration lease);
  Holder Query(std::string_view name);
  // Frees `name` if `owner` holds it.
  void Release(std::string_view name, std::string_view owner);

  // Serves the lock.* methods (lock.proto) for remote callers.
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {"lock.Acquire", "lock.Query", "lock.Release"};

  // Until when (Env monotonic micros) the table is quiet.
  int64_t quiet_until() const { return quiet_until_; }

 private:
  LockTable(Env* env, LockTableOptions options);
  struct Lease {
    std::string owner;
    int64_t expires = 0;  // Env monotonic micros
    uint64_t grant = 0;
  };
  Holder HolderLocked(std::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RecordLeaseLocked(absl::Duration lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteStateLocked(int64_t longest_micros) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const env_;
  const LockTableOptions options_;
  int64_t quiet_until_ = 0;
  absl::Mutex mu_;
  int64_t recorded_longest_ ABSL_GUARDED_BY(mu_) = 0;  // micros, as in the state file
  std::map<std::string, Lease, std::less<>> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace megastore::storage::lock
