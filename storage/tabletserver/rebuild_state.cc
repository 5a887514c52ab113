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
#include "storage/tablet/schema.h"
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
bool Tiles(std::vector<Found> parts, const std::string& start,
           const std::string& end) {
  std::sort(parts.begin(), parts.end(), [](const Found& a, const Found& b) {
    return a.stored.start_row < b.stored.start_row;
  });
  std::string at = start;
  for (const Found& p : parts) {
    if (p.stored.start_row != at) return false;
    at = p.stored.end_row;
    if (at.empty()) break;
  }
  return at == end;
}

bool DescendsFrom(const Found& f, const std::string& id) {
  return std::find(f.stored.ancestors.begin(), f.stored.ancestors.end(), id) !=
         f.stored.ancestors.end();
}

// Drops from `tablets` those superseded by a split that finished (a tablet
// whose present descendants cover its rows; the descendants split again in
// between included) and the descendants of one that did not (the tablet
// itself stays). Repeats until nothing changes.
void ResolveSplits(const std::string& table,
                   std::map<std::string, Found>* tablets,
                   std::vector<std::string>* notes) {
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [id, ancestor] : *tablets) {
      std::vector<Found>
          leaves;  // descendants not themselves split further here
      std::vector<std::string> descendants;
      for (const auto& [other_id, f] : *tablets) {
        if (!DescendsFrom(f, id)) continue;
        descendants.push_back(other_id);
        const bool split_again = std::any_of(
            tablets->begin(), tablets->end(),
            [&](const auto& e) { return DescendsFrom(e.second, other_id); });
        if (!split_again) leaves.push_back(f);
      }
      if (descendants.empty()) continue;
      const std::string kept_id = id;
      if (Tiles(leaves, ancestor.stored.start_row, ancestor.stored.end_row)) {
        std::vector<std::string> gone{kept_id};
        for (const std::string& d : descendants)
          if (std::none_of(leaves.begin(), leaves.end(),
                           [&](const Found& l) { return l.id == d; }))
            gone.push_back(d);
        std::vector<std::string> leaf_ids;
        for (const Found& l : leaves) leaf_ids.push_back(l.id);
        notes->push_back(StrCat(
            "table ", table, ": tablet", gone.size() > 1 ? "s " : " ",
            absl::StrJoin(gone, ", "), " left out: split into ",
            absl::StrJoin(leaf_ids, ", "),
            ", which cover the same rows (the left-out directories can go)"));
        for (const std::string& g : gone) tablets->erase(g);
      } else {
        notes->push_back(StrCat(
            "table ", table, ": tablet", descendants.size() > 1 ? "s " : " ",
            absl::StrJoin(descendants, ", "), " left out: split from ", kept_id,
            " but not covering its rows (an unfinished split; the directories "
            "can go)"));
        for (const std::string& d : descendants) tablets->erase(d);
      }
      changed = true;
      break;  // `tablets` changed under the loop
    }
  }
}

}  // namespace

absl::StatusOr<RebuiltState> RebuildStateFromTablets(
    const std::string& data_dir) {
  const fs::path root(data_dir);
  std::error_code ec;
  if (fs::exists(root / "logs", ec) || fs::exists(root / "tablets", ec)) {
    return absl::FailedPreconditionError(StrCat(
        data_dir,
        " is a cell's data root (logs/, tablets/): a cell keeps its tablets "
        "in METADATA, not in state.pb"));
  }
  const fs::path tables_dir = root / "tables";
  if (!fs::is_directory(tables_dir, ec)) {
    return absl::NotFoundError(StrCat(
        tables_dir.string(), " does not exist: no tablets to rebuild from"));
  }
  std::vector<fs::path> table_dirs;
  for (auto it = fs::directory_iterator(tables_dir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) table_dirs.push_back(it->path());
  }
  if (ec)
    return absl::InternalError(
        StrCat("cannot list ", tables_dir.string(), ": ", ec.message()));
  std::sort(table_dirs.begin(), table_dirs.end());

  RebuiltState out;
  std::vector<std::string> problems;
  for (const fs::path& dir : table_dirs) {
    const std::string name = dir.filename().string();
    if (!ValidateName(name, "table").ok()) {
      problems.push_back(StrCat(dir.string(), ": not a table's directory (",
                                name, " is no table name)"));
      continue;
    }
    TableSchema schema;
    absl::StatusOr<std::string> kept =
        ReadChecksummedFile((dir / "schema.pb").string(), 16 << 20);
    if (!kept.ok()) {
      problems.push_back(StrCat("table ", name,
                                ": its schema: ", kept.status().message(),
                                absl::IsNotFound(kept.status())
                                    ? " (written by servers of this version; "
                                      "start the server once on its "
                                      "state.pb, or restore that)"
                                    : ""));
      continue;
    }
    if (!schema.ParseFromString(*kept) || schema.name() != name) {
      problems.push_back(StrCat("table ", name, ": ",
                                (dir / "schema.pb").string(),
                                " is not this table's schema"));
      continue;
    }
    std::map<std::string, Found> tablets;
    bool readable = true;
    for (auto it = fs::directory_iterator(dir, ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      if (!it->is_directory(ec)) continue;
      const std::string id = it->path().filename().string();
      absl::StatusOr<StoredTablet> stored =
          Tablet::ReadStored(it->path().string());
      if (!stored.ok()) {
        problems.push_back(
            StrCat("table ", name, ": ", stored.status().message()));
        readable = false;
        continue;
      }
      tablets[id] = Found{id, *stored};
    }
    if (ec)
      return absl::InternalError(
          StrCat("cannot list ", dir.string(), ": ", ec.message()));
    if (!readable) continue;
    if (tablets.empty()) {
      out.notes.push_back(
          StrCat("table ", name, " left out: it has no tablet directories"));
      continue;
    }
    ResolveSplits(name, &tablets, &out.notes);
    std::vector<Found> ordered;
    for (auto& [id, f] : tablets) ordered.push_back(f);
    std::sort(ordered.begin(), ordered.end(),
              [](const Found& a, const Found& b) {
                return a.stored.start_row < b.stored.start_row;
              });
    std::string at;  // the first row not yet covered
    bool covered = true;
    for (const Found& f : ordered) {
      if (!covered) break;
      if (f.stored.start_row != at) {
        problems.push_back(StrCat(
            "table ", name, ": ",
            f.stored.start_row < at
                ? StrCat("tablet ", f.id, " overlaps the tablet before it at ",
                         RowName(f.stored.start_row, false))
                : StrCat("no tablet holds the rows from ", RowName(at, false),
                         " to ", RowName(f.stored.start_row, true),
                         " (a tablet directory is missing)")));
        covered = false;
        break;
      }
      at = f.stored.end_row;
      if (at.empty() && &f != &ordered.back()) {
        problems.push_back(StrCat("table ", name, ": tablet ", f.id,
                                  " reaches the end of the table but ",
                                  ordered.back().id, " starts after it"));
        covered = false;
      }
    }
    if (covered && !at.empty()) {
      problems.push_back(StrCat(
          "table ", name, ": no tablet holds the rows from ",
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
        StrCat("cannot rebuild the state of ", data_dir, ":\n  ",
               absl::StrJoin(problems, "\n  "),
               "\nrestore what is named, or move those directories out of ",
               tables_dir.string(), ", and run this again"));
  }
  return out;
}

}  // namespace megastore::storage
