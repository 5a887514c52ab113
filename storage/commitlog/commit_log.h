// The tablet server's commit log (Bigtable §5.3, "commit log"): one
// append-only log shared by every tablet of the server, in segment files.
//
// One writer thread owns the files. Appenders hand it records and either
// wait (Append) or leave a callback (AppendAsync); everything that arrives
// while the writer is busy goes out as the next group: one write() and one
// fdatasync() (group commit). Callbacks run in LSN order, once their
// record is durable, on the thread that wrote the group: the writer thread,
// or a waiting appender — an Append that finds nobody writing writes the
// group itself (its own record and whatever else is queued) instead of
// waking the writer thread and being woken by it: two thread hand-offs
// fewer for a lone write. (With inline_writes there is no writer thread:
// every appender writes, as described there.) Each record carries an LSN
// (log sequence number), the id of the tablet it belongs to and an opaque
// payload (the tablet's mutation).
//
// Segments are written into files filled with zeros beforehand (unless
// preallocate is off): a thread of the log's own prepares the next one, so
// a sync has no file size or block allocation to record. A segment is cut
// to its written length, and synced, before the next one starts.
//
// Recovery: Open() reads every segment. A torn tail of the last segment (a
// write the crash interrupted) is logged with its offset and cut off. Torn
// means the last record is incomplete — the file ends inside it, or (in a
// zero-filled segment) a part of a 512-byte sector of it is all zeros and
// nothing readable follows — or the bytes after the last good record are
// all zero (space the crash left unwritten): a write that was never
// acknowledged. Cuts are synced. A *complete* record with
// a bad checksum or an unexpected LSN is corruption, wherever it is: it is
// kept on disk for inspection and remembered as a gap, like damage anywhere
// else; Replay() refuses, with DataLoss, to replay across a gap a caller
// needs. Nothing is ever skipped silently: a range of LSNs deliberately
// skipped (AdvanceTo) is recorded in a checksummed `skipped-FROM-TO` file
// beside the segments.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/commitlog/log_format.h"

namespace megastore::storage::commitlog {

struct CommitLogOptions {
  // Directory of the segment files; created if missing.
  std::string dir;
  // A new segment starts once the current one reaches this size.
  uint64_t segment_bytes = 64 << 20;
  // fdatasync before acknowledging (turn off only in benchmarks of the rest).
  bool sync = true;
  // Write segments into files zero-filled ahead of need (with sync, and
  // without inline_writes or read_only): an fdatasync that extends a file
  // must also record its new size and blocks, one that overwrites zeros
  // need not (about a quarter less time per sync on ext4). Prepared files
  // start at 4 MiB and double up to segment_bytes, so a log that writes
  // little zero-fills little; a segment moves to a prepared file as soon as
  // one is ready. Without space for one, segments are plain files.
  bool preallocate = true;
  // No writer thread: each append writes (and syncs) its group in the
  // appender's own call, and the callbacks run there, before AppendAsync
  // returns. An append from inside a callback is queued and written by the
  // same call before it returns. For the deterministic simulator, where
  // nothing may run on a thread of its own; appenders on several threads
  // still get group commit and LSN-ordered callbacks. As with the writer
  // thread, a callback must never wait for another append: that append is
  // written only after the callback returns.
  bool inline_writes = false;
  // Recover and Replay only (the master splitting a dead server's log): no
  // segment is started, appends fail with FailedPrecondition. A torn tail
  // is still cut off, as the server's own recovery would.
  bool read_only = false;
  // A lazy record nothing else syncs is synced by the writer thread this
  // long after it was written (InfiniteDuration: only by the next durable
  // record, or at the segment's close).
  absl::Duration lazy_sync_delay = absl::Milliseconds(10);
};

// A damaged region before the tail, found by Open().
struct LogGap {
  std::string segment;     // file path
  uint64_t offset = 0;     // where the damage starts
  uint64_t last_good_lsn;  // the last readable record before it (0: none)
  uint64_t next_good_lsn;  // the first readable record after it (0: none)
};

struct CommitLogStats {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t syncs = 0;  // groups written and synced (a group of lazy records only is not)
  uint64_t max_batch_records = 0;  // largest group commit so far
  uint64_t appender_groups = 0;    // groups an Append wrote itself (the writer thread was idle)
  // Group commits by number of records: [1], [2,3], [4,7], ... [2^15, inf).
  std::vector<uint64_t> batch_histogram = std::vector<uint64_t>(16, 0);
  uint64_t segments = 0;
  uint64_t no_space_failures = 0;      // groups refused for a full disk (their appends failed)
  uint64_t preallocated_segments = 0;  // segments started in a zero-filled file
};

class CommitLog {
 public:
  // Opens the log, recovering as described above, and starts a new segment
  // for appends.
  static absl::StatusOr<std::unique_ptr<CommitLog>> Open(const CommitLogOptions& options);
  ~CommitLog();
  CommitLog(const CommitLog&) = delete;
  CommitLog& operator=(const CommitLog&) = delete;

  // Runs once the record is durable (status OK) or cannot be (the write or
  // sync failed), in LSN order, on the thread that wrote the group: the
  // log's writer thread or an appender blocked in Append (which may hold
  // locks of its own, so a callback must not wait for anything an appender
  // could hold). It must not block on another append.
  using AppendCallback = absl::AnyInvocable<void(absl::Status status, uint64_t lsn)>;

  // Queues one record and returns its LSN at once; `done` runs later as
  // described above. If the log has already failed, returns that error and
  // never calls `done`. A write refused for lack of space fails its group's
  // appends with ResourceExhausted and nothing else: the log goes on once
  // space returns. After any other failed write, or a failed sync, every
  // later append fails too (the log's state on disk is unknown); the server
  // must restart and recover.
  //
  // `durable` false: the record need not be synced on its own account —
  // `done` runs once it is written (in the OS's cache), and it becomes
  // durable with the next sync, which every later durable record brings
  // (the log is one sequence: a durable record makes every earlier one
  // durable), or at the latest options.lazy_sync_delay later, when the
  // writer thread syncs what nothing else did (not with inline_writes).
  // For a write whose durability a later durable write implies.
  // Callbacks still run in LSN order: a lazy record queued behind a durable
  // one waits for that one's sync.
  absl::StatusOr<uint64_t> AppendAsync(std::string_view tablet_id, std::string_view payload,
                                       AppendCallback done, bool durable = true);

  // Appends one record and waits until it is durable (or, with `durable`
  // false, written; see AppendAsync). Returns its LSN. If no group is being
  // written, writes one itself (see above). Not to be called from an
  // AppendCallback.
  absl::StatusOr<uint64_t> Append(std::string_view tablet_id, std::string_view payload,
                                  bool durable = true);

  // Calls `fn` for every record with LSN > after_lsn, in LSN order, reading
  // the segments on disk. Stops at the first error `fn` returns. DataLoss if
  // a gap lies where records after `after_lsn` are needed. Meant for
  // recovery, before appends start; records appended meanwhile may or may
  // not be seen.
  absl::Status Replay(uint64_t after_lsn,
                      const std::function<absl::Status(const Record&)>& fn) const;

  // Deletes segments whose records all have LSN <= `lsn`, except the one
  // being appended to.
  absl::Status DeleteSegmentsThrough(uint64_t lsn);

  // Makes every record written so far durable (one fdatasync, none if
  // nothing written is unsynced or options.sync is off), without waiting
  // for the writer: for a tablet about to flush its memtables, whose
  // records must be durable in the log before the flush makes them durable
  // in SSTables (a lazy record's data must not outlive earlier records of
  // other tablets in a power cut). Safe to call from any thread, holding
  // any lock, even while the writer is blocked in an append callback. A
  // failed sync fails the log, as a failed group sync does.
  absl::Status SyncWritten();

  // The last LSN handed out (durable or about to be).
  uint64_t last_lsn() const;
  // The highest LSN up to which every record is durable (synced, or
  // written when options.sync is off). Lazy records may lie beyond it.
  uint64_t synced_lsn() const;
  // Whether Open() found no segment at all (a new log, or one that was
  // moved away).
  bool fresh() const { return fresh_; }
  // Makes the next LSN `next_lsn` if it is above last_lsn() + 1, recording
  // the skipped range so that later recoveries see no gap there. Only
  // before the first append (FailedPrecondition otherwise). For a server
  // whose tablets' redo points are beyond the log's end: no new write may
  // get an LSN a replay would skip.
  absl::Status AdvanceTo(uint64_t next_lsn);
  // Gaps found by Open(); empty for a healthy log.
  const std::vector<LogGap>& gaps() const { return gaps_; }
  // What Open() did to the tail, for the operator ("" if nothing).
  const std::string& recovery_note() const { return recovery_note_; }
  CommitLogStats stats() const;

 private:
  struct Segment {
    uint64_t first_lsn;
    std::string path;
  };

  explicit CommitLog(const CommitLogOptions& options);
  absl::Status Recover();
  // A zero-filled file made by the preparer thread.
  struct Prepared {
    std::string path;
    uint64_t bytes = 0;
  };
  // Creates the segment that appends go to next: in `prepared` if given
  // (renamed), else a new, empty file. The current segment is first cut to
  // its written length and synced. Only WritePending (or Open) calls it;
  // takes mu_ briefly.
  absl::Status StartSegment(uint64_t first_lsn, std::optional<Prepared> prepared = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Before writing a group of `bytes`: moves to a new segment if the
  // current one is full, or to a prepared file once one is ready and the
  // current segment is a plain file or has no zeros left for the group.
  absl::Status MaybeStartSegment(uint64_t first_lsn, size_t bytes);
  // Cuts the current segment's unwritten zeros and syncs what it holds
  // (lazy records, the cut): before it is closed.
  absl::Status FinishSegment();
  // The preparer thread: zero-fills a file whenever one is wanted.
  void PreparerLoop();
  // The prepared file, if one is ready; asks for the next.
  std::optional<Prepared> TakePrepared() ABSL_LOCKS_EXCLUDED(prep_mu_);
  // Writes one group of records; only WritePending calls it.
  absl::Status WriteGroup(const std::string& data, uint64_t first_lsn);
  // Makes everything written so far durable (fdatasync, if options.sync).
  absl::Status SyncGroup(uint64_t first_lsn);
  enum class GroupResult { kNothing, kWritten, kFailed, kNoSpace };
  // Takes everything pending as one group, writes and syncs it, and runs
  // its callbacks. Called with write_mu_ held: by the writer thread, or by
  // the appender itself with inline_writes.
  GroupResult WritePending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // With inline_writes: writes until nothing an append waits for is pending.
  void WriteInline() ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  bool HasPendingCallbacks() const ABSL_LOCKS_EXCLUDED(mu_);
  // The writer thread: writes pending groups until stopping_ and drained.
  void WriterLoop();
  // Queues one record (AppendAsync's work under mu_); its LSN.
  absl::StatusOr<uint64_t> Queue(std::string_view tablet_id, std::string_view payload,
                                 AppendCallback done, bool durable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lazy records were written to the current segment since its last sync:
  // synced before the segment is closed (only the writer touches it).
  bool unsynced_ = false;
  const CommitLogOptions options_;
  std::vector<LogGap> gaps_;  // fixed after Open
  std::string recovery_note_;
  bool fresh_ = false;  // fixed after Open
  // After a corrupt tail record: where new LSNs start (past it); 0 if none.
  uint64_t resume_lsn_ = 0;

  mutable absl::Mutex mu_;
  uint64_t last_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t synced_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  std::string pending_ ABSL_GUARDED_BY(mu_);  // encoded records not yet written
  uint64_t pending_first_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_records_ ABSL_GUARDED_BY(mu_) = 0;  // records in pending_
  bool no_space_ ABSL_GUARDED_BY(mu_) = false;       // the last group was refused for a full disk
  // The callbacks of the pending records, in LSN order.
  struct PendingCallback {
    uint64_t lsn;
    AppendCallback done;
    bool durable;
  };
  std::vector<PendingCallback> pending_callbacks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Who writes the next group: the writer thread is writing one, or an
  // appender is (the writer thread then waits even with records pending).
  bool writer_busy_ ABSL_GUARDED_BY(mu_) = false;
  bool appender_writing_ ABSL_GUARDED_BY(mu_) = false;
  // Lazy records are written but not synced, through this LSN (0: none):
  // the writer thread syncs them options_.lazy_sync_delay after, unless a
  // durable record's sync does first.
  uint64_t lazy_through_ ABSL_GUARDED_BY(mu_) = 0;
  // When the first of them was written, plus the delay: lazy groups that
  // keep coming do not put the sync off.
  absl::Time lazy_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // The writer thread's sync of lazy records nobody else synced (under
  // write_mu_).
  void SyncLazyRecords();
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  CommitLogStats stats_ ABSL_GUARDED_BY(mu_);
  // The current segment for SyncWritten: its own descriptor (a dup), so a
  // sync in flight survives the segment's close. Replaced under mu_ once
  // the previous segment is synced (StartSegment).
  struct SyncFile {
    explicit SyncFile(int fd) : fd(fd) {}
    SyncFile(const SyncFile&) = delete;
    SyncFile& operator=(const SyncFile&) = delete;
    ~SyncFile();
    const int fd;
  };
  std::shared_ptr<const SyncFile> sync_file_ ABSL_GUARDED_BY(mu_);
  // Every record through this LSN is written to the files (stored once a
  // group's write returns, before any of its callbacks runs).
  std::atomic<uint64_t> written_lsn_{0};
  // Held (before mu_) by one SyncWritten at a time.
  absl::Mutex sync_written_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  // Held while a group is written and its callbacks run: the files belong
  // to whoever holds it (the writer thread, or inline appenders).
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int fd_ = -1;                // guarded by write_mu_ (Open sets it before anyone else runs)
  uint64_t segment_size_ = 0;  // likewise
  uint64_t zeroed_bytes_ = 0;  // likewise: the current segment's prepared size (0: plain)
  std::thread writer_;

  // Preallocation: the preparer makes one file at a time.
  absl::Mutex prep_mu_;
  std::optional<Prepared> prepared_ ABSL_GUARDED_BY(prep_mu_);  // ready to be taken
  bool prepare_wanted_ ABSL_GUARDED_BY(prep_mu_) = false;
  bool prep_stopping_ ABSL_GUARDED_BY(prep_mu_) = false;
  uint64_t next_prepare_bytes_ ABSL_GUARDED_BY(prep_mu_) = 0;
  std::atomic<bool> prep_abort_{false};  // the preparer stops mid-file
  std::thread preparer_;
};

}  // namespace megastore::storage::commitlog
