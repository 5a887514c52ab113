// A simulated deployment: N datacenters, each a Bigtable (a real tablet
// server's tables, prefixed with the datacenter's name), a lock service, a
// coordinator and a replication server, on one SimEnv and SimNetwork.
// Used by the simulator's runs (cluster.cc) and by tests of the layers
// above replication.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/buggify.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator.pb.h"
#include "replication/group_client.h"
#include "replication/replication_server.h"
#include "sim/cluster.h"
#include "sim/world.h"
#include "storage/client/bigtable_client.h"
#include "storage/lock/lock_table.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::sim {

using replication::GroupClient;
using replication::GroupClientOptions;
using replication::GroupRef;
using replication::LogPosition;
using replication::ReadLevel;
using replication::ReplicaType;

// The table the simulator's own workload uses (families "p" and "e").
inline constexpr char kTable[] = "groups";
inline constexpr char kDataFamily[] = "e";

inline absl::Duration Ms(double ms) { return absl::Microseconds(static_cast<int64_t>(ms * 1000)); }

inline std::vector<std::vector<absl::Duration>> LatencyMatrix(const SimOptions& o) {
  const size_t n = o.replicas.size();
  std::vector<std::vector<absl::Duration>> m(n, std::vector<absl::Duration>(n));
  const double defaults[3][3] = {{0, 10, 30}, {10, 0, 25}, {30, 25, 0}};
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      double ms = a == b ? o.local_ms : o.default_wan_ms;
      if (a != b && a < 3 && b < 3) ms = defaults[a][b];
      if (a < o.latency_ms.size() && b < o.latency_ms[a].size() && a != b) ms = o.latency_ms[a][b];
      m[a][b] = Ms(ms);
    }
  }
  return m;
}

inline std::string DcName(size_t i) { return std::string(1, static_cast<char>('A' + i)); }

class Cluster {
 public:
  explicit Cluster(const SimOptions& o) : options_(o), env_(o.seed), net_(&env_, LatencyMatrix(o)) {
    if (options_.vary_timing) DrawTiming();
  }

  // Creates the tables (kTable and `extra`, each in every datacenter) and
  // starts every datacenter's servers.
  absl::Status Open(const std::vector<storage::TableSchema>& extra = {}) {
    env_.Trace(StrCat("coordinator lease ", absl::FormatDuration(options_.coordinator_lease),
                      ", renew every ", absl::FormatDuration(options_.renew_interval),
                      ", RPC timeout ", absl::FormatDuration(options_.coordinator_rpc_timeout),
                      ", clock drift up to ", options_.max_clock_drift));
    storage::TabletServerOptions to;
    to.data_dir = dir_.path();
    to.sync_log = false;
    // Off: the maintenance thread would use the simulation's Env (timers,
    // randomness) from a thread of its own.
    to.maintenance_interval = absl::ZeroDuration();
    to.resources.block_cache_bytes = 8 << 20;
    to.resources.in_memory_cache_bytes = 1 << 20;
    to.resources.write_buffer_bytes = 64 << 20;
    to.resources.background_threads = 1;
    to.tuning.write_buffer_bytes = 4 << 20;
    // The tablet server's clock (server timestamps, GC ages, flush ages) is
    // the simulation's, and its commit log writes in the writer's own call:
    // a seed's data replays exactly. Only RocksDB's flushes and compactions
    // run on threads of their own; they change no result.
    to.inline_commit_log = true;
    MS_ASSIGN_OR_RETURN(tablets_, storage::TabletServer::Open(to, &env_));
    inproc_ = std::make_unique<storage::InProcessBigtable>(tablets_.get());
    for (size_t i = 0; i < options_.replicas.size(); ++i) {
      storage::TableSchema schema;
      schema.set_name(StrCat(DcName(i), ".", kTable));
      *schema.add_families() = replication::LogFamilySchema();
      *schema.add_families() = replication::DataFamilySchema(kDataFamily);
      MS_RETURN_IF_ERROR(tablets_->CreateTable(schema));
      for (storage::TableSchema t : extra) {
        t.set_name(StrCat(DcName(i), ".", t.name()));
        MS_RETURN_IF_ERROR(tablets_->CreateTable(t));
      }
      auto dc = std::make_unique<Dc>();
      dc->index = static_cast<int>(i);
      dc->name = DcName(i);
      dc->type = options_.replicas[i];
      dc->bigtable =
          std::make_unique<SimBigtable>(&env_, inproc_.get(), dc->name + ".", Ms(options_.disk_ms));
      dc->coord_env = std::make_unique<ProcessEnv>(&env_, Drift());
      dc->lock_env = std::make_unique<ProcessEnv>(&env_, Drift());
      env_.Trace(StrCat("clock rates at ", dc->name, ": coordinator ", dc->coord_env->drift(),
                        ", lock service ", dc->lock_env->drift()));
      dc->locks = std::make_unique<storage::lock::LockTable>(dc->lock_env.get());
      dcs_.push_back(std::move(dc));
    }
    for (auto& dc : dcs_) {
      net_.AddNode(LockAddr(dc->index), dc->index);
      net_.AddNode(ReplAddr(dc->index), dc->index);
      net_.AddNode(CoordAddr(dc->index), dc->index);
      ServeLocks(dc->index);
      StartRepl(dc->index);
      if (dc->type == ReplicaType::kFull) StartCoordinator(dc->index);
    }
    return absl::OkStatus();
  }

  SimEnv& env() { return env_; }
  SimNetwork& net() { return net_; }

  // The faults the end-to-end tests run under: 3% message loss, 3%
  // duplication and 4 ms jitter on every link, and, every 0.5-1.5 s until
  // `until_micros` of virtual time, a random datacenter's replication server
  // or coordinator crashed and restarted 0.3-1.3 s later.
  void StartChaos(int64_t until_micros) {
    LinkFaults f;
    f.loss = 0.03;
    f.duplicate = 0.03;
    f.jitter = absl::Milliseconds(4);
    net_.set_faults(f);
    chaos_until_ = until_micros;
    env_.Schedule(absl::Milliseconds(200), [this] { Chaos(); });
  }
  // Ends the faults: links healed and clean, every server running.
  void StopChaos() {
    chaos_until_ = 0;
    net_.HealAll();
    net_.set_faults({});
    for (int dc = 0; dc < static_cast<int>(size()); ++dc) {
      StartRepl(dc);
      StartCoordinator(dc);
    }
  }
  const SimOptions& options() const { return options_; }
  size_t size() const { return dcs_.size(); }
  ReplicaType type(int dc) const { return dcs_[dc]->type; }

  static std::string LockAddr(int dc) { return DcName(dc) + "/lock"; }
  static std::string ReplAddr(int dc) { return DcName(dc) + "/repl"; }
  static std::string CoordAddr(int dc) { return DcName(dc) + "/coord"; }

  GroupClientOptions ClientOptions(int local) const {
    GroupClientOptions o;
    for (const auto& dc : dcs_) {
      replication::ReplicaInfo r;
      r.name = dc->name;
      r.type = dc->type;
      r.replication = ReplAddr(dc->index);
      r.coordinator = dc->type == ReplicaType::kFull ? CoordAddr(dc->index) : "";
      r.lock_service = LockAddr(dc->index);
      o.replicas.push_back(r);
    }
    o.local = local;
    o.rpc_timeout = absl::Milliseconds(250);
    o.max_backoff = absl::Milliseconds(40);
    o.deadline = absl::Seconds(5);
    o.combine = options_.combine;
    o.forward = options_.forward;
    return o;
  }

  void CrashLocks(int i) { net_.Crash(LockAddr(i)); }
  // Brings a crashed lock service back with its leases (as if durable).
  void StartLocks(int i) {
    if (net_.up(LockAddr(i))) return;
    net_.Restart(LockAddr(i));
    ServeLocks(i);
  }
  // The lock service restarts and forgets every lease: it stays quiet for
  // the longest lease it granted plus the drift margin (as megastored's
  // lock role does from its state file).
  void ForgetLocks(int i) {
    net_.Crash(LockAddr(i));
    net_.Restart(LockAddr(i));
    storage::lock::LockTableOptions o;
    o.max_clock_drift = options_.max_clock_drift;
    o.quiet_period =
        storage::lock::QuietPeriod(options_.coordinator_lease, options_.max_clock_drift);
    dcs_[i]->locks = std::move(storage::lock::LockTable::Open(dcs_[i]->lock_env.get(), o)).value();
    ServeLocks(i);
    env_.Trace(StrCat("lock service ", DcName(i), " restarted and forgot its leases"));
  }

  void ServeLocks(int i) {
    storage::lock::LockTable* locks = dcs_[i]->locks.get();
    for (std::string_view m : storage::lock::LockTable::kMethods) {
      net_.SetHandler(LockAddr(i), m, [locks, m](std::string req, Responder respond) {
        locks->Serve(m, std::move(req), std::move(respond));
      });
    }
  }

  // Starts the replication server of datacenter i, unless it runs.
  void StartRepl(int i) {
    Dc& dc = *dcs_[i];
    if (dc.repl) return;
    net_.Restart(ReplAddr(i));
    replication::ReplicationServerOptions ro;
    ro.cluster = ClientOptions(i);
    ro.sweep_interval = absl::Seconds(1);
    ro.sweep_age = absl::Seconds(1);
    ro.cleanup.enabled = options_.log_cleanup;
    ro.cleanup.require_backup = true;
    ro.cleanup.keep_positions = 2;
    ro.cleanup.keep_age = absl::Seconds(1);
    ro.cleanup.max_positions = 6;
    ro.cleanup.interval = absl::Milliseconds(700);
    dc.repl = std::make_unique<replication::ReplicationServer>(
        &env_, net_.TransportFor(ReplAddr(i)), dc.bigtable.get(), ro);
    replication::ReplicationServer* server = dc.repl.get();
    for (std::string_view m : replication::ReplicationServer::kMethods) {
      net_.SetHandler(ReplAddr(i), m, [server, m](std::string req, Responder respond) {
        server->Serve(m, std::move(req), std::move(respond));
      });
    }
    server->Start();
  }

  // Starts the coordinator of datacenter i, unless it runs.
  void StartCoordinator(int i) {
    Dc& dc = *dcs_[i];
    if (dc.coord) return;
    net_.Restart(CoordAddr(i));
    coordinator::CoordinatorOptions co;
    co.name = dc.name;
    for (const auto& other : dcs_)
      if (other->index != i) co.lock_services.push_back(LockAddr(other->index));
    co.lease = options_.coordinator_lease;
    co.renew_interval = options_.renew_interval;
    co.rpc_timeout = options_.coordinator_rpc_timeout;
    co.max_clock_drift = options_.max_clock_drift;
    dc.coord = std::make_unique<coordinator::Coordinator>(dc.coord_env.get(),
                                                          net_.TransportFor(CoordAddr(i)), co);
    coordinator::Coordinator* c = dc.coord.get();
    for (std::string_view m : coordinator::Coordinator::kMethods) {
      net_.SetHandler(CoordAddr(i), m, [this, i, c, m](std::string req, Responder respond) {
        if (m == "coord.Check" && on_valid_) {
          // The invariant is checked at the moment of the answer.
          coordinator::CoordinatorRequest r;
          if (r.ParseFromString(req)) {
            respond = [this, i, root = r.root(),
                       respond = std::move(respond)](absl::StatusOr<std::string> reply) mutable {
              coordinator::CoordinatorReply cr;
              if (on_valid_ && reply.ok() && cr.ParseFromString(*reply) && cr.valid())
                on_valid_(i, root);
              respond(std::move(reply));
            };
          }
        }
        c->Serve(m, std::move(req), std::move(respond));
      });
    }
    c->Start();
  }

  // Called whenever a coordinator answers "valid" for a group (dc, root).
  void set_on_valid(std::function<void(int, const std::string&)> fn) { on_valid_ = std::move(fn); }

  // How far replica `dc` has a group's log: the highest position it has
  // accepted a value for, learned or applied (a mere promise does not count).
  absl::StatusOr<uint64_t> HighestHeld(int dc, const std::string& root) {
    MS_ASSIGN_OR_RETURN(std::optional<storage::Row> row,
                        CheckerRead(dc, root, replication::kLogFamily));
    uint64_t held = 0;
    if (!row) return held;
    for (const storage::Cell& c : row->cells) {
      if (c.qualifier == "S:applied") held = std::max(held, static_cast<uint64_t>(c.timestamp));
      if (c.qualifier.size() != 10 || c.qualifier[0] != 'L') continue;
      uint64_t pos = 0;
      for (int k = 1; k < 9; ++k) pos = (pos << 8) | static_cast<uint8_t>(c.qualifier[k]);
      if (c.qualifier[9] == 'l') held = std::max(held, pos);
      if (c.qualifier[9] == 'a') {
        replication::AcceptorRecord a;
        if (!a.ParseFromString(c.value)) return absl::DataLossError("unreadable acceptor record");
        if (a.has_accepted()) held = std::max(held, pos);
      }
    }
    return held;
  }

  void CrashRepl(int i) {
    Dc& dc = *dcs_[i];
    if (!dc.repl) return;
    net_.Crash(ReplAddr(i));
    dc.repl->Stop();
    graveyard_repl_.push_back(std::move(dc.repl));
  }

  void CrashCoordinator(int i) {
    Dc& dc = *dcs_[i];
    if (!dc.coord) return;
    net_.Crash(CoordAddr(i));
    dc.coord->Stop();
    graveyard_coord_.push_back(std::move(dc.coord));
  }

  // Datacenter i loses its copy of the key-value table: the table is
  // dropped and made again empty, as a replaced disk would leave it (no
  // tombstones). Its log goes with it, so only a replica that does not
  // vote may lose it (a voter would forget its promises).
  absl::Status WipeTable(int i) {
    if (replication::Votes(dcs_[i]->type))
      return absl::InvalidArgumentError("a voting replica's log must not be wiped");
    const std::string name = StrCat(DcName(i), ".", kTable);
    MS_ASSIGN_OR_RETURN(storage::TableSchema schema, tablets_->GetTable(name));
    MS_RETURN_IF_ERROR(tablets_->DeleteTable(name));
    MS_RETURN_IF_ERROR(tablets_->CreateTable(schema));
    // Writes still queued for the old disk are lost with it (a late one
    // would put an applied record from before the loss over the empty table).
    dcs_[i]->bigtable->DropQueuedWrites();
    env_.Trace(StrCat("datacenter ", DcName(i), " lost its copy of ", kTable));
    return absl::OkStatus();
  }

  // Every replica's replication servers that ran, the crashed ones too.
  uint64_t PositionsCleaned() const {
    uint64_t n = 0;
    for (const auto& dc : dcs_)
      if (dc->repl) n += dc->repl->stats().positions_removed;
    for (const auto& r : graveyard_repl_) n += r->stats().positions_removed;
    return n;
  }

  // What the replication servers did as hot groups' homes, and the
  // positions they learned on accept, summed over every one that ran.
  replication::ReplicationServer::Stats HomeStats() const {
    replication::ReplicationServer::Stats sum;
    auto add = [&sum](const replication::ReplicationServer& r) {
      const replication::ReplicationServer::Stats s = r.stats();
      sum.home_commits += s.home_commits;
      sum.home_entries += s.home_entries;
      sum.home_combined += s.home_combined;
      sum.learned_on_accept += s.learned_on_accept;
    };
    for (const auto& dc : dcs_)
      if (dc->repl) add(*dc->repl);
    for (const auto& r : graveyard_repl_) add(*r);
    return sum;
  }

  bool repl_up(int i) const { return dcs_[i]->repl != nullptr; }
  bool coord_up(int i) const { return dcs_[i]->coord != nullptr; }
  coordinator::Coordinator* coord(int i) { return dcs_[i]->coord.get(); }
  SimBigtable* bigtable(int i) { return dcs_[i]->bigtable.get(); }

  // Reads replica `dc`'s copy of a group's log straight from its Bigtable.
  absl::StatusOr<std::map<uint64_t, std::string>> LearnedLog(int dc, const std::string& root,
                                                             uint64_t* applied) {
    MS_ASSIGN_OR_RETURN(std::optional<storage::Row> row,
                        CheckerRead(dc, root, replication::kLogFamily));
    std::map<uint64_t, std::string> out;
    *applied = 0;
    if (!row) return out;
    for (const storage::Cell& c : row->cells) {
      if (c.qualifier == "S:applied") {
        replication::AppliedRecord a;
        if (!a.ParseFromString(c.value)) return absl::DataLossError("bad applied record");
        *applied = a.position();
      }
      if (c.qualifier.size() == 10 && c.qualifier[0] == 'L' && c.qualifier[9] == 'l') {
        uint64_t pos = 0;
        for (int k = 1; k < 9; ++k) pos = (pos << 8) | static_cast<uint8_t>(c.qualifier[k]);
        out[pos] = c.value;
      }
    }
    return out;
  }

  // The latest value of an entity at replica `dc`.
  absl::StatusOr<std::optional<std::string>> LatestValue(int dc, const std::string& row) {
    MS_ASSIGN_OR_RETURN(std::optional<storage::Row> r, CheckerRead(dc, row, kDataFamily));
    if (!r || r->cells.empty()) return std::optional<std::string>();
    return std::optional<std::string>(r->cells[0].value);
  }

 private:
  // The checkers' read of one row of replica `dc`, straight from its
  // Bigtable: the newest cell of each column of `family`. Fault points stay
  // quiet for it (the checker is not under test).
  absl::StatusOr<std::optional<storage::Row>> CheckerRead(int dc, const std::string& row,
                                                          std::string family) {
    buggify::Suspend checker;
    storage::ReadOptions o;
    o.filter.families = {std::move(family)};
    o.filter.cells_per_column = 1;
    return tablets_->ReadRow(StrCat(DcName(dc), ".", kTable), row, o);
  }

  void Chaos() {
    if (env_.now() >= chaos_until_) return;
    const int dc = static_cast<int>(env_.Uniform(size()));
    if (env_.Chance(0.5)) {
      CrashRepl(dc);
      env_.Schedule(absl::Milliseconds(300 + env_.Uniform(1000)), [this, dc] { StartRepl(dc); });
    } else {
      CrashCoordinator(dc);
      env_.Schedule(absl::Milliseconds(300 + env_.Uniform(1000)),
                    [this, dc] { StartCoordinator(dc); });
    }
    env_.Schedule(absl::Milliseconds(500 + env_.Uniform(1000)), [this] { Chaos(); });
  }
  int64_t chaos_until_ = 0;

  // Draws the seed's coordinator timing from the ranges the configuration
  // accepts (CoordinatorOptions::Validate): lease 0.5-4 s, RPC timeout
  // 50-500 ms, renew interval from a tenth of the lease up to what still
  // outlasts a renewal.
  void DrawTiming() {
    for (int attempt = 0; attempt < 100; ++attempt) {
      coordinator::CoordinatorOptions co;
      co.max_clock_drift = options_.max_clock_drift;
      co.lease = absl::Milliseconds(500 + env_.Uniform(3501));
      co.rpc_timeout = absl::Milliseconds(50 + env_.Uniform(451));
      const int64_t lease_ms = absl::ToInt64Milliseconds(co.lease);
      co.renew_interval = absl::Milliseconds(lease_ms / 10 + env_.Uniform(lease_ms));
      if (!co.Validate().ok()) continue;
      options_.coordinator_lease = co.lease;
      options_.renew_interval = co.renew_interval;
      options_.coordinator_rpc_timeout = co.rpc_timeout;
      break;
    }
  }
  // A process's clock rate: within half the configured bound either way,
  // so any two processes are at most the bound apart (what the lease
  // arithmetic assumes).
  double Drift() {
    if (!options_.vary_timing || options_.max_clock_drift <= 0) return 0;
    const double unit =
        static_cast<double>(env_.Uniform(2'000'001)) / 1'000'000.0 - 1.0;  // [-1, 1]
    return unit * options_.max_clock_drift / 2;
  }

  struct Dc {
    int index = 0;
    std::string name;
    ReplicaType type = ReplicaType::kFull;
    std::unique_ptr<SimBigtable> bigtable;
    std::unique_ptr<ProcessEnv> coord_env, lock_env;  // their own clock rates
    std::unique_ptr<storage::lock::LockTable> locks;
    std::unique_ptr<coordinator::Coordinator> coord;
    std::unique_ptr<replication::ReplicationServer> repl;
  };

  SimOptions options_;
  std::function<void(int, const std::string&)> on_valid_;
  TestDir dir_;
  SimEnv env_;
  SimNetwork net_;
  std::unique_ptr<storage::TabletServer> tablets_;
  std::unique_ptr<storage::InProcessBigtable> inproc_;
  std::vector<std::unique_ptr<Dc>> dcs_;
  std::vector<std::unique_ptr<coordinator::Coordinator>> graveyard_coord_;
  std::vector<std::unique_ptr<replication::ReplicationServer>> graveyard_repl_;
};

}  // namespace megastore::sim
