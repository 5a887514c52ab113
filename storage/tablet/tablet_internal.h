// Internal to the tablet engine (tablet*.cc): the constants of its meta
// column family, helpers its files share, and the definitions of
// Tablet's private structs.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/strings.h"
#include "rocksdb/db.h"
#include "storage/tablet/compaction_filter.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/tablet.h"

namespace megastore::storage::tablet_internal {

inline constexpr char kMetaFormatKey[] = "format";
inline constexpr char kMetaRangeKey[] = "range";
inline constexpr char kMetaSeqKey[] = "seq";
inline constexpr char kMetaRedoKey[] = "redo";
inline constexpr char kMetaRedoLogKey[] = "redo_log";
inline constexpr char kMetaSplitFromKey[] = "split_from";
inline constexpr char kFormatVersion[] = "1";
inline constexpr char kGroupPrefix[] = "lg.";

inline rocksdb::ColumnFamilyOptions MetaOptions() {
  rocksdb::ColumnFamilyOptions o;
  o.write_buffer_size = 1 << 20;
  return o;
}

// Sequence numbers are reserved in blocks: the tablet persists an upper
// bound and writes a new one only when writers pass it.
inline constexpr uint64_t kSequenceBlock = 1 << 20;

inline std::string EncodeRowBound(std::string_view row) {
  std::string k;
  key_format::AppendRowPrefix(&k, row);
  return k;
}

inline std::string RangeString(std::string_view start, std::string_view end) {
  return StrCat("[\"", EscapeBytes(start), "\", ",
                end.empty() ? "end of table" : StrCat("\"", EscapeBytes(end), "\""), ")");
}

inline absl::Status CheckTimestamp(int64_t ts, std::string_view what) {
  if (ts < kServerTimestamp) {
    return absl::InvalidArgumentError(
        StrCat(what, " ", ts, " is negative (use -1 for the server's time, or 0..2^63-1)"));
  }
  return absl::OkStatus();
}

inline rocksdb::ReadOptions PointReadOptions(bool memory_only = false) {
  rocksdb::ReadOptions ro;
  ro.prefix_same_as_start = true;    // bloom filters on the row key
  ro.ignore_range_deletions = true;  // the tablet never writes them
  if (memory_only) ro.read_tier = rocksdb::kBlockCacheTier;
  return ro;
}

// What a read with ReadOptions::nonblocking_budget may still do: Visit()
// per stored entry it reads, Check() on every RocksDB status (data not in
// memory is Incomplete there, WouldBlockError() here).
class ReadBudget {
 public:
  explicit ReadBudget(const ReadOptions& o)
      : limited_(o.nonblocking_budget > 0), left_(o.nonblocking_budget) {}
  bool memory_only() const { return limited_; }
  absl::Status Visit() {
    if (limited_ && --left_ < 0) return WouldBlockError();
    return absl::OkStatus();
  }
  absl::Status Check(const rocksdb::Status& s, std::string_view context) const {
    if (limited_ && s.IsIncomplete()) return WouldBlockError();
    return FromRocksDB(s, context);
  }

 private:
  bool limited_;
  int64_t left_;
};

}  // namespace megastore::storage::tablet_internal

namespace megastore::storage {

struct Tablet::PooledIterator {
  LocalityGroupHandle* group = nullptr;
  bool memory_only = false;  // reads with read_tier = kBlockCacheTier
  std::unique_ptr<rocksdb::Iterator> it;
  std::string upper;           // the current read's upper bound...
  rocksdb::Slice upper_slice;  // ...which the iterator's options point at
};

struct Tablet::LocalityGroupHandle {
  std::string name;
  rocksdb::ColumnFamilyHandle* cf = nullptr;
  rocksdb::CompressionType compression = rocksdb::kNoCompression;
  std::shared_ptr<TabletCompactionFilterFactory> filter_factory;
};

// A stretch [lower, upper) of one row's stored keys.
struct Tablet::KeySpan {
  std::string lower;
  std::string upper;
};

struct Tablet::CachedRow {
  // The row's stored entries, per locality group of the view that read it.
  std::vector<std::vector<std::pair<std::string, std::string>>> groups;
  size_t bytes = 0;
};

}  // namespace megastore::storage
