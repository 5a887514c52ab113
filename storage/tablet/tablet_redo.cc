// The tablet's redo log: replaying commit-log records, adopting a split
// parent's log, and the position up to which the log is no longer needed.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/tablet/compaction_filter.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/log_record.h"
#include "storage/tablet/row_builder.h"
#include "storage/tablet/tablet.h"
#include "storage/tablet/tablet_internal.h"

namespace megastore::storage {

using tablet_internal::kMetaRedoKey;
using tablet_internal::kMetaRedoLogKey;
using tablet_internal::RangeString;

absl::Status Tablet::ReplayLogRecord(uint64_t lsn, std::string_view payload) {
  MS_ASSIGN_OR_RETURN(LogRecord record, DecodeLogRecord(payload));
  const auto v = view();
  if (!ContainsRow(record.row)) {
    return absl::FailedPreconditionError(StrCat("commit log record ", lsn, " for tablet ",
                                                options_.log_id, " has row \"",
                                                EscapeBytes(record.row), "\" outside its range ",
                                                RangeString(options_.start_row, options_.end_row)));
  }
  MS_RETURN_IF_ERROR(ValidateMutations(*v->schema, record.mutations));
  const size_t stripe = StripeOf(record.row);
  absl::MutexLock lock(&row_locks_[stripe]);
  {
    absl::MutexLock redo_lock(&redo_mu_);
    if (writes_since_flush_++ == 0) first_unflushed_micros_ = env_->MonotonicMicros();
  }
  return WriteRow(*v, record.row, record.mutations, record.timestamp, stripe, lsn);
}

absl::Status Tablet::AdoptLog(std::string_view log_name) {
  if (options_.log == nullptr) return absl::FailedPreconditionError("tablet has no shared log");
  uint64_t lsn;
  {
    absl::MutexLock lock(&redo_mu_);
    if (!pending_floors_.empty()) {
      return absl::FailedPreconditionError(
          StrCat("tablet ", options_.path, " has writes in flight"));
    }
    lsn = options_.log->last_lsn();
  }
  rocksdb::WriteBatch batch;
  std::string value;
  PutFixed64(&value, lsn);
  MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRedoKey, value), "build write batch"));
  MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRedoLogKey, std::string(log_name)),
                                 "build write batch"));
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  MS_RETURN_IF_ERROR(
      FromRocksDB(db_->Write(wo, &batch), StrCat("record the log of ", options_.path)));
  MS_RETURN_IF_ERROR(Flush());
  absl::MutexLock lock(&redo_mu_);
  recovered_redo_log_ = std::string(log_name);
  recovered_redo_point_ = lsn;
  durable_log_position_ = std::max(durable_log_position_, lsn);
  writes_since_flush_ = 0;
  return absl::OkStatus();
}

uint64_t Tablet::LogWatermarkLocked() const {
  // With no write in flight, every record of this tablet up to the log's
  // last LSN has been applied.
  // Never past the durable part of the log (lazy records beyond it).
  const uint64_t synced = options_.log->synced_lsn();
  return std::min(pending_floors_.empty() ? options_.log->last_lsn() : *pending_floors_.begin(),
                  synced);
}

absl::StatusOr<uint64_t> Tablet::PersistLogPosition(bool force_flush) {
  if (options_.log == nullptr) return absl::FailedPreconditionError("tablet has no shared log");
  uint64_t watermark;
  bool clean;
  {
    absl::MutexLock lock(&redo_mu_);
    watermark = LogWatermarkLocked();
    clean = writes_since_flush_ == 0;
    writes_since_flush_ = 0;
  }
  if (!clean || force_flush) {
    // Everything up to `watermark` is in the memtables this flush persists.
    absl::Status s = Flush();
    if (!s.ok()) {
      absl::MutexLock lock(&redo_mu_);
      ++writes_since_flush_;  // still dirty
      return s;
    }
  }
  absl::MutexLock lock(&redo_mu_);
  durable_log_position_ = std::max(durable_log_position_, watermark);
  return durable_log_position_;
}

uint64_t Tablet::durable_log_position() {
  absl::MutexLock lock(&redo_mu_);
  return std::max(durable_log_position_, recovered_redo_point_);
}

int64_t Tablet::UnflushedAgeMicros() {
  absl::MutexLock lock(&redo_mu_);
  return writes_since_flush_ == 0 ? 0 : env_->MonotonicMicros() - first_unflushed_micros_;
}

}  // namespace megastore::storage
