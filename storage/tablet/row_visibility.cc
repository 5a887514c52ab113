#include "storage/tablet/row_visibility.h"

#include <algorithm>

namespace megastore::storage {

using key_format::EntryKind;
using key_format::ParsedKey;

void RowVisibility::Mask::Add(int64_t t, uint64_t seq, int64_t read_timestamp) {
  any = std::max(any, seq);
  if (t <= read_timestamp) visible = std::max(visible, seq);
}

RowVisibility::RowVisibility(const CompiledSchema* schema, int64_t read_timestamp,
                             int64_t now_micros)
    : schema_(schema), read_timestamp_(read_timestamp), now_micros_(now_micros) {}

void RowVisibility::StartRow() {
  row_mask_ = Mask{};
  family_.clear();
  family_info_ = nullptr;
  family_mask_ = Mask{};
  column_.clear();
  column_tombstones_.clear();
  column_rank_ = 0;
}

void RowVisibility::StartFamily(std::string_view family) {
  family_.assign(family);
  family_info_ = schema_->FindFamily(family);
  family_mask_ = Mask{};
  age_cutoff_ = 0;
  if (family_info_ != nullptr && family_info_->gc_rule.max_age_micros() > 0) {
    age_cutoff_ = now_micros_ - family_info_->gc_rule.max_age_micros();
  }
  column_.clear();
  column_tombstones_.clear();
  column_rank_ = 0;
}

void RowVisibility::StartColumn(std::string_view column_prefix) {
  column_.assign(column_prefix);
  column_tombstones_.clear();
  column_rank_ = 0;
}

RowVisibility::Verdict RowVisibility::Add(const ParsedKey& key, uint64_t seq) {
  if (key.kind == EntryKind::kRowTombstone) {
    row_mask_.Add(key.timestamp, seq, read_timestamp_);
    return Verdict::kGarbage;
  }
  if (key.family != family_ || family_.empty()) StartFamily(key.family);
  if (key.kind == EntryKind::kFamilyTombstone) {
    family_mask_.Add(key.timestamp, seq, read_timestamp_);
    return Verdict::kGarbage;
  }
  if (key.column_prefix != column_) StartColumn(key.column_prefix);
  if (key.kind == EntryKind::kColumnTombstone) {
    column_tombstones_.push_back(
        ColumnTombstone{key.timestamp, key.range_start, key.range_end, seq});
    return Verdict::kGarbage;
  }
  return ClassifyCell(key.timestamp, seq);
}

RowVisibility::Verdict RowVisibility::ClassifyCell(int64_t ts, uint64_t seq) {
  if (family_info_ == nullptr) return Verdict::kGarbage;

  bool masked_any = row_mask_.any > seq || family_mask_.any > seq;
  bool masked_visible = row_mask_.visible > seq || family_mask_.visible > seq;
  for (const ColumnTombstone& t : column_tombstones_) {
    if (t.seq <= seq || ts < t.start || (t.end != 0 && ts >= t.end)) continue;
    masked_any = true;
    if (t.t <= read_timestamp_) masked_visible = true;
  }

  const GcRule& rule = family_info_->gc_rule;
  const bool has_versions = rule.max_versions() > 0;
  const bool has_age = rule.max_age_micros() > 0;
  bool too_many = false;
  if (!masked_any) {
    too_many = has_versions && column_rank_ >= rule.max_versions();
    ++column_rank_;
  }
  const bool too_old = has_age && ts < age_cutoff_;
  bool collected;
  if (rule.mode() == GcRule::INTERSECTION && has_versions && has_age) {
    collected = too_many && too_old;
  } else {
    collected = too_many || too_old;
  }

  if (!collected && ts <= read_timestamp_ && !masked_visible) return Verdict::kVisible;
  return (collected || masked_any) ? Verdict::kGarbage : Verdict::kHidden;
}

}  // namespace megastore::storage
