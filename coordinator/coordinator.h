// The coordinator of one full replica (docs/architecture.md): the set of entity
// groups whose every chosen log position this replica has accepted, so a
// `current` read there needs no inter-datacenter message.
//
//  * Invalidate(group, p) always wins over a Validate of a lower position,
//    whichever arrives first.
//  * Validate carries the epoch Check reported before the reader's catch-up
//    and is refused if the epoch changed since (a restart, or a lost lock
//    majority, each draws a new epoch and forgets every group).
//  * It answers "valid" only while it holds a majority of its locks in the
//    other datacenters' lock services. It counts a lock as held until
//    `lease` after it *sent* the request that renewed it, shortened by the
//    clock-drift margin (storage/lock/lock_table.h: HolderLease), never
//    longer than the lock service itself will, so a writer that sees the
//    lock expired there may treat the coordinator as invalidated.
//  * Whenever a writer could have found one of its locks free — the lock
//    service reports a new grant id for it — it forgets every group and
//    draws a new epoch, as when it loses the majority. So a writer's lock
//    survey (which may see the locks free at different instants) can never
//    be contradicted by a "valid" from a coordinator that missed the
//    write's invalidation, however the lease, renew interval and RPC
//    timeout are chosen: a reply with a new id follows every moment the lock
//    was free at a service, and comes before the coordinator counts that lock
//    again. It also resets when it notices it regained a majority (cheap, and
//    it keeps the rule obvious); safety does not rest on noticing that.
//  * Lease counting uses Env::MonotonicMicros, which does not advance while
//    the host is suspended: a coordinator host must not be suspended (a VM
//    paused past its lease must be restarted, not resumed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/lifetime.h"
#include "base/transport.h"
#include "coordinator/advisory_locks.h"

namespace megastore::coordinator {

struct CoordinatorOptions {
  // This replica's name; the lock is "coordinator/<name>".
  std::string name;
  // Node addresses of the other datacenters' lock services.
  std::vector<std::string> lock_services;
  absl::Duration lease = absl::Seconds(10);
  absl::Duration renew_interval = absl::Seconds(2);
  absl::Duration rpc_timeout = absl::Seconds(1);
  // How far its clock and a lock service's may drift apart while a lease
  // runs (a fraction of the lease; storage::lock::kDefaultMaxClockDrift).
  double max_clock_drift = 1e-3;

  // InvalidArgument naming the numbers if the lease cannot outlast a renewal
  // (renew_interval + rpc_timeout must be below the lease as the
  // coordinator counts it), or a value is out of range.
  absl::Status Validate() const;
};

std::string LockName(std::string_view replica);

class Coordinator {
 public:
  // `env` and `transport` must outlive the coordinator.
  Coordinator(Env* env, Transport* transport, CoordinatorOptions options);
  ~Coordinator();

  // Starts taking and renewing the locks.
  void Start();
  // Stops renewing (the locks then expire) and answering.
  void Stop();

  // Serves coord.Check, coord.Invalidate, coord.Validate (coordinator.proto),
  // and the groups' advisory locks, coord.Lock and coord.Unlock.
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {"coord.Check", "coord.Invalidate",
                                                  "coord.Validate", "coord.Lock", "coord.Unlock"};
  AdvisoryLocks& advisory_locks() { return advisory_locks_; }

  bool serving();
  uint64_t epoch();

  // What it has answered since it started (status pages, /metrics).
  struct Stats {
    uint64_t checks = 0;         // coord.Check: a current read asking
    uint64_t checks_valid = 0;   // ... answered "valid": served without a majority read
    uint64_t invalidations = 0;  // coord.Invalidate from writers
    uint64_t validations = 0;    // coord.Validate accepted after a reader's catch-up
    uint64_t groups = 0;         // groups it holds state for
    uint64_t valid_groups = 0;   // ... of which up to date here
    uint64_t resets =
        0;  // times it forgot every group (majority lost or regained, a lock found free)
  };
  Stats stats();
  // Stop honouring the locks early (simulated lock expiry: the renewals
  // stop reaching the lock services until `for_how_long` has passed).
  void PauseRenewals(absl::Duration for_how_long);

 private:
  struct GroupState {
    bool valid = false;
    uint64_t invalidated = 0;  // highest position an Invalidate named
  };
  // One renewal round of the Start() numbered `generation` (a Stop and a
  // Start in between end this chain).
  void Renew(uint64_t generation);
  bool ServingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const env_;
  Transport* const transport_;
  const CoordinatorOptions options_;
  const std::string owner_;  // lock owner: name and incarnation

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool was_serving_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t paused_until_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> held_until_ ABSL_GUARDED_BY(mu_);  // per lock service, monotonic micros
  std::vector<uint64_t> grant_ ABSL_GUARDED_BY(mu_);  // per lock service, the grant id last seen
  absl::flat_hash_map<std::string, GroupState> groups_ ABSL_GUARDED_BY(mu_);
  Stats counts_ ABSL_GUARDED_BY(mu_);  // its counters (the group counts are computed)
  Env::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool warned_no_grant_id_ ABSL_GUARDED_BY(mu_) = false;
  AdvisoryLocks advisory_locks_{env_};
  // Entered by the renewal timer and the lock services' answers.
  std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();
};

}  // namespace megastore::coordinator
