// Bigtable's data model as the tablet engine exposes it:
// (row, family:qualifier, timestamp) -> value, the mutations that change it
// and the filters that select from it.
//
// Timestamps are microseconds in [0, kMaxTimestamp]. A negative timestamp on
// a write means "assign the server's current time" (kServerTimestamp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace megastore::storage {

inline constexpr int64_t kServerTimestamp = -1;
inline constexpr int64_t kMaxTimestamp = INT64_MAX;

// Limits on input, enforced on every write.
inline constexpr size_t kMaxRowKeyBytes = 4096;
inline constexpr size_t kMaxQualifierBytes = 16 * 1024;
inline constexpr size_t kDefaultMaxValueBytes = 10 * 1024 * 1024;

// One version of one column of one row.
struct Cell {
  std::string family;
  std::string qualifier;
  int64_t timestamp = 0;
  std::string value;

  friend bool operator==(const Cell&, const Cell&) = default;
};

// A row as returned by reads: its cells grouped by family (families in name
// order), then by qualifier (bytewise order), newest timestamp first.
struct Row {
  std::string key;
  std::vector<Cell> cells;

  friend bool operator==(const Row&, const Row&) = default;
};

// A change to one row. A MutateRow applies a list of them atomically.
struct Mutation {
  enum class Type {
    kSetCell,       // write `value` at (family, qualifier, timestamp)
    kDeleteCells,   // delete cells of (family, qualifier) with timestamp in [start_ts, end_ts)
    kDeleteFamily,  // delete every cell of `family` in the row
    kDeleteRow,     // delete every cell of the row
  };

  Type type = Type::kSetCell;
  std::string family;
  std::string qualifier;
  std::string value;
  // kSetCell: the cell's timestamp; kServerTimestamp assigns the mutation time.
  int64_t timestamp = kServerTimestamp;
  // kDeleteCells: the range of cell timestamps deleted; end_ts == 0 means
  // unbounded.
  int64_t start_ts = 0;
  int64_t end_ts = 0;

  static Mutation SetCell(std::string family, std::string qualifier, std::string value,
                          int64_t timestamp = kServerTimestamp);
  static Mutation DeleteCells(std::string family, std::string qualifier, int64_t start_ts = 0,
                              int64_t end_ts = 0);
  static Mutation DeleteFamily(std::string family);
  static Mutation DeleteRow();
};

// One row's mutations, for MutateRows.
struct RowMutations {
  std::string row;
  std::vector<Mutation> mutations;
};

// An atomic read-modify-write of the latest cell of one column.
struct ReadModifyWriteRule {
  enum class Type {
    kAppend,     // new value = old value + append_value ("" if absent)
    kIncrement,  // new value = old (8-byte big-endian int64, 0 if absent) + increment
  };
  Type type = Type::kAppend;
  std::string family;
  std::string qualifier;
  std::string append_value;
  int64_t increment = 0;
};

// A range of byte strings: [start, end) or [start, end]; no end means
// unbounded above.
struct ByteRange {
  std::string start;
  std::optional<std::string> end;
  bool end_inclusive = false;

  bool Contains(std::string_view s) const;
  // InvalidArgument when end < start (or end == start and end is exclusive
  // while start is not empty, which selects nothing and is surely a mistake).
  absl::Status Validate(std::string_view what) const;
};

// Rows [start, end); an empty `end` means "to the end of the table".
struct RowRange {
  std::string start;
  std::string end;

  static RowRange Prefix(std::string_view prefix);
  static RowRange All() { return RowRange{}; }
};

// The rows to read: the listed keys and ranges, in row order, each row once.
// Both lists empty means every row.
struct RowSet {
  std::vector<std::string> keys;
  std::vector<RowRange> ranges;
};

// Which cells a read returns. Conditions apply in this order: family,
// qualifier, timestamp range, cells per column, value range, strip value. So
// `cells_per_column = 1` with a value range asks "is the latest value in the
// range?", the question a compare-and-set predicate needs.
struct RowFilter {
  // Only these families; empty means all.
  std::vector<std::string> families;

  enum class QualifierMatch { kAll, kExact, kPrefix, kRange };
  QualifierMatch qualifier_match = QualifierMatch::kAll;
  std::string qualifier;      // kExact: the qualifier; kPrefix: the prefix
  ByteRange qualifier_range;  // kRange

  // Cell timestamps in [start, end); end == 0 means unbounded.
  int64_t timestamp_start = 0;
  int64_t timestamp_end = 0;

  std::optional<ByteRange> value_range;

  // At most this many (newest) cells per column; 0 means all.
  int32_t cells_per_column = 0;
  // Return cells with empty values (keys and timestamps only).
  bool strip_value = false;

  bool PassesAll() const;
};

struct ReadOptions {
  RowFilter filter;
  // Read the data as of this timestamp: for each column, the versions with
  // timestamp <= read_timestamp, with deletions applied only if they
  // happened at or before it. kMaxTimestamp reads the latest data.
  int64_t read_timestamp = kMaxTimestamp;
  // Stop after this many rows with at least one cell; 0 means no limit.
  int64_t rows_limit = 0;
  // Non-zero: the read must not wait (it runs on an RPC I/O thread). It
  // reads only what is in memory (memtables, block and table caches),
  // visits at most this many stored entries and waits for no lock; where it
  // would do more it fails with WouldBlockError() (storage/tablet/tablet.h)
  // and may be run again with 0 where waiting is fine. Rows a scan delivered
  // before such a failure are to be dropped: the rerun delivers them again.
  int64_t nonblocking_budget = 0;
};

}  // namespace megastore::storage
