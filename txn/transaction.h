// Transactions on one entity group (docs/architecture.md; docs/transactions.md): the
// paper's steps — read (the group's current log position and timestamp),
// application logic (Gets see the group as of that position, plus the
// transaction's own writes), commit (Paxos for the next position), apply
// (the replicas write the entry's mutations at the commit timestamp) —
// over replication::GroupClient and the schema's Bigtable layout.
//
// Asynchronous, so the simulator can run it on virtual time; api/ wraps it
// in blocking calls for application code. Errors are absl::Status codes:
//   Aborted            conflict: another transaction took the position; the
//                      whole transaction may be retried (Run does).
//   DeadlineExceeded   out of time. For Commit the outcome is unknown: the
//                      entry may be in the log (the message says when it
//                      surely is, but not yet visible). Read before retrying.
//   Unavailable        too few replicas answered a read; nothing was written
//                      (Commit never reports an unknown outcome this way).
//   InvalidArgument    the entity does not fit the schema (the message names
//                      the field), a key changed, or it is in another group.
//   NotFound           no such table.
//   FailedPrecondition writes in a transaction that read `inconsistent`, or
//                      use after Commit.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/retry.h"
#include "replication/group_client.h"
#include "schema/layout.h"
#include "txn/types.h"

namespace megastore::txn {

using schema::Entity;
using schema::KeyValue;

template <typename T>
using Callback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

class Transaction : public std::enable_shared_from_this<Transaction> {
 public:
  // Begins a transaction on the group of `root_table`'s entity with key
  // `root_key` (or any table's entity with that group key).
  // `deferred`: the position is not read here but with the transaction's
  // first read (GroupClient::ReadFirst: one request less when the local
  // replica is up to date); until then position() is unknown (WithPosition
  // waits for it), and a failure to find it is that read's error
  // (position_failure()).
  static void Begin(Context ctx, std::string root_table, std::vector<KeyValue> root_key,
                    TransactionOptions options, Callback<std::shared_ptr<Transaction>> done,
                    bool deferred = false);

  // The entity of `table` with primary key `key` in this group, or nullopt.
  void Get(std::string table, std::vector<KeyValue> key, Callback<std::optional<Entity>> done);
  // Ancestor query: `table`'s entities in this group whose primary key
  // starts with `key_prefix` (at least the group's key), in key order, as
  // of the read position, with this transaction's own writes applied.
  void Query(std::string table, std::vector<KeyValue> key_prefix, QueryOptions options,
             Callback<QueryResult> done);
  // Local index query: the entities whose index `index` values start with
  // `values`, in index order. The index is read as of the read position
  // (the transaction's own writes show in the entities returned, not in
  // which entities match).
  void IndexQuery(std::string index, std::vector<KeyValue> values, QueryOptions options,
                  Callback<QueryResult> done);

  // Sends `body` to queue `queue` of the entity group of `root_table`'s
  // entity with key `root_key`, atomically with this transaction's commit
  // (it goes into this group's outbox; DeliverPending moves it).
  absl::Status Send(std::string_view root_table, const std::vector<KeyValue>& root_key,
                    std::string queue, std::string body);
  // Up to `limit` messages waiting in this group's queue `queue`, by id.
  void ReadQueue(std::string queue, int64_t limit, Callback<std::vector<QueueMessage>> done);
  // Removes a message read from this group's queue, at commit.
  absl::Status Consume(const QueueMessage& message);
  // The message `id` of this group's queue `queue` as of the read position
  // (nullopt if it is not waiting there: consumed, or never delivered).
  void ReadMessage(std::string queue, std::string id, Callback<std::optional<QueueMessage>> done);
  bool sent_messages() const;

  // Two-phase commit, phase one: instead of committing, records this
  // transaction's writes in the group as prepared under `txid`, with the
  // group holding the decision (`decision_root`). Until the decision is
  // applied (FinishPrepared), every other commit in the group first
  // resolves it: see docs/transactions.md, "Two-phase commit".
  void Prepare(std::string txid, std::string decision_root, Callback<CommitInfo> done);
  bool has_writes() const;

  // The group's own bookkeeping rows (queues, two-phase commit), outside
  // the entity layout: the latest "e" cells of `row` as of the read
  // position (empty if none), and a buffered write of its cells. Not for
  // entities: use Get/Put.
  void RawGet(std::string row, Callback<std::map<std::string, std::string>> done);
  void RawWrite(std::string row, std::vector<replication::CellChange> cells);
  // An index repair (Database::RepairIndexes): writes `w` (index entry
  // cells, of the entity table or a global index table) with the commit,
  // at every replica. Not for entities: use Put.
  absl::Status AddRepair(const schema::BigtableWrite& w);

  // Intersection of several local index queries on one table: the
  // entities that match every (index, values prefix) condition, in key
  // order (e.g. photos with tag "beach" and tag "sun"). Each index is read
  // as of the read position; the keys are intersected, then the entities
  // read (with this transaction's writes).
  void IndexIntersect(std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions,
                      Callback<std::vector<Entity>> done);
  // The same a page at a time (options.limit entities; the cursor resumes).
  // When every condition gives a value for each of its index's columns, the
  // entries of each condition are in primary-key order and the scans are
  // merge-joined: each scan reads ahead a page at a time and skips (seeks)
  // to the largest key another scan is at, so memory stays at a page per
  // condition however many entries match one of them. Otherwise the keys
  // are intersected in memory, as above.
  void IndexIntersect(std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions,
                      QueryOptions options, Callback<QueryResult> done);

  // Rows of the group in [start, end) (end "": unbounded) as of the read
  // position, which must be known; at most `limit` (0: one replica
  // answer's worth). Every read of the group's rows goes through here or
  // the row reads (Get, RawGet), which record what they cover: a commit
  // that loses its position is promoted past the winner only if the
  // winner wrote none of it (Reads).
  void ScanGroup(std::string start, std::string end, std::string family, int64_t limit,
                 Callback<replication::ScanReply> done);
  // What this transaction read of its group, as the promotion test
  // judges it (GroupClient::Unaffected: its reads still hold after an
  // entry that writes none of these rows); nullptr for a two-phase prepare
  // or bookkeeping transaction, which is never promoted.
  replication::GroupClient::Reads Reads() const;

  // Buffer a write; checked against the schema now.
  absl::Status Put(std::string_view table, Entity entity);
  absl::Status Delete(std::string_view table, std::vector<KeyValue> key);
  // Commits the buffered writes at the next log position.
  void Commit(Callback<CommitInfo> done);

  // The read position: known once Begin answered, or (begun deferred)
  // once WithPosition or a read has found it; asking earlier is a bug.
  const replication::LogPosition& position() const;
  // Runs `done` with the position once known, reading it first if nothing
  // has yet (a deferred Begin).
  void WithPosition(Callback<replication::LogPosition> done);
  // Begun deferred, why the position could not be found (Unavailable,
  // DeadlineExceeded: nothing was written, the attempt may be retried as a
  // failed Begin may); OK otherwise.
  absl::Status position_failure() const;
  const replication::GroupRef& group() const { return group_; }
  // Where the transaction's time comes from (its client's Env).
  Env* env() const { return ctx_.client->env(); }
  // The datacenter whose replica served the reads (position().replica).
  const std::string& datacenter() const {
    return ctx_.client->options().replicas[static_cast<size_t>(replica_)].name;
  }

  // `deadline`: env MonotonicMicros by which every step must end (0: none).
  // `position` nullopt: found with the first read (Begin's `deferred`).
  // A transaction made at a position read elsewhere (a read token, an
  // examination) knows nothing of those reads: give it options.promote =
  // false, or a lost position would be promoted past writes they saw.
  Transaction(Context ctx, TransactionOptions options, replication::GroupRef group,
              std::optional<replication::LogPosition> position, int64_t deadline = 0,
              std::string lock_owner = "");
  ~Transaction();
  // True if the transaction holds its group's advisory lock.
  bool holds_lock() const;
  // Begins a transaction on the group whose root row is `root_row`.
  static void BeginAtRow(Context ctx, std::string root_row, TransactionOptions options,
                         Callback<std::shared_ptr<Transaction>> done, bool deferred = false);

 private:
  struct Write {
    const schema::TableDescriptor* table = nullptr;
    std::optional<Entity> after;  // nullopt: delete
  };
  struct Row {
    const schema::TableDescriptor* table = nullptr;
    std::optional<Entity> entity;
  };
  absl::StatusOr<std::string> RowOf(const schema::TableDescriptor& table,
                                    const std::vector<KeyValue>& key) const;
  // Reads `row` as of the transaction's position (no buffer); the first
  // read of a deferred transaction finds the position with it.
  void ReadRow(const schema::TableDescriptor* table, std::string row,
               Callback<std::optional<Entity>> done);
  // ReadRow's answer.
  void OnRowRead(const schema::TableDescriptor* table, const std::string& row,
                 absl::StatusOr<replication::ReadReply> r, Callback<std::optional<Entity>> done);
  // True if the position is known. Else false, and once it is found
  // `retry` runs with `done` (which gets the failure if it is not).
  template <typename T>
  bool PositionKnown(Callback<T>& done, absl::AnyInvocable<void(Callback<T>)> retry);
  // Records the deferred position (or the failure to find it) and runs
  // what waited for it.
  void SetPosition(absl::StatusOr<replication::LogPosition> at);
  void FinishCommit(Callback<CommitInfo> done);
  // Records a read of the group's `row`, or of [start, end), in the read set.
  void NoteRead(const std::string& row);
  void NoteRange(std::string start, std::string end);
  // Gives the advisory lock back, if held (idempotent).
  void ReleaseLock();

  const Context ctx_;
  const TransactionOptions options_;
  const replication::GroupRef group_;
  const int replica_;  // where the reads go (the position's replica)
  // Written once, under mu_, before position_known_ is set; read without
  // the lock only after seeing position_known_.
  replication::LogPosition position_;
  std::atomic<bool> position_known_{false};
  // A deferred position: being read (waiters queued), or failed.
  bool position_reading_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status position_failure_ ABSL_GUARDED_BY(mu_);
  std::vector<Callback<replication::LogPosition>> position_waiters_ ABSL_GUARDED_BY(mu_);
  const int64_t deadline_;  // env MonotonicMicros; 0: the client's per-step default

  mutable absl::Mutex mu_;
  std::map<std::string, Write> writes_ ABSL_GUARDED_BY(mu_);  // by row, in row order
  std::map<std::string, Row> read_ ABSL_GUARDED_BY(mu_);      // rows read at the position
  // The read set: every row and range of the group read at the position
  // (for promotion; docs/transactions.md, "Promotion").
  std::set<std::string> read_rows_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> read_ranges_ ABSL_GUARDED_BY(mu_);
  // Rows outside the entity layout (queues): row -> cells to set ("" value
  // and delete flag: delete).
  std::map<std::string, std::vector<replication::CellChange>> raw_writes_ ABSL_GUARDED_BY(mu_);
  uint64_t message_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  friend struct Delivery;
  friend void FinishPrepared(Context, std::string, std::string, bool, Callback<bool>);
  friend void Decide(Context, std::string, std::string, std::optional<bool>,
                     Callback<std::optional<bool>>);
  // Appends the transaction's writes to `entry`.
  absl::Status BuildChanges(replication::LogEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds an undecided prepared transaction in the group and resolves it;
  // `done(true)` if there was one. Uses the rows the first read brought
  // along if it did (PreparedScan), else scans.
  void ResolvePrepared(Callback<bool> done);
  // The range of the group's prepared rows to scan along with a read (the
  // first read of a transaction that may commit), once; nullopt otherwise.
  std::optional<replication::ScanRange> PreparedScan();
  // Keeps the prepared rows a read brought along.
  void KeepPreparedRows(const replication::ReadReply& reply);
  // Resolves the first undecided prepared transaction of `rows`, if any.
  void ResolvePreparedRows(const replication::ScanReply& rows, Callback<bool> done);
  void ProposeEntry(replication::LogEntry entry, Callback<CommitInfo> done);
  void CommitUnlocked(Callback<CommitInfo> done);
  std::vector<replication::RowChange> extra_changes_ ABSL_GUARDED_BY(mu_);  // other tables
  // Two-phase commit's own transactions (decisions, phase two) write only
  // bookkeeping rows or the prepared writes themselves: they must not wait
  // for prepared transactions (that could wait in a cycle).
  bool two_phase_bookkeeping_ ABSL_GUARDED_BY(mu_) = false;
  // The group's prepared rows at the position, read along with the first
  // read (PreparedScan); whether that read asked for them.
  std::optional<replication::ScanReply> prepared_rows_ ABSL_GUARDED_BY(mu_);
  bool prepared_scan_asked_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::pair<std::string, std::string>> prepare_
      ABSL_GUARDED_BY(mu_);  // txid, decision root
  bool committing_ ABSL_GUARDED_BY(mu_) = false;
  std::string lock_owner_ ABSL_GUARDED_BY(mu_);  // empty: no advisory lock held
};

// Global index query: the entities whose index `index` values start with
// `values`, across entity groups, in index order. The index is read at the
// local replica and may lag the groups' logs (its entries are written when
// each commit is applied); each entity is then read from its own group at
// `level` (snapshot by default) and returned only if it still has the
// entry, so a result never shows an entity that no longer matches — but a
// just-committed match may be missing until its entry is applied here.
void GlobalIndexQuery(Context ctx, std::string index, std::vector<KeyValue> values,
                      QueryOptions options, replication::ReadLevel level,
                      Callback<QueryResult> done);

// A transaction's application logic: it calls `done` with OK to commit, or
// an error to abandon the transaction.
using Body = std::function<void(std::shared_ptr<Transaction> txn,
                                absl::AnyInvocable<void(absl::Status)> done)>;

// Two-phase commit: the decision of `txid`, kept in the group whose root
// row is `decision_root`. With `propose`, records it unless one is already
// recorded (the first decision wins); returns the recorded decision
// (true: commit), or nullopt if none is recorded and none was proposed.
void Decide(Context ctx, std::string decision_root, std::string txid, std::optional<bool> propose,
            Callback<std::optional<bool>> done);
// Phase two in one group: applies (commit) or drops (abort) the writes
// prepared under `txid`; `done(false)` if nothing was prepared there.
void FinishPrepared(Context ctx, std::string group_root, std::string txid, bool commit,
                    Callback<bool> done);
// Commits a transaction across entity groups — `parts`, each begun on its
// own group, with their writes buffered — atomically: a part alone
// commits normally; several go through two-phase commit (prepare in each,
// the decision in the first written group, then phase two in each; see
// docs/transactions.md). Aborted if any part lost a conflict (nothing was
// committed: retry from the reads); another error from the decision means
// the outcome is unknown (in-doubt resolution finishes it).
void CommitAcross(Context ctx, std::vector<std::shared_ptr<Transaction>> parts,
                  Callback<CommitInfo> done);

// How old an undecided prepared transaction must be before another
// transaction of its group may decide it aborted.
inline constexpr absl::Duration kPreparedTimeout = absl::Seconds(5);

// The attempts of one Run (here or the blocking API's): options.max_attempts
// of them, a random pause of up to options.max_retry_backoff before each
// retry, all within options.deadline if set.
Retry TransactionRetry(Env* env, const TransactionOptions& options);
// Starts the next attempt with `options` narrowed to the time left, or
// returns DeadlinePassed.
absl::Status StartAttempt(Retry& retry, absl::Duration total, TransactionOptions* options);
// DeadlineExceeded: the transaction deadline `total` passed after
// `attempts` attempts.
absl::Status DeadlinePassed(absl::Duration total, int attempts);
// A failure to find a transaction's position (a failed Begin, or a
// deferred one's first read): nothing was proposed, so a transient one
// (Unavailable, DeadlineExceeded) is as safe to retry as a conflict.
bool PositionFailure(const absl::Status& s);

// Runs `body` in a transaction on the group whose root row is `root`,
// committing it and retrying conflicts and transient failures (20 tries).
void RunAtRow(Context ctx, std::string root, Body body, Callback<CommitInfo> done);

// Delivers every message in the outbox of the group whose root row is
// `source_root`: each goes into its receiving group's queue in a
// transaction there that first checks the delivery marker (so a message is
// delivered exactly once however often this runs), then leaves the outbox.
// Returns how many were delivered now.
void DeliverPending(Context ctx, std::string source_root, Callback<int> done);

// The queue sweeper: delivers the outboxes of every group listed in the
// outbox table at the local replica (a group is listed by the commit of
// its first Send and unlisted once DeliverPending emptied its outbox), so
// messages of a sender that died before delivering still arrive. Exactly
// once, like DeliverPending. The list is read at the local replica and may
// lag a moment behind recent commits; the next sweep picks those up.
// Returns how many messages it delivered.
void SweepQueues(Context ctx, Callback<int> done);
// The Bigtable table listing groups with undelivered messages.
std::string OutboxTable(const schema::Layout& layout);

// The Bigtable tables a schema needs in every datacenter: its entity table
// (families: the log, entities, index entries), one per global index, and
// the outbox list.
std::vector<storage::TableSchema> TablesFor(const schema::Layout& layout);

// Runs `body` in a transaction on the group and commits it, retrying the
// whole transaction after a conflict (Aborted) with a random pause, up to
// options.max_attempts. A body error is returned as is.
void Run(Context ctx, std::string root_table, std::vector<KeyValue> root_key,
         TransactionOptions options, Body body, Callback<CommitInfo> done);

template <typename T>
inline bool Transaction::PositionKnown(Callback<T>& done,
                                       absl::AnyInvocable<void(Callback<T>)> retry) {
  if (position_known_.load(std::memory_order_acquire)) return true;
  WithPosition([done = std::move(done),
                retry = std::move(retry)](absl::StatusOr<replication::LogPosition> at) mutable {
    if (!at.ok()) return done(at.status());
    retry(std::move(done));
  });
  return false;
}

}  // namespace megastore::txn
