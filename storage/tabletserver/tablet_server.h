// The tablet server (Bigtable §5): serves the tablets of its data directory,
// with one commit log shared by all of them.
//
// Writes go to the commit log first (group commit, durable before they are
// acknowledged), then to the tablet, which records its redo point. On start
// the server replays each loaded tablet's records after its redo point.
// Minor compactions happen by size (RocksDB's memtable limit) and by age
// (RunMaintenance flushes tablets whose oldest unflushed write is older than
// `flush_max_age`); log segments every tablet has flushed are deleted.
//
// Two modes:
//  * standalone: the server itself keeps which tables and tablets it has,
//    in `<data>/state.pb`, and each table's schema again in
//    `<data>/tables/<table>/schema.pb`, so that a lost state.pb can be
//    rebuilt from the tablets (RebuildStateFromTablets);
//  * cell (options.cell_log_name set; docs/cell.md): `data_dir` is the
//    cell's shared data root, tablets live in `tablets/<id>/` and this
//    incarnation's commit log in `logs/<cell_log_name>/`. The master assigns
//    tablets (AssignTablet, with their table's schema) and takes them away
//    (UnloadTablet); nothing about assignments is kept locally, since the
//    truth is METADATA. A row whose tablet is not served here answers
//    NotServingError().
//
// Thread-safe. Data operations route by (table, row) to the tablet that
// covers the row.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "storage/commitlog/commit_log.h"
#include "storage/tablet/tablet.h"
#include "storage/tabletserver/tabletserver.pb.h"

namespace megastore::storage {

struct TabletServerOptions {
  std::string data_dir;
  TabletResourcesOptions resources;
  uint64_t log_segment_bytes = 64 << 20;
  // fdatasync the commit log before acknowledging writes.
  bool sync_log = true;
  // Write the commit log into zero-filled files made ahead of need
  // (CommitLogOptions::preallocate): cheaper syncs; off on copy-on-write
  // filesystems, where writing over zeros gains nothing.
  bool preallocate_log = true;
  // The commit log writes in each writer's own call instead of on a thread
  // of its own (CommitLogOptions::inline_writes): the simulator's choice.
  bool inline_commit_log = false;
  // A lazy write nothing else syncs is synced this long after it was
  // written (CommitLogOptions::lazy_sync_delay).
  absl::Duration lazy_sync_delay = absl::Milliseconds(10);
  // Minor compaction by age: flush a tablet whose oldest unflushed write is
  // older than this.
  absl::Duration flush_max_age = absl::Seconds(60);
  // How often RunMaintenance runs by itself; zero disables the timer.
  absl::Duration maintenance_interval = absl::Seconds(5);
  size_t max_value_bytes = kDefaultMaxValueBytes;
  StorageTuning tuning;
  // Start even though the commit log is missing or ends before a tablet's
  // redo point (it was moved aside or truncated): the writes it held that
  // no SSTable has are lost, and new LSNs start past every redo point so
  // none of the next writes can be skipped at replay. Without it such a
  // start is refused with DataLoss naming the tablets.
  bool accept_log_loss = false;

  // ---- cell mode -----------------------------------------------------------------
  // This incarnation's log name; non-empty turns cell mode on. Unique per
  // start: a log directory that exists already is refused.
  std::string cell_log_name;
  // RunMaintenance splits a tablet larger than this (0: never).
  uint64_t split_threshold_bytes = 0;
  // Whether this server may serve now (its lock-service session surely
  // lives); checked on every request, so a server that was paused past its
  // lease refuses requests at once, before any timer of its own could run.
  // Unset: always.
  std::function<bool()> lease_valid;
  // Which tablets may split at all (unset: every one); a cell's root
  // tablet never does.
  std::function<bool(const TabletEntry&)> may_split;
  // Commits a split in METADATA (the children's rows) before the children
  // serve; an error undoes the split (the parent serves again) — except
  // Unknown (it may have been committed): then neither the parent nor the
  // children are served here, their files stay, and the master, reading
  // METADATA, assigns whichever it names.
  std::function<absl::Status(const TabletEntry& parent, const std::vector<TabletEntry>& children)>
      commit_split;
  // Runs after a committed split, outside the server's locks (tells the
  // master; a lost notification is found by the master's next scan).
  std::function<void(const TabletEntry& parent, const std::vector<TabletEntry>& children)>
      after_split;
  // Commits a merge in METADATA (MergeTablets) before the merged tablet
  // serves; an error undoes it (the two tablets serve again) — Unknown as
  // for commit_split.
  std::function<absl::Status(const TabletEntry& left, const TabletEntry& right,
                             const TabletEntry& merged)>
      commit_merge;
};

// The answer for a row whose tablet this server does not serve (cell mode):
// Unavailable, message starting "not serving". The client library then
// forgets the location and looks it up again.
absl::Status NotServingError(std::string_view what);
bool IsNotServing(const absl::Status& status);

struct TabletServerStats {
  commitlog::CommitLogStats log;
  TabletStats tablets;
  struct PerTablet {
    TabletEntry entry;
    uint64_t size_bytes = 0;
  };
  std::vector<PerTablet> per_tablet;
};

class TabletServer {
 public:
  // Opens the data directory (created if missing) and recovers every loaded
  // tablet. A tablet whose log records cannot be read is not loaded; its
  // rows answer Unavailable with the reason (see load_errors()).
  static absl::StatusOr<std::unique_ptr<TabletServer>> Open(const TabletServerOptions& options,
                                                            Env* env);
  ~TabletServer();

  // ---- tables (standalone mode) -----------------------------------------------
  // Creates a table as one tablet covering every row. AlreadyExists if the
  // name is taken; InvalidArgument for a bad name or schema.
  absl::Status CreateTable(const TableSchema& schema);
  // Unloads the table's tablets and deletes their data. NotFound if absent.
  absl::Status DeleteTable(std::string_view name);
  std::vector<TableSchema> ListTables() const;
  // Whether `table` exists and Megastore replicates it
  // (TableSchema.replicated). Cheap: for every raw write.
  bool IsReplicated(std::string_view table) const;
  absl::StatusOr<TableSchema> GetTable(std::string_view name) const;
  // Replaces the table's schema (add families, change GC rules, ...) on
  // every loaded tablet, then persists it.
  absl::Status UpdateTable(const TableSchema& schema);

  // ---- tablets --------------------------------------------------------------------
  // Cell mode: starts serving tablet `entry` of the table `schema` describes:
  // opens tablets/<id> (created only with `create`: otherwise a missing
  // directory is DataLoss), replays the pieces of dead servers' logs the
  // master split for it (recovered/<id>/), then adopts this server's log.
  // OK if it is already served with the same range; FailedPrecondition
  // outside cell mode, or if `for_log` is set and is not this server's
  // commit log: the master recorded the assignment for an earlier
  // incarnation at this address, and this one must not serve it (the
  // master would hand the tablet to another server while this one kept it).
  absl::Status AssignTablet(const TabletEntry& entry, const TableSchema& schema, bool create,
                            const std::string& for_log = "");
  bool cell_mode() const { return !options_.cell_log_name.empty(); }
  // Ids of tablets whose directories a split or merge is creating right now
  // (not in METADATA yet): the master's garbage collection leaves them.
  std::vector<std::string> CreatingTablets() const;
  std::vector<TabletEntry> ListTablets(std::string_view table = {}) const;
  // For crash simulation: closing the server (its destructor) drops every
  // tablet's memtables instead of flushing them, as a crash would; the
  // commit log holds their writes (Tablet::DropMemtablesOnClose).
  void CrashOnClose();
  absl::Status LoadTablet(std::string_view id);
  // Flushes and closes the tablet; it stays on disk, unserved.
  // `for_log` set and not this server's commit log: FailedPrecondition (the
  // caller means an earlier incarnation at this address, whose unflushed
  // writes only the recovery of its log brings back; "not loaded" here
  // would wrongly say there is nothing left to flush).
  absl::Status UnloadTablet(std::string_view id, std::string_view for_log = {});
  // Splits a loaded tablet at `split_row`; returns the children's entries.
  // In cell mode the split is committed through options.commit_split first.
  // An empty `split_row` picks the middle row.
  absl::StatusOr<std::vector<TabletEntry>> SplitTablet(std::string_view id,
                                                       std::string_view split_row);
  absl::Status CompactTablet(std::string_view id);
  // Cell mode: merges two loaded neighbouring tablets of one table (`left`
  // ends where `right` starts) into a new tablet, committed through
  // options.commit_merge; returns its entry. Writes to the two wait
  // meanwhile (clients retry).
  absl::StatusOr<TabletEntry> MergeTablets(std::string_view left, std::string_view right);

  // ---- data -------------------------------------------------------------------------
  // As the Tablet methods of the same names; NotFound for an unknown table,
  // Unavailable for a row whose tablet is not loaded.
  // `durable` false: a lazy write (Tablet::RowWrite::durable).
  absl::Status MutateRow(std::string_view table, std::string_view row,
                         absl::Span<const Mutation> mutations, int64_t timestamp = kServerTimestamp,
                         bool durable = true);
  // Makes every lazy write so far durable (one sync of the commit log,
  // none if nothing written is unsynced).
  absl::Status SyncLazyWrites();
  std::vector<absl::Status> MutateRows(std::string_view table,
                                       absl::Span<const RowMutations> entries);
  // Asynchronous forms (see Tablet::MutateRowAsync): `write->done` runs on
  // the commit log's thread once the write is durable and applied. An error
  // returned here (unknown table, no tablet, bad input) means nothing was
  // queued and `write` is left to the caller.
  // With `may_block` false it never waits for a lock: where it would, it
  // returns WouldBlockError() (see tablet.h) with `write` untouched.
  absl::Status MutateRowAsync(std::string_view table, std::unique_ptr<Tablet::RowWrite>& write,
                              bool may_block = true);
  // Queues every entry (each row atomic on its own); `done` runs once, with
  // one status per entry, when all have finished.
  void MutateRowsAsync(std::string_view table, std::vector<RowMutations> entries,
                       absl::AnyInvocable<void(std::vector<absl::Status>)> done);
  absl::StatusOr<bool> CheckAndMutateRow(std::string_view table, std::string_view row,
                                         const RowFilter& predicate,
                                         absl::Span<const Mutation> true_mutations,
                                         absl::Span<const Mutation> false_mutations,
                                         bool durable = true);
  absl::StatusOr<Row> ReadModifyWriteRow(std::string_view table, std::string_view row,
                                         absl::Span<const ReadModifyWriteRule> rules);
  absl::StatusOr<std::optional<Row>> ReadRow(std::string_view table, std::string_view row,
                                             const ReadOptions& options = {});
  // Rows of every tablet of the table, in row order.
  absl::Status ReadRows(std::string_view table, const RowSet& rows, const ReadOptions& options,
                        const std::function<bool(Row&)>& on_row);

  // ---- maintenance --------------------------------------------------------------------
  // Flushes tablets with old unflushed writes and deletes log segments that
  // no tablet needs. Runs by itself every maintenance_interval.
  absl::Status RunMaintenance();
  TabletServerStats Stats() const;
  // Tablets that failed to load at start, by id, with the reason.
  std::map<std::string, std::string> load_errors() const;
  const TabletServerOptions& options() const { return options_; }

 private:
  class LogAdapter;
  struct Loaded {
    TabletEntry entry;
    std::shared_ptr<Tablet> tablet;
  };

  TabletServer(const TabletServerOptions& options, Env* env);
  absl::Status Recover();
  absl::Status SaveStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `next` the state: written to state.pb first (standalone mode),
  // so that what is served never runs ahead of what a start would load;
  // on an error nothing changed.
  absl::Status CommitStateLocked(TabletServerState next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves into <data>/leftovers/ (named in the log, never deleted) what a
  // crash or a failed removal left in tables/: a deleted table's
  // directory, a split's parent whose children serve, the children of a
  // split that did not finish (only if they hold nothing newer than the
  // parent: no record in the log (`ids_in_log`), no later redo point).
  void MoveLeftoversAsideLocked(const std::set<std::string>& ids_in_log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes tables/<name>/schema.pb (standalone mode).
  absl::Status SaveTableSchema(const TableSchema& schema) const;
  // Reads state.pb (checksummed); refuses a damaged one, or a missing one
  // where tablet data or a commit log exist.
  absl::Status LoadState();
  absl::StatusOr<std::shared_ptr<Tablet>> OpenTabletLocked(const TabletEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TabletOptions OptionsFor(const TabletEntry& entry) const;
  const TableSchema* FindTableLocked(std::string_view name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  TabletEntry* FindEntryLocked(std::string_view id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The loaded tablet serving (table, row), or the reason there is none.
  // Without `may_block`, WouldBlockError() if the server's lock is taken.
  absl::StatusOr<std::shared_ptr<Tablet>> Route(std::string_view table, std::string_view row,
                                                bool may_block = true) const;
  // Runs `fn` on the row's tablet; retries when the tablet was split meanwhile.
  template <typename Fn>
  auto WithTablet(std::string_view table, std::string_view row, Fn fn) -> decltype(fn(nullptr));
  std::string NewTabletId(std::string_view table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TabletPath(const std::string& table, const std::string& id) const;
  // A row near the middle of the tablet's rows (by count), for splitting.
  static absl::StatusOr<std::string> MiddleRow(Tablet& tablet);
  // Replays the log pieces the master split for `entry` from dead servers'
  // logs (cell mode) and adopts this server's log.
  absl::Status RecoverAssigned(const TabletEntry& entry, Tablet* tablet);
  // Cell mode: NotServing unless loaded tablets cover every row of `rows`.
  absl::Status CheckServedLocked(std::string_view table, const RowSet& rows) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ScheduleMaintenance();

  const TabletServerOptions options_;
  Env* const env_;
  TabletResources resources_;
  std::unique_ptr<commitlog::CommitLog> log_;
  std::unique_ptr<LogAdapter> log_adapter_;

  mutable absl::Mutex mu_;
  TabletServerState state_ ABSL_GUARDED_BY(mu_);
  // The names of state_'s replicated tables, under a lock of their own: a
  // raw write asks on the I/O thread, which must not wait for mu_.
  void RefreshReplicatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable absl::Mutex replicated_mu_;
  std::set<std::string, std::less<>> replicated_ ABSL_GUARDED_BY(replicated_mu_);
  std::map<std::string, Loaded> loaded_ ABSL_GUARDED_BY(mu_);  // by tablet id
  std::map<std::string, std::string> load_errors_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> assigning_ ABSL_GUARDED_BY(mu_);  // cell mode: AssignTablet running
  std::set<std::string> creating_ ABSL_GUARDED_BY(mu_);   // see CreatingTablets()

  absl::Mutex maintenance_mu_;  // one RunMaintenance at a time
  // Shared with the maintenance timer's callback, which may still be running
  // when the server is destroyed: the destructor sets `stopping` and waits
  // until no callback is inside the server.
  struct TimerState {
    absl::Mutex mu;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    bool running ABSL_GUARDED_BY(mu) = false;
    Env::TimerId timer ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<TimerState> timer_state_ = std::make_shared<TimerState>();
};

// A standalone server's state (its tables and tablets) as its data
// directory's tablets record it: each table's schema from
// tables/<table>/schema.pb, each tablet's row range from its own metadata.
// A tablet superseded by split children that cover its rows is left out
// (a crash between a split and removing the parent leaves both), as are
// the children of a split that did not finish. Every tablet comes back
// loaded. Refused, naming each problem, if anything is unreadable or a
// table's tablets do not cover its rows exactly once: the operator decides
// (restore, or move the named directories aside) and runs it again.
// Whether `id` has the form of a tablet id of `table` in a standalone
// server (TABLE-<16 hex digits>).
bool IsTabletId(std::string_view table, std::string_view id);

struct RebuiltState {
  TabletServerState state;
  std::vector<std::string> notes;  // what was left out, and why
};
absl::StatusOr<RebuiltState> RebuildStateFromTablets(const std::string& data_dir);

}  // namespace megastore::storage
