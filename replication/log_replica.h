// One replica's half of an entity group's replicated log: the acceptor, the
// learner and the applier, kept in the group's root row of this datacenter's
// Bigtable (docs/architecture.md; docs/replication.md has the cell layout).
//
// Stateless: every call reads what it needs from Bigtable and changes the
// acceptor state only through CheckAndMutateRow, so each acceptor step is
// atomic and durable and a replication server can restart at any moment.
//
// Root-row cells, all in family "p" (kLogFamily, one version kept):
//   "L" BE64(pos) "a"   AcceptorRecord of position pos
//   "L" BE64(pos) "l"   the chosen LogEntry of pos, once known here
//   "S:applied"         AppliedRecord; cell timestamp = its position
//   "S:top"             BE64 of the highest position touched; timestamp = it
// The two summary cells are written with their position as the cell
// timestamp, so concurrent writers never move them backwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "replication/cell_crypto.h"
#include "replication/client_options.h"
#include "replication/replication.pb.h"
#include "storage/client/bigtable_client.h"
#include "storage/model/schema.pb.h"

namespace megastore::replication {

inline constexpr char kLogFamily[] = "p";

// The column family every Megastore table needs for its groups' logs.
storage::ColumnFamily LogFamilySchema();
// A family that log entries write data into (entities, index entries):
// its deletes mask by timestamp (ColumnFamily.timestamp_deletes), so an
// apply of an entry that lands after a later entry's delete — a slow or
// repeated apply, a replayed write — stays masked. Every family that
// EntryMutations writes must be declared this way.
storage::ColumnFamily DataFamilySchema(std::string_view name);

std::string AcceptorColumn(uint64_t position);
std::string LearnedColumn(uint64_t position);

class LogReplica {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

  // `bigtable` (and `env` and `encryption`, if given) must outlive this
  // object. With an `env`, a proposed entry's timestamp is checked against
  // its clock. With `encryption`, groups it says are encrypted are stored
  // sealed (replication/cell_crypto.h) and opened when read.
  LogReplica(storage::BigtableClient* bigtable, ReplicaType type, Env* env = nullptr,
             absl::Duration max_clock_skew = kDefaultMaxClockSkew,
             GroupEncryption* encryption = nullptr)
      : bigtable_(bigtable),
        type_(type),
        env_(env),
        max_clock_skew_(max_clock_skew),
        encryption_(encryption) {}

  ReplicaType type() const { return type_; }

  // One acceptor step (paxos::HandleRequest), persisted before the reply.
  // Replies `learned` instead if the position's chosen value is known here.
  //
  // Refuses what no honest writer sends, so that no client can push the
  // group's log where it cannot follow:
  //   * OutOfRange for a position with nothing here that is beyond one past
  //     the highest position this replica knows for the group (its top), or
  //     than `known_elsewhere` + 1 when the caller has learned from other
  //     replicas that the group reached `known_elsewhere` (a replica that
  //     missed some positions still votes on the next one);
  //   * InvalidArgument for an accepted value that is not a log entry, or
  //     whose timestamp is beyond this replica's clock plus the allowed
  //     skew (naming both).
  void Paxos(PaxosRequest request, Callback<PaxosReply> done) {
    Paxos(std::move(request), 0, std::move(done));
  }
  void Paxos(PaxosRequest request, uint64_t known_elsewhere, Callback<PaxosReply> done);
  void State(GroupRef group, Callback<StateReply> done);
  // As State, with the applied position durable here: a lazily written
  // applied record is synced before the answer (for the log clean-up,
  // which removes positions on the word of every replica that it applied
  // them, and must not hear of one a power cut here could take back).
  void DurableState(GroupRef group, Callback<StateReply> done);
  // At most kMaxReadLog positions per call.
  void ReadLog(ReadLogRequest request, Callback<ReadLogReply> done);
  // Records the chosen value of a position, then applies every consecutive
  // known position after the applied one (data only on full and read-only
  // replicas). Safe to run concurrently and repeatedly. OutOfRange for a
  // position beyond one past this replica's top: a replica that fell
  // behind catches up in order (GroupClient::CatchUp), never by jumping.
  void Apply(ApplyRequest request, Callback<ApplyReply> done) {
    Apply(std::move(request), 0, std::move(done));
  }
  // The same, recording the position also when it is at most one past
  // `known_elsewhere` (another replica vouched the group got that far).
  void Apply(ApplyRequest request, uint64_t known_elsewhere, Callback<ApplyReply> done);
  // The latest cells of `row`'s `family` as of `timestamp`, and the rows
  // of request.also_scan as Scan would give them. With at_applied, as of
  // the applied position, which comes back in ReadReply.state.
  void Read(ReadRequest request, Callback<ReadReply> done);
  // Rows of the group in a range (at most kMaxScanRows per call). In an
  // encrypted group, a range over local index entries reads all of the
  // group's entries of that index (their stored order is not theirs), at
  // most kMaxSealedIndexRows of them (ResourceExhausted beyond).
  void Scan(ScanRequest request, Callback<ScanReply> done);
  static constexpr int64_t kMaxScanRows = 1000;
  static constexpr int64_t kMaxSealedIndexRows = 100000;
  // Rows of a global index table (family "i"), newest data.
  void ScanIndex(ScanIndexRequest request, Callback<ScanReply> done);
  // Lists (and with `apply` removes) what this replica holds for positions
  // above `keep_through`, at most kMaxTruncate per call (TruncateRequest).
  void Truncate(TruncateRequest request, Callback<TruncateReply> done);
  static constexpr int kMaxTruncate = 1000;

  static constexpr uint64_t kMaxReadLog = 256;

  // ---- log clean-up (docs/replication.md, "Cleaning up the log") ----------

  // Removes the log cells of positions up to `through` (never above this
  // replica's applied position), at most kMaxClean positions per call
  // (`more` then says to call again). The cleaned mark is written with the
  // removal, atomically, so a Paxos request for a removed position is
  // refused (IsCleanedUp) rather than finding an empty acceptor. Reports
  // what is left of the log when it is done.
  void Clean(GroupRef group, uint64_t through, Callback<CleanReply> done);
  static constexpr uint64_t kMaxClean = 1000;
  // The commit timestamp of the entry chosen at `position`, if this replica
  // knows it (NotFound if not; 0 for a no-op).
  void EntryTimestamp(GroupRef group, uint64_t position, Callback<int64_t> done);
  // Records that a backup covers the group's log through `position`
  // (never moves back).
  void MarkBackup(GroupRef group, uint64_t position, Callback<StateReply> done);

  // See BackupSealRequest: at most kMaxBackupItems items per call.
  void SealBackup(BackupSealRequest request, Callback<BackupSealReply> done);
  static constexpr int kMaxBackupItems = 16;
  // See ListGroupsRequest: at most kMaxListedGroups roots per call.
  void ListGroups(ListGroupsRequest request, Callback<ListGroupsReply> done);
  static constexpr int kMaxListedGroups = 256;

  // ---- catch-up from a snapshot ---------------------------------------------

  // See SnapshotRowsRequest. At most kMaxSnapshotRows rows per call.
  void SnapshotRows(SnapshotRowsRequest request, Callback<SnapshotRowsReply> done);
  static constexpr int kMaxSnapshotRows = 256;
  // See InstallRowsRequest (full and read-only replicas).
  void InstallRows(InstallRowsRequest request, Callback<InstallRowsReply> done);
  // See FinishSnapshotRequest. Also removes what this replica's log held
  // at or below the position.
  void FinishSnapshot(FinishSnapshotRequest request, Callback<StateReply> done);

 private:
  using Sealing = std::shared_ptr<const GroupSealing>;
  // The group's sealing (unencrypted without an `encryption`).
  void SealingOf(const GroupRef& group, bool create, Callback<Sealing> done);
  void PaxosSealed(std::shared_ptr<PaxosRequest> request, uint64_t known_elsewhere, Sealing sealing,
                   Callback<PaxosReply> done);
  void PaxosAttempt(std::shared_ptr<PaxosRequest> request, uint64_t known_elsewhere, int attempt,
                    Sealing sealing, Callback<PaxosReply> done);
  // The acceptor step itself, once the position's stored state is known.
  void PaxosStep(std::shared_ptr<PaxosRequest> request, int attempt,
                 std::optional<std::string> stored, Sealing sealing, Callback<PaxosReply> done);
  void ReadLogSealed(ReadLogRequest request, Sealing sealing, Callback<ReadLogReply> done);
  void TruncateSealed(GroupRef group, uint64_t keep, bool apply, Sealing sealing,
                      Callback<TruncateReply> done);
  void ApplySealed(ApplyRequest request, uint64_t known_elsewhere, Sealing sealing,
                   Callback<ApplyReply> done);
  void ScanSealed(ScanRequest request, Sealing sealing, Callback<ScanReply> done);
  void SnapshotSealed(SnapshotRowsRequest request, Sealing sealing,
                      Callback<SnapshotRowsReply> done);
  void InstallSealed(InstallRowsRequest request, Sealing sealing, Callback<InstallRowsReply> done);
  // `done`, made to wait for a check that this replica holds `position`
  // of `group` (applied it, and has history that far back): Aborted if not.
  // The check runs alongside the read it guards. Position 0: no check.
  template <typename T>
  Callback<T> HoldingPosition(const GroupRef& group, uint64_t position, Callback<T> done);
  // Read's rows once the request is checked (and its position held).
  void ReadAt(ReadRequest request, Callback<ReadReply> done);
  // Removes the log cells of positions [from, to] (the caller bounds the
  // range); `done` with the count of positions and bytes removed.
  void RemoveLogCells(GroupRef group, uint64_t from, uint64_t to,
                      std::vector<storage::Mutation> with,
                      absl::AnyInvocable<void(absl::StatusOr<std::pair<uint64_t, uint64_t>>)> done);
  // Bytes of the log cells above `cleaned` (CleanReply.kept_bytes).
  void MeasureLog(GroupRef group, uint64_t cleaned, Callback<uint64_t> done);
  // InvalidArgument if `timestamp` is beyond this replica's clock plus the
  // allowed skew.
  absl::Status CheckTimestamp(const GroupRef& group, uint64_t position, int64_t timestamp) const;
  // Applies learned positions in order from the applied one. `known`: a
  // position's value the caller just learned (spares reading it back).
  void ApplyLoop(GroupRef group, Sealing sealing, Callback<ApplyReply> done,
                 std::optional<std::pair<uint64_t, std::string>> known = std::nullopt);
  // The same from the log state `state` just read. `learn`: the learned
  // value and top of `known`, written with its applied record when it is
  // the next position to apply (one write for both).
  void ApplyFrom(GroupRef group, Sealing sealing, StateReply state, Callback<ApplyReply> done,
                 std::optional<std::pair<uint64_t, std::string>> known = std::nullopt,
                 std::vector<storage::Mutation> learn = {});
  // Apply of a position beyond the next one to apply: records it learned
  // (if the top here reaches the position before it, or `known_elsewhere`
  // vouches for it), then applies what can be applied.
  void LearnBeyond(GroupRef group, uint64_t pos, uint64_t known_elsewhere, Sealing sealing,
                   std::string value, std::vector<storage::Mutation> learn,
                   Callback<ApplyReply> done);

  // Positions this replica's log holds durably beyond what it applied.
  // A synced Paxos write here (an accept, a promise) writes the top with
  // its position: once it succeeded, the top here is at least that
  // position for good — unless a truncation of the log lowers it. Its
  // start forgets every durable top; while it runs nothing is noted or
  // trusted; its start and its end each move the epoch on (a step that
  // began in an earlier epoch notes nothing). Applying a position at most that high
  // may then write its applied record lazily (LazyApplyOk): if a power cut
  // loses the record, the durable top stays above what is applied, and
  // every current read here catches the replica up before reading. In
  // memory only, bounded; what it does not know is applied durably.
  uint64_t DurableEpoch();
  void NoteDurableTop(const GroupRef& group, uint64_t position, uint64_t epoch);
  void BeginTruncation();
  void EndTruncation();
  // Whether applying `position` of `group`, whose entry is `entry`, may
  // write its applied record lazily: the durable top reaches `position`,
  // and so does the top this apply read from the log here (`state_top`:
  // a guard, where it can be, against a durable top noted for a table
  // since dropped and created again under its name), no truncation runs,
  // and
  // the entry writes only the group's own rows (anything else is read
  // without the group's log, so it must be durable once applied). Sets
  // `*epoch` to the epoch that answer holds for: if it has moved on by the
  // time the lazy write is done, the write is synced.
  bool LazyApplyOk(const GroupRef& group, uint64_t position, uint64_t state_top,
                   const LogEntry& entry, uint64_t* epoch);
  static constexpr size_t kMaxDurableTops = 1 << 16;
  static constexpr size_t kMaxDurableTopsBytes = size_t{8} << 20;  // of keys

  storage::BigtableClient* const bigtable_;
  const ReplicaType type_;
  Env* const env_;
  const absl::Duration max_clock_skew_;
  GroupEncryption* const encryption_;
  absl::Mutex durable_tops_mu_;
  // By table and root row (GroupKey).
  absl::flat_hash_map<std::string, uint64_t> durable_tops_ ABSL_GUARDED_BY(durable_tops_mu_);
  size_t durable_tops_bytes_ ABSL_GUARDED_BY(durable_tops_mu_) = 0;
  uint64_t durable_epoch_ ABSL_GUARDED_BY(durable_tops_mu_) = 0;
  int truncations_ ABSL_GUARDED_BY(durable_tops_mu_) = 0;  // in flight
};

// True for the OutOfRange refusal of a position beyond a replica's top.
bool IsBeyondTop(const absl::Status& s);
// True for the FailedPrecondition refusal of a position whose log was
// cleaned up at the replica.
bool IsCleanedUp(const absl::Status& s);

// Validates a request's group reference (InvalidArgument naming the problem).
absl::Status CheckGroup(const GroupRef& group);
// A group's key in maps: table, NUL, root row.
std::string GroupKey(const GroupRef& group);

// The Bigtable mutations that apply `entry`'s changes to one row (sealed
// with `cipher` if given, for the row cipher->StoredRow(change.row())).
absl::StatusOr<std::vector<storage::Mutation>> EntryMutations(const RowChange& change,
                                                              int64_t timestamp,
                                                              const GroupCipher* cipher = nullptr);

}  // namespace megastore::replication
