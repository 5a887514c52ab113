// What a tablet needs from a write-ahead log shared with other tablets (the
// tablet server's commit log). Tablets without one keep RocksDB's own WAL.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

namespace megastore::storage {

class TabletLog {
 public:
  // Runs once the record is durable (OK) or cannot be, on the log's own
  // thread, in LSN order across all tablets. Must not block on the log.
  using Callback = absl::AnyInvocable<void(absl::Status status, uint64_t lsn)>;

  virtual ~TabletLog() = default;
  // Queues `record` for `tablet_id` and returns its log sequence number
  // (LSN) without waiting; `done` runs later as described above. An error
  // returned here means the record was not queued and `done` never runs.
  // Thread-safe.
  // `durable` false: a lazy record, done once written and durable with
  // the log's next sync (commitlog::CommitLog::AppendAsync).
  virtual absl::StatusOr<uint64_t> AppendAsync(std::string_view tablet_id, std::string_view record,
                                               Callback done, bool durable = true) = 0;
  // Durably appends `record` (or lazily, as above); returns its LSN. Blocks
  // until it is durable (written); never call it from a Callback.
  virtual absl::StatusOr<uint64_t> Append(std::string_view tablet_id, std::string_view record,
                                          bool durable = true) = 0;
  // The highest LSN handed out so far.
  virtual uint64_t last_lsn() const = 0;
  // The highest LSN up to which every record is durable (lazy records may
  // lie beyond it): a redo point stored in a tablet never passes it, or a
  // crash could leave the tablet ahead of the log it recovers from.
  virtual uint64_t synced_lsn() const = 0;
  // Makes every record written so far durable, without waiting for the
  // log's own thread (commitlog::CommitLog::SyncWritten). A tablet calls it
  // before each flush of its memtables: a lazy record flushed into an
  // SSTable is durable there, and every earlier record of the log, of any
  // tablet, must then be durable too.
  virtual absl::Status SyncWritten() = 0;
};

}  // namespace megastore::storage
