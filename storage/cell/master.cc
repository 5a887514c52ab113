#include "storage/cell/master.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/await.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/commitlog/commit_log.h"
#include "storage/model/schema.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage::cell {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxEvents = 64;

TabletEntry EntryOf(const TabletRecord& r) {
  TabletEntry e;
  e.set_table(r.location.table);
  e.set_id(r.location.tablet_id);
  e.set_start_row(r.location.start_row);
  e.set_end_row(r.location.end_row);
  return e;
}

bool IsRoot(const TabletRecord& r) {
  return r.location.table == kMetadataTable && r.location.end_row == kRootEndRow;
}

// A lock-service call, waited for through the master's Env.
template <typename T, typename Fn>
absl::StatusOr<T> Ask(Env* env, Fn fn) {
  return Await<T>(env, std::move(fn));
}

}  // namespace

Master::Master(lock::LockService* lock, Env* env, MasterOptions options,
               std::function<void(const absl::Status&)> on_lost)
    : lock_(lock),
      env_(env),
      options_(std::move(options)),
      on_lost_(std::move(on_lost)),
      // The master is the cell's authority on its tables: what it does to
      // a replicated one its own service has already let through.
      client_(lock, env,
              CellClientOptions{options_.cell, options_.rpc_timeout, absl::Seconds(2), 64,
                                /*force_replicated=*/true, options_.connect}) {}

Master::~Master() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (wake_ && !wake_->HasBeenNotified()) wake_->Notify();
  }
  if (loop_) loop_->Join();
  live_.reset();
  election_.reset();
}

void Master::Start(const std::string& address) {
  address_ = address;
  election_ = std::make_unique<MasterElection>(
      lock_, env_, options_.cell, address_, options_.session_ttl,
      [this] {
        MS_LOG_INFO("master of cell {}: elected ({})", options_.cell, address_);
        {
          absl::MutexLock lock(&mu_);
          elected_ = true;
        }
        live_ = std::make_unique<LiveServers>(
            lock_, env_, options_.cell,
            [this](const std::string& s) {
              Event(StrCat("server ", s, " joined"));
              Kick();
            },
            [this](const std::string& s) {
              Event(StrCat("server ", s, " left"));
              Kick();
            });
        live_->Start();
        elected_at_ = env_->MonotonicMicros();
        loop_ = env_->StartThread(StrCat("master ", address_, " reconcile"), [this] { Loop(); });
      },
      [this](const absl::Status& why) {
        {
          absl::MutexLock lock(&mu_);
          elected_ = false;
        }
        MS_LOG_ERROR("master of cell {}: lost the master lock: {}", options_.cell, why.ToString());
        on_lost_(why);
      });
  election_->Start();
}

std::unique_ptr<TabletClient> Master::Connect(const std::string& server,
                                              absl::Duration timeout) const {
  if (options_.connect) return std::make_unique<TabletClient>(options_.connect(server), timeout);
  return std::make_unique<TabletClient>(server, timeout);
}

bool Master::is_master() const {
  absl::MutexLock lock(&mu_);
  return elected_ && election_ != nullptr && election_->is_master();
}

std::string Master::current_master() const {
  return election_ ? election_->master() : std::string();
}

absl::Status Master::CheckMaster() const {
  if (is_master()) return absl::OkStatus();
  const std::string m = current_master();
  return absl::FailedPreconditionError(StrCat(
      "this is a standby master of cell ", options_.cell,
      m.empty() ? std::string("; no master holds the lock now") : StrCat("; the master is ", m)));
}

void Master::Event(std::string text) {
  absl::MutexLock lock(&mu_);
  // The same trouble every pass (a server refusing a tablet) is told once
  // every 30 s, not once a second.
  const int64_t now = env_->MonotonicMicros();
  constexpr int64_t kQuiet = 30'000'000;
  for (auto it = recent_.begin(); it != recent_.end();) {
    it = now - it->second > kQuiet ? recent_.erase(it) : std::next(it);
  }
  if (!recent_.emplace(text, now).second) return;
  MS_LOG_INFO("master {}: {}", options_.cell, text);
  events_.push_back(std::move(text));
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void Master::Kick() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
  if (wake_ && !wake_->HasBeenNotified()) wake_->Notify();
}

void Master::Loop() {
  while (true) {
    std::shared_ptr<absl::Notification> wake;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (!kicked_) wake = wake_ = std::make_shared<absl::Notification>();
    }
    // Until kicked, stopped or the interval is over (through the Env: the
    // simulator runs meanwhile).
    if (wake) env_->WaitFor(*wake, options_.reconcile_interval);
    {
      absl::MutexLock lock(&mu_);
      wake_.reset();
      if (stopping_) return;
      kicked_ = false;
    }
    if (!is_master()) continue;
    EnvMutexLock pass(env_, &pass_mu_);
    if (absl::Status s = Pass(); !s.ok())
      MS_LOG_WARN("master {}: reconcile: {}", options_.cell, s.ToString());
  }
}

absl::Status Master::ReconcileNow() {
  MS_RETURN_IF_ERROR(CheckMaster());
  EnvMutexLock pass(env_, &pass_mu_);
  return Pass();
}

std::string Master::NewTabletId(const std::string& table) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(env_->Random64()));
  return StrCat(table, "-", buf);
}

absl::StatusOr<std::map<std::string, TableSchema>> Master::ReadSchemas() {
  MS_ASSIGN_OR_RETURN(lock::Listing listing, Ask<lock::Listing>(env_, [&](auto cb) {
                        lock_->List(TablesDir(options_.cell), std::move(cb));
                      }));
  std::map<std::string, TableSchema> out;
  out[kMetadataTable] = MetadataSchema();
  for (const lock::FileInfo& f : listing.files) {
    const std::string name = f.path.substr(TablesDir(options_.cell).size());
    MS_ASSIGN_OR_RETURN(TableSchema s, DecodeTableFile(name, f.contents));
    out[name] = std::move(s);
  }
  return out;
}

void Master::ProbeServers() {
  const std::set<std::string> live = live_->servers();
  const int64_t now = env_->MonotonicMicros();
  for (auto it = probes_.begin(); it != probes_.end();) {
    it = live.contains(it->first) ? std::next(it) : probes_.erase(it);
  }
  for (auto it = probe_clients_.begin(); it != probe_clients_.end();) {
    it = live.contains(it->first) ? std::next(it) : probe_clients_.erase(it);
  }
  for (const std::string& s : live) {
    Probe& p = probes_[s];
    if (p.last_ok == 0) p.last_ok = now;
    std::string log;
    std::unique_ptr<TabletClient>& prober = probe_clients_[s];
    if (prober == nullptr) prober = Connect(s, options_.probe_timeout);
    absl::StatusOr<std::vector<TabletClient::TabletInfo>> listed = prober->ListTablets("", &log);
    if (listed.ok()) {
      p.reachable = true;
      p.last_ok = now;
      p.log = log;
      p.serving.clear();
      for (const auto& t : *listed) {
        if (t.load_error.empty()) p.serving[t.entry.id()] = t.size_bytes;
      }
      continue;
    }
    p.reachable = false;
    if (now - p.last_ok < absl::ToInt64Microseconds(options_.server_timeout)) continue;
    // Unreachable for too long while its file lives: make it dead. It stops
    // serving when it sees its file go (or loses its session); its tablets
    // wait server_ttl more, by when either has surely happened.
    const std::string path = ServersDir(options_.cell) + s;
    absl::StatusOr<std::optional<lock::FileInfo>> f =
        Ask<std::optional<lock::FileInfo>>(env_, [&](auto cb) { lock_->Get(path, std::move(cb)); });
    if (!f.ok() || !f->has_value()) continue;
    absl::StatusOr<bool> deleted =
        Ask<bool>(env_, [&](auto cb) { lock_->Delete(path, (*f)->version, std::move(cb)); });
    if (deleted.ok() && *deleted) {
      fenced_until_[s] = now + absl::ToInt64Microseconds(options_.server_ttl + absl::Seconds(1));
      Event(StrCat("server ", s, " unreachable for ", absl::FormatDuration(options_.server_timeout),
                   ": deleted its servers file (", listed.status().message(), ")"));
    }
  }
}

absl::Status Master::Assign(const std::string& server, const TabletRecord& record,
                            const TableSchema& schema) {
  std::unique_ptr<TabletClient>& c = assign_clients_[server];
  if (c == nullptr) c = Connect(server, options_.assign_timeout);
  // For the incarnation METADATA names: a restarted server at the same
  // address refuses it, and the next pass recovers the tablet elsewhere.
  return c->AssignTablet(EntryOf(record), schema, record.is_new, record.log);
}

bool Master::Reachable(const std::string& server) {
  auto p = probes_.find(server);
  return p != probes_.end() && p->second.reachable;
}

std::string Master::LeastLoaded() {
  std::string best;
  size_t best_count = SIZE_MAX;
  for (const auto& [s, p] : probes_) {
    if (!p.reachable || p.log.empty()) continue;
    const size_t n = p.serving.size() + assigned_this_pass_[s];
    if (n < best_count) {
      best = s;
      best_count = n;
    }
  }
  return best;
}

absl::Status Master::WriteRecord(const TabletRecord& record, const std::string& expected_id,
                                 const std::string& event) {
  if (IsRoot(record)) {
    return Ask<int64_t>(env_,
                        [&](auto cb) {
                          lock_->Put(RootFile(options_.cell), EncodeRootFile(record), 0,
                                     std::move(cb));
                        })
        .status();
  }
  absl::StatusOr<bool> matched;
  for (int attempt = 0; attempt < 3; ++attempt) {
    matched = client_.CheckAndMutateRow(
        kMetadataTable, RowKeyOf(record.location.table, record.location.end_row), IdIs(expected_id),
        RecordMutations(record, event, env_->NowMicros()), {});
    // An unknown outcome: writing the same record (same id) again is
    // harmless; a write that changes the id is the caller's to check.
    if (matched.ok() || record.location.tablet_id != expected_id ||
        !(absl::IsUnavailable(matched.status()) || absl::IsDeadlineExceeded(matched.status()))) {
      break;
    }
  }
  MS_RETURN_IF_ERROR(matched.status());
  if (!*matched) {
    return absl::AbortedError(StrCat("METADATA no longer names tablet ", expected_id, " of table ",
                                     record.location.table));
  }
  return absl::OkStatus();
}

absl::Status Master::CreateRecord(const TabletRecord& record, const std::string& event) {
  RowFilter any_id;
  any_id.families = {"loc"};
  any_id.qualifier_match = RowFilter::QualifierMatch::kExact;
  any_id.qualifier = "id";
  MS_ASSIGN_OR_RETURN(bool exists,
                      client_.CheckAndMutateRow(
                          kMetadataTable, RowKeyOf(record.location.table, record.location.end_row),
                          any_id, {}, RecordMutations(record, event, env_->NowMicros())));
  if (exists)
    return absl::AlreadyExistsError(StrCat("METADATA already has a tablet of ",
                                           record.location.table, " ending at \"",
                                           EscapeBytes(record.location.end_row), "\""));
  return absl::OkStatus();
}

absl::Status Master::SplitLog(const std::string& log) {
  if (split_logs_.contains(log)) return absl::OkStatus();
  const fs::path dir = fs::path(options_.data_root) / "logs" / log;
  if (!fs::exists(dir)) {
    split_logs_.insert(log);
    return absl::OkStatus();
  }
  const int64_t start = env_->MonotonicMicros();
  commitlog::CommitLogOptions o;
  o.dir = dir.string();
  o.read_only = true;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<commitlog::CommitLog> reader, commitlog::CommitLog::Open(o));
  // Sorted by tablet (then LSN, the log's order): one piece per tablet.
  std::map<std::string, std::string> pieces;
  uint64_t records = 0, bytes = 0;
  MS_RETURN_IF_ERROR(reader->Replay(0, [&](const commitlog::Record& r) -> absl::Status {
    if (r.tablet_id.empty())
      return absl::OkStatus();  // a stand-in for a write refused on a full disk
    commitlog::AppendRecord(&pieces[std::string(r.tablet_id)], r.lsn, r.tablet_id, r.payload);
    ++records;
    bytes += r.payload.size();
    return absl::OkStatus();
  }));
  reader.reset();
  for (const auto& [id, data] : pieces) {
    if (ValidateName(id, "tablet id").ok() == false) {
      return absl::DataLossError(StrCat("commit log ", dir.string(),
                                        " holds records of a malformed tablet id \"",
                                        EscapeBytes(id), "\""));
    }
    const fs::path piece_dir = fs::path(options_.data_root) / "recovered" / id;
    std::error_code ec;
    fs::create_directories(piece_dir, ec);
    if (ec)
      return absl::InternalError(StrCat("cannot create ", piece_dir.string(), ": ", ec.message()));
    MS_RETURN_IF_ERROR(WriteFileAtomically((piece_dir / log).string(), data));
  }
  // Every record is in a piece now: the log itself is no longer needed.
  std::error_code ec;
  fs::remove_all(dir, ec);
  split_logs_.insert(log);
  Event(StrCat("split commit log ", log, ": ", records, " records (", bytes, " bytes) into ",
               pieces.size(), " tablet pieces in ", (env_->MonotonicMicros() - start) / 1000,
               " ms"));
  return absl::OkStatus();
}

void Master::EnsureServed(TabletRecord& record, const std::map<std::string, TableSchema>& schemas) {
  auto schema = schemas.find(record.location.table);
  if (schema == schemas.end()) {
    Event(StrCat("tablet ", record.location.tablet_id, " belongs to table ", record.location.table,
                 ", which has no schema in the lock service; not assigned"));
    return;
  }
  const int64_t now = env_->MonotonicMicros();
  if (record.assigned()) {
    auto p = probes_.find(record.location.server);
    if (p != probes_.end() && p->second.log == record.log && !record.log.empty()) {
      // Its server is alive (the same incarnation): serving it, or told again.
      if (!p->second.reachable || p->second.serving.contains(record.location.tablet_id)) return;
      absl::Status s = Assign(record.location.server, record, schema->second);
      if (!s.ok()) {
        Event(StrCat("tablet ", record.location.tablet_id, ": ", record.location.server,
                     " did not load it: ", s.message()));
        return;
      }
      p->second.serving[record.location.tablet_id] = kUnknownSize;
      if (record.is_new) {
        record.is_new = false;
        (void)WriteRecord(record, record.location.tablet_id, "");
      }
      return;
    }
    if (p != probes_.end() && p->second.log.empty()) return;  // not probed yet
    if (auto f = fenced_until_.find(record.location.server);
        f != fenced_until_.end() && f->second > now)
      return;
    // Its server is gone (or restarted as a new incarnation): its log holds
    // what the tablet had not flushed.
    if (!record.log.empty()) {
      if (absl::Status s = SplitLog(record.log); !s.ok()) {
        Event(StrCat("cannot split commit log ", record.log, " of dead server ",
                     record.location.server, ": ", s.ToString(),
                     "; its tablets stay unassigned until it is repaired"));
        return;
      }
    }
  }
  const std::string target = LeastLoaded();
  if (target.empty()) return;  // no live server yet
  const std::string from = record.location.server;
  TabletRecord next = record;
  next.location.server = target;
  next.log = probes_[target].log;
  const std::string event =
      from.empty() ? StrCat("assigned to ", target)
                   : StrCat("recovered from dead server ", from, ", assigned to ", target);
  if (absl::Status s = WriteRecord(next, record.location.tablet_id, event); !s.ok()) {
    Event(StrCat("tablet ", record.location.tablet_id,
                 ": recording its assignment failed: ", s.message()));
    return;
  }
  record = next;
  ++assigned_this_pass_[target];
  absl::Status s = Assign(target, record, schema->second);
  if (!s.ok()) {
    Event(StrCat("tablet ", record.location.tablet_id, ": ", target,
                 " did not load it: ", s.message()));
    return;
  }
  probes_[target].serving[record.location.tablet_id] = kUnknownSize;
  Event(StrCat("tablet ", record.location.tablet_id, " (", record.location.table, ") ", event));
  if (record.is_new) {
    record.is_new = false;
    (void)WriteRecord(record, record.location.tablet_id, "");
  }
}

void Master::FixSplits(std::vector<TabletRecord>& records) {
  // A merge interrupted after its first write: the left tablet's row is
  // covered by the merged tablet's, which starts where the left one did.
  for (size_t i = 1; i < records.size(); ++i) {
    const TabletRecord& prev = records[i - 1];
    const TabletRecord& r = records[i];
    if (prev.location.table != r.location.table || r.location.start_row > prev.location.start_row)
      continue;
    RowFilter still = IdIs(prev.location.tablet_id);
    absl::StatusOr<bool> deleted = client_.CheckAndMutateRow(
        kMetadataTable, RowKeyOf(prev.location.table, prev.location.end_row), still,
        {Mutation::DeleteRow()}, {});
    if (deleted.ok() && *deleted) {
      Event(StrCat("completed an interrupted merge: removed the row of ", prev.location.tablet_id,
                   ", covered by ", r.location.tablet_id));
      records.erase(records.begin() + static_cast<long>(i - 1));
      --i;
    }
  }
  for (size_t i = 0; i < records.size(); ++i) {
    TabletRecord& r = records[i];
    if (r.split_left.empty()) continue;
    const bool has_prev = i > 0 && records[i - 1].location.table == r.location.table;
    const std::string prev_end = has_prev ? records[i - 1].location.end_row : std::string();
    if (prev_end != r.location.start_row) {
      // The left child's row was never written: write it.
      TabletRecord left = r;
      left.location.start_row = prev_end;
      left.location.end_row = r.location.start_row;
      left.location.tablet_id = r.split_left;
      left.split_left.clear();
      if (absl::Status s =
              CreateRecord(left, StrCat("split from its parent (completed by the master)"));
          !s.ok()) {
        Event(StrCat("completing the split of ", r.location.tablet_id, ": ", s.message()));
        continue;
      }
      records.insert(records.begin() + static_cast<long>(i), left);
      ++i;
      Event(StrCat("completed an interrupted split: left child ", left.location.tablet_id));
    }
    TabletRecord& right = records[i];
    right.split_left.clear();
    (void)WriteRecord(right, right.location.tablet_id, "");
  }
}

absl::Status Master::Pass() {
  ++passes_;
  metadata_ready_ = false;
  assigned_this_pass_.clear();
  ProbeServers();
  MS_ASSIGN_OR_RETURN(auto schemas, ReadSchemas());

  // The root tablet: /<cell>/root, created with the first METADATA tablet
  // in a new cell.
  MS_ASSIGN_OR_RETURN(std::optional<lock::FileInfo> root_file,
                      Ask<std::optional<lock::FileInfo>>(env_, [&](auto cb) {
                        lock_->Get(RootFile(options_.cell), std::move(cb));
                      }));
  TabletRecord root;
  if (!root_file) {
    if (LeastLoaded().empty()) return absl::OkStatus();  // wait for a server
    root.location.table = kMetadataTable;
    root.location.end_row = kRootEndRow;
    root.location.tablet_id = kRootTabletId;
    root.is_new = true;
    MS_ASSIGN_OR_RETURN(bool created, Ask<bool>(env_, [&](auto cb) {
                          lock_->Create(RootFile(options_.cell), EncodeRootFile(root), 0,
                                        std::move(cb));
                        }));
    if (!created) return absl::AbortedError("another master created the root tablet meanwhile");
    Event("new cell: created the root tablet");
  } else {
    MS_ASSIGN_OR_RETURN(root, DecodeRootFile(root_file->contents));
  }
  EnsureServed(root, schemas);
  if (!root.assigned() || !Reachable(root.location.server) ||
      !probes_[root.location.server].serving.contains(root.location.tablet_id)) {
    return absl::UnavailableError(
        StrCat("the root tablet is not served yet",
               root.assigned() ? StrCat(" (assigned to ", root.location.server, ")") : ""));
  }

  std::vector<TabletRecord> metas;
  MS_RETURN_IF_ERROR(client_.ReadMetadataTablet(root.location, &metas));
  if (metas.empty()) {
    TabletRecord first;
    first.location.table = kMetadataTable;
    first.location.start_row = kRootEndRow;
    first.location.tablet_id = NewTabletId(kMetadataTable);
    first.is_new = true;
    MS_RETURN_IF_ERROR(CreateRecord(first, "created"));
    metas.push_back(first);
  }
  FixSplits(metas);
  std::vector<TabletRecord> all = {root};
  bool complete = true;
  std::vector<TabletRecord> users;
  for (TabletRecord& m : metas) {
    EnsureServed(m, schemas);
    all.push_back(m);
    if (!m.assigned() || !Reachable(m.location.server) ||
        !probes_[m.location.server].serving.contains(m.location.tablet_id)) {
      complete = false;
      continue;
    }
    std::vector<TabletRecord> rows;
    if (absl::Status s = client_.ReadMetadataTablet(m.location, &rows); !s.ok()) {
      complete = false;
      Event(StrCat("reading METADATA tablet ", m.location.tablet_id, ": ", s.message()));
      continue;
    }
    users.insert(users.end(), rows.begin(), rows.end());
  }
  FixSplits(users);
  for (TabletRecord& u : users) {
    EnsureServed(u, schemas);
    all.push_back(u);
  }

  // What State() reports.
  CellState state;
  state.set_master(address_);
  for (const auto& [s, p] : probes_) {
    ServerState* ss = state.add_servers();
    ss->set_address(s);
    ss->set_log(p.log);
    ss->set_tablets(static_cast<int>(p.serving.size()));
    ss->set_reachable(p.reachable);
  }
  for (const TabletRecord& r : all) {
    TabletState* t = state.add_tablets();
    t->set_table(r.location.table);
    t->set_start_row(r.location.start_row);
    t->set_end_row(r.location.end_row);
    t->set_id(r.location.tablet_id);
    t->set_server(r.location.server);
    t->set_log(r.log);
    auto p = probes_.find(r.location.server);
    if (p != probes_.end()) {
      auto it = p->second.serving.find(r.location.tablet_id);
      t->set_serving(it != p->second.serving.end());
      if (it != p->second.serving.end() && it->second < kUnknownSize) t->set_size_bytes(it->second);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& e : events_) state.add_events(e);
    state.set_reconciles(passes_);
    state_ = std::move(state);
  }
  metadata_ready_ = complete;
  const int64_t now = env_->MonotonicMicros();
  std::map<std::string, int64_t> seen;
  for (const TabletRecord& r : all) {
    auto it = first_seen_.find(r.location.tablet_id);
    seen[r.location.tablet_id] = it == first_seen_.end() ? now : it->second;
  }
  first_seen_ = std::move(seen);
  if (complete) {
    if (now - elected_at_ >= absl::ToInt64Microseconds(options_.balance_delay)) {
      const std::set<std::string> merging = MergeSmall(users, schemas);
      Balance(users, schemas, merging);
    }
    if (passes_ % 10 == 1) CollectGarbage(all);
  }
  return absl::OkStatus();
}

// ---- operations ----------------------------------------------------------------------------

absl::Status Master::CreateTable(const TableSchema& schema,
                                 const std::vector<std::string>& initial_splits) {
  MS_RETURN_IF_ERROR(CheckMaster());
  MS_RETURN_IF_ERROR(ValidateName(schema.name(), "table"));
  if (schema.name() == kMetadataTable)
    return absl::InvalidArgumentError("table name METADATA is the cell's own");
  MS_RETURN_IF_ERROR(CompiledSchema::Compile(schema).status());
  for (size_t i = 0; i < initial_splits.size(); ++i) {
    if (initial_splits[i].empty() || (i > 0 && initial_splits[i] <= initial_splits[i - 1])) {
      return absl::InvalidArgumentError("initial splits must be non-empty rows in ascending order");
    }
  }
  EnvMutexLock pass(env_, &pass_mu_);
  absl::Status ready = Pass();
  if (!ready.ok() || !metadata_ready_) {
    return absl::UnavailableError(
        StrCat("cell ", options_.cell, " is not ready: its METADATA is not served yet",
               ready.ok() ? std::string() : StrCat(" (", ready.message(), ")"),
               "; are its tablet servers up?"));
  }
  MS_ASSIGN_OR_RETURN(bool created, Ask<bool>(env_, [&](auto cb) {
                        lock_->Create(TableFile(options_.cell, schema.name()),
                                      EncodeTableFile(schema), 0, std::move(cb));
                      }));
  if (!created) return absl::AlreadyExistsError(StrCat("table ", schema.name(), " already exists"));
  std::string start;
  for (size_t i = 0; i <= initial_splits.size(); ++i) {
    TabletRecord r;
    r.location.table = schema.name();
    r.location.start_row = start;
    r.location.end_row = i < initial_splits.size() ? initial_splits[i] : std::string();
    r.location.tablet_id = NewTabletId(schema.name());
    r.is_new = true;
    MS_RETURN_IF_ERROR(CreateRecord(r, "created"));
    start = r.location.end_row;
  }
  Event(StrCat("created table ", schema.name(), " with ", initial_splits.size() + 1, " tablets"));
  return Pass();
}

absl::Status Master::DeleteTable(const std::string& name) {
  MS_RETURN_IF_ERROR(CheckMaster());
  if (name == kMetadataTable) return absl::InvalidArgumentError("METADATA cannot be deleted");
  EnvMutexLock pass(env_, &pass_mu_);
  MS_ASSIGN_OR_RETURN(bool deleted, Ask<bool>(env_, [&](auto cb) {
                        lock_->Delete(TableFile(options_.cell, name), 0, std::move(cb));
                      }));
  if (!deleted) return absl::NotFoundError(StrCat("table ", name, " does not exist"));
  MS_ASSIGN_OR_RETURN(std::vector<TabletRecord> records, client_.Tablets(name));
  std::set<std::string> servers;
  for (const TabletRecord& r : records) {
    if (r.location.table != name) continue;
    if (r.assigned()) {
      (void)client_.Server(r.location.server)->UnloadTablet(r.location.tablet_id);
      servers.insert(r.location.server);
    }
    MS_RETURN_IF_ERROR(client_.MutateRow(kMetadataTable, RowKeyOf(name, r.location.end_row),
                                         {Mutation::DeleteRow()}));
  }
  for (const std::string& s : servers) (void)client_.Server(s)->DeleteTable(name);
  Event(StrCat("deleted table ", name));
  return absl::OkStatus();
}

absl::Status Master::UpdateTable(const TableSchema& schema) {
  MS_RETURN_IF_ERROR(CheckMaster());
  EnvMutexLock pass(env_, &pass_mu_);
  MS_ASSIGN_OR_RETURN(auto schemas, ReadSchemas());
  auto old = schemas.find(schema.name());
  if (old == schemas.end() || schema.name() == kMetadataTable) {
    return absl::NotFoundError(StrCat("table ", schema.name(), " does not exist"));
  }
  MS_ASSIGN_OR_RETURN(auto from, CompiledSchema::Compile(old->second));
  MS_ASSIGN_OR_RETURN(auto to, CompiledSchema::Compile(schema));
  MS_RETURN_IF_ERROR(CompiledSchema::CheckChange(*from, *to));
  MS_RETURN_IF_ERROR(Ask<int64_t>(env_, [&](auto cb) {
                       lock_->Put(TableFile(options_.cell, schema.name()), EncodeTableFile(schema),
                                  0, std::move(cb));
                     }).status());
  // Servers loading a tablet later get the new schema with it.
  MS_ASSIGN_OR_RETURN(std::vector<TabletRecord> records, client_.Tablets(schema.name()));
  std::set<std::string> servers;
  for (const TabletRecord& r : records) {
    if (r.location.table == schema.name() && r.assigned()) servers.insert(r.location.server);
  }
  for (const std::string& s : servers) MS_RETURN_IF_ERROR(client_.Server(s)->UpdateTable(schema));
  Event(StrCat("updated the schema of table ", schema.name()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TableSchema>> Master::ListTables() {
  MS_ASSIGN_OR_RETURN(auto schemas, ReadSchemas());
  std::vector<TableSchema> out;
  for (auto& [name, s] : schemas) {
    if (name != kMetadataTable) out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<TabletEntry>> Master::SplitTablet(const std::string& tablet_id,
                                                             const std::string& row) {
  MS_RETURN_IF_ERROR(CheckMaster());
  MS_ASSIGN_OR_RETURN(std::vector<TabletRecord> records, client_.Tablets());
  for (const TabletRecord& r : records) {
    if (r.location.tablet_id != tablet_id) continue;
    if (r.location.table == kMetadataTable && IsRoot(r))
      return absl::InvalidArgumentError("the root tablet never splits");
    if (!r.assigned())
      return absl::UnavailableError(StrCat("tablet ", tablet_id, " is not assigned yet"));
    MS_ASSIGN_OR_RETURN(std::vector<TabletEntry> children,
                        client_.Server(r.location.server)->SplitTablet(tablet_id, row));
    Kick();
    return children;
  }
  return absl::NotFoundError(StrCat("no tablet ", tablet_id, " in cell ", options_.cell));
}

absl::Status Master::MoveTablet(const std::string& tablet_id, const std::string& server) {
  MS_RETURN_IF_ERROR(CheckMaster());
  EnvMutexLock pass(env_, &pass_mu_);
  ProbeServers();
  MS_ASSIGN_OR_RETURN(auto schemas, ReadSchemas());
  MS_ASSIGN_OR_RETURN(std::vector<TabletRecord> records, client_.Tablets());
  for (const TabletRecord& r : records) {
    if (r.location.tablet_id != tablet_id) continue;
    if (IsRoot(r)) {
      return absl::InvalidArgumentError("the root tablet moves only when its server dies");
    }
    return Move(r, server, schemas);
  }
  return absl::NotFoundError(StrCat("no tablet ", tablet_id, " in cell ", options_.cell));
}

void Master::ReportSplit(const ReportSplitRequest& report) {
  Event(StrCat(report.server(), " split tablet ", report.parent().id(), " into ",
               report.children_size() > 0 ? report.children(0).id() : "?", " and ",
               report.children_size() > 1 ? report.children(1).id() : "?"));
  Kick();
}

absl::StatusOr<CellState> Master::State() {
  MS_RETURN_IF_ERROR(CheckMaster());
  absl::MutexLock lock(&mu_);
  CellState s = state_;
  s.clear_events();
  for (const std::string& e : events_) s.add_events(e);
  return s;
}

}  // namespace megastore::storage::cell
