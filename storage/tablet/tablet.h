// A tablet: one row range [start_row, end_row) of one Bigtable table, stored
// in one RocksDB instance in its own directory (Bigtable §5.3). Locality
// groups are RocksDB column families.
//
// Every operation is atomic on one row. Writes to one row apply in the order
// they were logged; CheckAndMutateRow and ReadModifyWriteRow hold a row lock
// and wait for the row's writes in flight, so they are linearizable.
// All methods are thread-safe.
//
// Errors:
//   InvalidArgument   bad input (unknown family, oversized key or value,
//                     malformed filter or timestamp); nothing was written.
//   OutOfRange        the row is not in this tablet's range.
//   FailedPrecondition the tablet was split or closed; or an increment met a
//                     value that is not an 8-byte integer.
//   DataLoss          a stored entry is corrupt.
//   others            RocksDB I/O failures, converted.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/env.h"
#include "storage/model/data_model.h"
#include "storage/model/schema.h"
#include "storage/tablet/resources.h"
#include "storage/tablet/rocksdb_options.h"
#include "storage/tablet/tablet_log.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
struct ColumnFamilyOptions;
}  // namespace rocksdb

namespace megastore::storage {

class RowBuilder;
struct TabletCompactionContext;
namespace tablet_internal {
class ReadBudget;
}

// What a non-blocking MutateRowAsync returns instead of waiting for a lock.
absl::Status WouldBlockError();
bool IsWouldBlock(const absl::Status& s);

struct TabletOptions {
  // The tablet's directory; created if missing.
  std::string path;
  // The row range this tablet serves: [start_row, end_row); an empty end_row
  // means "to the end of the table". A new tablet records it; an existing
  // one must be opened with the range it recorded.
  std::string start_row;
  std::string end_row;
  // Writes with a value larger than this are refused.
  size_t max_value_bytes = kDefaultMaxValueBytes;
  StorageTuning tuning;
  // The tablet server's shared commit log, or nullptr for RocksDB's own WAL.
  // With a log, every write is appended (and durable) before it is applied,
  // and each applied batch records the tablet's redo point. Not owned.
  TabletLog* log = nullptr;
  // This tablet's id in the shared log.
  std::string log_id;
};

// What a tablet's directory records about itself (Tablet::ReadStored):
// enough to list it again when its server's state file is lost.
struct StoredTablet {
  std::string start_row;
  std::string end_row;  // "" = end of table
  // The tablets it was split from, nearest first: its parent, the parent's
  // parent, ... (empty if created whole, or split before tablets recorded
  // it).
  std::vector<std::string> ancestors;
  uint64_t redo_point = 0;
};

class Tablet {
 public:
  // Reads the metadata of the tablet at `path` without opening it for
  // writing (the server need not run; nothing is replayed or changed).
  static absl::StatusOr<StoredTablet> ReadStored(const std::string& path);

  // Opens (creating if needed) the tablet at options.path. `resources` and
  // `env` must outlive the tablet.
  static absl::StatusOr<std::unique_ptr<Tablet>> Open(const TabletOptions& options,
                                                      const TableSchema& schema,
                                                      TabletResources* resources, Env* env);
  ~Tablet();
  Tablet(const Tablet&) = delete;
  Tablet& operator=(const Tablet&) = delete;

  // ---- writes ---------------------------------------------------------------

  // Applies `mutations` to `row` atomically, in order. `timestamp` is the
  // mutation time: deletions are stamped with it and SetCells with
  // kServerTimestamp take it; kServerTimestamp means the server's clock.
  absl::Status MutateRow(std::string_view row, absl::Span<const Mutation> mutations,
                         int64_t timestamp = kServerTimestamp);

  // The outcome of an asynchronous write; called exactly once.
  using WriteCallback = absl::AnyInvocable<void(absl::Status status)>;
  struct RowWrite {
    std::string row;
    std::vector<Mutation> mutations;
    int64_t timestamp = kServerTimestamp;
    WriteCallback done;
    // false: a lazy write (CommitLog::AppendAsync): `done` once it is
    // logged and applied, durable with the log's next sync.
    bool durable = true;
  };

  // MutateRow without waiting for the commit log. If the write is refused
  // up front (anything MutateRow refuses before writing, or the tablet no
  // longer accepts writes), returns the error and leaves `write` untouched:
  // the caller still owns it and may retry it elsewhere. Otherwise takes
  // `write`, queues it and calls its `done` once the write is durable and
  // applied (OK) or has failed. With a shared log `done` runs on the log's
  // thread, so it must be quick and must not write to a tablet
  // synchronously; without one the write happens before this returns.
  //
  // With `may_block` false it never waits for a lock (it may run on an RPC
  // I/O thread): where it would, it returns WouldBlockError() and leaves
  // `write` untouched.
  absl::Status MutateRowAsync(std::unique_ptr<RowWrite>& write, bool may_block = true);

  // MutateRow for each entry; each row atomic on its own. One status per
  // entry, in order.
  std::vector<absl::Status> MutateRows(absl::Span<const RowMutations> entries,
                                       int64_t timestamp = kServerTimestamp);

  // Reads the latest data of `row` through `predicate`; if it yields any
  // cell, applies `true_mutations`, else `false_mutations`. Returns whether
  // the predicate matched. Atomic with respect to every other write.
  // `durable` false: the mutations are a lazy write (RowWrite::durable).
  absl::StatusOr<bool> CheckAndMutateRow(std::string_view row, const RowFilter& predicate,
                                         absl::Span<const Mutation> true_mutations,
                                         absl::Span<const Mutation> false_mutations,
                                         bool durable = true);

  // Applies the rules in order to the latest cells of their columns and
  // writes the results as new cells (timestamp: the server's clock, or just
  // above the column's newest cell if that is later). Returns the new cells.
  absl::StatusOr<Row> ReadModifyWriteRow(std::string_view row,
                                         absl::Span<const ReadModifyWriteRule> rules);

  // ---- reads ----------------------------------------------------------------

  // The row's cells selected by `options`, or nullopt if none.
  absl::StatusOr<std::optional<Row>> ReadRow(std::string_view row, const ReadOptions& options = {});

  // Calls `on_row` for each row of `rows` (clipped to this tablet) that has a
  // selected cell, in row order, until it returns false or
  // options.rows_limit rows were delivered. The callback may move from the
  // row. Reads a consistent snapshot.
  absl::Status ReadRows(const RowSet& rows, const ReadOptions& options,
                        const std::function<bool(Row&)>& on_row);

  // ---- maintenance ----------------------------------------------------------

  // Flushes every memtable to SSTables (Bigtable's minor compaction).
  absl::Status Flush();

  // Major compaction: rewrites every SSTable of every locality group into
  // one, dropping deleted, masked, garbage-collected and out-of-range data,
  // and every tombstone. Afterwards no such data remains on disk. Reads and
  // writes continue meanwhile; at most one major compaction runs at a time.
  absl::Status CompactTablet();

  // Splits this tablet at `split_row` (start_row < split_row < end_row) into
  // [start_row, split_row) at `left_path` and [split_row, end_row) at
  // `right_path`, made from a RocksDB checkpoint: the children hard-link the
  // parent's SSTables. Afterwards this tablet refuses writes
  // (FailedPrecondition); open the children to continue.
  absl::Status Split(std::string_view split_row, const std::string& left_path,
                     const std::string& right_path);
  // After a Split whose children will not be used (committing it failed):
  // this tablet accepts writes again. The caller deletes the children.
  void UndoSplit();

  // Waits for the writes in flight (asynchronous ones too) to finish, then
  // refuses new ones with FailedPrecondition (reads continue). For unloading: after it, a flush
  // persists everything the tablet ever acknowledged.
  void StopWrites();
  // Undoes StopWrites (a merge that could not be committed).
  void ResumeWrites();

  // For crash simulation: closing drops the memtables instead of flushing
  // them, as a crash loses them. What they held is in the commit log past
  // the tablet's redo point, so the next owner recovers it from there.
  void DropMemtablesOnClose();

  // For merging neighbours: copies every stored entry of `source`'s rows —
  // cells and tombstones, all versions, exactly as stored, so reads as of
  // any time see what they saw in `source` — into this tablet, which must
  // cover those rows, use the same locality groups, and not be serving yet.
  // `source` must not take writes meanwhile (StopWrites). Afterwards this
  // tablet's sequence numbers continue above `source`'s, and the copy is
  // flushed.
  absl::Status ImportFrom(Tablet& source);

  // Switches to `schema` (see CompiledSchema::CheckChange for what may
  // change).
  absl::Status UpdateSchema(const TableSchema& schema);

  // ---- the shared commit log (TabletOptions::log) -----------------------------

  // The redo point stored in the tablet when it was opened: every record of
  // this tablet with a higher LSN must be replayed.
  uint64_t recovered_redo_point() const { return recovered_redo_point_; }
  // Which log the recovered redo point counts in ("" if the tablet never
  // adopted one): in a cell a tablet moves between servers, each with its
  // own log and LSNs.
  const std::string& recovered_redo_log() const { return recovered_redo_log_; }
  // The tablets this one was split from, nearest first (StoredTablet).
  const std::vector<std::string>& ancestors() const { return ancestors_; }
  // Makes this server's log (options.log, named `log_name`) the one the
  // tablet's redo point counts in, at the log's current LSN, and flushes:
  // afterwards no earlier log's records are needed. Call after replaying
  // what earlier logs held and before accepting writes.
  absl::Status AdoptLog(std::string_view log_name);
  // Applies one logged mutation during recovery (records in LSN order).
  // Replaying a suffix of the log twice gives the same state as once.
  absl::Status ReplayLogRecord(uint64_t lsn, std::string_view payload);
  // Makes sure the tablet's data is on disk up to some LSN and returns it:
  // every record of this tablet at or below it is in SSTables, so log
  // segments up to it are not needed by this tablet. Flushes only if there
  // were writes since the last flush (or `force_flush`).
  absl::StatusOr<uint64_t> PersistLogPosition(bool force_flush = false);
  // How long the oldest write not yet flushed has waited (0 if none).
  int64_t UnflushedAgeMicros();
  // The last position PersistLogPosition returned (or the recovered redo
  // point): log records of this tablet up to it are on disk in SSTables.
  uint64_t durable_log_position();
  bool was_split() const { return split_.load(); }
  // False once split or StopWrites()ed.
  bool accepts_writes() const { return !split_.load() && !writes_stopped_.load(); }

  // ---- introspection ----------------------------------------------------------

  const std::string& path() const { return options_.path; }
  const std::string& start_row() const { return options_.start_row; }
  const std::string& end_row() const { return options_.end_row; }
  bool ContainsRow(std::string_view row) const;
  std::shared_ptr<const CompiledSchema> schema() const;
  // Estimated bytes on disk plus in memtables.
  uint64_t ApproximateSizeBytes();
  // The highest write sequence number handed out so far.
  uint64_t last_sequence() const { return last_seq_.load(); }

 private:
  struct LocalityGroupHandle;
  struct CachedRow;
  struct AsyncWrite;
  // The schema and the handles of its locality groups (in the schema's
  // order), swapped as a whole by UpdateSchema.
  struct View {
    std::shared_ptr<const CompiledSchema> schema;
    std::vector<LocalityGroupHandle*> groups;
  };
  static constexpr size_t kLockStripes = 256;

  Tablet(const TabletOptions& options, TabletResources* resources, Env* env);

  absl::Status ValidateRow(std::string_view row) const;
  absl::Status ValidateMutations(const CompiledSchema& schema,
                                 absl::Span<const Mutation> mutations) const;
  // Everything MutateRow checks before writing.
  absl::Status ValidateWrite(const CompiledSchema& schema, std::string_view row,
                             absl::Span<const Mutation> mutations, int64_t timestamp) const;
  std::shared_ptr<const View> view() const;
  size_t StripeOf(std::string_view row) const;
  // The current time for GC max_age rules (0 if the schema has none).
  int64_t GcClock(const CompiledSchema& schema) const;
  // Row cache entries are keyed by tablet, generation and row; a major
  // compaction starts a new generation.
  std::string RowCacheKey(std::string_view row, uint64_t generation) const;
  // Logs (with a shared log) and applies one row's mutations. Requires the
  // row's stripe lock, and no asynchronous write of the stripe in flight
  // (AwaitStripeIdle).
  absl::Status ApplyLocked(const View& view, std::string_view row,
                           absl::Span<const Mutation> mutations, int64_t timestamp, size_t stripe,
                           bool durable = true);
  // Applies without logging; `redo` is stored with the batch if given. No
  // other write of `row` may run concurrently: the caller holds the row's
  // stripe lock, or is the log's thread applying records in LSN order.
  absl::Status WriteRow(const View& view, std::string_view row,
                        absl::Span<const Mutation> mutations, int64_t now, size_t stripe,
                        std::optional<uint64_t> redo);
  // With the stripe lock held: waits until no asynchronous write of the
  // stripe is in flight (none can start meanwhile).
  void AwaitStripeIdle(size_t stripe);
  // The log's callback for an asynchronous write.
  void FinishAsyncWrite(AsyncWrite* write, absl::Status status);
  uint64_t LogWatermarkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(redo_mu_);
  // With `budget` null, the read has one of its own (per `options`).
  absl::StatusOr<std::optional<Row>> ReadRowInternal(const View& view, std::string_view row,
                                                     const ReadOptions& options,
                                                     tablet_internal::ReadBudget* budget = nullptr);
  absl::Status CheckWritable() const;
  // The row `builder` assembled, counted in the statistics.
  std::optional<Row> FinishRead(RowBuilder& builder);
  // Reads that name their families visit only the stretches of the row
  // their filter can match (NarrowSpans: per locality group, in key order;
  // empty when the read must visit the whole row).
  struct KeySpan;
  static std::vector<std::vector<KeySpan>> NarrowSpans(const CompiledSchema& schema, size_t groups,
                                                       std::string_view row,
                                                       const RowFilter& filter);
  absl::Status ReadSpans(const View& view, const std::vector<std::vector<KeySpan>>& spans,
                         RowBuilder* builder, tablet_internal::ReadBudget* budget);

  // Idle iterators for point reads of single-group tablets: creating a
  // RocksDB iterator costs about as much as the seek itself.
  struct PooledIterator;
  static constexpr size_t kMaxPooledIterators = 4;
  absl::StatusOr<std::unique_ptr<PooledIterator>> AcquireIterator(LocalityGroupHandle* group,
                                                                  bool memory_only);
  void ReleaseIterator(std::unique_ptr<PooledIterator> p);
  void DropPooledIterators();
  // Returns the first of `n` fresh sequence numbers.
  absl::StatusOr<uint64_t> AssignSequence(size_t n);
  absl::Status OpenDB(std::shared_ptr<const CompiledSchema> schema);
  // A handle (without its column family yet) and the RocksDB options for a
  // locality group. Requires compaction_state_.
  std::unique_ptr<LocalityGroupHandle> NewGroupHandle(const LocalityGroup& group,
                                                      rocksdb::ColumnFamilyOptions* cf);
  absl::Status LoadOrStoreMeta();
  // Creates the column families `schema` needs that are missing, then
  // installs the new view. Requires mu_.
  absl::Status InstallSchemaLocked(std::shared_ptr<const CompiledSchema> schema)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TabletOptions options_;
  TabletResources* const resources_;
  Env* const env_;
  const uint64_t tablet_id_;
  std::string start_key_;  // encoded start_row
  std::string end_key_;    // encoded end_row, "" if unbounded

  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;

  mutable absl::Mutex mu_;
  std::shared_ptr<const View> view_ ABSL_GUARDED_BY(mu_);
  // Every locality group ever opened; only appended to, under mu_. Views
  // point into it.
  std::vector<std::unique_ptr<LocalityGroupHandle>> groups_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<TabletCompactionContext> compaction_state_;
  // Set by Split under write_gate_ held exclusively, so a writer that holds
  // the gate shared sees it.
  std::atomic<bool> split_{false};
  std::atomic<bool> writes_stopped_{false};  // likewise, set by StopWrites
  std::atomic<bool> flush_failed_{false};    // the last Flush failed: Resume before the next

  // Writers hold it shared (asynchronous ones while they queue); Split and
  // StopWrites hold it exclusively, and wait for pending_floors_ to empty.
  absl::Mutex write_gate_;
  absl::Mutex major_compaction_mu_;
  // Taken by CheckAndMutateRow and ReadModifyWriteRow across their read and
  // write, and briefly by asynchronous writers to register themselves.
  std::array<absl::Mutex, kLockStripes> row_locks_;
  // Row cache consistency: a write bumps its stripe's version and erases the
  // cached row under cache_locks_; a reader caches what it read only if the
  // version did not change meanwhile, under the same lock.
  std::array<absl::Mutex, kLockStripes> cache_locks_;
  std::array<std::atomic<uint64_t>, kLockStripes> row_versions_{};
  std::atomic<uint64_t> last_seq_{0};
  std::atomic<uint64_t> seq_reserved_{0};  // persisted bound on last_seq_
  absl::Mutex reserve_mu_;
  std::atomic<uint64_t> cache_generation_{0};
  // Shared-log bookkeeping.
  uint64_t recovered_redo_point_ = 0;
  std::string recovered_redo_log_;
  std::vector<std::string> ancestors_;
  absl::Mutex redo_mu_;
  // One entry per write in flight with a shared log: a lower bound of its
  // LSN, taken before it was appended.
  std::multiset<uint64_t> pending_floors_ ABSL_GUARDED_BY(redo_mu_);
  // Asynchronous writes in flight, by row stripe.
  std::array<uint32_t, kLockStripes> async_in_flight_ ABSL_GUARDED_BY(redo_mu_){};
  uint64_t writes_since_flush_ ABSL_GUARDED_BY(redo_mu_) = 0;
  int64_t first_unflushed_micros_ ABSL_GUARDED_BY(redo_mu_) = 0;
  uint64_t durable_log_position_ ABSL_GUARDED_BY(redo_mu_) = 0;
  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<PooledIterator>> iterator_pool_ ABSL_GUARDED_BY(pool_mu_);
};

}  // namespace megastore::storage
