// The library side of replication (docs/architecture.md): what an app server's
// client library runs to read an entity group at a consistency level and to
// commit a log entry — the Paxos proposer, catch-up, coordinator
// invalidation and apply. Everything goes through Env and Transport; the
// replicas are reached through their replication servers.
//
// Thread-safe; callbacks run on the transport's or Env's threads (in the
// simulator: its one thread).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/histogram.h"
#include "base/lifetime.h"
#include "base/top_counts.h"
#include "base/transport.h"
#include "coordinator/coordinator_client.h"
#include "replication/client_options.h"
#include "replication/log_replica.h"
#include "replication/replication.pb.h"

namespace megastore::replication {

namespace internal {
struct Chosen;  // write_steps.h
}  // namespace internal

struct CommitResult {
  uint64_t position = 0;
  int64_t timestamp = 0;
};

// ReadFirst's answer: the position, and the row read at it.
struct FirstRead {
  LogPosition at;
  ReadReply reply;
};

// Errors:
//   Aborted            Commit lost its position to another writer (conflict):
//                      the entry was certainly not committed; retry from a read.
//   DeadlineExceeded   Commit: the outcome is unknown — no value was chosen in
//                      time, or ours was chosen but could not be made visible
//                      (acknowledging it could break current reads). Never
//                      retry such a commit blindly. Reads: out of time.
//   Unavailable        only from reads (too few replicas answered); Commit
//                      never returns it, so it never means "maybe written".
class GroupClient {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

  // `env` and `transport` must outlive the client and every operation.
  GroupClient(Env* env, Transport* transport, GroupClientOptions options);
  // Waits for callbacks running in the client's code on other threads, and
  // makes later ones do nothing: an operation's tail (applies, a lost
  // race's invalidation) may still be under way after its caller was told
  // the outcome. Do not destroy it from inside one of its own callbacks.
  ~GroupClient();

  // What a reply or timer callback holds to enter the client's code: false
  // once the client is being destroyed (the callback must then do nothing).
  using Lifetime = ::megastore::Lifetime;
  using Entry = Lifetime::Entry;
  const std::shared_ptr<Lifetime>& lifetime() const { return lifetime_; }

  // Every operation ends by `deadline`, a time of env()->MonotonicMicros()
  // (0: options().deadline from the call), with DeadlineExceeded or
  // Unavailable if it could not finish; no single request waits longer
  // than what is left.

  // Step one of a transaction: the position to read at (and commit after),
  // at replica `replica` (-1: the local one), which must hold data (not a
  // witness). A current read at another replica works as it does locally:
  // that replica's coordinator vouches for it, or a majority read and a
  // catch-up of that replica. At the local replica it first waits for this
  // client's commits to the group whose local apply is still under way
  // (docs/replication.md, "Writing", step 5).
  void ReadPosition(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                    int64_t deadline = 0, int replica = -1);
  // A transaction's first read with its position (ReadPosition, then Read
  // of `row`), in one request to the local replica in the common case: the
  // row is read at the replica's applied position, which is the position
  // when the local coordinator vouches for the replica and nothing beyond
  // it is accepted there (a snapshot read needs neither). Otherwise, and
  // at another replica or the inconsistent level, the position is found
  // as ReadPosition finds it and the row read at it.
  void ReadFirst(GroupRef group, ReadLevel level, std::string row, std::string family,
                 Callback<FirstRead> done, int64_t deadline = 0, int replica = -1,
                 std::optional<ScanRange> also_scan = std::nullopt);
  // One row's latest cells of `family` as of `at`; with `also_scan`, the
  // group's rows in that range too, as Scan would give them (in
  // ReadReply.scan, absent if the replica predates it).
  void Read(GroupRef group, const LogPosition& at, std::string row, std::string family,
            Callback<ReadReply> done, int64_t deadline = 0,
            std::optional<ScanRange> also_scan = std::nullopt);
  // Rows of the group in [start, end) as of `at` (at most `limit`).
  void Scan(GroupRef group, const LogPosition& at, std::string start, std::string end,
            std::string family, int64_t limit, Callback<ScanReply> done, int64_t deadline = 0);
  // Rows of a global index table at the local replica (newest data).
  void ScanIndex(std::string table, std::string start, std::string end, int64_t limit,
                 Callback<ScanReply> done, int64_t deadline = 0);
  // What a commit's transaction read of its group (nullptr: nothing it
  // read can be judged here — such a commit is never promoted, combined or
  // sent to the group's home). A commit that lost its position to `winner`
  // may be proposed again at the next position unchanged only if
  // Unaffected(reads, winner): the winner wrote nothing the transaction
  // read (docs/transactions.md, "Promotion"). The same test decides whether
  // a commit may follow `winner` in one combined entry (`winner` is then
  // the commit before it). Judged by the rows `winner` changes: their
  // values may have been cleared.
  using Reads = std::shared_ptr<const ReadSet>;
  static bool Unaffected(const ReadSet& reads, const LogEntry& winner);
  // Whether `entry` is, or has as a member, the commit with id `id`: a
  // commit that finds itself in a position it lost (a copy of it — the
  // same request delivered twice to a group's home, or proposed both
  // there and here — took it) is committed there, never promoted past
  // itself. False for an empty `id`.
  static bool Holds(const LogEntry& entry, const std::string& id);
  // Whether `entry` carries `mine`: its id and exactly its changes, as the
  // entry itself or as one of its members. What a commit that lost its
  // position checks before taking the winner for its own (an id alone
  // could be named by a forged member list).
  static bool Carries(const LogEntry& entry, const LogEntry& mine);
  // Proposes `entry` for position at.position + 1. Sets the entry's
  // timestamp and next-leader nominee; the caller sets a unique `id`. With
  // `reads`, an entry that loses its position to one that left them
  // unaffected is proposed again at the next position (at most
  // kMaxPromotions times in a row, within the deadline) instead of ending
  // Aborted.
  //
  // With options().combine, a commit that arrives while this client's
  // proposal for the group is in flight waits for its outcome, and then
  // goes in the next proposal together with the others waiting that
  // those before them leave unaffected (and whose rows are disjoint from
  // theirs): one log entry, one position and timestamp for all. A commit
  // that read before positions this client saw decided passes them as a
  // promotion would, without a round trip; one that cannot pass one ends
  // Aborted at once. The proposal's deadline is its members' earliest.
  // Waiting commits go oldest `since` first (a time of
  // env()->MonotonicMicros(): when the transaction's first attempt began;
  // 0: now), so a retry goes ahead of commits begun after it. A caller
  // that gives a `since` waits for its turn (AwaitTurn) when a conflict
  // carries one (HasTurn); without one, no turn is kept for it.
  //
  // With options().forward, while the group is hot — this client lost a
  // position to another app server's entry, or the group's home reports
  // commits from others, within options().hot_for — a commit with `reads`
  // that writes only its group's rows is sent to the group's home instead
  // (repl.Commit): the replication server of one full replica, the same
  // for every app server, combines and proposes it with everyone else's
  // (docs/replication.md, "Hot groups").
  void Commit(GroupRef group, const LogPosition& at, LogEntry entry, Callback<CommitResult> done,
              int64_t deadline = 0, Reads reads = nullptr, int64_t since = 0);
  // Whether an Aborted commit may wait for its turn (AwaitTurn) rather
  // than back off: it lost to a position this client's lane judged, and a
  // turn was kept for its retry.
  static bool HasTurn(const absl::Status& status);
  // Turns: a retry of a commit that ended Aborted with a turn waits here
  // until every retry of the group's commits from this client begun before
  // it (`since`, as for Commit) has had its turn, and the previous turn's
  // commit was decided; `done(true)` then, and until that retry's commit
  // reaches the lane (at most kTurnHold) commits begun after it wait. So
  // this app server's writers of one entity take turns, oldest first,
  // instead of racing each other (docs/replication.md, "Combined
  // entries"). DeadlineExceeded at `deadline`.
  //
  // With options().early_turns the next turn is given once the previous
  // turn's commit is proposed; the grant names that proposal's position,
  // and this client's reads of the group at its local replica then wait
  // (at most kReadFloorWait) until the replica has applied it.
  void AwaitTurn(GroupRef group, int64_t since, Callback<bool> done, int64_t deadline = 0);
  // The same at this client's own lane only (never at a home), answering
  // with the position the retry's reads must wait for (0: none) instead of
  // waiting for it here: a home's side of repl.AwaitTurn.
  void AwaitTurnAfter(GroupRef group, int64_t since, Callback<uint64_t> done, int64_t deadline = 0);
  static constexpr absl::Duration kTurnHold = absl::Milliseconds(100);
  static constexpr absl::Duration kReadFloorWait = absl::Milliseconds(100);
  // Positions a commit may be promoted past, in a row.
  static constexpr int kMaxPromotions = 256;
  // Whether some replica other than the local one knows the group's log
  // reached `position` (its top or applied position is at least that):
  // asks them all, answers true at the first that does, false once all
  // answered (or the deadline passed) without one.
  void SomeReplicaReached(GroupRef group, uint64_t position, Callback<bool> done,
                          int64_t deadline = 0);
  // Blocks until no local apply of a commit this client acknowledged
  // before applying it is still in flight, or `at_most` passed. For a
  // process about to exit (a tool, a closing Database): its last commits'
  // local applies land instead of being left to the next read. Not from
  // one of the client's own callbacks.
  void AwaitLocalApplies(absl::Duration at_most);
  // Brings replica `replica` up to at least position `target`: copies known
  // chosen values, decides unknown positions with no-op Paxos, applies in
  // order. Returns the replica's applied position.
  void CatchUp(GroupRef group, int replica, uint64_t target, Callback<LogPosition> done,
               int64_t deadline = 0);

  // The advisory lock of `group` (coordinator/advisory_locks.h), held by
  // `owner`: asks the group's home coordinator — one full replica's, picked
  // by a hash of the group so every writer asks the same one — waiting at
  // most `wait` in its queue. `done(true)`: granted for at most `lease`.
  // `done(false)` or an error: go ahead without it.
  void LockGroup(GroupRef group, std::string owner, absl::Duration wait, absl::Duration lease,
                 Callback<bool> done, int64_t deadline = 0);
  // Releases it (or leaves the queue); nobody waits for the answer.
  void UnlockGroup(GroupRef group, std::string owner);

  const GroupClientOptions& options() const { return options_; }
  Env* env() const { return env_; }
  Transport* transport() const { return transport_; }
  // Calls to coordinators, over transport().
  coordinator::CoordinatorClient* coordinators() { return &coordinators_; }
  // What this client's Commits came to, since it was made.
  struct Stats {
    uint64_t commits = 0;            // our entry was chosen
    uint64_t entries = 0;            // ... the log entries those commits were in
    uint64_t combined = 0;           // ... commits that shared their entry with others
    uint64_t turns = 0;              // retries given their turn (AwaitTurn)
    uint64_t forwarded = 0;          // commits sent to their hot group's home (answered there)
    uint64_t fast_path = 0;          // ... by the leader's ballot-0 accept, one round trip
    uint64_t conflicts = 0;          // another writer's entry took the position (Aborted)
    uint64_t promotions = 0;         // ... and ours went on to the next position instead
    uint64_t unknown = 0;            // no value chosen in time (outcome unknown)
    uint64_t locks_granted = 0;      // advisory locks taken
    uint64_t locks_missed = 0;       // advisory lock requests that went ahead without it
    uint64_t catchups = 0;           // catch-ups of a replica (reads that found it behind, sweeps)
    uint64_t invalidations = 0;      // invalidations sent to the coordinator of a replica
                                     // whose accept did not come in time
    uint64_t snapshot_catchups = 0;  // catch-ups that copied another replica's data (the
                                     // positions needed were cleaned up everywhere)
    uint64_t first_reads = 0;        // ReadFirst answered by one request (position and row)
    uint64_t first_reads_again = 0;  // ... that found the position the usual way and read again
  };
  Stats stats() const;
  // The group is hot for options().hot_for from now: another app server's
  // entry took a position this client proposed for, or its home says other
  // app servers send it commits of the group (in an answer to one, or to
  // an accept: the write steps, replication/write_accept.cc).
  void NoteHot(const GroupRef& group) ABSL_LOCKS_EXCLUDED(hot_mu_);
  // This client as it names itself to hot groups' homes (random).
  uint64_t origin() const { return origin_; }
  // Counts an invalidation sent (the write steps, replication/write_invalidate.cc).
  void NoteInvalidation() { stats_.invalidations.fetch_add(1, std::memory_order_relaxed); }
  // Counts a ReadFirst answered in one request, or (`again`) not.
  void NoteFirstRead(bool again) {
    (again ? stats_.first_reads_again : stats_.first_reads).fetch_add(1, std::memory_order_relaxed);
  }
  // Latency of successful commits and of current-level ReadPositions (for
  // a ReadFirst that found the position with its read, of both together).
  const LatencyHistogram& commit_latency() const { return commit_latency_; }
  const LatencyHistogram& read_latency() const { return read_latency_; }
  // The entity groups with the most commits (or lost positions: conflicts
  // and promotions) by this client, most first: (root row, count).
  std::vector<std::pair<std::string, uint64_t>> HottestGroups(size_t n, bool by_conflicts) const;

  // The replicas that vote, in acceptor-id order (paxos::AcceptorId i is
  // replica voters()[i]).
  const std::vector<int>& voters() const { return voters_; }

 private:
  Env* const env_;
  Transport* const transport_;
  const GroupClientOptions options_;
  coordinator::CoordinatorClient coordinators_{transport_};
  std::vector<int> voters_;
  // Replicas with a coordinator, where groups' advisory locks live.
  std::vector<int> lock_homes_;
  const ReplicaInfo* LockHome(const GroupRef& group) const;
  struct Counters {
    std::atomic<uint64_t> commits{0}, fast_path{0}, conflicts{0}, promotions{0}, unknown{0};
    std::atomic<uint64_t> entries{0}, combined{0}, turns{0}, forwarded{0};
    std::atomic<uint64_t> locks_granted{0}, locks_missed{0};
    std::atomic<uint64_t> catchups{0}, invalidations{0}, snapshot_catchups{0};
    std::atomic<uint64_t> first_reads{0}, first_reads_again{0};
  };
  LatencyHistogram commit_latency_, read_latency_;
  TopCounts<2> group_counts_;  // by root row: commits, conflicts
  // Local applies of this client's commits acknowledged before the apply
  // finished, by root row (replication/local_applies.cc): a read of the
  // group from this client waits for those begun before it, so it sees its
  // own commits without a catch-up.
  struct LocalApplies {
    uint64_t next = 0;             // the sequence number of the next apply begun
    std::set<uint64_t> in_flight;  // sequence numbers
    struct Waiter {
      uint64_t upto;  // runs once no apply numbered below this is in flight
      absl::AnyInvocable<void(uint64_t behind)> fn;
    };
    std::vector<Waiter> waiters;
    // The highest acknowledged position whose local apply failed (0: none):
    // reads catch the replica up to it first.
    uint64_t behind = 0;
  };
  absl::Mutex applies_mu_;
  std::map<std::string, LocalApplies> local_applies_ ABSL_GUARDED_BY(applies_mu_);
  int applies_in_flight_ ABSL_GUARDED_BY(applies_mu_) = 0;  // in all groups
  // Notified when applies_in_flight_ reaches 0 (AwaitLocalApplies).
  std::vector<std::shared_ptr<absl::Notification>> drained_ ABSL_GUARDED_BY(applies_mu_);
  // Returns the apply's sequence number, for EndLocalApply.
  uint64_t BeginLocalApply(const std::string& root);
  // `applied`: how the apply of `position` went.
  void EndLocalApply(const std::string& root, uint64_t seq, uint64_t position,
                     const absl::Status& applied);
  // Runs `fn(behind)` once this client's local applies of the group in
  // flight now have ended (at once if there are none), or at `deadline` if
  // sooner; `behind` as in LocalApplies.
  void AfterLocalApplies(const std::string& root, int64_t deadline,
                         absl::AnyInvocable<void(uint64_t behind)> fn);
  // The local replica did not apply this client's acknowledged `position`.
  void LocalBehind(const std::string& root, uint64_t position);
  // The local replica reached `position`: forgets a `behind` at or below it.
  void LocalCaughtUp(const std::string& root, uint64_t position);
  // ReadPosition's work once its checks are done and local applies waited
  // for (`started`: when ReadPosition was called, for read_latency_).
  void ReadPositionAt(GroupRef group, ReadLevel level, Callback<LogPosition> done, int64_t deadline,
                      int local, int64_t started);
  // ReadPosition at the local replica once this client's applies there
  // were waited for: `behind`, the position an apply that failed left
  // unapplied (0: none), is caught up to first.
  void ReadPositionAfterApplies(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                                int64_t deadline, int64_t started, uint64_t behind);
  // Commit's proposal of `entry` for at.position + 1 (`promotions`: how
  // many positions it lost and was promoted past so far).
  void ProposeAfter(GroupRef group, const LogPosition& at, LogEntry entry, bool group_rows_only,
                    int64_t deadline, int promotions, Reads reads, int64_t started,
                    Callback<CommitResult> done);
  // How a decided position's commits are answered (`answers`: each one's
  // start, for commit_latency_, and callback): with the result if `ours`,
  // once visible (and applied here unless `group_rows_only`), else Aborted
  // once the winner is applied here.
  struct Answer {
    int64_t started;
    Callback<CommitResult> done;
    bool turn = false;  // a conflict carries a turn
  };
  // (`answered` runs once all are answered.)
  void FinishPosition(GroupRef group, uint64_t position, internal::Chosen chosen, bool ours,
                      int64_t timestamp, bool group_rows_only, int64_t deadline,
                      std::vector<Answer> answers, absl::AnyInvocable<void()> answered = nullptr);
  // Aborted "conflict: another writer committed log position p", with a
  // turn for its retry.
  static absl::Status TurnConflict(uint64_t position);

  // ---- combined entries (replication/combine.cc) ----
  // A commit waiting for this client's proposal of its group, or in it.
  struct Member {
    LogPosition at;  // what its reads saw; promotions move it on
    LogEntry entry;  // its id and changes (lent to the proposal in flight)
    Reads reads;
    bool group_rows_only = true;
    int64_t deadline = 0;
    int64_t started = 0;
    int64_t since = 0;   // when its transaction's first attempt began
    bool turns = false;  // its caller waits for a turn after a conflict (a `since` given)
    int promotions = 0;
    size_t bytes = 0;               // its changes' encoded size
    std::vector<std::string> rows;  // the rows it writes: table '\0' row
    Callback<CommitResult> done;
  };
  using MemberPtr = std::unique_ptr<Member>;
  // One group's commits from this client: one proposal in flight at most.
  struct Lane {
    GroupRef group;
    bool busy = false;               // a proposal is in flight
    int64_t busy_until = 0;          // its deadline
    std::vector<MemberPtr> waiting;  // oldest first
    // The position after the last one this lane saw decided (0: none),
    // and the entries of the last few decided, which waiting commits that
    // read before them are judged against.
    uint64_t next = 0;
    std::map<uint64_t, LogEntry> decided;
    size_t decided_bytes = 0;
    // Retries waiting for their turn, any order (the oldest `since` goes
    // next). A placeholder (no `done`) keeps the place of a commit just
    // refused until its retry asks, or `expires`.
    struct Turn {
      int64_t since = 0;
      int64_t created = 0;  // commits begun after it wait until kTurnHold after this
      int64_t expires = 0;
      int64_t deadline = 0;
      Callback<uint64_t> done;  // given the position its reads wait for (0: none)
    };
    std::vector<Turn> turns;
    // The retry whose turn it is (-1: none): until its commit arrives (or
    // granted_until) commits begun after it wait; the next turn is given
    // once its commit is decided (with early_turns: once it is proposed).
    int64_t granted = -1;
    int64_t granted_until = 0;
    bool granted_arrived = false;
    // With early_turns: the position of the last granted turn's proposal,
    // which the next turn's reads wait for.
    uint64_t turn_after = 0;
    // Decided positions whose commits are still being answered: the next
    // turn waits for them, so its retry reads what they wrote.
    int answering = 0;
    int64_t timer_at = 0;  // when the lane's timer fires (0: none set)
    bool idle() const {
      return !busy && waiting.empty() && turns.empty() && granted < 0 && answering == 0;
    }
  };
  absl::Mutex lanes_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(lanes_mu_);
  struct Plan;
  // The lane of `group` (key: LaneKey), made if there is none.
  Lane* LaneOf(const std::string& key, GroupRef group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lanes_mu_);
  void Enqueue(GroupRef group, MemberPtr member);
  Plan PlanNext(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lanes_mu_);
  void RunPlan(Plan plan);
  void ProposeMembers(GroupRef group, uint64_t position, LogPosition base,
                      std::vector<MemberPtr> members);
  void MembersDecided(GroupRef group, uint64_t position, std::string value,
                      std::vector<MemberPtr> members, absl::StatusOr<internal::Chosen> chosen);
  void WaitingExpired(std::string key, Member* member);
  // Keeps a refused commit's place for its retry.
  void KeepTurn(Lane& lane, int64_t since) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lanes_mu_);
  // Gives the next turn if it is due; the callbacks to run (outside the
  // lock), and when to look again (0: no timer needed).
  struct Turns {
    std::vector<std::pair<Callback<uint64_t>, absl::StatusOr<uint64_t>>> run;
    int64_t again = 0;
  };
  Turns NextTurn(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lanes_mu_);
  // A retry begun at `since` went to the group's home: the turn or place
  // this client's own lane keeps for it is given up.
  void LeaveLane(const GroupRef& group, int64_t since) ABSL_LOCKS_EXCLUDED(lanes_mu_);
  // A lane's timer set for `at` (0: a nudge, no timer): expired turns and
  // holds, a plan if idle, the next turn if due.
  void LaneTimer(const std::string& key, int64_t at);
  void RunTurns(const std::string& key, Turns turns);

  // ---- hot groups' homes (replication/forward.cc) ----
  // This client, to the homes it sends commits to (random).
  uint64_t origin_ = 0;
  absl::Mutex hot_mu_;
  // Until when each hot group's commits go to its home.
  absl::flat_hash_map<std::string, int64_t> hot_ ABSL_GUARDED_BY(hot_mu_);
  std::atomic<size_t> hot_size_{0};  // hot_.size(), read without the lock
  static constexpr size_t kMaxHotGroups = 10000;
  // A home that did not answer is not sent commits until `until`; each
  // failure in a row doubles the pause, from kHomeFailedFor to
  // kHomeFailedMax.
  struct HomeHealth {
    int64_t until = 0;
    int64_t pause = 0;
  };
  std::vector<HomeHealth> homes_ ABSL_GUARDED_BY(hot_mu_);  // by replica index
  static constexpr absl::Duration kHomeFailedFor = absl::Seconds(5);
  static constexpr absl::Duration kHomeFailedMax = absl::Seconds(60);
  // Where a commit of `group` goes now: its home, or nullptr (here).
  const ReplicaInfo* HomeFor(const GroupRef& group) ABSL_LOCKS_EXCLUDED(hot_mu_);
  // The home (replica index) answered, or (`ok` false) did not.
  void HomeAnswered(size_t home, bool ok) ABSL_LOCKS_EXCLUDED(hot_mu_);
  void Forward(const ReplicaInfo& home, GroupRef group, const LogPosition& at, LogEntry entry,
               Reads reads, int64_t deadline, int64_t since, int64_t started,
               Callback<CommitResult> done);
  // AwaitTurn at the group's home.
  void AwaitTurnAt(const ReplicaInfo& home, GroupRef group, int64_t since, Callback<bool> done,
                   int64_t deadline);
  // Read floors: a turn given while the commit before it is decided at
  // `position` (early_turns). Until the local replica has applied it, or
  // kReadFloorWait passed, this client's reads of the group at the local
  // replica wait: the retry reads what that commit wrote.
  struct ReadFloor {
    GroupRef group;
    uint64_t position = 0;
    int64_t until = 0;  // reads begun later do not wait for it
    // Reads waiting (each until its own time, at most kReadFloorWait after
    // it began), and whether a poll of the local replica is under way
    // for them: one per group, however many wait.
    std::vector<std::pair<int64_t, absl::AnyInvocable<void()>>> waiting;
    bool polling = false;
  };
  absl::Mutex floors_mu_;
  absl::flat_hash_map<std::string, ReadFloor> floors_ ABSL_GUARDED_BY(floors_mu_);
  std::atomic<size_t> floors_size_{0};  // floors_.size(), read without the lock
  static constexpr size_t kMaxReadFloors = 10000;
  static constexpr absl::Duration kReadFloorPoll = absl::Milliseconds(1);
  void SetReadFloor(const GroupRef& group, uint64_t position) ABSL_LOCKS_EXCLUDED(floors_mu_);
  // Calls `then` at once if no floor is set for the group; otherwise once
  // the local replica applied it, kReadFloorWait passed, or `deadline`,
  // and the floor is gone.
  void AwaitReadFloor(const GroupRef& group, int64_t deadline, absl::AnyInvocable<void()> then)
      ABSL_LOCKS_EXCLUDED(floors_mu_);
  bool HasReadFloor(const GroupRef& group) ABSL_LOCKS_EXCLUDED(floors_mu_);
  // Asks the local replica where the group's floor (key) stands; answers
  // the reads that may go, again in kReadFloorPoll while some wait.
  void PollReadFloor(const std::string& key) ABSL_LOCKS_EXCLUDED(floors_mu_);
  // ReadFirst and ReadPosition once past the read floor.
  void ReadFirstPastFloor(GroupRef group, ReadLevel level, std::string row, std::string family,
                          Callback<FirstRead> done, int64_t deadline, int replica,
                          std::optional<ScanRange> also_scan);
  void ReadPositionPastFloor(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                             int64_t deadline, int local);
  // Aborted `status`, marked as carrying a turn.
  static absl::Status WithTurn(absl::Status status);

  Counters stats_;
  std::shared_ptr<Lifetime> lifetime_ = std::make_shared<Lifetime>();
};

}  // namespace megastore::replication
