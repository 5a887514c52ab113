// RebuildStateFromTablets: a standalone tablet server's state.pb again,
// from what its data directory's tables and tablets record about
// themselves.
#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/str_join.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/strings.h"
#include "storage/model/schema.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage {

namespace fs = std::filesystem;

namespace {

struct Found {
  std::string id;
  StoredTablet stored;
};

std::string RowName(std::string_view row, bool is_end) {
  if (row.empty()) return is_end ? "the end" : "the start";
  return StrCat("\"", EscapeBytes(row), "\"");
}

// Whether `parts` cover [start, end) exactly once, in order.
bool Tiles(std::vector<Found> parts, const std::string& start, const std::string& end) {
  std::sort(parts.begin(), parts.end(),
            [](const Found& a, const Found& b) { return a.stored.start_row < b.stored.start_row; });
  std::string at = start;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].stored.start_row != at) return false;
    at = parts[i].stored.end_row;
    if (at.empty()) return i + 1 == parts.size() && end.empty();
  }
  return at == end;
}

// Splits leave a tree: each tablet's nearest ancestor present here is its
// parent. A tablet whose present descendants cover its rows was split,
// and the split finished (a crash came before its directory was removed):
// it is left out, for the descendants. Descendants that do not cover its
// rows are either the children of a split that did not finish or a
// split's children with one of them lost: which one cannot be told here,
// so it is a problem for the operator.
class SplitTree {
 public:
  SplitTree(const std::string& table, const std::map<std::string, Found>& tablets) : table_(table) {
    for (const auto& [id, f] : tablets) {
      std::string parent;
      for (const std::string& a : f.stored.ancestors) {
        if (tablets.contains(a)) {
          parent = a;
          break;
        }
      }
      children_[parent].push_back(&f);
    }
  }

  // The tablets that serve the table's rows, or false after adding the
  // problems found.
  bool Resolve(std::vector<Found>* serving, std::vector<std::string>* notes,
               std::vector<std::string>* problems) {
    bool ok = true;
    for (const Found* root : children_[""]) ok = Cover(*root, serving, notes, problems) && ok;
    return ok;
  }

 private:
  bool Cover(const Found& t, std::vector<Found>* out, std::vector<std::string>* notes,
             std::vector<std::string>* problems) {
    auto kids = children_.find(t.id);
    if (kids == children_.end()) {
      out->push_back(t);
      return true;
    }
    std::vector<Found> cover;
    bool ok = true;
    for (const Found* k : kids->second) ok = Cover(*k, &cover, notes, problems) && ok;
    if (!ok) return false;
    std::vector<std::string> ids;
    for (const Found& c : cover) ids.push_back(c.id);
    if (!Tiles(cover, t.stored.start_row, t.stored.end_row)) {
      problems->push_back(StrCat("table ", table_, ": tablet ", t.id,
                                 " and tablets split from it (", absl::StrJoin(ids, ", "),
                                 ") are here, but those do not cover its rows: "
                                 "a split that did not finish "
                                 "(move those out) or one whose other part is "
                                 "lost (restore it, or move ",
                                 t.id, " out)"));
      return false;
    }
    notes->push_back(StrCat("table ", table_, ": tablet ", t.id,
                            " left out: its rows are split among ", absl::StrJoin(ids, ", "),
                            " (the server moves its directory to leftovers/ at start)"));
    out->insert(out->end(), cover.begin(), cover.end());
    return true;
  }

  const std::string table_;
  std::map<std::string, std::vector<const Found*>> children_;  // by parent id; "" for the roots
};

}  // namespace

absl::StatusOr<RebuiltState> RebuildStateFromTablets(const std::string& data_dir) {
  const fs::path root(data_dir);
  std::error_code ec;
  if (fs::exists(root / "logs", ec) || fs::exists(root / "tablets", ec)) {
    return absl::FailedPreconditionError(
        StrCat(data_dir,
               " is a cell's data root (logs/, tablets/): a cell keeps its tablets "
               "in METADATA, not in state.pb"));
  }
  const fs::path tables_dir = root / "tables";
  if (!fs::is_directory(tables_dir, ec)) {
    return absl::NotFoundError(
        StrCat(tables_dir.string(), " does not exist: no tablets to rebuild from"));
  }
  std::vector<fs::path> table_dirs;
  for (auto it = fs::directory_iterator(tables_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2)) table_dirs.push_back(it->path());
  }
  if (ec)
    return absl::InternalError(StrCat("cannot list ", tables_dir.string(), ": ", ec.message()));
  std::sort(table_dirs.begin(), table_dirs.end());

  RebuiltState out;
  std::vector<std::string> problems;
  for (const fs::path& dir : table_dirs) {
    const std::string name = dir.filename().string();
    if (!ValidateName(name, "table").ok()) {
      problems.push_back(
          StrCat(dir.string(), ": not a table's directory (", name, " is no table name)"));
      continue;
    }
    TableSchema schema;
    absl::StatusOr<std::string> kept = ReadChecksummedFile((dir / "schema.pb").string(), 16 << 20);
    if (!kept.ok()) {
      problems.push_back(StrCat("table ", name, ": its schema: ", kept.status().message(),
                                absl::IsNotFound(kept.status())
                                    ? " (written by servers of this version; "
                                      "start the server once on its "
                                      "state.pb, or restore that)"
                                    : ""));
      continue;
    }
    if (!schema.ParseFromString(*kept) || schema.name() != name) {
      problems.push_back(StrCat("table ", name, ": ", (dir / "schema.pb").string(),
                                " is not this table's schema"));
      continue;
    }
    std::map<std::string, Found> tablets;
    bool readable = true;
    std::vector<fs::path> dirs;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      std::error_code e2;
      if (it->is_directory(e2)) dirs.push_back(it->path());
    }
    if (ec) return absl::InternalError(StrCat("cannot list ", dir.string(), ": ", ec.message()));
    for (const fs::path& tablet_dir : dirs) {
      const std::string id = tablet_dir.filename().string();
      if (!IsTabletId(name, id)) {
        out.notes.push_back(StrCat("table ", name, ": ", tablet_dir.string(), " left out: ", id,
                                   " is not a tablet id of this table"));
        continue;
      }
      absl::StatusOr<StoredTablet> stored = Tablet::ReadStored(tablet_dir.string());
      if (!stored.ok()) {
        problems.push_back(StrCat("table ", name, ": ", stored.status().message()));
        readable = false;
        continue;
      }
      tablets[id] = Found{id, *stored};
    }
    if (!readable) continue;
    if (tablets.empty()) {
      out.notes.push_back(StrCat("table ", name, " left out: it has no tablet directories"));
      continue;
    }
    std::vector<Found> ordered;
    if (!SplitTree(name, tablets).Resolve(&ordered, &out.notes, &problems)) continue;
    std::sort(ordered.begin(), ordered.end(), [](const Found& a, const Found& b) {
      return a.stored.start_row < b.stored.start_row;
    });
    std::string at;  // the first row not yet covered
    bool covered = true;
    for (size_t i = 0; i < ordered.size() && covered; ++i) {
      const Found& f = ordered[i];
      if (f.stored.start_row != at) {
        problems.push_back(StrCat(
            "table ", name, ": ",
            f.stored.start_row < at
                ? StrCat("tablet ", f.id, " overlaps the tablet before it at ",
                         RowName(f.stored.start_row, false))
                : StrCat("no tablet holds the rows from ", RowName(at, false), " to ",
                         RowName(f.stored.start_row, true), " (a tablet directory is missing)")));
        covered = false;
      }
      at = f.stored.end_row;
      if (covered && at.empty() && i + 1 < ordered.size()) {
        problems.push_back(StrCat("table ", name, ": tablet ", f.id,
                                  " reaches the end of the table but ", ordered[i + 1].id,
                                  " starts after it"));
        covered = false;
      }
    }
    if (covered && !at.empty()) {
      problems.push_back(StrCat("table ", name, ": no tablet holds the rows from ",
                                RowName(at, false), " to the end (a tablet directory is missing)"));
      covered = false;
    }
    if (!covered) continue;
    *out.state.add_tables() = schema;
    for (const Found& f : ordered) {
      TabletEntry* e = out.state.add_tablets();
      e->set_table(name);
      e->set_id(f.id);
      e->set_start_row(f.stored.start_row);
      e->set_end_row(f.stored.end_row);
      e->set_path(StrCat("tables/", name, "/", f.id));
      e->set_loaded(true);
    }
  }
  if (!problems.empty()) {
    return absl::FailedPreconditionError(
        StrCat("cannot rebuild the state of ", data_dir, ":\n  ", absl::StrJoin(problems, "\n  "),
               "\nrestore what is named, or move those directories out of ", tables_dir.string(),
               ", and run this again"));
  }
  return out;
}

}  // namespace megastore::storage
