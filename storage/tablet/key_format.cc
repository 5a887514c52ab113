#include "storage/tablet/key_format.h"

#include "base/coding.h"

namespace megastore::storage::key_format {
namespace {

constexpr char kRowTombstoneTag = '\x01';
constexpr char kColumnTombstoneTag = '\x00';
constexpr char kCellTag = '\x01';

void AppendFamily(std::string* dst, std::string_view family) {
  dst->append(family);
  dst->push_back('\0');
}

// Length of the ordered-bytes encoding at the front of `s`, or 0.
size_t OrderedBytesLength(std::string_view s) {
  size_t pos = 0;
  while (true) {
    const size_t zero = s.find('\0', pos);
    if (zero == std::string_view::npos || zero + 1 >= s.size()) return 0;
    const char next = s[zero + 1];
    if (next == '\x01') return zero + 2;
    if (next != '\xff') return 0;
    pos = zero + 2;
  }
}

bool ConsumeTimestamp(std::string_view* in, int64_t* ts) {
  uint64_t v;
  if (!ConsumeOrderedUint64(in, &v, SortOrder::kDescending) || v > INT64_MAX) return false;
  *ts = static_cast<int64_t>(v);
  return true;
}

bool ConsumeAscendingTimestamp(std::string_view* in, int64_t* ts) {
  uint64_t v;
  if (!ConsumeOrderedUint64(in, &v) || v > INT64_MAX) return false;
  *ts = static_cast<int64_t>(v);
  return true;
}

}  // namespace

void AppendRowPrefix(std::string* dst, std::string_view row) { AppendOrderedBytes(dst, row); }

std::string RowTombstoneKey(std::string_view row, int64_t t) {
  std::string k;
  AppendRowPrefix(&k, row);
  k.push_back(kRowTombstoneTag);
  AppendOrderedUint64(&k, static_cast<uint64_t>(t), SortOrder::kDescending);
  return k;
}

std::string FamilyTombstoneKey(std::string_view row, std::string_view family, int64_t t) {
  std::string k;
  AppendRowPrefix(&k, row);
  AppendFamily(&k, family);
  k.append("\x00\x00", 2);
  AppendOrderedUint64(&k, static_cast<uint64_t>(t), SortOrder::kDescending);
  return k;
}

std::string ColumnTombstoneKey(std::string_view row, std::string_view family,
                               std::string_view qualifier, int64_t t, int64_t start, int64_t end) {
  std::string k;
  AppendRowPrefix(&k, row);
  AppendFamily(&k, family);
  AppendOrderedBytes(&k, qualifier);
  k.push_back(kColumnTombstoneTag);
  AppendOrderedUint64(&k, static_cast<uint64_t>(t), SortOrder::kDescending);
  AppendOrderedUint64(&k, static_cast<uint64_t>(start));
  AppendOrderedUint64(&k, static_cast<uint64_t>(end));
  return k;
}

void AppendCellKey(std::string* dst, std::string_view row, std::string_view family,
                   std::string_view qualifier, int64_t ts) {
  AppendRowPrefix(dst, row);
  AppendFamily(dst, family);
  AppendOrderedBytes(dst, qualifier);
  dst->push_back(kCellTag);
  AppendOrderedUint64(dst, static_cast<uint64_t>(ts), SortOrder::kDescending);
}

size_t RowPrefixLength(std::string_view key) { return OrderedBytesLength(key); }

bool ParseKey(std::string_view key, ParsedKey* out) {
  const size_t row_len = OrderedBytesLength(key);
  if (row_len == 0 || row_len >= key.size()) return false;
  out->row_prefix = key.substr(0, row_len);
  std::string_view rest = key.substr(row_len);
  out->family = {};
  out->column_prefix = {};
  out->range_start = out->range_end = 0;

  if (rest[0] == kRowTombstoneTag) {
    rest.remove_prefix(1);
    out->kind = EntryKind::kRowTombstone;
    return ConsumeTimestamp(&rest, &out->timestamp) && rest.empty();
  }
  const size_t fam_end = rest.find('\0');
  if (fam_end == 0 || fam_end == std::string_view::npos) return false;
  out->family = rest.substr(0, fam_end);
  rest.remove_prefix(fam_end + 1);
  if (rest.size() >= 2 && rest[0] == '\0' && rest[1] == '\0') {
    rest.remove_prefix(2);
    out->kind = EntryKind::kFamilyTombstone;
    return ConsumeTimestamp(&rest, &out->timestamp) && rest.empty();
  }
  const size_t qual_len = OrderedBytesLength(rest);
  if (qual_len == 0 || qual_len >= rest.size()) return false;
  out->column_prefix = key.substr(0, key.size() - rest.size() + qual_len);
  rest.remove_prefix(qual_len);
  const char tag = rest[0];
  rest.remove_prefix(1);
  if (tag == kCellTag) {
    out->kind = EntryKind::kCell;
    return ConsumeTimestamp(&rest, &out->timestamp) && rest.empty();
  }
  if (tag == kColumnTombstoneTag) {
    out->kind = EntryKind::kColumnTombstone;
    return ConsumeTimestamp(&rest, &out->timestamp) &&
           ConsumeAscendingTimestamp(&rest, &out->range_start) &&
           ConsumeAscendingTimestamp(&rest, &out->range_end) && rest.empty();
  }
  return false;
}

bool DecodeRow(std::string_view row_prefix, std::string* row) {
  return ConsumeOrderedBytes(&row_prefix, row) && row_prefix.empty();
}

bool DecodeQualifier(const ParsedKey& key, std::string* qualifier) {
  std::string_view q = key.column_prefix.substr(key.row_prefix.size() + key.family.size() + 1);
  return ConsumeOrderedBytes(&q, qualifier) && q.empty();
}

void AppendValue(std::string* dst, uint64_t seq, std::string_view user_value) {
  PutVarint64(dst, seq);
  dst->append(user_value);
}

bool ParseValue(std::string_view stored, uint64_t* seq, std::string_view* user_value) {
  if (!ConsumeVarint64(&stored, seq)) return false;
  *user_value = stored;
  return true;
}

}  // namespace megastore::storage::key_format
