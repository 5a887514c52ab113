// Where tablets are, as the cell's client library remembers it (Bigtable
// §5.1; docs/cell.md): METADATA's row keys, and a cache of tablet
// locations by (table, row range) that callers fill from METADATA reads and
// invalidate when a server answers "not serving".
//
// METADATA row key of a tablet: its table's name, "\0", then "\0" + its end
// row, or "\1" for the table's last tablet (whose end row is empty): so a
// table's tablets sort by end row, its last one after all others, and the
// tablet holding row r is the first at or after MetadataSearchKey(table, r).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace megastore::storage::cell {

struct TabletLocation {
  std::string table;
  std::string start_row;  // inclusive
  std::string end_row;    // exclusive; "" = the end of the table
  std::string tablet_id;
  std::string server;  // HOST:PORT of the tablet server serving it

  bool Contains(const std::string& row) const {
    return start_row <= row && (end_row.empty() || row < end_row);
  }
};

// InvalidArgument if `table` is empty or holds a "\0".
absl::StatusOr<std::string> MetadataKey(const std::string& table, const std::string& end_row);
// Where a METADATA scan for the tablet holding `row` starts.
std::string MetadataSearchKey(const std::string& table, const std::string& row);
// The same two without the check on the name: `prefix` is a table's name,
// or "" for the rows of METADATA's own tablets (storage/cell/metadata.h).
std::string EncodeMetadataKey(const std::string& prefix, const std::string& end_row);
std::string EncodeMetadataSearchKey(const std::string& prefix, const std::string& row);
// The table and end row a METADATA key names; InvalidArgument if it is not one.
absl::StatusOr<std::pair<std::string, std::string>> ParseMetadataKey(const std::string& key);

class LocationCache {
 public:
  // The cached tablet of `table` holding `row`, if any.
  std::optional<TabletLocation> Lookup(const std::string& table, const std::string& row) const;
  // Remembers `location`, forgetting cached tablets of its table it
  // overlaps (they were split, merged or moved).
  void Insert(const TabletLocation& location);
  // Forgets the cached tablet holding `row` (its server said it does not
  // serve it): the next Lookup misses and the caller reads METADATA again.
  void Invalidate(const std::string& table, const std::string& row);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, TabletLocation> by_key_ ABSL_GUARDED_BY(mu_);  // by METADATA key
};

}  // namespace megastore::storage::cell
