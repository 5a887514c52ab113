#include "backup/restore.h"

#include <algorithm>
#include <map>
#include <set>

#include "backup/backup_file.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/replication_server.h"
#include "schema/layout.h"

namespace megastore::backup {

namespace {

std::string Describe(const replication::GroupRef& g) {
  return StrCat("entity group ", EscapeBytes(g.root()), " of ", g.table());
}

// Ends a ReadChunks walk early (not an error).
absl::Status Enough() { return absl::CancelledError("enough"); }
bool IsEnough(const absl::Status& s) { return absl::IsCancelled(s) && s.message() == "enough"; }

void Apply(const replication::LogEntry& entry, GroupState* state) {
  for (const replication::RowChange& rc : entry.changes()) {
    if (!rc.table().empty()) continue;  // a global index: rebuilt by the restore's writes
    GroupState::Columns& cols = state->rows[rc.row()];
    for (const replication::CellChange& c : rc.cells()) {
      if (c.delete_cells()) {
        cols.erase({c.family(), c.qualifier()});
      } else {
        cols[{c.family(), c.qualifier()}] = c.value();
      }
    }
    if (cols.empty()) state->rows.erase(rc.row());
  }
}

}  // namespace

absl::StatusOr<GroupState> FullState(const std::string& dir, const FileEntry& file,
                                     const OpenChunk& open) {
  GroupState state;
  state.base = state.position = file.header().to();
  state.timestamp = file.header().timestamp();
  MS_RETURN_IF_ERROR(ReadChunks(dir, file, open, [&](Chunk& c) {
    for (replication::SnapshotRow& r : *c.mutable_rows()) {
      GroupState::Columns cols;
      for (replication::SnapshotCell& cell : *r.mutable_cells())
        cols[{cell.family(), cell.qualifier()}] = std::move(*cell.mutable_value());
      if (!cols.empty()) state.rows[r.key()] = std::move(cols);
    }
    return absl::OkStatus();
  }));
  return state;
}

absl::StatusOr<ReplayReport> ReplayBackup(const std::string& dir, const OpenChunk& open) {
  absl::StatusOr<Manifest> m = LoadManifest(dir);
  if (!m.ok()) return m.status();
  std::map<std::string, std::vector<const FileEntry*>> fulls, logs;
  for (const FileEntry& f : m->files())
    (f.header().kind() == FULL ? fulls : logs)[replication::GroupKey(f.header().group())].push_back(
        &f);
  ReplayReport report;
  for (auto& [key, files] : fulls) {
    std::sort(files.begin(), files.end(),
              [](auto* a, auto* b) { return a->header().to() < b->header().to(); });
    if (files.front()->header().sealed() && !open) {
      report.problems.push_back(StrCat(Describe(files.front()->header().group()),
                                       ": sealed; replaying needs the datacenter that sealed "
                                       "it (give --config)"));
      continue;
    }
    report.groups++;
    std::vector<const FileEntry*>& chain = logs[key];
    std::sort(chain.begin(), chain.end(),
              [](auto* a, auto* b) { return a->header().from() < b->header().from(); });
    for (size_t i = 1; i < files.size(); ++i) {
      const FileHeader& earlier = files[i - 1]->header();
      const FileHeader& later = files[i]->header();
      // Only full backups the log files connect (a group can have a full
      // backup with no log shipped since the one before: nothing to check).
      uint64_t next = earlier.to() + 1;
      for (const FileEntry* l : chain)
        if (l->header().from() <= next && l->header().to() >= next) next = l->header().to() + 1;
      if (next <= later.to()) continue;
      StateOptions so;
      so.dir = dir;
      so.group = later.group();
      so.to_position = later.to();
      so.base_at_most = earlier.to();
      so.open = open;
      absl::StatusOr<GroupState> replayed = BuildState(so);
      const std::string what =
          StrCat(Describe(later.group()), ": replaying positions ", earlier.to() + 1, "..",
                 later.to(), " onto ", files[i - 1]->path());
      if (!replayed.ok()) {
        report.problems.push_back(StrCat(what, ": ", replayed.status().message()));
        continue;
      }
      report.replays++;
      report.entries += replayed->replayed;
      absl::StatusOr<GroupState> copied = FullState(dir, *files[i], open);
      if (!copied.ok()) {
        report.problems.push_back(std::string(copied.status().message()));
        continue;
      }
      if (replayed->rows == copied->rows) continue;
      // The first row that differs, for the report.
      std::string first;
      for (const auto& [row, cols] : replayed->rows) {
        auto it = copied->rows.find(row);
        if (it == copied->rows.end() || it->second != cols) {
          first = row;
          break;
        }
      }
      if (first.empty()) {
        for (const auto& [row, cols] : copied->rows)
          if (replayed->rows.count(row) == 0) {
            first = row;
            break;
          }
      }
      report.problems.push_back(StrCat(what, " does not give ", files[i]->path(),
                                       " (first differing row ", EscapeBytes(first), ")"));
    }
  }
  return report;
}

absl::StatusOr<GroupState> BuildState(const StateOptions& o) {
  absl::StatusOr<Manifest> m = LoadManifest(o.dir);
  if (!m.ok()) return m.status();
  const std::string key = replication::GroupKey(o.group);
  std::vector<const FileEntry*> fulls, logs;
  for (const FileEntry& f : m->files()) {
    if (replication::GroupKey(f.header().group()) != key) continue;
    (f.header().kind() == FULL ? fulls : logs).push_back(&f);
  }
  if (fulls.empty())
    return absl::NotFoundError(
        StrCat("the backup in ", o.dir, " holds no full backup of ", Describe(o.group)));
  std::sort(fulls.begin(), fulls.end(),
            [](auto* a, auto* b) { return a->header().to() < b->header().to(); });
  std::sort(logs.begin(), logs.end(),
            [](auto* a, auto* b) { return a->header().from() < b->header().from(); });

  // The base: the latest full backup at or before the point, and before
  // every entry to leave out.
  const uint64_t first_skip = o.skip.empty() ? UINT64_MAX : *o.skip.begin();
  const FileEntry* base = nullptr;
  for (const FileEntry* f : fulls) {
    const FileHeader& h = f->header();
    if (o.to_position && h.to() > *o.to_position) continue;
    if (o.to_time && h.timestamp() > *o.to_time) continue;
    if (h.to() >= first_skip) continue;
    if (o.base_at_most && h.to() > *o.base_at_most) continue;
    base = f;
  }
  if (base == nullptr) {
    const FileHeader& first = fulls.front()->header();
    if (first.to() >= first_skip)
      return absl::InvalidArgumentError(StrCat(
          "position ", first_skip, " (to leave out) is inside the first full backup of ",
          Describe(o.group), " (position ", first.to(), "): no earlier state to replay from"));
    return absl::InvalidArgumentError(StrCat(
        "the backup's first full backup of ", Describe(o.group), " is at position ", first.to(),
        " (commit time ", first.timestamp(), " µs): it cannot go back further than that"));
  }

  absl::StatusOr<GroupState> full = FullState(o.dir, *base, o.open);
  if (!full.ok()) return full.status();
  GroupState state = std::move(*full);

  // The log after it, entry by entry, up to the point.
  uint64_t next = state.position + 1;
  bool stopped = false;  // reached the point
  for (const FileEntry* f : logs) {
    if (stopped) break;
    if (f->header().to() < next) continue;
    if (f->header().from() > next) break;  // a gap: the backup ends here for this group
    absl::Status s = ReadChunks(o.dir, *f, o.open, [&](Chunk& c) -> absl::Status {
      for (const LogItem& item : c.entries()) {
        if (item.position() < next) continue;
        if (item.position() != next)
          return absl::DataLossError(StrCat("backup file ", f->path(), ": position ",
                                            item.position(), " where ", next, " belongs"));
        if (o.to_position && item.position() > *o.to_position) {
          stopped = true;
          return Enough();
        }
        replication::LogEntry entry;
        if (!entry.ParseFromString(item.value()))
          return absl::DataLossError(StrCat("backup file ", f->path(), ": the entry of position ",
                                            item.position(), " does not parse"));
        if (o.to_time && !entry.noop() && entry.timestamp() > *o.to_time) {
          stopped = true;
          return Enough();
        }
        if (o.skip.count(item.position()) > 0) {
          state.skipped++;
        } else {
          Apply(entry, &state);
          state.replayed++;
        }
        state.position = item.position();
        if (entry.timestamp() > 0) state.timestamp = entry.timestamp();
        ++next;
      }
      return absl::OkStatus();
    });
    if (!s.ok() && !IsEnough(s)) return s;
  }
  // The replay must have reached the point, not run out of files short of
  // it (a gap in the log files, or the end of the backup): an earlier
  // state written back would undo newer writes.
  const auto short_of = [&](const std::string& point) {
    return absl::InvalidArgumentError(
        StrCat("the backup's log of ", Describe(o.group), " goes from the full backup at position ",
               state.base, " only through position ", state.position, "; it cannot restore to ",
               point, " (run msadmin backup log first, or choose an earlier point)"));
  };
  if (o.to_position && state.position < *o.to_position && !stopped)
    return short_of(StrCat("position ", *o.to_position));
  if (o.to_time && !o.to_position && !stopped)
    // Entries after the last one backed up may be at or before the time.
    return short_of(StrCat("time ", *o.to_time, " µs (no entry after it is backed up)"));
  if (!o.to_position && !o.to_time) {
    // The latest: as far as the group's files go.
    uint64_t latest = 0;
    for (const FileEntry* f : fulls) latest = std::max(latest, f->header().to());
    for (const FileEntry* f : logs) latest = std::max(latest, f->header().to());
    if (state.position < latest) return short_of(StrCat("its latest backed-up position ", latest));
  }
  for (uint64_t p : o.skip) {
    if (p > state.position)
      return absl::InvalidArgumentError(StrCat("position ", p,
                                               " (to leave out) is after the restore point, "
                                               "position ",
                                               state.position));
  }
  return state;
}

absl::StatusOr<RestoreReport> RestoreGroup(const RestoreOptions& o) {
  if (o.db == nullptr) return absl::InvalidArgumentError("a restore needs a cluster to write to");
  const schema::Layout& layout = o.db->layout();
  const schema::TableDescriptor* root = layout.schema().FindTable(o.root_table);
  if (root == nullptr || !root->entity_group_root())
    return absl::InvalidArgumentError(StrCat(
        o.root_table, " is not an entity group root table of schema ", layout.entity_table()));
  absl::StatusOr<std::string> group_row = layout.GroupRow(*root, o.root_key);
  if (!group_row.ok()) return group_row.status();
  if (*group_row != o.state.group.root() || layout.entity_table() != o.state.group.table())
    return absl::InvalidArgumentError("the group to restore and the backup's group differ");
  std::vector<const schema::TableDescriptor*> tables = {root};
  for (const schema::TableDescriptor& t : layout.schema().schema().tables())
    if (!t.entity_group_root() && t.root_table() == root->name()) tables.push_back(&t);

  RestoreReport report;
  absl::StatusOr<GroupState> state = BuildState(o.state);
  if (!state.ok()) return state.status();

  // The entities the group had at the point, by row.
  struct Target {
    const schema::TableDescriptor* table;
    schema::Entity entity;
  };
  std::map<std::string, Target> target;
  for (auto& [row, cols] : state->rows) {
    const schema::TableDescriptor* table = nullptr;
    if (row == *group_row) {
      table = root;
    } else {
      for (size_t i = 1; i < tables.size() && table == nullptr; ++i) {
        absl::StatusOr<storage::RowRange> range = layout.TableRange(*tables[i], o.root_key);
        if (range.ok() && row >= range->start && (range->end.empty() || row < range->end))
          table = tables[i];
      }
    }
    if (table == nullptr) continue;  // index entries, queues, two-phase records
    storage::Row r;
    r.key = row;
    for (auto& [col, value] : cols)
      r.cells.push_back(storage::Cell{col.first, col.second, 0, value});
    absl::StatusOr<schema::Entity> e = layout.EntityFromRow(*table, r);
    if (!e.ok())
      return absl::DataLossError(StrCat("the backup's row ", EscapeBytes(row), " of table ",
                                        table->name(), " does not decode: ", e.status().message()));
    // A row with only other cells (inline index entries of a deleted
    // parent, say) holds no entity.
    if (e->fields.empty()) continue;
    target.emplace(row, Target{table, std::move(*e)});
  }
  report.state = std::move(*state);
  report.state.rows.clear();

  // The plan: read every live entity of the group once, at one position.
  struct Step {
    std::string row;
    const schema::TableDescriptor* table;
    std::vector<schema::KeyValue> key;
    const schema::Entity* put = nullptr;  // nullptr: delete
  };
  std::vector<Step> plan;
  {
    absl::StatusOr<std::unique_ptr<Transaction>> txn = o.db->Begin(o.root_table, o.root_key);
    if (!txn.ok()) return txn.status();
    std::set<std::string> seen;
    for (const schema::TableDescriptor* t : tables) {
      txn::QueryOptions q;
      do {
        absl::StatusOr<txn::QueryResult> page = (*txn)->Query(t->name(), o.root_key, q);
        if (!page.ok()) return page.status();
        for (const schema::Entity& e : page->entities) {
          absl::StatusOr<std::vector<schema::KeyValue>> k = layout.KeyOf(*t, e);
          if (!k.ok()) return k.status();
          absl::StatusOr<std::string> row = layout.EntityRow(*t, *k);
          if (!row.ok()) return row.status();
          seen.insert(*row);
          auto it = target.find(*row);
          if (it == target.end()) {
            plan.push_back(Step{*row, t, std::move(*k), nullptr});
          } else if (schema::Equal(e, it->second.entity)) {
            report.unchanged++;
          } else {
            plan.push_back(Step{*row, t, std::move(*k), &it->second.entity});
          }
        }
        q.cursor = page->cursor;
      } while (!q.cursor.empty());
    }
    for (const auto& [row, t] : target) {
      if (seen.count(row) > 0) continue;
      absl::StatusOr<std::vector<schema::KeyValue>> k = layout.KeyOf(*t.table, t.entity);
      if (!k.ok()) return k.status();
      plan.push_back(Step{row, t.table, std::move(*k), &t.entity});
    }
    report.live_before = report.last_commit = (*txn)->position().position;
  }
  if (o.dry_run) {
    for (const Step& st : plan) (st.put != nullptr ? report.puts : report.deletes)++;
    return report;
  }

  // Then the plan, `batch` writes per commit. Each batch reads its entities
  // again (a Put maintains the indexes from what is there).
  const size_t batch = static_cast<size_t>(std::max(1, o.batch));
  constexpr int kMaxConflicts = 20;
  int conflicts = 0;
  auto written_meanwhile = [&](const std::string& why) {
    return absl::AbortedError(
        StrCat(Describe(o.state.group), " was written by someone else while the restore ran (", why,
               "): ", report.puts, " puts and ", report.deletes, " deletes of ", plan.size(),
               " are committed; run the restore again to finish it, or force it to write over "
               "concurrent writers"));
  };
  for (size_t next = 0; next < plan.size();) {
    const size_t end = std::min(plan.size(), next + batch);
    absl::StatusOr<std::unique_ptr<Transaction>> txn = o.db->Begin(o.root_table, o.root_key);
    if (!txn.ok()) return txn.status();
    uint64_t puts = 0, deletes = 0;
    for (size_t i = next; i < end; ++i) {
      const Step& st = plan[i];
      // Unforced, only the first entity is read: the group's position then
      // says whether anyone else wrote since the plan or the last commit,
      // and if nobody did, the plan still holds. Forced, each is read, so
      // what a concurrent writer already made equal is left alone.
      std::optional<schema::Entity> now;
      if (i == next || o.force) {
        absl::StatusOr<std::optional<schema::Entity>> got = (*txn)->Get(st.table->name(), st.key);
        if (!got.ok()) return got.status();
        now = std::move(*got);
        if (!o.force && (*txn)->position().position != report.last_commit)
          return written_meanwhile(StrCat("it is at position ", (*txn)->position().position,
                                          ", the restore's last commit was ", report.last_commit));
      }
      if (o.force) {
        if (st.put != nullptr ? (now && schema::Equal(*now, *st.put)) : !now) continue;
      }
      if (st.put != nullptr) {
        MS_RETURN_IF_ERROR((*txn)->Put(st.table->name(), *st.put));
        ++puts;
      } else {
        MS_RETURN_IF_ERROR((*txn)->Delete(st.table->name(), st.key));
        ++deletes;
      }
    }
    if (puts + deletes == 0) {
      next = end;
      continue;
    }
    absl::StatusOr<CommitInfo> info = (*txn)->Commit();
    if (!info.ok()) {
      if (absl::IsAborted(info.status())) {
        if (!o.force) return written_meanwhile(std::string(info.status().message()));
        if (++conflicts <= kMaxConflicts) {
          // The same batch again, after a pause that grows (a busy writer
          // wins positions back to back).
          o.db->env()->SleepFor(absl::Milliseconds(5 * std::min(conflicts, 10)) +
                                absl::Microseconds(o.db->env()->Random64() % 5000));
          continue;
        }
      }
      return absl::Status(
          info.status().code(),
          StrCat("restore of ", Describe(o.state.group), ": a commit of ", puts + deletes,
                 " writes failed (", report.puts, " puts and ", report.deletes,
                 " deletes committed before it; running the restore again "
                 "finishes it): ",
                 info.status().message()));
    }
    report.commits++;
    report.puts += puts;
    report.deletes += deletes;
    report.last_commit = info->position;
    next = end;
    if (o.on_commit) o.on_commit(report);
  }
  return report;
}

}  // namespace megastore::backup
