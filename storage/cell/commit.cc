// The tablet servers' side of splits and merges in METADATA (master.h:
// CommitSplit, CommitMerge).
#include "base/logging.h"
#include "base/strings.h"
#include "storage/cell/master.h"

namespace megastore::storage::cell {

absl::Status CommitSplit(CellClient* client, Env* env, const std::string& server,
                         const std::string& log, const TabletEntry& parent,
                         const std::vector<TabletEntry>& children) {
  if (children.size() != 2) return absl::InvalidArgumentError("a split has two children");
  const std::string& table = parent.table();
  TabletRecord right;
  right.location = TabletLocation{table, children[1].start_row(), children[1].end_row(),
                                  children[1].id(), server};
  right.log = log;
  right.split_left = children[0].id();
  const std::string key = RowKeyOf(table, parent.end_row());
  absl::StatusOr<bool> matched = client->CheckAndMutateRow(
      kMetadataTable, key, IdIs(parent.id()),
      RecordMutations(right, StrCat("split from ", parent.id(), " on ", server), env->NowMicros()),
      {});
  if (!matched.ok()) {
    // It may or may not have happened: the row says which.
    ReadOptions o;
    o.filter.families = {"loc"};
    absl::StatusOr<std::optional<Row>> row = client->ReadRow(kMetadataTable, key, o);
    if (!row.ok()) {
      return absl::UnknownError(StrCat("the split of ", parent.id(),
                                       " may or may not be committed (", matched.status().message(),
                                       "; reading the row back: ", row.status().message(), ")"));
    }
    absl::StatusOr<TabletRecord> now =
        row->has_value() ? RecordFromRow(**row) : absl::NotFoundError("no row");
    if (now.ok() && now->location.tablet_id == children[1].id()) {
      matched = true;
    } else if (now.ok() && now->location.tablet_id == parent.id()) {
      return matched.status();  // not committed: the parent serves on
    } else {
      return absl::AbortedError(
          StrCat("METADATA no longer names tablet ", parent.id(), ": not split"));
    }
  }
  if (!*matched) {
    return absl::AbortedError(
        StrCat("METADATA no longer names tablet ", parent.id(), ": not split"));
  }
  // Committed. The rest is completed by the master if this fails.
  TabletRecord left;
  left.location = TabletLocation{table, children[0].start_row(), children[0].end_row(),
                                 children[0].id(), server};
  left.log = log;
  absl::Status s = client->MutateRow(
      kMetadataTable, RowKeyOf(table, children[0].end_row()),
      RecordMutations(left, StrCat("split from ", parent.id(), " on ", server), env->NowMicros()));
  if (s.ok())
    s = client->MutateRow(kMetadataTable, key, {Mutation::DeleteCells("loc", "split_left")});
  if (!s.ok())
    MS_LOG_WARN("split of {}: committed; finishing METADATA left to the master: {}", parent.id(),
                s.ToString());
  return absl::OkStatus();
}

absl::Status CommitMerge(CellClient* client, Env* env, const std::string& server,
                         const std::string& log, const TabletEntry& left, const TabletEntry& right,
                         const TabletEntry& merged) {
  TabletRecord m;
  m.location =
      TabletLocation{merged.table(), merged.start_row(), merged.end_row(), merged.id(), server};
  m.log = log;
  const std::string key = RowKeyOf(right.table(), right.end_row());
  absl::StatusOr<bool> matched = client->CheckAndMutateRow(
      kMetadataTable, key, IdIs(right.id()),
      RecordMutations(m, StrCat("merged from ", left.id(), " and ", right.id(), " on ", server),
                      env->NowMicros()),
      {});
  if (!matched.ok()) {
    // It may or may not have happened: the row says which.
    ReadOptions o;
    o.filter.families = {"loc"};
    absl::StatusOr<std::optional<Row>> row = client->ReadRow(kMetadataTable, key, o);
    if (!row.ok()) {
      return absl::UnknownError(StrCat("the merge into ", merged.id(),
                                       " may or may not be committed (", matched.status().message(),
                                       "; reading the row back: ", row.status().message(), ")"));
    }
    absl::StatusOr<TabletRecord> now =
        row->has_value() ? RecordFromRow(**row) : absl::NotFoundError("no row");
    if (!now.ok() || now->location.tablet_id != merged.id()) return matched.status();
    matched = true;
  }
  if (!*matched)
    return absl::AbortedError(
        StrCat("METADATA no longer names tablet ", right.id(), ": not merged"));
  // Committed; the master removes the left row if this fails.
  absl::StatusOr<bool> deleted =
      client->CheckAndMutateRow(kMetadataTable, RowKeyOf(left.table(), left.end_row()),
                                IdIs(left.id()), {Mutation::DeleteRow()}, {});
  if (!deleted.ok()) {
    MS_LOG_WARN("merge into {}: committed; removing {}'s row left to the master: {}", merged.id(),
                left.id(), deleted.status().ToString());
  }
  return absl::OkStatus();
}

}  // namespace megastore::storage::cell
