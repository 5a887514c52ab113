// The cell's METADATA table and its files in the lock service (Bigtable
// §5.1; docs/cell.md).
//
// METADATA is an ordinary table served by the cell's tablet servers. Its row
// for a tablet of table T ending at row E is MetadataKey(T, E); the rows for
// METADATA's own tablets use an empty table name instead ("\0\0E", "\0\1"),
// so they sort before every user table and all lie in the **root tablet**,
// METADATA's first tablet, rows ["", "\x01"), which never splits. The root
// tablet's location is the lock-service file /<cell>/root.
//
// Columns of a tablet's row (family "loc", one version):
//   start       the tablet's start row (its end row is in the key)
//   id          the tablet id: its directory tablets/<id> under the data root
//   server      HOST:PORT of the server it is assigned to ("" = unassigned)
//   log         that server's commit log name (so the master knows which
//               log to split if the server dies)
//   new         "1" until the tablet was first loaded: the directory may be
//               created (otherwise a missing directory is data loss)
//   split_left  a split in progress: the left child's id (see CommitSplit)
// and family "log": the tablet's event log, one cell per event (qualifier
// the 20-digit wall-clock micros, value the event's text).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/cell/location_cache.h"
#include "storage/model/data_model.h"
#include "storage/model/schema.pb.h"
#include "storage/tabletserver/tabletserver.pb.h"

namespace megastore::storage::cell {

inline constexpr char kMetadataTable[] = "METADATA";
inline constexpr char kRootTabletId[] = "METADATA-root";
// The root tablet holds METADATA rows ["", kRootEndRow).
inline constexpr char kRootEndRow[] = "\x01";

TableSchema MetadataSchema();
// False for the root tablet (TabletServerOptions::may_split).
bool MaySplit(const TabletEntry& tablet);

std::string RootFile(const std::string& cell);   // "/<cell>/root"
std::string TablesDir(const std::string& cell);  // "/<cell>/tables/"
std::string TableFile(const std::string& cell, const std::string& table);

// A tablet as METADATA (or /<cell>/root) records it.
struct TabletRecord {
  TabletLocation location;  // table, start_row, end_row, tablet_id, server
  std::string log;          // the assigned server's commit log name
  bool is_new = false;
  std::string split_left;  // a split in progress: the left child's id

  bool assigned() const { return !location.server.empty(); }
};

// The METADATA row key of (table, end_row): MetadataKey, with METADATA's
// own tablets under the empty table name.
std::string RowKeyOf(const std::string& table, const std::string& end_row);
// Where a METADATA scan for the tablet of `table` holding `row` starts.
std::string SearchKeyOf(const std::string& table, const std::string& row);

// The row's record; InvalidArgument naming what is missing or malformed.
absl::StatusOr<TabletRecord> RecordFromRow(const Row& row);
// The mutations writing `record`'s "loc" columns (and clearing those it
// leaves empty), plus an event-log cell if `event` is not empty.
std::vector<Mutation> RecordMutations(const TabletRecord& record, const std::string& event,
                                      int64_t now_micros);
// A predicate matching a row whose loc:id is `id` (for check-and-mutate:
// "only if METADATA still says this tablet").
RowFilter IdIs(const std::string& id);

// /<cell>/root's contents <-> the root tablet's record.
std::string EncodeRootFile(const TabletRecord& root);
absl::StatusOr<TabletRecord> DecodeRootFile(const std::string& contents);

// A table file's contents (the schema in protobuf text format).
std::string EncodeTableFile(const TableSchema& schema);
absl::StatusOr<TableSchema> DecodeTableFile(const std::string& name, const std::string& contents);

}  // namespace megastore::storage::cell
