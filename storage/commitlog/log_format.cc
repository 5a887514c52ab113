#include "storage/commitlog/log_format.h"

#include <cstdio>

#include "base/checksum.h"
#include "base/coding.h"

namespace megastore::storage::commitlog {

void AppendRecord(std::string* dst, uint64_t lsn, std::string_view tablet_id,
                  std::string_view payload) {
  const size_t start = dst->size();
  dst->append(kHeaderBytes, '\0');
  PutFixed64(dst, lsn);
  PutLengthPrefixed(dst, tablet_id);
  dst->append(payload);
  const uint32_t length = static_cast<uint32_t>(dst->size() - start - kHeaderBytes);
  char* header = dst->data() + start;
  for (int i = 0; i < 4; ++i) header[4 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const uint32_t crc = crc32c::Mask(crc32c::Extend(0, header + 4, 4 + length));
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
}

ParseResult ParseRecord(std::string_view in, Record* record, size_t* consumed) {
  if (in.size() < kHeaderBytes) return ParseResult::kTruncated;
  const uint32_t crc = DecodeFixed32(in.data());
  const uint32_t length = DecodeFixed32(in.data() + 4);
  if (length > kMaxRecordBytes || length < 9) return ParseResult::kCorrupt;
  if (in.size() < kHeaderBytes + length) return ParseResult::kTruncated;
  if (crc32c::Unmask(crc) != crc32c::Extend(0, in.data() + 4, 4 + length)) {
    return ParseResult::kCorrupt;
  }
  std::string_view body = in.substr(kHeaderBytes, length);
  if (!ConsumeFixed64(&body, &record->lsn) || record->lsn == 0 ||
      !ConsumeLengthPrefixed(&body, &record->tablet_id)) {
    return ParseResult::kCorrupt;
  }
  record->payload = body;
  *consumed = kHeaderBytes + length;
  return ParseResult::kOk;
}

std::string SegmentFileName(uint64_t first_lsn) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020llu.log", static_cast<unsigned long long>(first_lsn));
  return buf;
}

bool ParseSegmentFileName(std::string_view name, uint64_t* first_lsn) {
  if (name.size() != 24 || name.substr(20) != ".log") return false;
  uint64_t v = 0;
  for (char c : name.substr(0, 20)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *first_lsn = v;
  return true;
}

}  // namespace megastore::storage::commitlog
