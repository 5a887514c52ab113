// The commit log's write path: queueing records, writing and syncing
// groups (on the writer thread, a waiting appender's or inline), running
// their callbacks.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/synchronization/notification.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_batch.h"
#include "storage/commitlog/commit_log.h"
#include "storage/commitlog/commit_log_internal.h"

namespace megastore::storage::commitlog {

using internal::Errno;
using internal::StandIns;

namespace {
// The inline log whose callbacks this thread is running, if any: an append
// from one of them is left to the write loop already running.
thread_local const void* inline_writer = nullptr;
}  // namespace

absl::StatusOr<uint64_t> CommitLog::Queue(std::string_view tablet_id, std::string_view payload,
                                          AppendCallback done, bool durable) {
  if (!error_.ok()) return error_;
  if (stopping_) return absl::CancelledError("commit log is closing");
  const uint64_t lsn = ++last_lsn_;
  if (pending_.empty()) pending_first_lsn_ = lsn;
  AppendRecord(&pending_, lsn, tablet_id, payload);
  ++pending_records_;
  pending_callbacks_.push_back(PendingCallback{lsn, std::move(done), durable});
  return lsn;
}

absl::StatusOr<uint64_t> CommitLog::AppendAsync(std::string_view tablet_id,
                                                std::string_view payload, AppendCallback done,
                                                bool durable) {
  absl::StatusOr<uint64_t> lsn;
  {
    absl::MutexLock lock(&mu_);
    lsn = Queue(tablet_id, payload, std::move(done), durable);
  }
  if (lsn.ok() && options_.inline_writes && inline_writer != this) WriteInline();
  return lsn;
}

bool CommitLog::HasPendingCallbacks() const {
  absl::MutexLock lock(&mu_);
  return !pending_callbacks_.empty();
}

void CommitLog::WriteInline() {
  absl::MutexLock write(&write_mu_);
  const void* outer = inline_writer;
  inline_writer = this;
  // Another thread's records may go out in this call's group, or ours in
  // theirs: both are durable before either call returns.
  for (;;) {
    const GroupResult r = WritePending();
    if (r == GroupResult::kWritten) continue;
    // A full disk failed the group; appends its callbacks made meanwhile
    // are failed (or written) by another round rather than left behind.
    if (r == GroupResult::kNoSpace && HasPendingCallbacks()) continue;
    break;
  }
  inline_writer = outer;
}

absl::StatusOr<uint64_t> CommitLog::Append(std::string_view tablet_id, std::string_view payload,
                                           bool durable) {
  absl::Status result;
  absl::Notification done;
  AppendCallback notify = [&](absl::Status s, uint64_t) {
    result = std::move(s);
    done.Notify();
  };
  if (options_.inline_writes) {
    MS_ASSIGN_OR_RETURN(const uint64_t lsn,
                        AppendAsync(tablet_id, payload, std::move(notify), durable));
    done.WaitForNotification();
    if (!result.ok()) return result;
    return lsn;
  }
  uint64_t lsn;
  bool write_here;
  {
    absl::MutexLock lock(&mu_);
    MS_ASSIGN_OR_RETURN(lsn, Queue(tablet_id, payload, std::move(notify), durable));
    // Nobody is writing: this call writes the group (the writer thread
    // waits meanwhile, so the group holds this record). After a full disk
    // the writer thread's paced retries go on instead.
    write_here = !writer_busy_ && !appender_writing_ && !no_space_;
    if (write_here) appender_writing_ = true;
  }
  if (write_here) {
    GroupResult r;
    {
      absl::MutexLock write(&write_mu_);
      r = WritePending();
    }
    absl::MutexLock lock(&mu_);
    appender_writing_ = false;  // records queued meanwhile wake the writer thread
    if (r != GroupResult::kNothing) ++stats_.appender_groups;
  }
  done.WaitForNotification();
  if (!result.ok()) return result;
  return lsn;
}

void CommitLog::WriterLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto work = +[](CommitLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return (!log->pending_.empty() && !log->appender_writing_) || log->stopping_;
      };
      mu_.Await(absl::Condition(
          +[](CommitLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            // (Lazy records while an appender writes wait for it: its
            // group may sync them, and the writer must not spin.)
            return (!log->pending_.empty() && !log->appender_writing_) || log->stopping_ ||
                   (log->lazy_through_ != 0 && !log->appender_writing_);
          },
          this));
      // Lazy records written and nothing to write: they get the next
      // durable record's sync, or after options_.lazy_sync_delay their own.
      if (!work(this) && !mu_.AwaitWithDeadline(absl::Condition(work, this), lazy_deadline_)) {
        if (lazy_through_ == 0 || appender_writing_) continue;
        writer_busy_ = true;
        mu_.Unlock();
        {
          absl::MutexLock write(&write_mu_);
          SyncLazyRecords();
        }
        mu_.Lock();
        writer_busy_ = false;
        continue;
      }
      if (pending_.empty()) return;  // stopping, and nothing left to write
      // Stopping on a full disk with only stand-ins left (no append waits):
      // drop them; nothing acknowledged is in them.
      if (stopping_ && pending_callbacks_.empty() && stats_.no_space_failures > 0 && no_space_)
        return;
      writer_busy_ = true;
    }
    GroupResult result;
    {
      absl::MutexLock write(&write_mu_);
      result = WritePending();
    }
    {
      absl::MutexLock lock(&mu_);
      writer_busy_ = false;
    }
    if (result == GroupResult::kNoSpace)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // not a busy retry
  }
}

CommitLog::GroupResult CommitLog::WritePending() {
  std::string group;
  std::vector<PendingCallback> callbacks;
  uint64_t first;
  size_t records;  // in the group: its appends' and stand-ins for earlier ones
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (pending_.empty()) return GroupResult::kNothing;
    group.swap(pending_);
    callbacks.swap(pending_callbacks_);
    first = pending_first_lsn_;
    records = pending_records_;
    pending_records_ = 0;
    status = error_;
  }
  // Everything that queued up while the last group was being synced goes
  // out as one write and one fdatasync.
  if (status.ok()) status = MaybeStartSegment(first, group.size());
  if (status.ok()) status = WriteGroup(group, first);
  if (status.ok()) written_lsn_.store(first + records - 1, std::memory_order_release);
  const bool no_space = absl::IsResourceExhausted(status);
  // A group of lazy records only is not synced. Otherwise the lazy ones
  // ahead of the first durable record are done once written; the rest
  // wait for the sync (callbacks stay in LSN order). Stand-ins for earlier
  // appends (records without a callback) are always synced.
  bool sync = records > callbacks.size();
  for (const PendingCallback& c : callbacks) sync = sync || c.durable;
  size_t ran = 0;
  if (status.ok() && sync) {
    for (; ran < callbacks.size() && !callbacks[ran].durable; ++ran)
      callbacks[ran].done(absl::OkStatus(), callbacks[ran].lsn);
    status = SyncGroup(first);
    if (status.ok()) unsynced_ = false;
  } else if (status.ok()) {
    unsynced_ = true;
  }
  {
    absl::MutexLock lock(&mu_);
    if (no_space) {
      // The disk is full; nothing of the group is on disk (WriteGroup cut
      // back what it wrote). Its appends fail, and stand-ins for its LSNs
      // go out first once space returns; the log keeps working.
      MS_LOG_WARN_LIMITED("commit log: {}; writes fail until space returns", status.message());
      pending_.insert(0, StandIns(first, records));
      pending_first_lsn_ = first;
      pending_records_ += records;
      ++stats_.no_space_failures;
      no_space_ = true;
    } else if (status.ok()) {
      no_space_ = false;
      const uint64_t appended = callbacks.size();
      stats_.records += appended;
      stats_.bytes += group.size();
      if (sync) ++stats_.syncs;
      if (sync || !options_.sync) synced_lsn_ = std::max(synced_lsn_, first + records - 1);
      // Lazy records written, not synced: the writer thread's to sync if
      // nothing else does. (Those of a synced group are synced.)
      const uint64_t lazy_before = lazy_through_;
      lazy_through_ = sync || !options_.sync ? 0 : first + records - 1;
      // From the first of them, however many lazy groups follow.
      if (lazy_before == 0 && lazy_through_ != 0)
        lazy_deadline_ = absl::Now() + options_.lazy_sync_delay;
      stats_.max_batch_records = std::max(stats_.max_batch_records, appended);
      size_t bucket = 0;
      while (bucket + 1 < stats_.batch_histogram.size() && (uint64_t{2} << bucket) <= appended)
        ++bucket;
      ++stats_.batch_histogram[bucket];
    } else if (error_.ok()) {
      error_ = status;
      MS_LOG_ERROR("commit log: {}", status.ToString());
    }
  }
  {
    // Callbacks answering RPCs: one write per connection, at the end.
    ThreadBatch batch;
    // Only the callbacks of real records: stand-ins have none.
    for (size_t i = ran; i < callbacks.size(); ++i) callbacks[i].done(status, callbacks[i].lsn);
  }
  if (no_space) return GroupResult::kNoSpace;
  return status.ok() ? GroupResult::kWritten : GroupResult::kFailed;
}

absl::Status CommitLog::WriteGroup(const std::string& data, uint64_t first_lsn) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = Errno("write commit log at LSN " + std::to_string(first_lsn), options_.dir);
      if (absl::IsResourceExhausted(s)) {
        // Cut back what part of the group was written, so the segment ends
        // at a whole record; if even that fails, the log's state is unknown.
        const off_t size = static_cast<off_t>(segment_size_);
        zeroed_bytes_ = 0;  // the cut took any zeros after it too
        if (::ftruncate(fd_, size) != 0 || ::lseek(fd_, size, SEEK_SET) != size) {
          return absl::InternalError(StrCat(
              s.message(), "; and cutting back the partial write failed: ", std::strerror(errno)));
        }
      }
      return s;
    }
    done += static_cast<size_t>(n);
  }
  segment_size_ += data.size();
  return absl::OkStatus();
}

void CommitLog::SyncLazyRecords() {
  uint64_t through;
  {
    absl::MutexLock lock(&mu_);
    through = lazy_through_;
    if (!error_.ok()) lazy_through_ = 0;  // the log has failed: nothing more to sync
    if (through == 0 || !error_.ok()) return;
  }
  // A segment closed since synced them (it syncs before closing).
  absl::Status status = unsynced_ ? SyncGroup(through) : absl::OkStatus();
  if (status.ok()) unsynced_ = false;
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    if (error_.ok()) {
      error_ = status;
      MS_LOG_ERROR("commit log: {}", status.ToString());
    }
    return;
  }
  ++stats_.syncs;
  synced_lsn_ = std::max(synced_lsn_, through);
  if (lazy_through_ == through) lazy_through_ = 0;
}

CommitLog::SyncFile::~SyncFile() {
  if (fd >= 0) ::close(fd);
}

absl::Status CommitLog::SyncWritten() {
  const uint64_t wanted = written_lsn_.load(std::memory_order_acquire);
  // One sync at a time: callers that queued behind one find their records
  // synced by it (a clean-up sweep asks once per group).
  absl::MutexLock one(&sync_written_mu_);
  std::shared_ptr<const SyncFile> file;
  uint64_t through;
  {
    absl::MutexLock lock(&mu_);
    if (wanted <= synced_lsn_ || !options_.sync) return absl::OkStatus();
    // Records written and not durable, and the log has failed: they never
    // will be.
    if (!error_.ok()) return error_;
    // Records in an earlier segment were synced when it was closed, before
    // sync_file_ moved on; those of the current one are in sync_file_.
    through = written_lsn_.load(std::memory_order_acquire);
    if (sync_file_ == nullptr) return absl::OkStatus();
    file = sync_file_;
  }
  absl::Status status;
  if (::fdatasync(file->fd) != 0) {
    status = absl::InternalError(StrCat("fdatasync commit log through LSN ", through, " ",
                                        options_.dir, ": ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    // As after a failed group sync: what is on disk is unknown.
    if (error_.ok()) {
      error_ = status;
      MS_LOG_ERROR("commit log: {}", status.ToString());
    }
    return status;
  }
  ++stats_.syncs;
  synced_lsn_ = std::max(synced_lsn_, through);
  if (lazy_through_ <= through) lazy_through_ = 0;  // the writer's timed sync is not needed
  return absl::OkStatus();
}

absl::Status CommitLog::SyncGroup(uint64_t first_lsn) {
  if (options_.sync && ::fdatasync(fd_) != 0) {
    // Whatever errno says, ENOSPC included: after a failed sync the state
    // of the written data is unknown, so it is never retried.
    return absl::InternalError(StrCat("fdatasync commit log at LSN ", first_lsn, " ", options_.dir,
                                      ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace megastore::storage::commitlog
