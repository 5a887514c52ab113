#include "storage/tablet/log_record.h"

#include "base/coding.h"
#include "base/strings.h"

namespace megastore::storage {
namespace {

constexpr uint32_t kVersion = 1;

void PutTimestamp(std::string* dst, int64_t ts) { PutVarint64(dst, static_cast<uint64_t>(ts)); }

bool ConsumeTimestamp(std::string_view* in, int64_t* ts) {
  uint64_t v;
  if (!ConsumeVarint64(in, &v) || v > static_cast<uint64_t>(INT64_MAX)) return false;
  *ts = static_cast<int64_t>(v);
  return true;
}

}  // namespace

void EncodeLogRecord(std::string* dst, std::string_view row, int64_t timestamp,
                     absl::Span<const Mutation> mutations) {
  PutVarint32(dst, kVersion);
  PutLengthPrefixed(dst, row);
  PutTimestamp(dst, timestamp);
  PutVarint32(dst, static_cast<uint32_t>(mutations.size()));
  for (const Mutation& m : mutations) {
    dst->push_back(static_cast<char>(m.type));
    PutLengthPrefixed(dst, m.family);
    PutLengthPrefixed(dst, m.qualifier);
    PutLengthPrefixed(dst, m.value);
    PutTimestamp(dst, m.timestamp >= 0 ? m.timestamp : timestamp);
    PutTimestamp(dst, m.start_ts);
    PutTimestamp(dst, m.end_ts);
  }
}

absl::StatusOr<LogRecord> DecodeLogRecord(std::string_view in) {
  auto corrupt = [](std::string_view what) {
    return absl::DataLossError(StrCat("corrupt commit log record: ", what));
  };
  uint32_t version, count;
  std::string_view row;
  LogRecord r;
  if (!ConsumeVarint32(&in, &version)) return corrupt("no version");
  if (version != kVersion) return corrupt(StrCat("unknown version ", version));
  if (!ConsumeLengthPrefixed(&in, &row) || !ConsumeTimestamp(&in, &r.timestamp) ||
      !ConsumeVarint32(&in, &count)) {
    return corrupt("bad header");
  }
  if (count > in.size()) return corrupt("mutation count exceeds the record");
  r.row.assign(row);
  r.mutations.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (in.empty()) return corrupt("truncated mutation");
    const auto type = static_cast<uint8_t>(in[0]);
    in.remove_prefix(1);
    if (type > static_cast<uint8_t>(Mutation::Type::kDeleteRow)) {
      return corrupt(StrCat("unknown mutation type ", type));
    }
    Mutation m;
    m.type = static_cast<Mutation::Type>(type);
    std::string_view family, qualifier, value;
    if (!ConsumeLengthPrefixed(&in, &family) || !ConsumeLengthPrefixed(&in, &qualifier) ||
        !ConsumeLengthPrefixed(&in, &value) || !ConsumeTimestamp(&in, &m.timestamp) ||
        !ConsumeTimestamp(&in, &m.start_ts) || !ConsumeTimestamp(&in, &m.end_ts)) {
      return corrupt(StrCat("truncated mutation ", i));
    }
    m.family.assign(family);
    m.qualifier.assign(qualifier);
    m.value.assign(value);
    r.mutations.push_back(std::move(m));
  }
  if (!in.empty()) return corrupt("trailing bytes");
  return r;
}

}  // namespace megastore::storage
