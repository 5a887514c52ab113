#include "storage/tablet/row_builder.h"

#include <algorithm>

#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::storage {

using key_format::EntryKind;
using key_format::ParsedKey;

RowBuilder::RowBuilder(const CompiledSchema* schema, const ReadOptions* options, int64_t now_micros)
    : schema_(schema),
      filter_(options->filter),
      visibility_(schema, options->read_timestamp, now_micros) {}

void RowBuilder::StartRow(std::string_view key) {
  row_.key.assign(key);
  have_key_ = !key.empty();
  row_.cells.clear();
  groups_with_cells_ = 0;
  StartLocalityGroup();
}

void RowBuilder::StartLocalityGroup() {
  visibility_.StartRow();
  if (group_has_cells_) ++groups_with_cells_;
  group_has_cells_ = false;
  column_.clear();
  column_passes_ = false;
  column_cells_ = 0;
  column_finished_ = false;
}

bool RowBuilder::FamilyPasses(std::string_view family) const {
  if (filter_.families.empty()) return true;
  return std::find(filter_.families.begin(), filter_.families.end(), family) !=
         filter_.families.end();
}

bool RowBuilder::QualifierPasses(std::string_view q) const {
  switch (filter_.qualifier_match) {
    case RowFilter::QualifierMatch::kAll:
      return true;
    case RowFilter::QualifierMatch::kExact:
      return q == filter_.qualifier;
    case RowFilter::QualifierMatch::kPrefix:
      return q.substr(0, filter_.qualifier.size()) == filter_.qualifier;
    case RowFilter::QualifierMatch::kRange:
      return filter_.qualifier_range.Contains(q);
  }
  return false;
}

absl::Status RowBuilder::Add(std::string_view key, std::string_view value) {
  ParsedKey parsed;
  uint64_t seq;
  std::string_view user_value;
  if (!key_format::ParseKey(key, &parsed) || !key_format::ParseValue(value, &seq, &user_value)) {
    return absl::DataLossError(StrCat("corrupt tablet entry: key ", HexEncode(key.substr(0, 256))));
  }
  if (!have_key_) {
    if (!key_format::DecodeRow(parsed.row_prefix, &row_.key)) {
      return absl::DataLossError(StrCat("corrupt row key in tablet entry ", HexEncode(key)));
    }
    have_key_ = true;
  }
  // A finished column stays finished through its older entries, visible
  // or not (garbage versions past a GC rule are the ones worth skipping).
  if (parsed.column_prefix.empty() || parsed.column_prefix != column_) column_finished_ = false;
  if (visibility_.Add(parsed, seq) != RowVisibility::Verdict::kVisible) return absl::OkStatus();

  if (parsed.column_prefix != column_) {
    column_.assign(parsed.column_prefix);
    column_cells_ = 0;
    column_passes_ = FamilyPasses(parsed.family);
    if (column_passes_) {
      if (!key_format::DecodeQualifier(parsed, &qualifier_)) {
        return absl::DataLossError(StrCat("corrupt qualifier in tablet entry ", HexEncode(key)));
      }
      column_passes_ = QualifierPasses(qualifier_);
    }
  }
  if (!column_passes_) {
    column_finished_ = true;
    return absl::OkStatus();
  }
  if (parsed.timestamp < filter_.timestamp_start ||
      (filter_.timestamp_end != 0 && parsed.timestamp >= filter_.timestamp_end)) {
    return absl::OkStatus();
  }
  if (filter_.cells_per_column > 0 && column_cells_ >= filter_.cells_per_column) {
    column_finished_ = true;
    return absl::OkStatus();
  }
  ++column_cells_;
  column_finished_ = filter_.cells_per_column > 0 && column_cells_ >= filter_.cells_per_column;
  if (filter_.value_range && !filter_.value_range->Contains(user_value)) return absl::OkStatus();
  group_has_cells_ = true;
  Cell& cell = row_.cells.emplace_back();
  cell.family.assign(parsed.family);
  cell.qualifier = qualifier_;
  cell.timestamp = parsed.timestamp;
  if (!filter_.strip_value) cell.value.assign(user_value);
  return absl::OkStatus();
}

bool RowBuilder::Finish(Row* row) {
  if (group_has_cells_) ++groups_with_cells_;
  group_has_cells_ = false;
  if (row_.cells.empty()) return false;
  if (groups_with_cells_ > 1) {
    std::stable_sort(row_.cells.begin(), row_.cells.end(),
                     [](const Cell& a, const Cell& b) { return a.family < b.family; });
  }
  *row = std::move(row_);
  row_ = Row{};
  return true;
}

absl::Status ValidateFilter(const RowFilter& filter, const CompiledSchema& schema) {
  for (const std::string& f : filter.families) {
    if (schema.FindFamily(f) == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("filter names unknown column family \"", EscapeBytes(f), "\""));
    }
  }
  if (filter.qualifier_match == RowFilter::QualifierMatch::kRange) {
    MS_RETURN_IF_ERROR(filter.qualifier_range.Validate("filter qualifier range"));
  }
  if (filter.timestamp_start < 0 || filter.timestamp_end < 0 ||
      (filter.timestamp_end != 0 && filter.timestamp_end < filter.timestamp_start)) {
    return absl::InvalidArgumentError(StrCat("filter timestamp range [", filter.timestamp_start,
                                             ", ", filter.timestamp_end, ") is malformed"));
  }
  if (filter.value_range) MS_RETURN_IF_ERROR(filter.value_range->Validate("filter value range"));
  if (filter.cells_per_column < 0) {
    return absl::InvalidArgumentError(
        StrCat("filter cells_per_column ", filter.cells_per_column, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace megastore::storage
