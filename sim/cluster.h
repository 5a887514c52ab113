// A whole simulated deployment: N datacenters (Bigtable, lock service,
// coordinator, replication server) and M app-server clients running reads,
// blind writes and read-modify-writes against a few entity groups, with
// faults injected from the seed; then the checkers (docs/replication.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "replication/log_replica.h"
#include "sim/history.h"

namespace megastore::sim {

struct SimOptions {
  uint64_t seed = 1;
  // Replica types, one per datacenter (named A, B, C, ...).
  std::vector<replication::ReplicaType> replicas = {replication::ReplicaType::kFull,
                                                    replication::ReplicaType::kFull,
                                                    replication::ReplicaType::kFull};
  // One-way latency between datacenters (ms); missing pairs use `default_wan`.
  // Defaults: A-B 10 ms, A-C 30 ms, B-C 25 ms.
  std::vector<std::vector<double>> latency_ms;
  double default_wan_ms = 20;
  double local_ms = 0.2;  // within a datacenter
  double disk_ms = 1;     // one Bigtable operation

  int clients = 4;  // spread over the datacenters with data
  // Operations each client (app server) runs at once, through its one
  // GroupClient: with more than one, its commits to a group combine into
  // shared log entries.
  int sessions = 1;
  // GroupClientOptions::combine for every app server (false: each commit
  // proposes on its own).
  bool combine = true;
  // GroupClientOptions::forward for every app server (false: a hot
  // group's commits are never sent to its home).
  bool forward = true;
  int groups = 2;
  int keys = 3;  // entities per group
  int ops_per_client = 25;
  // Which operations clients run (weights).
  int read_weight = 4, write_weight = 2, cas_weight = 2, delete_weight = 1;
  // A write or compare-and-set that loses its log position to an entry
  // that did not write what it read goes on to the next position
  // (GroupClient::Commit's promote test) instead of failing.
  bool promote = true;
  // The bank (sim/bank.h): app servers moving money between entity
  // groups by two-phase commit and queues, each running `bank_ops`
  // transfers or collections. 0 clients: none.
  int bank_clients = 0;
  int bank_ops = 6;

  // The coordinators' lock timing and the clock-drift bound they are
  // configured with. With `vary_timing`, each seed draws the lease, renew
  // interval and RPC timeout from what CoordinatorOptions::Validate
  // accepts, and each coordinator's and lock service's clock runs at its
  // own rate within +-max_clock_drift.
  bool vary_timing = false;
  absl::Duration coordinator_lease = absl::Seconds(2);
  absl::Duration renew_interval = absl::Milliseconds(400);
  absl::Duration coordinator_rpc_timeout = absl::Milliseconds(250);
  double max_clock_drift = 1e-3;

  bool faults = true;
  // The fault points in production code (base/buggify.h), enabled with the
  // seed while the faults run.
  bool buggify = true;
  absl::Duration fault_period = absl::Seconds(15);
  double loss = 0.03, duplicate = 0.03;
  absl::Duration jitter = absl::Milliseconds(4);
  // After the faults stop, how long clients may still take to finish.
  absl::Duration drain_limit = absl::Seconds(120);

  // Log clean-up at every replica (docs/replication.md, "Cleaning up the
  // log"), with a short tail so that it runs often; backups are marked
  // every few seconds at one replica after another. A witness that falls
  // behind the others' clean-up catches up from a snapshot.
  bool log_cleanup = true;
  // With a read-only replica, a fault replaces its disk now and then (its
  // tablet server down, back with the table empty): it comes back by a
  // catch-up, from a snapshot of another replica's data once the others
  // cleaned up their logs.
  bool wipe_read_only = true;

  bool trace = false;
};

struct SimStats {
  int ops_ok = 0, ops_failed = 0, ops_unknown = 0;
  int bank_ok = 0;  // bank operations that succeeded
  uint64_t messages = 0, dropped = 0, positions = 0;
  int faults = 0;
  int64_t virtual_micros = 0;
  uint64_t valid_checks = 0;  // coordinator "valid" answers the invariant checked
  uint64_t log_checks = 0;    // log cells the step invariants checked as they were written
  uint64_t late_writes = 0, repeated_writes = 0;  // Bigtable writes made late or twice
  uint64_t positions_cleaned = 0;  // log positions clean-up removed, summed over replicas
  uint64_t snapshot_catchups = 0;  // catch-ups that copied another replica's data
  uint64_t promotions = 0;         // lost positions the clients' writes went on past
  uint64_t commits = 0;            // the clients' writes committed ...
  uint64_t entries = 0;            // ... in this many log entries
  uint64_t combined = 0;           // ... of which this many shared theirs with others
  uint64_t forwarded = 0;          // the clients' writes sent to their group's home
  uint64_t learned_on_accept =
      0;          // positions replicas learned from an accept completing a majority
  int wipes = 0;  // read-only replicas' data wiped
};

struct SimResult {
  absl::Status status;  // the first checker violation, if any
  std::vector<Event> history;
  std::vector<std::string> trace;
  SimStats stats;
};

SimResult RunSimulation(const SimOptions& options);

// The latency measurements of docs/replication.md (`mssim --measure`): an
// uncontended writer and reader at datacenter A under the default latencies,
// no faults, then with the leader replica down and with A's coordinator
// down. Returns the report as text.
std::string RunMeasurements(uint64_t seed, int ops);

}  // namespace megastore::sim
