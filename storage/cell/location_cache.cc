#include "storage/cell/location_cache.h"

#include "base/coding.h"
#include "base/strings.h"

namespace megastore::storage::cell {

std::string EncodeMetadataKey(const std::string& prefix, const std::string& end_row) {
  std::string key = prefix;
  key.push_back('\0');
  if (end_row.empty()) {
    key.push_back('\1');
  } else {
    key.push_back('\0');
    key += end_row;
  }
  return key;
}

std::string EncodeMetadataSearchKey(const std::string& prefix, const std::string& row) {
  std::string key = EncodeMetadataKey(prefix, row.empty() ? std::string(1, '\0') : row);
  if (row.empty()) {
    key.pop_back();  // "\0\0": before every end row of the table
  } else {
    key.push_back('\0');  // just after `row`: a tablet ending at `row` does not hold it
  }
  return key;
}

absl::StatusOr<std::string> MetadataKey(const std::string& table, const std::string& end_row) {
  if (table.empty() || table.find('\0') != std::string::npos)
    return absl::InvalidArgumentError(
        StrCat("table name \"", EscapeBytes(table), "\" is empty or holds a NUL"));
  return EncodeMetadataKey(table, end_row);
}

std::string MetadataSearchKey(const std::string& table, const std::string& row) {
  return EncodeMetadataSearchKey(table, row);
}

absl::StatusOr<std::pair<std::string, std::string>> ParseMetadataKey(const std::string& key) {
  const size_t nul = key.find('\0');
  if (nul == std::string::npos || nul == 0 || nul + 1 >= key.size())
    return absl::InvalidArgumentError(StrCat("\"", EscapeBytes(key), "\" is not a METADATA key"));
  const char kind = key[nul + 1];
  if (kind == '\1' && key.size() == nul + 2)
    return std::make_pair(key.substr(0, nul), std::string());
  if (kind == '\0' && key.size() > nul + 2)
    return std::make_pair(key.substr(0, nul), key.substr(nul + 2));
  return absl::InvalidArgumentError(StrCat("\"", EscapeBytes(key), "\" is not a METADATA key"));
}

std::optional<TabletLocation> LocationCache::Lookup(const std::string& table,
                                                    const std::string& row) const {
  absl::MutexLock lock(&mu_);
  auto it = by_key_.lower_bound(MetadataSearchKey(table, row));
  if (it == by_key_.end() || it->second.table != table || !it->second.Contains(row))
    return std::nullopt;
  return it->second;
}

void LocationCache::Insert(const TabletLocation& location) {
  absl::MutexLock lock(&mu_);
  // Cached tablets of the table that overlap [start_row, end_row).
  auto it = by_key_.lower_bound(MetadataSearchKey(location.table, location.start_row));
  while (it != by_key_.end() && it->second.table == location.table &&
         (location.end_row.empty() || it->second.start_row < location.end_row)) {
    it = by_key_.erase(it);
  }
  by_key_[EncodeMetadataKey(location.table, location.end_row)] = location;
}

void LocationCache::Invalidate(const std::string& table, const std::string& row) {
  absl::MutexLock lock(&mu_);
  auto it = by_key_.lower_bound(MetadataSearchKey(table, row));
  if (it != by_key_.end() && it->second.table == table && it->second.Contains(row))
    by_key_.erase(it);
}

size_t LocationCache::size() const {
  absl::MutexLock lock(&mu_);
  return by_key_.size();
}

}  // namespace megastore::storage::cell
