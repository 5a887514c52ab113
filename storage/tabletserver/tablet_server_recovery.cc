// Tablet server recovery: replaying the commit log into the tablets after
// a restart, setting leftovers of unfinished operations aside, and (in a
// cell) assigning, loading and unloading tablets with their log pieces.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/commitlog/log_format.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_server_internal.h"

namespace megastore::storage {

namespace fs = std::filesystem;

using tablet_server_internal::kStateFile;
using tablet_server_internal::kTableSchemaFile;

absl::Status TabletServer::Recover() {
  if (cell_mode()) {
    // Nothing to recover: the master assigns tablets, and each assignment
    // replays what the tablet's earlier servers' logs held.
    MS_RETURN_IF_ERROR(ValidateName(options_.cell_log_name, "commit log"));
    commitlog::CommitLogOptions log_options;
    log_options.dir = (fs::path(options_.data_dir) / "logs" / options_.cell_log_name).string();
    if (fs::exists(log_options.dir)) {
      return absl::AlreadyExistsError(
          StrCat("commit log ", log_options.dir,
                 " exists: each tablet server incarnation needs a new log name"));
    }
    log_options.segment_bytes = options_.log_segment_bytes;
    log_options.sync = options_.sync_log;
    log_options.preallocate = options_.preallocate_log;
    log_options.inline_writes = options_.inline_commit_log;
    MS_ASSIGN_OR_RETURN(log_, commitlog::CommitLog::Open(log_options));
    log_adapter_ = std::make_unique<LogAdapter>(log_.get());
    return absl::OkStatus();
  }
  MS_RETURN_IF_ERROR(LoadState());
  {
    absl::MutexLock lock(&mu_);
    RefreshReplicatedLocked();
  }
  {
    // Each table's schema kept beside its tablets too (data directories
    // from before kept it only in state.pb); a table whose directory is
    // gone is not given an empty one.
    absl::MutexLock lock(&mu_);
    for (const TableSchema& t : state_.tables()) {
      const fs::path dir = fs::path(options_.data_dir) / "tables" / t.name();
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      absl::StatusOr<std::string> kept = ReadChecksummedFile((dir / kTableSchemaFile).string());
      if (kept.ok() && *kept == t.SerializeAsString()) continue;
      // Not fatal: only a rebuild of a lost state.pb needs it.
      if (absl::Status s = SaveTableSchema(t); !s.ok())
        MS_LOG_WARN("table {}: {}", t.name(), s.ToString());
    }
  }
  commitlog::CommitLogOptions log_options;
  log_options.dir = (fs::path(options_.data_dir) / "commitlog").string();
  log_options.segment_bytes = options_.log_segment_bytes;
  log_options.sync = options_.sync_log;
  log_options.preallocate = options_.preallocate_log;
  log_options.inline_writes = options_.inline_commit_log;
  log_options.lazy_sync_delay = options_.lazy_sync_delay;
  MS_ASSIGN_OR_RETURN(log_, commitlog::CommitLog::Open(log_options));
  log_adapter_ = std::make_unique<LogAdapter>(log_.get());
  if (!log_->recovery_note().empty()) MS_LOG_WARN("{}", log_->recovery_note());
  const bool log_was_missing = log_->fresh();

  absl::MutexLock lock(&mu_);
  uint64_t replay_from = UINT64_MAX;
  std::map<std::string, std::shared_ptr<Tablet>> replaying;
  std::vector<std::string> behind_the_log;  // tablets whose redo point the log does not reach
  uint64_t max_redo = 0;
  for (const TabletEntry& e : state_.tablets()) {
    if (!e.loaded()) continue;
    if (!fs::exists(OptionsFor(e).path)) {
      // Never recreated empty in its place: its rows would silently vanish.
      const std::string why =
          StrCat("tablet ", e.id(), " of table ", e.table(), ": its directory ", OptionsFor(e).path,
                 " is missing; restore it, or unload the tablet");
      load_errors_[e.id()] = why;
      MS_LOG_ERROR("{}", why);
      continue;
    }
    absl::StatusOr<std::shared_ptr<Tablet>> t = OpenTabletLocked(e);
    if (!t.ok()) {
      load_errors_[e.id()] = std::string(t.status().ToString());
      MS_LOG_ERROR("tablet {} not loaded: {}", e.id(), t.status().ToString());
      continue;
    }
    const uint64_t redo = (*t)->recovered_redo_point();
    max_redo = std::max(max_redo, redo);
    if (log_was_missing || redo > log_->last_lsn()) {
      behind_the_log.push_back(StrCat(e.id(), " (table ", e.table(), ", redo point ", redo, ")"));
    }
    // A damaged log region this tablet needs keeps it unloaded.
    std::string refusal;
    for (const commitlog::LogGap& gap : log_->gaps()) {
      if (gap.next_good_lsn == 0 || redo + 1 < gap.next_good_lsn) {
        refusal =
            StrCat("commit log ", gap.segment, " is damaged at offset ", gap.offset, " after LSN ",
                   gap.last_good_lsn, " and tablet ", e.id(), " needs records after LSN ", redo,
                   "; restore the segment, or unload and rebuild the tablet");
      }
    }
    if (!refusal.empty()) {
      load_errors_[e.id()] = refusal;
      MS_LOG_ERROR("{}", refusal);
      continue;
    }
    replay_from = std::min(replay_from, redo);
    replaying[e.id()] = *t;
    loaded_[e.id()] = Loaded{e, *t};
  }
  if (!behind_the_log.empty()) {
    const std::string what =
        StrCat("commit log ", log_options.dir,
               log_was_missing ? " is missing" : StrCat(" ends at LSN ", log_->last_lsn()),
               " but these tablets were written through it: ", absl::StrJoin(behind_the_log, ", "),
               ". Writes acknowledged after their last flush are lost with it");
    if (!options_.accept_log_loss) {
      return absl::DataLossError(
          StrCat(what,
                 ". Restore the log, or start with --accept-log-loss to serve what the "
                 "tablets hold"));
    }
    MS_LOG_ERROR("{}; starting anyway (--accept-log-loss), new LSNs from {}", what, max_redo + 1);
    // Never again below a redo point: a write logged there would be
    // skipped at the next replay.
    MS_RETURN_IF_ERROR(log_->AdvanceTo(max_redo + 1));
  }
  std::set<std::string> ids_in_log;  // of tablets not replayed (not in state.pb, or not loaded)
  if (!replaying.empty()) {
    uint64_t replayed = 0;
    MS_RETURN_IF_ERROR(log_->Replay(replay_from, [&](const commitlog::Record& r) -> absl::Status {
      auto it = replaying.find(std::string(r.tablet_id));
      if (it == replaying.end()) {
        if (ids_in_log.size() < 100000) ids_in_log.emplace(r.tablet_id);
        return absl::OkStatus();
      }
      if (r.lsn <= it->second->recovered_redo_point()) {
        return absl::OkStatus();
      }
      ++replayed;
      absl::Status s = it->second->ReplayLogRecord(r.lsn, r.payload);
      if (!s.ok()) {
        return absl::DataLossError(
            StrCat("replaying LSN ", r.lsn, " into tablet ", it->first, ": ", s.ToString()));
      }
      return absl::OkStatus();
    }));
    for (auto& [id, t] : replaying) MS_RETURN_IF_ERROR(t->PersistLogPosition(true).status());
    if (replayed > 0) MS_LOG_INFO("recovered {} commit log records", replayed);
  }
  MoveLeftoversAsideLocked(ids_in_log);
  return absl::OkStatus();
}

bool IsTabletId(std::string_view table, std::string_view id) {
  if (id.size() != table.size() + 17 || !id.starts_with(table) || id[table.size()] != '-')
    return false;
  return std::all_of(id.end() - 16, id.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

void TabletServer::MoveLeftoversAsideLocked(const std::set<std::string>& ids_in_log) {
  std::set<std::string> tables, listed, ancestors_of_loaded;
  for (const TableSchema& t : state_.tables()) tables.insert(t.name());
  for (const TabletEntry& e : state_.tablets()) listed.insert(e.id());
  for (const auto& [id, l] : loaded_)
    ancestors_of_loaded.insert(l.tablet->ancestors().begin(), l.tablet->ancestors().end());
  const fs::path aside_dir = fs::path(options_.data_dir) / "leftovers";
  auto move_aside = [&](const fs::path& dir, std::string_view why) {
    std::error_code ec;
    fs::create_directories(aside_dir, ec);
    const fs::path to =
        aside_dir / StrCat(env_->NowMicros() / 1000000, "-", dir.parent_path().filename().string(),
                           "-", dir.filename().string());
    if (!ec) fs::rename(dir, to, ec);
    if (ec) {
      MS_LOG_WARN("{}: {}; could not move it to {}: {}", dir.string(), why, to.string(),
                  ec.message());
    } else {
      MS_LOG_WARN("moved {} to {}: {} (delete it once satisfied nothing in it is needed)",
                  dir.string(), to.string(), why);
    }
  };
  std::error_code ec;
  std::vector<fs::path> table_dirs;
  for (auto it = fs::directory_iterator(fs::path(options_.data_dir) / "tables", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2)) table_dirs.push_back(it->path());
  }
  for (const fs::path& table_dir : table_dirs) {
    const std::string table = table_dir.filename().string();
    if (!tables.contains(table)) {
      // A deleted table whose directory a crash or an error left.
      move_aside(table_dir, StrCat("table ", table, " is not in ", kStateFile, " (deleted)"));
      continue;
    }
    std::vector<fs::path> dirs;
    for (auto it = fs::directory_iterator(table_dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      std::error_code e2;
      if (it->is_directory(e2) && !listed.contains(it->path().filename().string()))
        dirs.push_back(it->path());
    }
    for (const fs::path& dir : dirs) {
      const std::string id = dir.filename().string();
      if (!IsTabletId(table, id)) {
        move_aside(dir, "not a tablet (a split child cut short, or not ours)");
        continue;
      }
      if (ancestors_of_loaded.contains(id)) {
        move_aside(dir, "a split tablet whose children serve its rows");
        continue;
      }
      absl::StatusOr<StoredTablet> stored = Tablet::ReadStored(dir.string());
      if (!stored.ok() || stored->ancestors.empty()) {
        MS_LOG_WARN("{} is not a tablet of {}; left alone{}", dir.string(), kStateFile,
                    stored.ok() ? "" : StrCat(" (", stored.status().message(), ")"));
        continue;
      }
      auto parent = loaded_.find(stored->ancestors.front());
      if (parent == loaded_.end()) {
        MS_LOG_WARN("{}: split from tablet {}, which is not loaded here; left alone", dir.string(),
                    stored->ancestors.front());
        continue;
      }
      if (ids_in_log.contains(id) ||
          stored->redo_point > parent->second.tablet->recovered_redo_point()) {
        MS_LOG_ERROR(
            "{}: a split child of tablet {} that {} holds writes {} does not know; left alone "
            "(restore "
            "the newer {}?)",
            dir.string(), parent->first,
            ids_in_log.contains(id) ? "the commit log" : "its own data", kStateFile, kStateFile);
        continue;
      }
      move_aside(dir, StrCat("a split of tablet ", parent->first, " that did not finish"));
    }
  }
}

absl::Status TabletServer::AssignTablet(const TabletEntry& assigned, const TableSchema& schema,
                                        bool create, const std::string& for_log) {
  if (!cell_mode())
    return absl::FailedPreconditionError("AssignTablet: this tablet server is not in a cell");
  if (!for_log.empty() && for_log != options_.cell_log_name) {
    return absl::FailedPreconditionError(
        StrCat("AssignTablet: tablet ", assigned.id(), " was assigned to the incarnation with log ",
               for_log, "; this server's log is ", options_.cell_log_name));
  }
  MS_RETURN_IF_ERROR(ValidateName(assigned.id(), "tablet id"));
  MS_ASSIGN_OR_RETURN(auto compiled, CompiledSchema::Compile(schema));
  TabletEntry entry = assigned;
  entry.set_table(schema.name());
  entry.set_path(TabletPath(schema.name(), entry.id()));
  entry.set_loaded(true);
  TabletOptions o;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = loaded_.find(entry.id()); it != loaded_.end()) {
      if (it->second.entry.start_row() != entry.start_row() ||
          it->second.entry.end_row() != entry.end_row()) {
        return absl::FailedPreconditionError(
            StrCat("tablet ", entry.id(), " is served here with another row range"));
      }
      return absl::OkStatus();
    }
    // A split's or merge's child is opened by that operation here; an
    // assignment racing it (the master seeing the child's METADATA row
    // first) would open it twice.
    if (creating_.count(entry.id())) {
      return absl::UnavailableError(
          StrCat("tablet ", entry.id(), " is being created here by a split or merge"));
    }
    if (!assigning_.insert(entry.id()).second) {
      return absl::UnavailableError(StrCat("tablet ", entry.id(), " is being loaded"));
    }
    const TableSchema* old = FindTableLocked(schema.name());
    if (old == nullptr) {
      *state_.add_tables() = schema;
    } else if (old->SerializeAsString() != schema.SerializeAsString()) {
      for (auto& [id, l] : loaded_) {
        if (l.entry.table() == schema.name()) {
          if (absl::Status s = l.tablet->UpdateSchema(schema); !s.ok()) {
            assigning_.erase(entry.id());
            return s;
          }
        }
      }
      for (TableSchema& t : *state_.mutable_tables()) {
        if (t.name() == schema.name()) t = schema;
      }
    }
    RefreshReplicatedLocked();
    o = OptionsFor(entry);
  }
  // Opening and recovering happen outside the server's lock: the other
  // tablets keep serving meanwhile.
  absl::Status status;
  std::shared_ptr<Tablet> tablet;
  if (!create && !fs::exists(fs::path(o.path) / "CURRENT")) {
    status = absl::DataLossError(StrCat("tablet ", entry.id(), " has no data at ", o.path,
                                        " (the cell's data root must be shared by every server)"));
  } else {
    absl::StatusOr<std::unique_ptr<Tablet>> opened = Tablet::Open(o, schema, &resources_, env_);
    if (opened.ok()) {
      tablet = std::move(*opened);
      status = RecoverAssigned(entry, tablet.get());
    } else {
      status = opened.status();
    }
  }
  absl::MutexLock lock(&mu_);
  assigning_.erase(entry.id());
  if (!status.ok()) {
    load_errors_[entry.id()] = status.ToString();
    return status;
  }
  load_errors_.erase(entry.id());
  *state_.add_tablets() = entry;
  loaded_[entry.id()] = Loaded{entry, std::move(tablet)};
  return absl::OkStatus();
}

absl::Status TabletServer::RecoverAssigned(const TabletEntry& entry, Tablet* tablet) {
  // recovered/<id>/<log name>: the records of this tablet that a dead
  // server's log held, in LSN order (the master's log split). Only the log
  // the tablet's redo point counts in can hold records it lacks: the pieces
  // of older logs were replayed before it adopted that log.
  const fs::path pieces = fs::path(options_.data_dir) / "recovered" / entry.id();
  uint64_t replayed = 0;
  if (fs::exists(pieces)) {
    for (const auto& f : fs::directory_iterator(pieces)) {
      const std::string name = f.path().filename().string();
      if (!f.is_regular_file() || name != tablet->recovered_redo_log()) continue;
      MS_ASSIGN_OR_RETURN(std::string data, ReadFileToString(f.path().string()));
      std::string_view in = data;
      const uint64_t redo = tablet->recovered_redo_point();
      while (!in.empty()) {
        commitlog::Record r;
        size_t n = 0;
        if (commitlog::ParseRecord(in, &r, &n) != commitlog::ParseResult::kOk) {
          return absl::DataLossError(StrCat("log piece ", f.path().string(),
                                            " is damaged at offset ", data.size() - in.size()));
        }
        in.remove_prefix(n);
        if (r.tablet_id != entry.id() || r.lsn <= redo) continue;
        if (absl::Status s = tablet->ReplayLogRecord(r.lsn, r.payload); !s.ok()) {
          return absl::DataLossError(
              StrCat("replaying LSN ", r.lsn, " of ", f.path().string(), ": ", s.ToString()));
        }
        ++replayed;
      }
    }
  }
  MS_RETURN_IF_ERROR(tablet->AdoptLog(options_.cell_log_name));
  std::error_code ec;
  fs::remove_all(pieces, ec);
  if (replayed > 0)
    MS_LOG_INFO("tablet {}: replayed {} records of a dead server's log", entry.id(), replayed);
  return absl::OkStatus();
}

absl::Status TabletServer::LoadTablet(std::string_view id) {
  if (cell_mode())
    return absl::FailedPreconditionError("in a cell the master assigns tablets (AssignTablet)");
  absl::MutexLock lock(&mu_);
  TabletEntry* e = FindEntryLocked(id);
  if (e == nullptr) return absl::NotFoundError(StrCat("no tablet ", id));
  if (loaded_.contains(std::string(id))) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Tablet> t, OpenTabletLocked(*e));
  if (load_errors_.contains(e->id())) {
    // It failed to load at start, so it was never recovered: replay its log
    // records now (DataLoss if the log cannot provide them). A tablet
    // unloaded by UnloadTablet was flushed and needs nothing.
    const uint64_t redo = t->recovered_redo_point();
    absl::Status s = log_->Replay(redo, [&](const commitlog::Record& r) -> absl::Status {
      if (r.tablet_id != e->id() || r.lsn <= redo) return absl::OkStatus();
      return t->ReplayLogRecord(r.lsn, r.payload);
    });
    if (s.ok()) s = t->PersistLogPosition(true).status();
    if (!s.ok()) {
      load_errors_[e->id()] = s.ToString();
      return s;
    }
  }
  TabletServerState next = state_;
  for (TabletEntry& n : *next.mutable_tablets()) {
    if (n.id() == id) n.set_loaded(true);
  }
  MS_RETURN_IF_ERROR(CommitStateLocked(std::move(next)));
  e = FindEntryLocked(id);
  loaded_[e->id()] = Loaded{*e, t};
  load_errors_.erase(e->id());
  return absl::OkStatus();
}

absl::Status TabletServer::UnloadTablet(std::string_view id, std::string_view for_log) {
  if (!for_log.empty() && for_log != options_.cell_log_name) {
    return absl::FailedPreconditionError(StrCat("UnloadTablet: tablet ", id,
                                                " was served by the incarnation with log ", for_log,
                                                "; this server's log is ", options_.cell_log_name));
  }
  std::shared_ptr<Tablet> t;
  TabletEntry entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(std::string(id));
    if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
    t = it->second.tablet;
    entry = it->second.entry;
    // From here on its rows answer Unavailable.
    loaded_.erase(it);
    if (cell_mode()) {
      auto* tablets = state_.mutable_tablets();
      for (int i = 0; i < tablets->size(); ++i) {
        if (tablets->Get(i).id() == id) {
          tablets->DeleteSubrange(i, 1);
          break;
        }
      }
    }
  }
  // Outside the server lock: let writes in flight finish, refuse new ones,
  // then flush, so everything acknowledged is in the tablet's SSTables (an
  // unloaded tablet is never replayed from the log); only then is it
  // recorded as unloaded.
  t->StopWrites();
  absl::Status s = t->PersistLogPosition(true).status();
  if (cell_mode()) return s;
  absl::MutexLock lock(&mu_);
  if (s.ok()) {
    TabletServerState next = state_;
    for (TabletEntry& n : *next.mutable_tablets()) {
      if (n.id() == id) n.set_loaded(false);
    }
    s = CommitStateLocked(std::move(next));
  }
  if (!s.ok()) {
    // Still loaded, as state.pb says: it serves on.
    t->ResumeWrites();
    loaded_[entry.id()] = Loaded{entry, t};
  }
  return s;
}

}  // namespace megastore::storage
