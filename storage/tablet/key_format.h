// How cells and tombstones are laid out as RocksDB keys and values inside a
// tablet. One locality group is one RocksDB column family; within it every
// entry of a row sorts together, and within a row tombstones sort before the
// cells they can mask, so one forward pass decides what is visible:
//
//   row tombstone     R 0x01 ~T
//   family tombstone  R F 0x00 0x00 0x00 ~T
//   column tombstone  R F 0x00 Q 0x00 ~T start end
//   cell              R F 0x00 Q 0x01 ~ts
//
// R and Q are the row key and qualifier in the order-preserving bytes
// encoding (0x00 escaped as 0x00 0xFF, ended by 0x00 0x01); F is the family
// name (never contains 0x00, never starts below '-'); ~x is the bitwise
// complement of x, big-endian, so newer timestamps sort first; T is the
// deletion's own timestamp; start/end bound the deleted cell timestamps.
//
// Every value starts with the write's sequence number (varint). A tombstone
// masks the cells of its scope written before it (lower sequence number); a
// read as of time S applies only tombstones with T <= S. Cell values carry
// the user's bytes after the sequence number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megastore::storage::key_format {

enum class EntryKind : uint8_t {
  kRowTombstone,
  kFamilyTombstone,
  kColumnTombstone,
  kCell,
};

// A key split into its parts. Views point into the key; `row_prefix` and
// `column_prefix` are still encoded (cheap to compare), the rest decoded.
struct ParsedKey {
  EntryKind kind;
  std::string_view row_prefix;     // R
  std::string_view family;         // F (empty for row tombstones)
  std::string_view column_prefix;  // R F 0x00 Q (column tombstones and cells)
  int64_t timestamp = 0;           // ts for cells, T for tombstones
  int64_t range_start = 0;         // column tombstones
  int64_t range_end = 0;           // column tombstones; exclusive
};

void AppendRowPrefix(std::string* dst, std::string_view row);

std::string RowTombstoneKey(std::string_view row, int64_t t);
std::string FamilyTombstoneKey(std::string_view row, std::string_view family, int64_t t);
std::string ColumnTombstoneKey(std::string_view row, std::string_view family,
                               std::string_view qualifier, int64_t t, int64_t start, int64_t end);
void AppendCellKey(std::string* dst, std::string_view row, std::string_view family,
                   std::string_view qualifier, int64_t ts);

// Returns false if `key` is not a well-formed entry key.
bool ParseKey(std::string_view key, ParsedKey* out);

// Decodes the row key / qualifier out of their encoded forms.
bool DecodeRow(std::string_view row_prefix, std::string* row);
bool DecodeQualifier(const ParsedKey& key, std::string* qualifier);

// The encoded length of the row prefix at the front of `key`, or 0.
size_t RowPrefixLength(std::string_view key);

void AppendValue(std::string* dst, uint64_t seq, std::string_view user_value);
// Splits a stored value into its sequence number and user bytes.
bool ParseValue(std::string_view stored, uint64_t* seq, std::string_view* user_value);

}  // namespace megastore::storage::key_format
