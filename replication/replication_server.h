// The replication server of one datacenter (DESIGN.md §5): serves remote
// acceptor, apply and log-read requests against its datacenter's Bigtable,
// and periodically finishes writes that were left incomplete (positions
// accepted here but never applied) by catching its replica up, which runs
// no-op Paxos where no value is known.
//
// It keeps no durable state: the groups it has seen Paxos traffic for are a
// hint for the sweep only; after a restart, readers' catch-up does the same.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "base/histogram.h"
#include "base/top_counts.h"
#include "base/transport.h"
#include "replication/group_client.h"
#include "replication/log_replica.h"

namespace megastore::replication {

struct ReplicationServerOptions {
  // The group's replicas, with `local` naming this server's datacenter.
  GroupClientOptions cluster;
  // How often to look for incomplete writes, and how old one must be.
  absl::Duration sweep_interval = absl::Seconds(2);
  absl::Duration sweep_age = absl::Seconds(2);
  // Encryption at rest (replication/at_rest.h); must outlive the server.
  // nullptr: nothing is encrypted.
  GroupEncryption* encryption = nullptr;
};

class ReplicationServer {
 public:
  // `env`, `transport` and `bigtable` must outlive the server.
  ReplicationServer(Env* env, Transport* transport, storage::BigtableClient* bigtable,
                    ReplicationServerOptions options);
  ~ReplicationServer();

  // Serves repl.Paxos, repl.State, repl.ReadLog, repl.Apply, repl.Read, repl.Scan,
  // repl.ScanIndex.
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {"repl.Paxos",     "repl.State",   "repl.ReadLog",
                                                  "repl.Apply",     "repl.Read",    "repl.Scan",
                                                  "repl.ScanIndex", "repl.Truncate"};

  // Starts the periodic sweep; Stop() ends it.
  void Start();
  void Stop();
  // One sweep now; `done` runs when every catch-up it started has finished.
  void Sweep(absl::AnyInvocable<void()> done = nullptr);

  // What it has served since it started (status pages, /metrics).
  struct Stats {
    uint64_t paxos = 0;      // prepare and accept requests
    uint64_t accepted = 0;   // values accepted: log entries written here
    uint64_t fast_path = 0;  // ... at ballot round 0: the leader's one-round-trip writes
    uint64_t log_bytes = 0;  // ... and their bytes
    uint64_t rejected = 0;   // requests refused for a higher ballot: writers in conflict
    uint64_t reads = 0;      // repl.Read, repl.Scan, repl.ScanIndex
    uint64_t applies = 0;    // repl.Apply
    uint64_t sweeps = 0;
    uint64_t sweep_catchups = 0;  // incomplete writes the sweep finished
    uint64_t gap_votes =
        0;  // votes on a position past this replica's top, another replica vouching
    uint64_t vouches_shed =
        0;  // such requests refused without asking, kMaxVouchesInFlight being out
  };
  Stats stats() const;
  const LatencyHistogram& paxos_latency() const { return paxos_latency_; }
  const LatencyHistogram& read_latency() const { return read_latency_; }
  struct GroupActivity {
    GroupRef group;
    uint64_t writes = 0;     // values accepted
    uint64_t conflicts = 0;  // requests refused
    uint64_t position = 0;   // highest log position asked about: the log's length
  };
  // The groups with the most writes (or conflicts) here.
  std::vector<GroupActivity> HottestGroups(size_t n, bool by_conflicts) const;
  // How many groups had Paxos traffic here since it started (at most 100,000 are counted).
  size_t groups_seen() const { return groups_.size(); }

 private:
  struct Seen {
    GroupRef group;
    int64_t last = 0;  // monotonic micros of the last Paxos request
    uint64_t behind =
        0;  // a position applied elsewhere that this replica refused (it missed earlier ones)
  };
  void Note(const GroupRef& group, uint64_t behind = 0);
  // Asks the other replicas whether one reached `position` of `group`
  // (SomeReplicaReached), as one of at most kMaxVouchesInFlight such
  // questions: beyond that (a flood of requests for positions this replica
  // has not reached) `done` gets false at once, without asking.
  static constexpr int kMaxVouchesInFlight = 256;
  void AskVouch(const GroupRef& group, uint64_t position, absl::AnyInvocable<void(bool)> done);
  void Tick();

  template <typename Reply>
  absl::AnyInvocable<void(absl::StatusOr<Reply>)> Timed(Responder respond);
  // What is counted of a repl.Paxos request, once answered.
  struct PaxosCount {
    std::string group_key;
    bool accept = false;
    bool fast = false;  // ballot round 0
    uint64_t position = 0;
    size_t value_bytes = 0;
    int64_t started = 0;  // monotonic micros
  };
  void CountPaxos(const PaxosCount& request, const absl::StatusOr<PaxosReply>& reply);

  Env* const env_;
  const ReplicationServerOptions options_;
  LogReplica replica_;
  GroupClient client_;

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool sweeping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
  Env::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;

  struct Counters {
    std::atomic<uint64_t> paxos{0}, accepted{0}, fast_path{0}, log_bytes{0}, rejected{0}, reads{0},
        applies{0}, sweeps{0}, sweep_catchups{0}, gap_votes{0}, vouches_shed{0};
  };
  std::atomic<int> vouches_in_flight_{0};
  Counters counters_;
  LatencyHistogram paxos_latency_, read_latency_;
  TopCounts<3> groups_;  // by Key(group): writes, conflicts, highest position
};

}  // namespace megastore::replication
