#include "storage/tablet/row_visibility.h"

#include <algorithm>

namespace megastore::storage {

using key_format::EntryKind;
using key_format::ParsedKey;

namespace {

// Keeps (max_t, its highest seq) as the highest timestamp seen and the
// highest sequence number among tombstones with that timestamp.
void RaiseTo(int64_t t, uint64_t seq, int64_t* max_t, uint64_t* max_t_seq) {
  if (t > *max_t) {
    *max_t = t;
    *max_t_seq = seq;
  } else if (t == *max_t) {
    *max_t_seq = std::max(*max_t_seq, seq);
  }
}

}  // namespace

void RowVisibility::Mask::Add(int64_t t, uint64_t seq, int64_t read_timestamp) {
  any = std::max(any, seq);
  RaiseTo(t, seq, &any_t, &any_t_seq);
  if (t <= read_timestamp) {
    visible = std::max(visible, seq);
    RaiseTo(t, seq, &visible_t, &visible_t_seq);
  }
}

namespace {

// Whether a tombstone with timestamp `t` written as `t_seq` masks a cell at
// `ts` written as `seq`, timestamps first (timestamp_deletes).
bool MasksByTimestamp(int64_t t, uint64_t t_seq, int64_t ts, uint64_t seq) {
  return ts < t || (ts == t && seq < t_seq);
}

}  // namespace

RowVisibility::Verdict RowVisibility::TombstoneVerdict(int64_t t, int64_t written,
                                                       int64_t grace) const {
  if (grace <= 0) return Verdict::kGarbage;
  const int64_t newest = std::max(t, written);
  return newest < now_micros_ - grace ? Verdict::kGarbage : Verdict::kHidden;
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

RowVisibility::Verdict RowVisibility::Add(const ParsedKey& key, uint64_t seq,
                                          int64_t written_micros) {
  if (key.kind == EntryKind::kRowTombstone) {
    row_mask_.Add(key.timestamp, seq, read_timestamp_);
    return TombstoneVerdict(key.timestamp, written_micros, schema_->max_tombstone_grace_micros());
  }
  if (key.family != family_ || family_.empty()) StartFamily(key.family);
  const int64_t grace = family_info_ != nullptr && family_info_->timestamp_deletes
                            ? family_info_->tombstone_grace_micros
                            : 0;
  if (key.kind == EntryKind::kFamilyTombstone) {
    family_mask_.Add(key.timestamp, seq, read_timestamp_);
    return TombstoneVerdict(key.timestamp, written_micros, grace);
  }
  if (key.column_prefix != column_) StartColumn(key.column_prefix);
  if (key.kind == EntryKind::kColumnTombstone) {
    column_tombstones_.push_back(
        ColumnTombstone{key.timestamp, key.range_start, key.range_end, seq});
    return TombstoneVerdict(key.timestamp, written_micros, grace);
  }
  return ClassifyCell(key.timestamp, seq);
}

RowVisibility::Verdict RowVisibility::ClassifyCell(int64_t ts, uint64_t seq) {
  if (family_info_ == nullptr) return Verdict::kGarbage;

  bool masked_any, masked_visible;
  if (family_info_->timestamp_deletes) {
    // By timestamp, whatever the write order.
    masked_any = MasksByTimestamp(row_mask_.any_t, row_mask_.any_t_seq, ts, seq) ||
                 MasksByTimestamp(family_mask_.any_t, family_mask_.any_t_seq, ts, seq);
    masked_visible = MasksByTimestamp(row_mask_.visible_t, row_mask_.visible_t_seq, ts, seq) ||
                     MasksByTimestamp(family_mask_.visible_t, family_mask_.visible_t_seq, ts, seq);
    for (const ColumnTombstone& t : column_tombstones_) {
      if (ts < t.start || (t.end != 0 ? ts >= t.end : ts > t.t)) continue;
      if (ts == t.t && t.seq <= seq) continue;  // written after the delete, at its timestamp
      masked_any = true;
      if (t.t <= read_timestamp_) masked_visible = true;
    }
  } else {
    masked_any = row_mask_.any > seq || family_mask_.any > seq;
    masked_visible = row_mask_.visible > seq || family_mask_.visible > seq;
    for (const ColumnTombstone& t : column_tombstones_) {
      if (t.seq <= seq || ts < t.start || (t.end != 0 && ts >= t.end)) continue;
      masked_any = true;
      if (t.t <= read_timestamp_) masked_visible = true;
    }
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
