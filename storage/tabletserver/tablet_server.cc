#include "storage/tabletserver/tablet_server.h"

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

namespace megastore::storage {

namespace fs = std::filesystem;

class TabletServer::LogAdapter : public TabletLog {
 public:
  explicit LogAdapter(commitlog::CommitLog* log) : log_(log) {}
  absl::StatusOr<uint64_t> AppendAsync(std::string_view tablet_id, std::string_view record,
                                       Callback done) override {
    return log_->AppendAsync(tablet_id, record, std::move(done));
  }
  absl::StatusOr<uint64_t> Append(std::string_view tablet_id, std::string_view record) override {
    return log_->Append(tablet_id, record);
  }
  uint64_t last_lsn() const override { return log_->last_lsn(); }

 private:
  commitlog::CommitLog* log_;
};

namespace {

constexpr char kStateFile[] = "state.pb";
constexpr char kTableSchemaFile[] = "schema.pb";

bool Covers(const TabletEntry& e, std::string_view row) {
  return row >= e.start_row() && (e.end_row().empty() || row < e.end_row());
}

constexpr char kNotServing[] = "not serving";

}  // namespace

absl::Status NotServingError(std::string_view what) {
  return absl::UnavailableError(StrCat(kNotServing, ": ", what));
}

bool IsNotServing(const absl::Status& status) {
  return absl::IsUnavailable(status) && absl::StartsWith(status.message(), kNotServing);
}

TabletServer::TabletServer(const TabletServerOptions& options, Env* env)
    : options_(options), env_(env), resources_(options.resources) {}

TabletServer::~TabletServer() {
  {
    TimerState& t = *timer_state_;
    absl::MutexLock lock(&t.mu);
    t.stopping = true;
    if (t.timer != 0) env_->Cancel(t.timer);
    // A maintenance round that already started finishes first.
    t.mu.Await(absl::Condition(
        +[](TimerState* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !s->running; }, &t));
  }
  absl::MutexLock m(&maintenance_mu_);
  absl::MutexLock lock(&mu_);
  for (auto& [id, l] : loaded_) {
    // Closing flushes the memtables (the commit log holds them anyway).
    l.tablet.reset();
  }
  loaded_.clear();
}

absl::StatusOr<std::unique_ptr<TabletServer>> TabletServer::Open(const TabletServerOptions& options,
                                                                 Env* env) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data directory is empty");
  MS_RETURN_IF_ERROR(CreatePrivateDirectories(options.data_dir));
  std::unique_ptr<TabletServer> server(new TabletServer(options, env));
  MS_RETURN_IF_ERROR(server->Recover());
  server->ScheduleMaintenance();
  return server;
}

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

absl::StatusOr<std::shared_ptr<Tablet>> TabletServer::OpenTabletLocked(const TabletEntry& e) {
  const TableSchema* schema = FindTableLocked(e.table());
  if (schema == nullptr)
    return absl::DataLossError(StrCat("tablet ", e.id(), " has no table ", e.table()));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<Tablet> t,
                      Tablet::Open(OptionsFor(e), *schema, &resources_, env_));
  return std::shared_ptr<Tablet>(std::move(t));
}

TabletOptions TabletServer::OptionsFor(const TabletEntry& e) const {
  TabletOptions o;
  o.path = (fs::path(options_.data_dir) / e.path()).string();
  o.start_row = e.start_row();
  o.end_row = e.end_row();
  o.max_value_bytes = options_.max_value_bytes;
  o.tuning = options_.tuning;
  o.log = log_adapter_.get();
  o.log_id = e.id();
  return o;
}

absl::Status TabletServer::SaveTableSchema(const TableSchema& schema) const {
  if (cell_mode()) return absl::OkStatus();
  const fs::path dir = fs::path(options_.data_dir) / "tables" / schema.name();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", dir.string(), ": ", ec.message()));
  return WriteChecksummedFile((dir / kTableSchemaFile).string(), schema.SerializeAsString());
}

absl::Status TabletServer::SaveStateLocked() {
  if (cell_mode()) return absl::OkStatus();  // METADATA is the truth
  return WriteChecksummedFile((fs::path(options_.data_dir) / kStateFile).string(),
                              state_.SerializeAsString());
}

absl::Status TabletServer::CommitStateLocked(TabletServerState next) {
  if (!cell_mode()) {
    MS_RETURN_IF_ERROR(WriteChecksummedFile((fs::path(options_.data_dir) / kStateFile).string(),
                                            next.SerializeAsString()));
  }
  state_ = std::move(next);
  RefreshReplicatedLocked();
  return absl::OkStatus();
}

void TabletServer::RefreshReplicatedLocked() {
  std::set<std::string, std::less<>> replicated;
  for (const TableSchema& t : state_.tables())
    if (t.replicated()) replicated.insert(t.name());
  absl::MutexLock lock(&replicated_mu_);
  replicated_ = std::move(replicated);
}

bool TabletServer::IsReplicated(std::string_view table) const {
  absl::ReaderMutexLock lock(&replicated_mu_);
  return replicated_.count(table) > 0;
}

absl::Status TabletServer::LoadState() {
  const std::string path = (fs::path(options_.data_dir) / kStateFile).string();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> data = ReadChecksummedFile(path);
  if (absl::IsFailedPrecondition(data.status())) {
    // Written before state files had a checksum: taken if it parses, and
    // rewritten with one at once.
    // Without a checksum, damage could still parse (two bytes of garbage
    // make an empty state), so it must also describe the directory: no
    // unknown fields, every table directory one of its tables, every
    // loaded tablet's directory present.
    absl::StatusOr<std::string> legacy = ReadFileToString(path);
    if (!legacy.ok()) return legacy.status();
    const std::string damaged = StrCat(path, " is damaged (it has no checksum header, and ");
    if (!state_.ParseFromString(*legacy))
      return absl::DataLossError(StrCat(damaged, "does not parse)"));
    if (state_.SerializeAsString() != *legacy) {
      return absl::DataLossError(
          StrCat(damaged, "is not as a server writes it: fields no state has)"));
    }
    std::set<std::string> names;
    for (const TableSchema& t : state_.tables()) names.insert(t.name());
    std::error_code ec;
    for (auto it = fs::directory_iterator(fs::path(options_.data_dir) / "tables", ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::error_code e2;
      if (it->is_directory(e2) && !names.contains(it->path().filename().string()))
        return absl::DataLossError(StrCat(damaged, "does not name table ",
                                          it->path().filename().string(),
                                          " whose directory is here)"));
    }
    for (const TabletEntry& e : state_.tablets()) {
      if (e.loaded() && !fs::is_directory(fs::path(options_.data_dir) / e.path(), ec))
        return absl::DataLossError(
            StrCat(damaged, "names tablet ", e.id(), " whose directory is missing)"));
    }
    MS_LOG_WARN("{} had no checksum; rewritten with one", path);
    return SaveStateLocked();
  }
  if (absl::IsNotFound(data.status())) {
    // A first start, unless tablets or a commit log are already here: then
    // the state naming them was lost, and starting empty would serve
    // nothing of them (and soon delete the log).
    std::string found;
    for (const char* dir : {"tables", "commitlog"}) {
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(fs::path(options_.data_dir) / dir, ec);
           !ec && it != fs::recursive_directory_iterator() && found.empty(); it.increment(ec)) {
        if (it->is_regular_file(ec) && it->file_size(ec) > 0) found = it->path().string();
      }
    }
    if (!found.empty()) {
      return absl::DataLossError(
          StrCat(path, " is missing, but the directory holds data written under it (", found,
                 ", ...): refusing to start empty. Restore the file (it lists the "
                 "tables and tablets), or move the directory aside to start afresh"));
    }
    return SaveStateLocked();  // from now on, a missing file is damage
  }
  if (!data.ok()) return data.status();
  if (!state_.ParseFromString(*data))
    return absl::DataLossError(StrCat(path, " is damaged: unparsable"));
  return absl::OkStatus();
}

const TableSchema* TabletServer::FindTableLocked(std::string_view name) const {
  for (const TableSchema& t : state_.tables()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

TabletEntry* TabletServer::FindEntryLocked(std::string_view id) {
  for (TabletEntry& e : *state_.mutable_tablets()) {
    if (e.id() == id) return &e;
  }
  return nullptr;
}

std::string TabletServer::TabletPath(const std::string& table, const std::string& id) const {
  return cell_mode() ? StrCat("tablets/", id) : StrCat("tables/", table, "/", id);
}

std::string TabletServer::NewTabletId(std::string_view table) {
  while (true) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(env_->Random64()));
    std::string id = StrCat(table, "-", buf);
    if (FindEntryLocked(id) == nullptr) return id;
  }
}

absl::Status TabletServer::CreateTable(const TableSchema& schema) {
  if (cell_mode()) {
    return absl::FailedPreconditionError(
        "this tablet server is in a cell: tables are created through the master");
  }
  MS_RETURN_IF_ERROR(ValidateName(schema.name(), "table"));
  MS_RETURN_IF_ERROR(CompiledSchema::Compile(schema).status());
  absl::MutexLock lock(&mu_);
  if (FindTableLocked(schema.name()) != nullptr) {
    return absl::AlreadyExistsError(StrCat("table ", schema.name(), " already exists"));
  }
  TabletEntry e;
  e.set_table(schema.name());
  e.set_id(NewTabletId(schema.name()));
  e.set_path(TabletPath(schema.name(), e.id()));
  e.set_loaded(true);
  // The schema file first, so a tablet never exists without the schema a
  // rebuilt state would need; the table exists once state.pb says so, and
  // a failure before that leaves nothing behind.
  const fs::path table_dir = fs::path(options_.data_dir) / "tables" / schema.name();
  auto undo = [&] {
    std::error_code ec;
    fs::remove_all(fs::path(options_.data_dir) / e.path(), ec);
    fs::remove(table_dir / kTableSchemaFile, ec);
    fs::remove(table_dir, ec);  // only if empty
  };
  absl::Status s = SaveTableSchema(schema);
  absl::StatusOr<std::unique_ptr<Tablet>> t =
      s.ok() ? Tablet::Open(OptionsFor(e), schema, &resources_, env_)
             : absl::StatusOr<std::unique_ptr<Tablet>>(s);
  if (t.ok()) {
    TabletServerState next = state_;
    *next.add_tables() = schema;
    *next.add_tablets() = e;
    s = CommitStateLocked(std::move(next));
    if (!s.ok()) t = s;
  }
  if (!t.ok()) {
    undo();
    return t.status();
  }
  loaded_[e.id()] = Loaded{e, std::shared_ptr<Tablet>(std::move(*t))};
  return absl::OkStatus();
}

absl::Status TabletServer::DeleteTable(std::string_view name) {
  std::vector<std::string> paths;
  {
    absl::MutexLock lock(&mu_);
    if (FindTableLocked(name) == nullptr)
      return absl::NotFoundError(StrCat("table ", name, " does not exist"));
    TabletServerState next;
    for (const TableSchema& t : state_.tables()) {
      if (t.name() != name) *next.add_tables() = t;
    }
    std::vector<std::string> ids;
    for (const TabletEntry& e : state_.tablets()) {
      if (e.table() != name) {
        *next.add_tablets() = e;
      } else {
        ids.push_back(e.id());
        paths.push_back((fs::path(options_.data_dir) / e.path()).string());
      }
    }
    MS_RETURN_IF_ERROR(CommitStateLocked(std::move(next)));
    for (const std::string& id : ids) {
      loaded_.erase(id);
      load_errors_.erase(id);
    }
  }
  // In a cell the directories are the master's to delete (its garbage
  // collection), once METADATA no longer names them.
  if (cell_mode()) return absl::OkStatus();
  // The log may still hold records of these tablets; with the tablets gone
  // from the state, recovery skips them.
  std::error_code ec;
  for (const std::string& p : paths) fs::remove_all(p, ec);
  fs::remove_all(fs::path(options_.data_dir) / "tables" / std::string(name), ec);
  return absl::OkStatus();
}

std::vector<TableSchema> TabletServer::ListTables() const {
  absl::MutexLock lock(&mu_);
  return {state_.tables().begin(), state_.tables().end()};
}

absl::StatusOr<TableSchema> TabletServer::GetTable(std::string_view name) const {
  absl::MutexLock lock(&mu_);
  const TableSchema* t = FindTableLocked(name);
  if (t == nullptr) return absl::NotFoundError(StrCat("table ", name, " does not exist"));
  return *t;
}

absl::Status TabletServer::UpdateTable(const TableSchema& schema) {
  MS_ASSIGN_OR_RETURN(auto compiled, CompiledSchema::Compile(schema));
  absl::MutexLock lock(&mu_);
  const TableSchema* old = FindTableLocked(schema.name());
  if (old == nullptr)
    return absl::NotFoundError(StrCat("table ", schema.name(), " does not exist"));
  MS_ASSIGN_OR_RETURN(auto old_compiled, CompiledSchema::Compile(*old));
  MS_RETURN_IF_ERROR(CompiledSchema::CheckChange(*old_compiled, *compiled));
  // Recorded first: a tablet never stores data of a schema the next start
  // would not know.
  TabletServerState next = state_;
  for (TableSchema& t : *next.mutable_tables()) {
    if (t.name() == schema.name()) t = schema;
  }
  MS_RETURN_IF_ERROR(SaveTableSchema(schema));
  MS_RETURN_IF_ERROR(CommitStateLocked(std::move(next)));
  for (auto& [id, l] : loaded_) {
    if (l.entry.table() == schema.name()) MS_RETURN_IF_ERROR(l.tablet->UpdateSchema(schema));
  }
  return absl::OkStatus();
}

std::vector<TabletEntry> TabletServer::ListTablets(std::string_view table) const {
  absl::MutexLock lock(&mu_);
  std::vector<TabletEntry> out;
  for (const TabletEntry& e : state_.tablets()) {
    if (table.empty() || e.table() == table) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const TabletEntry& a, const TabletEntry& b) {
    return std::tie(a.table(), a.start_row()) < std::tie(b.table(), b.start_row());
  });
  return out;
}

absl::Status TabletServer::AssignTablet(const TabletEntry& assigned, const TableSchema& schema,
                                        bool create) {
  if (!cell_mode())
    return absl::FailedPreconditionError("AssignTablet: this tablet server is not in a cell");
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

absl::Status TabletServer::UnloadTablet(std::string_view id) {
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

absl::StatusOr<std::vector<TabletEntry>> TabletServer::SplitTablet(std::string_view id,
                                                                   std::string_view requested_row) {
  std::string split_row(requested_row);
  if (split_row.empty()) {
    std::shared_ptr<Tablet> t;
    {
      absl::MutexLock lock(&mu_);
      auto it = loaded_.find(std::string(id));
      if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
      t = it->second.tablet;
    }
    MS_ASSIGN_OR_RETURN(split_row, MiddleRow(*t));
  }
  std::vector<TabletEntry> children(2);
  TabletEntry parent;
  std::shared_ptr<Tablet> tablet;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(std::string(id));
    if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
    parent = it->second.entry;
    tablet = it->second.tablet;
    if (split_row <= parent.start_row() ||
        (!parent.end_row().empty() && split_row >= parent.end_row())) {
      return absl::InvalidArgumentError(StrCat("split row \"", EscapeBytes(split_row),
                                               "\" is not inside tablet ", id, "'s rows"));
    }
    if (options_.may_split && !options_.may_split(parent)) {
      return absl::FailedPreconditionError(StrCat("tablet ", id, " never splits"));
    }
    if (!assigning_.insert(parent.id()).second) {
      return absl::UnavailableError(StrCat("tablet ", id, " is being split or loaded"));
    }
    for (int i = 0; i < 2; ++i) {
      TabletEntry& c = children[i];
      c.set_table(parent.table());
      c.set_id(NewTabletId(parent.table()));
      c.set_path(TabletPath(parent.table(), c.id()));
      c.set_loaded(true);
      creating_.insert(c.id());
    }
  }
  children[0].set_start_row(parent.start_row());
  children[0].set_end_row(split_row);
  children[1].set_start_row(split_row);
  children[1].set_end_row(parent.end_row());
  // Outside the server's lock (reads of the parent continue; its writes
  // wait for the children): the split flushes the parent, so its log
  // records are no longer needed, and committing it in METADATA may be a
  // write to this very server.
  absl::Status committed =
      tablet->Split(split_row, (fs::path(options_.data_dir) / children[0].path()).string(),
                    (fs::path(options_.data_dir) / children[1].path()).string());
  const bool split_done = committed.ok();
  if (committed.ok() && options_.commit_split) committed = options_.commit_split(parent, children);
  absl::MutexLock lock(&mu_);
  assigning_.erase(parent.id());
  for (const TabletEntry& c : children) creating_.erase(c.id());
  auto it = loaded_.find(parent.id());
  std::vector<std::shared_ptr<Tablet>> opened;
  for (const TabletEntry& c : children) {
    if (!committed.ok() || it == loaded_.end()) break;
    absl::StatusOr<std::shared_ptr<Tablet>> t = OpenTabletLocked(c);
    if (t.ok() && cell_mode()) {
      // The children start from the parent's flushed state: no log record
      // before this point concerns them.
      absl::Status adopted = (*t)->AdoptLog(options_.cell_log_name);
      if (!adopted.ok()) t = adopted;
    }
    if (!t.ok()) {
      // Committed, so the parent must not serve on: its rows are the
      // children's now. Their directories stay for whoever loads them next
      // (the master assigns them again); this server stops serving the rows.
      MS_LOG_ERROR("tablet {}: split committed but child {} did not open: {}", parent.id(), c.id(),
                   t.status().ToString());
      opened.clear();
      loaded_.erase(it);
      load_errors_[c.id()] = t.status().ToString();
      return t.status();
    }
    opened.push_back(std::move(*t));
  }
  if (absl::IsUnknown(committed)) {
    // Maybe committed: serve neither; the master assigns what METADATA names.
    MS_LOG_ERROR("tablet {}: {}; no longer served here", parent.id(), committed.ToString());
    if (it != loaded_.end()) loaded_.erase(it);
    auto* entries = state_.mutable_tablets();
    for (int i = 0; i < entries->size(); ++i) {
      if (entries->Get(i).id() == parent.id()) {
        entries->DeleteSubrange(i, 1);
        break;
      }
    }
    return committed;
  }
  if (!committed.ok() || it == loaded_.end()) {
    opened.clear();
    // Not committed: the parent takes writes again (its files are as they
    // were; the split only flushed them).
    if (split_done && !committed.ok()) tablet->UndoSplit();
    if (!committed.ok()) {
      std::error_code ec;
      for (const TabletEntry& c : children)
        fs::remove_all(fs::path(options_.data_dir) / c.path(), ec);
      return committed;
    }
    return absl::AbortedError(
        StrCat("tablet ", id, " was unloaded while it split; the master assigns its children"));
  }
  TabletServerState next;
  *next.mutable_tables() = state_.tables();
  for (const TabletEntry& e : state_.tablets()) {
    if (e.id() != id) *next.add_tablets() = e;
  }
  for (const TabletEntry& c : children) *next.add_tablets() = c;
  if (absl::Status s = CommitStateLocked(std::move(next)); !s.ok()) {
    // Not recorded, so not done: the parent serves on (a start would load
    // it), and the children go.
    opened.clear();
    tablet->UndoSplit();
    std::error_code ec;
    for (const TabletEntry& c : children)
      fs::remove_all(fs::path(options_.data_dir) / c.path(), ec);
    return s;
  }
  loaded_.erase(it);
  for (size_t i = 0; i < 2; ++i) loaded_[children[i].id()] = Loaded{children[i], opened[i]};
  // The children hard-link the parent's files; the parent's directory goes
  // (in a cell, the master's garbage collection deletes it once METADATA no
  // longer names it).
  tablet.reset();
  if (!cell_mode()) {
    std::error_code ec;
    fs::remove_all(fs::path(options_.data_dir) / parent.path(), ec);
  }
  if (options_.after_split) {
    mu_.Unlock();
    options_.after_split(parent, children);
    mu_.Lock();
  }
  return children;
}

absl::StatusOr<std::string> TabletServer::MiddleRow(Tablet& tablet) {
  // Row keys only (one stripped cell per row); the middle by count.
  std::vector<std::string> rows;
  ReadOptions o;
  o.filter.cells_per_column = 1;
  o.filter.strip_value = true;
  RowSet all;
  all.ranges.push_back(RowRange{tablet.start_row(), tablet.end_row()});
  MS_RETURN_IF_ERROR(tablet.ReadRows(all, o, [&](Row& r) {
    rows.push_back(r.key);
    return true;
  }));
  if (rows.size() < 2) {
    return absl::FailedPreconditionError(
        StrCat("tablet ", tablet.path(), " has fewer than two rows: nothing to split"));
  }
  return rows[rows.size() / 2];
}

absl::StatusOr<TabletEntry> TabletServer::MergeTablets(std::string_view left_id,
                                                       std::string_view right_id) {
  if (!cell_mode())
    return absl::FailedPreconditionError("MergeTablets: this tablet server is not in a cell");
  TabletEntry left, right, merged;
  std::shared_ptr<Tablet> l, r;
  {
    absl::MutexLock lock(&mu_);
    auto li = loaded_.find(std::string(left_id)), ri = loaded_.find(std::string(right_id));
    if (li == loaded_.end() || ri == loaded_.end()) {
      return absl::NotFoundError(
          StrCat("tablet ", li == loaded_.end() ? left_id : right_id, " is not loaded"));
    }
    left = li->second.entry;
    right = ri->second.entry;
    if (left.table() != right.table() || left.end_row().empty() ||
        left.end_row() != right.start_row()) {
      return absl::InvalidArgumentError(
          StrCat("tablets ", left_id, " and ", right_id, " are not neighbours"));
    }
    if (assigning_.contains(left.id()) || assigning_.contains(right.id())) {
      return absl::UnavailableError(
          StrCat("tablet ", left_id, " or ", right_id, " is being split or loaded"));
    }
    assigning_.insert(left.id());
    assigning_.insert(right.id());
    l = li->second.tablet;
    r = ri->second.tablet;
    merged.set_table(left.table());
    merged.set_id(NewTabletId(left.table()));
    merged.set_start_row(left.start_row());
    merged.set_end_row(right.end_row());
    merged.set_path(TabletPath(merged.table(), merged.id()));
    merged.set_loaded(true);
    creating_.insert(merged.id());
  }
  // Outside the lock: stop and flush the two (their reads go on), build the
  // merged tablet from their stored entries, commit, swap.
  l->StopWrites();
  r->StopWrites();
  std::shared_ptr<Tablet> m;
  absl::Status s = l->PersistLogPosition(true).status();
  if (s.ok()) s = r->PersistLogPosition(true).status();
  if (s.ok()) {
    // Only the schema needs the server's lock; creating the tablet is I/O.
    TableSchema schema;
    {
      absl::MutexLock lock(&mu_);
      const TableSchema* found = FindTableLocked(merged.table());
      if (found != nullptr) schema = *found;
    }
    absl::StatusOr<std::unique_ptr<Tablet>> opened =
        Tablet::Open(OptionsFor(merged), schema, &resources_, env_);
    if (opened.ok()) {
      m = std::move(*opened);
    } else {
      s = opened.status();
    }
  }
  if (s.ok()) s = m->ImportFrom(*l);
  if (s.ok()) s = m->ImportFrom(*r);
  if (s.ok()) s = m->AdoptLog(options_.cell_log_name);
  if (s.ok() && options_.commit_merge) s = options_.commit_merge(left, right, merged);
  absl::MutexLock lock(&mu_);
  assigning_.erase(left.id());
  assigning_.erase(right.id());
  creating_.erase(merged.id());
  if (absl::IsUnknown(s)) {
    // Maybe committed: serve none of the three; the master assigns what
    // METADATA names (the merged tablet's files are complete and flushed).
    MS_LOG_ERROR("merge into {}: {}; {} and {} no longer served here", merged.id(), s.ToString(),
                 left.id(), right.id());
    m.reset();
    loaded_.erase(left.id());
    loaded_.erase(right.id());
    auto* entries = state_.mutable_tablets();
    for (int i = entries->size() - 1; i >= 0; --i) {
      if (entries->Get(i).id() == left.id() || entries->Get(i).id() == right.id())
        entries->DeleteSubrange(i, 1);
    }
    return s;
  }
  if (!s.ok()) {
    m.reset();
    std::error_code ec;
    fs::remove_all(fs::path(options_.data_dir) / merged.path(), ec);
    l->ResumeWrites();
    r->ResumeWrites();
    return s;
  }
  auto* tablets = state_.mutable_tablets();
  for (int i = tablets->size() - 1; i >= 0; --i) {
    if (tablets->Get(i).id() == left.id() || tablets->Get(i).id() == right.id())
      tablets->DeleteSubrange(i, 1);
  }
  loaded_.erase(left.id());
  loaded_.erase(right.id());
  *state_.add_tablets() = merged;
  loaded_[merged.id()] = Loaded{merged, std::move(m)};
  MS_LOG_INFO("merged tablets {} and {} into {}", left.id(), right.id(), merged.id());
  return merged;
}

absl::Status TabletServer::CompactTablet(std::string_view id) {
  std::shared_ptr<Tablet> t;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(std::string(id));
    if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
    t = it->second.tablet;
  }
  return t->CompactTablet();
}

absl::StatusOr<std::shared_ptr<Tablet>> TabletServer::Route(std::string_view table,
                                                            std::string_view row,
                                                            bool may_block) const {
  if (may_block) {
    mu_.ReaderLock();
  } else if (!mu_.ReaderTryLock()) {
    return WouldBlockError();
  }
  absl::Cleanup unlock = [this] { mu_.ReaderUnlock(); };
  if (options_.lease_valid && !options_.lease_valid()) {
    return NotServingError("this server's lock-service session may have expired");
  }
  if (FindTableLocked(table) == nullptr) {
    if (cell_mode())
      return NotServingError(StrCat("no tablet of table ", table, " is served here"));
    return absl::NotFoundError(StrCat("table ", table, " does not exist"));
  }
  for (const auto& [id, l] : loaded_) {
    if (l.entry.table() == table && Covers(l.entry, row)) return l.tablet;
  }
  if (cell_mode()) {
    return NotServingError(StrCat("no tablet of table ", table, " holding row \"", EscapeBytes(row),
                                  "\" is served here"));
  }
  for (const TabletEntry& e : state_.tablets()) {
    if (e.table() == table && Covers(e, row)) {
      auto err = load_errors_.find(e.id());
      return absl::UnavailableError(StrCat("tablet ", e.id(), " serving row \"", EscapeBytes(row),
                                           "\" is not loaded",
                                           err != load_errors_.end() ? ": " + err->second : ""));
    }
  }
  return absl::UnavailableError(
      StrCat("no tablet of table ", table, " covers row \"", EscapeBytes(row), "\""));
}

template <typename Fn>
auto TabletServer::WithTablet(std::string_view table, std::string_view row, Fn fn)
    -> decltype(fn(nullptr)) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::shared_ptr<Tablet>> t = Route(table, row);
    if (!t.ok()) return t.status();
    auto result = fn(t->get());
    // Split or unloaded between routing and the call: route again (to a
    // child, or to the answer that the tablet is not loaded).
    bool retry = false;
    if constexpr (std::is_same_v<decltype(result), absl::Status>) {
      retry = absl::IsFailedPrecondition(result) && !(*t)->accepts_writes();
    } else {
      retry = absl::IsFailedPrecondition(result.status()) && !(*t)->accepts_writes();
    }
    if (retry && attempt >= 3 && cell_mode()) {
      return NotServingError(StrCat("tablet ", (*t)->path(), " is splitting or moving"));
    }
    if (!retry || attempt >= 3) return result;
  }
}

absl::Status TabletServer::MutateRow(std::string_view table, std::string_view row,
                                     absl::Span<const Mutation> mutations, int64_t timestamp) {
  // The asynchronous path, waited for: one routing-and-retry loop for both.
  absl::Status result;
  absl::Notification finished;
  auto write = std::make_unique<Tablet::RowWrite>();
  write->row.assign(row);
  write->mutations.assign(mutations.begin(), mutations.end());
  write->timestamp = timestamp;
  write->done = [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  };
  MS_RETURN_IF_ERROR(MutateRowAsync(table, write));
  finished.WaitForNotification();
  return result;
}

absl::Status TabletServer::MutateRowAsync(std::string_view table,
                                          std::unique_ptr<Tablet::RowWrite>& write,
                                          bool may_block) {
  for (int attempt = 0;; ++attempt) {
    MS_ASSIGN_OR_RETURN(std::shared_ptr<Tablet> t, Route(table, write->row, may_block));
    absl::Status s = t->MutateRowAsync(write, may_block);
    // Split or unloaded between routing and the call: route again (to a
    // child, or to the answer that the tablet is not loaded). A split marks
    // the parent before the children are routed to, so give the routing a
    // moment (bounded) to catch up.
    if (s.ok() || !absl::IsFailedPrecondition(s) || t->accepts_writes()) return s;
    if (attempt >= 1000)
      return cell_mode() ? NotServingError(StrCat("tablet ", t->path(), " is splitting or moving"))
                         : s;
    if (attempt >= 3) std::this_thread::yield();
  }
}

void TabletServer::MutateRowsAsync(std::string_view table, std::vector<RowMutations> entries,
                                   absl::AnyInvocable<void(std::vector<absl::Status>)> done) {
  struct Batch {
    absl::Mutex mu;
    std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu);
    absl::AnyInvocable<void(std::vector<absl::Status>)> done;
    void Finish(size_t i, absl::Status s) {
      std::vector<absl::Status> all;
      {
        absl::MutexLock lock(&mu);
        statuses[i] = std::move(s);
        if (--pending > 0) return;
        all = std::move(statuses);
      }
      done(std::move(all));
    }
  };
  if (entries.empty()) {
    done({});
    return;
  }
  auto batch = std::make_shared<Batch>();
  {
    absl::MutexLock lock(&batch->mu);
    batch->statuses.resize(entries.size());
    batch->pending = entries.size();
  }
  batch->done = std::move(done);
  for (size_t i = 0; i < entries.size(); ++i) {
    auto write = std::make_unique<Tablet::RowWrite>();
    write->row = std::move(entries[i].row);
    write->mutations = std::move(entries[i].mutations);
    write->done = [batch, i](absl::Status s) { batch->Finish(i, std::move(s)); };
    if (absl::Status s = MutateRowAsync(table, write); !s.ok()) batch->Finish(i, std::move(s));
  }
}

std::vector<absl::Status> TabletServer::MutateRows(std::string_view table,
                                                   absl::Span<const RowMutations> entries) {
  std::vector<absl::Status> out;
  absl::Notification finished;
  MutateRowsAsync(table, std::vector<RowMutations>(entries.begin(), entries.end()),
                  [&](std::vector<absl::Status> statuses) {
                    out = std::move(statuses);
                    finished.Notify();
                  });
  finished.WaitForNotification();
  return out;
}

absl::StatusOr<bool> TabletServer::CheckAndMutateRow(std::string_view table, std::string_view row,
                                                     const RowFilter& predicate,
                                                     absl::Span<const Mutation> true_mutations,
                                                     absl::Span<const Mutation> false_mutations) {
  return WithTablet(table, row, [&](Tablet* t) {
    return t->CheckAndMutateRow(row, predicate, true_mutations, false_mutations);
  });
}

absl::StatusOr<Row> TabletServer::ReadModifyWriteRow(std::string_view table, std::string_view row,
                                                     absl::Span<const ReadModifyWriteRule> rules) {
  return WithTablet(table, row, [&](Tablet* t) { return t->ReadModifyWriteRow(row, rules); });
}

absl::StatusOr<std::optional<Row>> TabletServer::ReadRow(std::string_view table,
                                                         std::string_view row,
                                                         const ReadOptions& options) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Tablet> t, Route(table, row));
  return t->ReadRow(row, options);
}

absl::Status TabletServer::ReadRows(std::string_view table, const RowSet& rows,
                                    const ReadOptions& options,
                                    const std::function<bool(Row&)>& on_row) {
  std::vector<std::pair<TabletEntry, std::shared_ptr<Tablet>>> tablets;
  {
    absl::MutexLock lock(&mu_);
    if (options_.lease_valid && !options_.lease_valid()) {
      return NotServingError("this server's lock-service session may have expired");
    }
    if (cell_mode()) MS_RETURN_IF_ERROR(CheckServedLocked(table, rows));
    if (FindTableLocked(table) == nullptr)
      return absl::NotFoundError(StrCat("table ", table, " does not exist"));
    for (const TabletEntry& e : state_.tablets()) {
      if (e.table() != table) continue;
      auto it = loaded_.find(e.id());
      tablets.emplace_back(e, it == loaded_.end() ? nullptr : it->second.tablet);
    }
  }
  std::sort(tablets.begin(), tablets.end(),
            [](const auto& a, const auto& b) { return a.first.start_row() < b.first.start_row(); });
  int64_t delivered = 0;
  bool stopped = false;
  for (const auto& [entry, tablet] : tablets) {
    if (stopped) break;
    if (tablet == nullptr) {
      // Only an error if the read touches this tablet's rows.
      bool touches = rows.keys.empty() && rows.ranges.empty();
      for (const std::string& k : rows.keys) touches |= Covers(entry, k);
      for (const RowRange& r : rows.ranges) {
        touches |= (r.end.empty() || r.end > entry.start_row()) &&
                   (entry.end_row().empty() || r.start < entry.end_row());
      }
      if (touches) return absl::UnavailableError(StrCat("tablet ", entry.id(), " is not loaded"));
      continue;
    }
    ReadOptions o = options;
    if (options.rows_limit > 0) o.rows_limit = options.rows_limit - delivered;
    MS_RETURN_IF_ERROR(tablet->ReadRows(rows, o, [&](Row& r) {
      ++delivered;
      if (!on_row(r)) {
        stopped = true;
        return false;
      }
      return true;
    }));
    if (options.rows_limit > 0 && delivered >= options.rows_limit) break;
  }
  return absl::OkStatus();
}

absl::Status TabletServer::CheckServedLocked(std::string_view table, const RowSet& rows) const {
  std::vector<const TabletEntry*> served;
  for (const auto& [id, l] : loaded_) {
    if (l.entry.table() == table) served.push_back(&l.entry);
  }
  std::sort(served.begin(), served.end(), [](const TabletEntry* a, const TabletEntry* b) {
    return a->start_row() < b->start_row();
  });
  auto covered = [&](const std::string& start, const std::string& end) {
    // Walks the served tablets from `start` while they are contiguous.
    std::string at = start;
    for (const TabletEntry* e : served) {
      if (e->end_row() != "" && e->end_row() <= at) continue;
      if (e->start_row() > at) return false;
      if (e->end_row().empty()) return true;
      at = e->end_row();
      if (!end.empty() && at >= end) return true;
    }
    return false;
  };
  std::vector<RowRange> ranges = rows.ranges;
  if (rows.keys.empty() && rows.ranges.empty()) ranges.push_back(RowRange::All());
  for (const RowRange& r : ranges) {
    if (!covered(r.start, r.end)) {
      return NotServingError(StrCat("rows [\"", EscapeBytes(r.start), "\", \"", EscapeBytes(r.end),
                                    "\") of table ", table, " are not all served here"));
    }
  }
  for (const std::string& k : rows.keys) {
    if (!covered(k, k + std::string(1, '\0'))) {
      return NotServingError(
          StrCat("row \"", EscapeBytes(k), "\" of table ", table, " is not served here"));
    }
  }
  return absl::OkStatus();
}

absl::Status TabletServer::RunMaintenance() {
  if (options_.split_threshold_bytes > 0) {
    std::vector<std::pair<std::string, std::shared_ptr<Tablet>>> big;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, l] : loaded_) {
        if (!options_.may_split || options_.may_split(l.entry)) big.emplace_back(id, l.tablet);
      }
    }
    for (auto& [id, t] : big) {
      if (t->ApproximateSizeBytes() <= options_.split_threshold_bytes) continue;
      absl::StatusOr<std::vector<TabletEntry>> children = SplitTablet(id, "");
      if (children.ok()) {
        MS_LOG_INFO("tablet {} passed {} bytes: split at \"{}\" into {} and {}", id,
                    options_.split_threshold_bytes, EscapeBytes((*children)[1].start_row()),
                    (*children)[0].id(), (*children)[1].id());
      } else if (!absl::IsFailedPrecondition(children.status()) &&
                 !absl::IsNotFound(children.status())) {
        // (NotFound: the master moved it away meanwhile.)
        MS_LOG_WARN("tablet {}: automatic split failed: {}", id, children.status().ToString());
      }
    }
  }
  absl::MutexLock m(&maintenance_mu_);
  std::vector<std::shared_ptr<Tablet>> tablets;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, l] : loaded_) tablets.push_back(l.tablet);
  }
  bool keep_all_segments;
  {
    absl::MutexLock lock(&mu_);
    // A tablet that failed to load was never recovered; its records stay.
    // (In a cell a failed assignment has no records in this server's log.)
    keep_all_segments = !cell_mode() && !load_errors_.empty();
  }
  if (keep_all_segments) {
    for (auto& t : tablets) {
      if (t->UnflushedAgeMicros() >= absl::ToInt64Microseconds(options_.flush_max_age)) {
        MS_RETURN_IF_ERROR(t->PersistLogPosition(false).status());
      }
    }
    return absl::OkStatus();
  }
  const int64_t max_age = absl::ToInt64Microseconds(options_.flush_max_age);
  uint64_t needed_from = log_->last_lsn();
  for (const auto& t : tablets) {
    // Clean tablets just advance their position; dirty ones flush once their
    // oldest write is old enough; younger dirty ones keep their segments.
    const int64_t age = t->UnflushedAgeMicros();
    uint64_t position = t->durable_log_position();
    if (age == 0 || age >= max_age) {
      MS_ASSIGN_OR_RETURN(position, t->PersistLogPosition(false));
    }
    needed_from = std::min(needed_from, position);
  }
  return log_->DeleteSegmentsThrough(needed_from);
}

void TabletServer::ScheduleMaintenance() {
  if (options_.maintenance_interval <= absl::ZeroDuration()) return;
  std::shared_ptr<TimerState> state = timer_state_;
  absl::MutexLock lock(&state->mu);
  if (state->stopping) return;
  state->timer = env_->Schedule(options_.maintenance_interval, [this, state] {
    {
      absl::MutexLock l(&state->mu);
      if (state->stopping) return;  // `this` may be gone
      state->running = true;
    }
    // Not on the Env's timer thread: a flush or a split (which writes
    // METADATA through the cell, and may wait for it) would delay every
    // other timer, lock-session renewals among them.
    std::thread([this, state] {
      absl::Status s = RunMaintenance();
      if (!s.ok()) MS_LOG_ERROR("tablet server maintenance: {}", s.ToString());
      ScheduleMaintenance();
      // Last touch of the server: the destructor waits for this.
      absl::MutexLock l(&state->mu);
      state->running = false;
    }).detach();
  });
}

TabletServerStats TabletServer::Stats() const {
  TabletServerStats s;
  s.log = log_->stats();
  s.tablets = resources_.Stats();
  absl::MutexLock lock(&mu_);
  for (const auto& [id, l] : loaded_) {
    s.per_tablet.push_back({l.entry, l.tablet->ApproximateSizeBytes()});
  }
  return s;
}

std::vector<std::string> TabletServer::CreatingTablets() const {
  absl::MutexLock lock(&mu_);
  return {creating_.begin(), creating_.end()};
}

std::map<std::string, std::string> TabletServer::load_errors() const {
  absl::MutexLock lock(&mu_);
  return load_errors_;
}

}  // namespace megastore::storage
