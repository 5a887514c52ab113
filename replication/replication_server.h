// The replication server of one datacenter (docs/architecture.md): serves remote
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
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "base/histogram.h"
#include "base/lifetime.h"
#include "base/top_counts.h"
#include "base/transport.h"
#include "replication/commit_home.h"
#include "replication/group_client.h"
#include "replication/guarded_bigtable.h"
#include "replication/log_replica.h"

namespace megastore::replication {

// Log clean-up (docs/replication.md, "Cleaning up the log"): which
// positions a replica removes from its groups' logs, and how often it looks.
struct LogCleanupOptions {
  bool enabled = true;
  // Remove only positions a backup of the group covers (msadmin backup):
  // the log is what a restore to a point in time replays.
  bool require_backup = true;
  // Always keep at least the last `keep_positions` positions, and every
  // position younger than `keep_age` unless more than `max_positions`
  // would be kept (then the age yields).
  uint64_t keep_positions = 1000;
  absl::Duration keep_age = absl::Minutes(10);
  uint64_t max_positions = 20000;
  absl::Duration interval = absl::Seconds(30);
};

struct ReplicationServerOptions {
  // The group's replicas, with `local` naming this server's datacenter.
  GroupClientOptions cluster;
  // How often to look for incomplete writes, and how old one must be.
  absl::Duration sweep_interval = absl::Seconds(2);
  absl::Duration sweep_age = absl::Seconds(2);
  // Encryption at rest (replication/at_rest.h); must outlive the server.
  // nullptr: nothing is encrypted.
  GroupEncryption* encryption = nullptr;
  LogCleanupOptions cleanup;
};

// The highest position a group may be cleaned through at replica `local`
// of `replicas`, given every replica's state (nullopt where one did not
// answer): a data replica, what every data replica applied; a witness, what
// a majority of full replicas applied; with `require_backup`, no further
// than the newest backup any replica reports. Nullopt: held back.
std::optional<uint64_t> CleanLimit(const std::vector<ReplicaInfo>& replicas, size_t local,
                                   bool require_backup,
                                   const std::vector<std::optional<StateReply>>& states);

class ReplicationServer {
 public:
  // `env`, `transport` and `bigtable` must outlive the server.
  ReplicationServer(Env* env, Transport* transport, storage::BigtableClient* bigtable,
                    ReplicationServerOptions options);
  ~ReplicationServer();

  // Serves repl.Paxos, repl.State, repl.ReadLog, repl.Apply, repl.Read, repl.Scan,
  // repl.ScanIndex, ...; and, as the home of hot groups, repl.Commit and
  // repl.AwaitTurn (replication/commit_home.h).
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {
      "repl.Paxos",        "repl.State",       "repl.ReadLog",        "repl.Apply",
      "repl.Read",         "repl.Scan",        "repl.ScanIndex",      "repl.Truncate",
      "repl.SnapshotRows", "repl.InstallRows", "repl.FinishSnapshot", "repl.MarkBackup",
      "repl.SealBackup",   "repl.ListGroups",  "repl.Commit",         "repl.AwaitTurn"};

  // Starts the periodic sweep; Stop() ends it.
  void Start();
  // Ends the periodic sweeps; one under way ends at its next step (the
  // destructor waits for it). Sweeps started after it do nothing.
  void Stop();
  bool Stopped() const;
  // One sweep now; `done` runs when every catch-up it started has finished.
  void Sweep(absl::AnyInvocable<void()> done = nullptr);
  // One log clean-up sweep now over the groups written since the last one
  // (and those whose clean-up is still due); `done` when it has finished.
  void CleanupSweep(absl::AnyInvocable<void()> done = nullptr);

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
    uint64_t sweep_pending = 0;   // groups the next sweeps look at (gauge)
    uint64_t gap_votes =
        0;  // votes on a position past this replica's top, another replica vouching
    uint64_t vouches_shed =
        0;  // such requests refused without asking, kMaxVouchesInFlight being out
    // Accepts that completed a majority (PaxosRequest.chosen_if_accepted):
    // positions learned and applied here without waiting for the writer.
    uint64_t learned_on_accept = 0;
    // Log clean-up.
    uint64_t cleanup_sweeps = 0;
    uint64_t groups_cleaned = 0;         // groups whose log lost positions
    uint64_t positions_removed = 0;      // log positions removed
    uint64_t bytes_reclaimed = 0;        // ... and the bytes of their cells
    uint64_t cleanup_blocked = 0;        // group clean-ups held back (a replica silent, no backup)
    uint64_t cleanup_pending = 0;        // groups waiting for their clean-up (gauge)
    uint64_t largest_log_bytes = 0;      // the largest group log seen by the last sweep (gauge)
    uint64_t largest_log_positions = 0;  // ... and the most positions one kept (gauge)
    uint64_t kept_log_bytes = 0;         // log bytes of the groups the last sweep looked at (gauge)
    // Hot groups' commits app servers sent here (repl.Commit), and those
    // refused unproposed for too many under way.
    uint64_t home_commits = 0;
    uint64_t home_shed = 0;
    // What this server's own client committed: commits sent here, and
    // the log entries they took (combined entries hold several).
    uint64_t home_entries = 0;
    uint64_t home_combined = 0;
    uint64_t home_promotions = 0;  // lost positions they went on past
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
  // How many groups this replica knows it is behind in (another replica
  // applied a position it missed), until its sweep catches them up.
  size_t groups_behind() const;

 private:
  struct Seen {
    GroupRef group;
    int64_t last = 0;  // monotonic micros of the last Paxos request
    uint64_t behind =
        0;  // a position applied elsewhere that this replica refused (it missed earlier ones)
    uint64_t asked = 0;  // the highest position of a Paxos request here
  };
  // Notes Paxos traffic for `group` (a request for position `asked`), or a
  // position applied elsewhere that this replica missed (`behind`): the
  // sweep looks at the group once it has been quiet for sweep_age.
  void Note(const GroupRef& group, uint64_t behind = 0, uint64_t asked = 0);
  // The group is applied here through `applied`: if that covers every
  // position noted for it, the sweep has nothing to finish there and
  // forgets it (it would only read the log state to find that out).
  void NoteApplied(const GroupRef& group, uint64_t applied);
  // repl.Apply's work: records a chosen value and applies what follows it
  // (a replica that missed earlier positions records it if another
  // vouches the group got that far).
  void ApplyChosen(ApplyRequest req, absl::AnyInvocable<void(absl::StatusOr<ApplyReply>)> answer);
  // Asks the other replicas whether one reached `position` of `group`
  // (SomeReplicaReached), as one of at most kMaxVouchesInFlight such
  // questions: beyond that (a flood of requests for positions this replica
  // has not reached) `done` gets false at once, without asking.
  static constexpr int kMaxVouchesInFlight = 256;
  void AskVouch(const GroupRef& group, uint64_t position, absl::AnyInvocable<void(bool)> done);
  void Tick();
  void CleanupTick();
  // Schedules `tick` (Tick or CleanupTick) on the Env's timer, entered
  // through life_.
  Env::TimerId ScheduleTick(absl::Duration after, void (ReplicationServer::*tick)());
  // Notes `group` for the next clean-up sweep.
  void NoteForCleanup(const GroupRef& group);
  static constexpr size_t kMaxCleanupGroups = 100000;
  // What cleaning one group came to: whether it is still due (held back,
  // or more left than one sweep does), and its log as the last step left it
  // (when that step finished).
  struct CleanOutcome {
    bool still_due = true;
    std::optional<CleanReply> log;
  };
  // Cleans one group's log as far as the rules allow.
  void CleanGroup(const GroupRef& group, absl::AnyInvocable<void(CleanOutcome)> done);
  // Cleans `group` through `through`, as far as kMaxCleanCallsPerSweep
  // steps go (`still_due`: held back by a rule meanwhile).
  void Clean(const GroupRef& group, uint64_t through, bool still_due,
             absl::AnyInvocable<void(CleanOutcome)> done);
  static constexpr int kMaxCleanCallsPerSweep = 20;
  // The clean-up bound lowered to keep every entry younger than keep_age
  // (binary search of entry timestamps in (cleaned, limit]).
  void AgeLimit(const GroupRef& group, uint64_t cleaned, uint64_t limit, uint64_t floor,
                absl::AnyInvocable<void(uint64_t)> done);

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
  // The replica's Bigtable: its answers are dropped once the server is
  // being destroyed (they would run the replica's chains in freed memory).
  GuardedBigtable bigtable_;
  LogReplica replica_;

  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // Stop() was called
  bool sweeping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
  Env::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;
  Env::TimerId cleanup_timer_ ABSL_GUARDED_BY(mu_) = 0;
  bool cleaning_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, GroupRef> cleanup_due_ ABSL_GUARDED_BY(mu_);

  struct Counters {
    std::atomic<uint64_t> paxos{0}, accepted{0}, fast_path{0}, log_bytes{0}, rejected{0}, reads{0},
        applies{0}, sweeps{0}, sweep_catchups{0}, gap_votes{0}, vouches_shed{0},
        learned_on_accept{0};
    std::atomic<uint64_t> cleanup_sweeps{0}, groups_cleaned{0}, positions_removed{0},
        bytes_reclaimed{0}, cleanup_blocked{0}, largest_log_bytes{0}, largest_log_positions{0},
        kept_log_bytes{0};
  };
  std::atomic<int> vouches_in_flight_{0};
  Counters counters_;
  LatencyHistogram paxos_latency_, read_latency_;
  TopCounts<3> groups_;  // by Key(group): writes, conflicts, highest position
  // Entered by the sweep and clean-up timers.
  std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();
  // Proposes the commits app servers send here through client_ (whose
  // replies it answers: destroyed after it).
  CommitHome home_{&client_, options_.cluster.hot_for, options_.cluster.max_clock_skew};
  // Last, so destroyed first: a reply to its requests (a vouch, a sweep's
  // catch-up, a hot group's commit) that calls into this server is let in
  // only while every other member is whole.
  GroupClient client_;
};

}  // namespace megastore::replication
