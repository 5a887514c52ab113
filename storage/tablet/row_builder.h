// Turns the stored entries of one row into the Row a reader sees: applies
// visibility (RowVisibility) and the read's RowFilter, and decodes cells.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "storage/model/data_model.h"
#include "storage/tablet/row_visibility.h"

namespace megastore::storage {

class RowBuilder {
 public:
  // `schema` and `options` must outlive the builder; `options.filter` must
  // have passed ValidateFilter.
  RowBuilder(const CompiledSchema* schema, const ReadOptions* options, int64_t now_micros);

  // Begins a row (clears the output) / the next locality group's entries of
  // the same row. `key`, if the caller knows it, saves decoding it.
  void StartRow(std::string_view key = {});
  void StartLocalityGroup();

  // Adds one stored entry of the current row, in key order within its
  // locality group. DataLoss if the entry is corrupt.
  absl::Status Add(std::string_view key, std::string_view value);

  // The encoded column (a prefix of the keys of its entries) of the last
  // entry added, when nothing more of that column can reach the row: its
  // family or qualifier fails the filter, or it already gave
  // cells_per_column cells. Empty otherwise. A reader may skip the rest of
  // such a column: its older versions (often thousands of a rewritten
  // summary cell before compaction drops them) change nothing.
  std::string_view FinishedColumn() const {
    return column_finished_ ? column_ : std::string_view();
  }

  // Moves the row's visible cells into `row` (family order restored if
  // several locality groups contributed). Returns false if no cell is
  // visible.
  bool Finish(Row* row);

 private:
  bool FamilyPasses(std::string_view family) const;
  bool QualifierPasses(std::string_view qualifier) const;

  const CompiledSchema* schema_;
  const RowFilter& filter_;
  RowVisibility visibility_;
  Row row_;
  bool have_key_ = false;  // row_.key is set
  int groups_with_cells_ = 0;
  bool group_has_cells_ = false;
  // Per-column filter state.
  std::string column_;
  bool column_passes_ = false;
  std::string qualifier_;
  int32_t column_cells_ = 0;
  bool column_finished_ = false;
};

// InvalidArgument naming the problem if `filter` is malformed (unknown
// family, inverted ranges, negative limits).
absl::Status ValidateFilter(const RowFilter& filter, const CompiledSchema& schema);

}  // namespace megastore::storage
