// What a tablet needs from a write-ahead log shared with other tablets (the
// tablet server's commit log). Tablets without one keep RocksDB's own WAL.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace megastore::storage {

class TabletLog {
 public:
  virtual ~TabletLog() = default;
  // Durably appends `record` for `tablet_id`; returns its log sequence
  // number (LSN). Thread-safe; blocks until the record is durable.
  virtual absl::StatusOr<uint64_t> Append(std::string_view tablet_id, std::string_view record) = 0;
  // The highest LSN handed out so far.
  virtual uint64_t last_lsn() const = 0;
};

}  // namespace megastore::storage
