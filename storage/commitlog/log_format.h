// The commit log's record format.
//
//   record  := crc:fixed32  length:fixed32  body[length]
//   body    := lsn:fixed64  tablet_id:varint32-prefixed bytes  payload:bytes
//
// `crc` is the masked CRC-32C of `length` and `body`. LSNs (log sequence
// numbers) start at 1 and increase by one per record across all segments.
// A segment file is named by the LSN of its first record, 20 decimal digits,
// plus ".log".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megastore::storage::commitlog {

inline constexpr size_t kHeaderBytes = 8;  // crc + length
// A length above this is treated as corruption, never allocated.
inline constexpr uint32_t kMaxRecordBytes = 256u << 20;

struct Record {
  uint64_t lsn = 0;
  std::string_view tablet_id;
  std::string_view payload;
};

void AppendRecord(std::string* dst, uint64_t lsn, std::string_view tablet_id,
                  std::string_view payload);

enum class ParseResult {
  kOk,         // a record was parsed; `consumed` bytes
  kTruncated,  // the bytes end inside a record (a torn write at the tail)
  kCorrupt,    // checksum mismatch or malformed body
};

// Parses the record at the start of `in`. On kOk, `record` views into `in`.
ParseResult ParseRecord(std::string_view in, Record* record, size_t* consumed);

std::string SegmentFileName(uint64_t first_lsn);
// Returns false if `name` is not a segment file name.
bool ParseSegmentFileName(std::string_view name, uint64_t* first_lsn);

}  // namespace megastore::storage::commitlog
