// Order-preserving encoding of entity keys (primary keys and index keys).
//
// A key is a list of parts, one per key column, each encoded with base/
// coding.h's memcomparable encodings in its column's direction:
//
//   int32, int64   8 bytes, sign bit flipped, big-endian
//   uint64         8 bytes, big-endian
//   bool           one byte, 0x00 (false) or 0x01 (true)
//   double         8 bytes, IEEE-754 total order; -0.0 is encoded as +0.0
//                  (they are equal), every NaN as one canonical NaN that
//                  sorts after +inf
//   string, bytes  0x00 escaped as 0x00 0xFF, then the terminator 0x00 0x01
//
// DESC parts invert every byte. A SCATTER part is preceded by two bytes of
// the CRC-32C of its (ascending) encoding, which spreads monotonically
// increasing values over the key space (and gives up range order on it).
// Parts are self-delimiting, so the encoding of a key's first n parts is a
// byte prefix of the whole key's: an entity group's rows share the prefix of
// its root's key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "schema/schema.pb.h"

namespace megastore::schema {

// One key column's value: int64_t for int32 and int64, uint64_t, bool,
// double, std::string for string and bytes.
using KeyValue = std::variant<int64_t, uint64_t, bool, double, std::string>;

struct KeyColumn {
  FieldType type = FIELD_TYPE_UNSPECIFIED;
  bool descending = false;
  bool scatter = false;
};

// Appends one part. InvalidArgument if the value's kind does not fit `type`
// (or an int32 is out of range).
absl::Status AppendKeyPart(std::string* dst, const KeyColumn& column, const KeyValue& value);
// Reads one part from the front of `in`. DataLoss for malformed input.
absl::StatusOr<KeyValue> ConsumeKeyPart(std::string_view* in, const KeyColumn& column);

absl::StatusOr<std::string> EncodeKey(const std::vector<KeyColumn>& columns,
                                      const std::vector<KeyValue>& values);
// Decodes a whole key; DataLoss if it is malformed or has bytes left over.
absl::StatusOr<std::vector<KeyValue>> DecodeKey(const std::vector<KeyColumn>& columns,
                                                std::string_view key);

// The key columns of `table`'s primary key (FailedPrecondition if the
// descriptor names a field it does not have).
absl::StatusOr<std::vector<KeyColumn>> PrimaryKeyColumns(const TableDescriptor& table);

}  // namespace megastore::schema
