// The tablet server (docs/tabletserver.md): opening it, its state file and
// its tables. Recovery and tablet assignment, splits, merges and
// maintenance, and the data path live in tablet_server_recovery.cc,
// tablet_server_split.cc and tablet_server_data.cc.
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
#include "storage/tabletserver/tablet_server_internal.h"

namespace megastore::storage {

namespace fs = std::filesystem;

using tablet_server_internal::kStateFile;
using tablet_server_internal::kTableSchemaFile;

namespace {

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

void TabletServer::CrashOnClose() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, l] : loaded_) {
    if (l.tablet) l.tablet->DropMemtablesOnClose();
  }
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
