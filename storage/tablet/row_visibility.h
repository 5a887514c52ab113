// The one place that decides which stored cells of a row exist for a reader
// and which a major compaction may drop. Reads and the compaction filter both
// feed a row's entries through it, in key order.
//
// Rules (docs/tablet.md has the long form):
//  * A tombstone masks the cells in its scope that were written before it
//    (lower sequence number). In a family with timestamp_deletes it masks
//    instead every cell of its scope whose timestamp is in its range (a
//    column range with no end, a family and a row tombstone: up to T),
//    whatever the write order — except a cell at exactly T, which it masks
//    only if written before it (so "delete, then set" in one mutation at T
//    keeps the set, as in order). A read as of S applies only tombstones whose
//    own timestamp T <= S; masked cells stay readable below T until the next
//    major compaction removes them.
//  * GC max_versions ranks the non-masked cells of a column by timestamp,
//    newest first; GC max_age compares timestamps with the current time.
//    Both hide cells from every read at once.
//  * A cell is visible as of S if its family exists, it is not collected, its
//    timestamp <= S and no tombstone with T <= S masks it.
//  * Garbage (droppable by a major compaction): tombstones (but those of a
//    timestamp_deletes family while their grace lasts), masked cells,
//    collected cells, cells of unknown families.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "storage/model/schema.h"
#include "storage/tablet/key_format.h"

namespace megastore::storage {

class RowVisibility {
 public:
  enum class Verdict { kVisible, kHidden, kGarbage };

  // `schema` must outlive this object.
  RowVisibility(const CompiledSchema* schema, int64_t read_timestamp, int64_t now_micros);

  // Forgets all row state; call before each row, and before each locality
  // group's part of a row.
  void StartRow();

  // Classifies the next entry of the row. Entries must arrive in key order.
  // Tombstones are never visible: kGarbage, or kHidden while a
  // timestamp_deletes family's grace keeps them. `written_micros`: when a
  // tombstone was written (0 if unknown; its timestamp counts then).
  Verdict Add(const key_format::ParsedKey& key, uint64_t seq, int64_t written_micros = 0);

 private:
  struct Mask {
    uint64_t any = 0;        // highest seq of any tombstone in scope
    uint64_t visible = 0;    // highest seq of a tombstone with T <= read_timestamp
    int64_t any_t = -1;      // highest T of any tombstone in scope
    uint64_t any_t_seq = 0;  // ... and the highest seq of those with that T
    int64_t visible_t = -1;  // highest T <= read_timestamp
    uint64_t visible_t_seq = 0;
    void Add(int64_t t, uint64_t seq, int64_t read_timestamp);
  };
  // kGarbage for a tombstone written at `written` with timestamp `t` once
  // `grace` has passed for both; kHidden before.
  Verdict TombstoneVerdict(int64_t t, int64_t written, int64_t grace) const;
  struct ColumnTombstone {
    int64_t t, start, end;
    uint64_t seq;
  };

  void StartFamily(std::string_view family);
  void StartColumn(std::string_view column_prefix);
  Verdict ClassifyCell(int64_t ts, uint64_t seq);

  const CompiledSchema* const schema_;
  const int64_t read_timestamp_;
  const int64_t now_micros_;

  Mask row_mask_;
  std::string family_;
  const FamilyInfo* family_info_ = nullptr;
  int64_t age_cutoff_ = 0;  // cells older than this are expired (max_age)
  Mask family_mask_;
  std::string column_;
  std::vector<ColumnTombstone> column_tombstones_;
  int32_t column_rank_ = 0;  // non-masked cells seen in this column
};

}  // namespace megastore::storage
