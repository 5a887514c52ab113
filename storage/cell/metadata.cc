#include "storage/cell/metadata.h"

#include <cstdio>

#include "absl/strings/str_split.h"
#include "base/coding.h"
#include "base/strings.h"
#include "google/protobuf/text_format.h"

namespace megastore::storage::cell {

namespace {

constexpr char kLoc[] = "loc";
constexpr char kLog[] = "log";

std::string PrefixOf(const std::string& table) {
  return table == kMetadataTable ? std::string() : table;
}

}  // namespace

TableSchema MetadataSchema() {
  TableSchema s;
  s.set_name(kMetadataTable);
  ColumnFamily* loc = s.add_families();
  loc->set_name(kLoc);
  loc->mutable_gc_rule()->set_max_versions(1);
  ColumnFamily* log = s.add_families();
  log->set_name(kLog);
  log->mutable_gc_rule()->set_max_versions(1);
  return s;
}

bool MaySplit(const TabletEntry& tablet) {
  return !(tablet.table() == kMetadataTable && tablet.end_row() == kRootEndRow);
}

std::string RootFile(const std::string& cell) { return StrCat("/", cell, "/root"); }
std::string TablesDir(const std::string& cell) { return StrCat("/", cell, "/tables/"); }
std::string TableFile(const std::string& cell, const std::string& table) {
  return TablesDir(cell) + table;
}

std::string RowKeyOf(const std::string& table, const std::string& end_row) {
  return EncodeMetadataKey(PrefixOf(table), end_row);
}

std::string SearchKeyOf(const std::string& table, const std::string& row) {
  return EncodeMetadataSearchKey(PrefixOf(table), row);
}

absl::StatusOr<TabletRecord> RecordFromRow(const Row& row) {
  TabletRecord r;
  const std::string& key = row.key;
  const size_t nul = key.find('\0');
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("METADATA row \"", EscapeBytes(key), "\": ", why));
  };
  if (nul == std::string::npos || nul + 1 >= key.size()) return bad("not a tablet's key");
  r.location.table = nul == 0 ? std::string(kMetadataTable) : key.substr(0, nul);
  if (key[nul + 1] == '\1' && key.size() == nul + 2) {
    r.location.end_row.clear();
  } else if (key[nul + 1] == '\0' && key.size() > nul + 2) {
    r.location.end_row = key.substr(nul + 2);
  } else {
    return bad("not a tablet's key");
  }
  bool has_id = false;
  for (const Cell& c : row.cells) {
    if (c.family != kLoc) continue;
    if (c.qualifier == "start") r.location.start_row = c.value;
    if (c.qualifier == "id") {
      r.location.tablet_id = c.value;
      has_id = true;
    }
    if (c.qualifier == "server") r.location.server = c.value;
    if (c.qualifier == "log") r.log = c.value;
    if (c.qualifier == "new") r.is_new = c.value == "1";
    if (c.qualifier == "split_left") r.split_left = c.value;
  }
  if (!has_id || r.location.tablet_id.empty()) return bad("has no loc:id");
  if (!r.location.end_row.empty() && r.location.start_row >= r.location.end_row) {
    return bad("its start row is not before its end row");
  }
  return r;
}

std::vector<Mutation> RecordMutations(const TabletRecord& record, const std::string& event,
                                      int64_t now_micros) {
  std::vector<Mutation> m;
  auto set = [&](const char* q, const std::string& v) {
    // One version per column: the previous one goes with the write.
    m.push_back(Mutation::DeleteCells(kLoc, q));
    if (!v.empty()) m.push_back(Mutation::SetCell(kLoc, q, v));
  };
  m.push_back(Mutation::DeleteCells(kLoc, "start"));
  m.push_back(
      Mutation::SetCell(kLoc, "start", record.location.start_row));  // "" is a real start row
  set("id", record.location.tablet_id);
  set("server", record.location.server);
  set("log", record.log);
  set("new", record.is_new ? "1" : "");
  set("split_left", record.split_left);
  if (!event.empty()) {
    char ts[24];
    std::snprintf(ts, sizeof(ts), "%020lld", static_cast<long long>(now_micros));
    m.push_back(Mutation::SetCell(kLog, ts, event));
  }
  return m;
}

RowFilter IdIs(const std::string& id) {
  RowFilter f;
  f.families = {kLoc};
  f.qualifier_match = RowFilter::QualifierMatch::kExact;
  f.qualifier = "id";
  f.value_range = ByteRange{id, id, true};
  f.cells_per_column = 1;
  return f;
}

std::string EncodeRootFile(const TabletRecord& root) {
  return StrCat("id=", root.location.tablet_id, "\nserver=", root.location.server,
                "\nlog=", root.log, "\nnew=", root.is_new ? "1" : "0", "\n");
}

absl::StatusOr<TabletRecord> DecodeRootFile(const std::string& contents) {
  TabletRecord r;
  r.location.table = kMetadataTable;
  r.location.end_row = kRootEndRow;
  for (absl::string_view piece : absl::StrSplit(contents, '\n', absl::SkipEmpty())) {
    const std::string_view line(piece.data(), piece.size());
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return absl::DataLossError(
          StrCat("root tablet file: line \"", EscapeBytes(line), "\" is not key=value"));
    }
    const std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "id")
      r.location.tablet_id = std::string(v);
    else if (k == "server")
      r.location.server = std::string(v);
    else if (k == "log")
      r.log = std::string(v);
    else if (k == "new")
      r.is_new = v == "1";
  }
  if (r.location.tablet_id.empty()) return absl::DataLossError("root tablet file has no id");
  return r;
}

std::string EncodeTableFile(const TableSchema& schema) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(schema, &out);
  return out;
}

absl::StatusOr<TableSchema> DecodeTableFile(const std::string& name, const std::string& contents) {
  TableSchema s;
  if (!google::protobuf::TextFormat::ParseFromString(contents, &s)) {
    return absl::DataLossError(
        StrCat("the lock service's schema of table ", name, " does not parse"));
  }
  return s;
}

}  // namespace megastore::storage::cell
