#include "sim/cell_sim.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "base/buggify.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "sim/sim_rpc.h"
#include "sim/world.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/master.h"
#include "storage/cell/membership.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/partitionable_lock_service.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::sim {
namespace {

using storage::Mutation;
using storage::ReadOptions;
using storage::Row;
using storage::RowRange;
using storage::TableSchema;
using storage::TabletEntry;
using storage::cell::CellClient;
using storage::cell::CellClientOptions;
using storage::cell::Master;
using storage::cell::MasterOptions;
using storage::cell::ServerRegistration;
using storage::lock::Partitionable;

constexpr char kCellName[] = "sim";
constexpr char kTable[] = "t";
constexpr char kFamily[] = "f";
constexpr absl::Duration kTtl = absl::Seconds(2);

std::string Key(int k) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "k%03d", k);
  return buf;
}

// A written value is the write's sequence number for its key (also its
// cell timestamp): what a read returns says which write it saw.
int64_t SeqOf(const std::optional<Row>& row) {
  if (!row || row->cells.empty()) return 0;
  int64_t seq = 0;
  if (!absl::SimpleAtoi(row->cells[0].value, &seq)) return -1;
  return seq;
}

class CellWorld {
 public:
  explicit CellWorld(const CellSimOptions& o)
      : o_(o), env_(o.seed), net_(&env_, {{absl::Microseconds(200)}}) {
    root_ = StrCat(dir_.path(), "/cell");
  }

  ~CellWorld() { (void)Teardown(); }

  void Run(CellSimResult* result) {
    if (o_.trace) env_.set_trace(&result->trace);
    result->status = RunAll(&result->stats);
    if (absl::Status s = Teardown(); result->status.ok()) result->status = s;
    result->stats.messages = net_.messages_sent();
    result->stats.dropped = net_.messages_dropped();
    result->stats.virtual_micros = env_.now();
  }

 private:
  // A tablet server process: everything an incarnation has.
  struct Server {
    std::string address;
    bool up = false;
    bool restarting = false;  // killed; a restart is scheduled by its reaper
    bool joined = false;      // its registration created its file (megastored serves only then)
    uint64_t incarnation = 0;
    // What megastored's lease check says: joined, and the session alive.
    bool lease_valid() const { return joined && registration && registration->registered(); }
    std::unique_ptr<ProcessEnv> env;
    std::unique_ptr<Partitionable> lock;
    std::unique_ptr<CellClient> client;  // its split commits
    std::unique_ptr<storage::TabletServer> tablets;
    std::unique_ptr<storage::ServiceMetrics> metrics;
    std::unique_ptr<SimRegistry> registry;
    std::unique_ptr<ServerRegistration> registration;
  };
  struct MasterProc {
    std::string address;
    bool up = false;
    bool restarting = false;
    std::unique_ptr<ProcessEnv> env;
    std::unique_ptr<Partitionable> lock;
    std::unique_ptr<Master> master;
    std::unique_ptr<SimRegistry> registry;
  };
  // What a client knows of one of its keys.
  struct KeyState {
    int64_t acked = 0;      // the highest write acknowledged
    int64_t attempted = 0;  // the highest write sent (acknowledged or not)
  };

  absl::Status RunAll(CellSimStats* stats) {
    MS_ASSIGN_OR_RETURN(lock_, storage::lock::EmbeddedLockService::Open(&env_, ""));
    for (int i = 0; i < o_.servers; ++i) {
      servers_.push_back(std::make_unique<Server>());
      servers_.back()->address = StrCat("ts", i);
      net_.AddNode(servers_.back()->address, 0);
      StartServer(*servers_.back());
    }
    for (int i = 0; i < o_.masters; ++i) {
      masters_.push_back(std::make_unique<MasterProc>());
      masters_.back()->address = StrCat("m", i);
      net_.AddNode(masters_.back()->address, 0);
      StartMaster(*masters_.back());
    }
    net_.AddNode("admin", 0);
    for (int i = 0; i < o_.clients; ++i) net_.AddNode(StrCat("c", i), 0);

    // The table, pre-split in four, created through the elected master.
    absl::Status created = absl::UnavailableError("not created");
    std::vector<Spawned> admin;
    admin.push_back(Spawn("admin create", [&] {
      for (int attempt = 0; attempt < 100 && !created.ok(); ++attempt) {
        env_.SleepFor(absl::Milliseconds(200));
        std::unique_ptr<storage::cell::MasterClient> m = AdminToMaster();
        if (m == nullptr) continue;
        TableSchema schema;
        schema.set_name(kTable);
        schema.add_families()->set_name(kFamily);
        created =
            m->CreateTable(schema, {Key(o_.keys / 4), Key(o_.keys / 2), Key(3 * o_.keys / 4)});
        if (absl::IsAlreadyExists(created)) created = absl::OkStatus();
      }
    }));
    if (!Finish(admin, absl::Seconds(60))) return Fail("creating the table never finished");
    if (!created.ok()) return Fail(StrCat("the table could not be created: ", created.ToString()));

    keys_.assign(static_cast<size_t>(o_.keys), KeyState{});
    for (int i = 0; i < o_.clients; ++i) {
      clients_.push_back(Spawn(StrCat("client c", i), [this, i, stats] { ClientLoop(i, stats); }));
    }
    const int64_t fault_end = env_.now() + absl::ToInt64Microseconds(o_.fault_period);
    ScheduleOwnerCheck(stats);
    if (o_.faults) {
      buggify::ScopedEnable fault_points(o_.buggify, o_.seed);
      // Lost messages and reordering; no duplicated requests: the cell's
      // RPC runs over TCP, which never delivers a request twice (its
      // clients do not retry what may have happened).
      net_.set_faults(LinkFaults{0.01, 0, absl::Milliseconds(2)});
      ScheduleFault(fault_end, stats);
      env_.RunUntil(fault_end, [&] { return !status_.ok(); });
      net_.HealAll();
    }
    faults_over_ = true;
    // Everything that is down comes back; then the clients must finish.
    for (auto& s : servers_) {
      if (!s->up && !s->restarting) Restart(*s);
    }
    for (auto& m : masters_) {
      if (!m->up && !m->restarting) RestartMaster(*m);
    }
    if (!Finish(clients_, o_.drain_limit) && status_.ok()) {
      return Fail(StrCat("clients did not finish within ", absl::FormatDuration(o_.drain_limit),
                         " after the faults stopped; tasks still running:", Running()));
    }
    if (!status_.ok()) return status_;
    MS_RETURN_IF_ERROR(CheckAtRest(stats));
    return status_;
  }

  // A task whose end can be waited for with a bound.
  struct Spawned {
    std::unique_ptr<Env::Thread> thread;
    std::shared_ptr<bool> done;
  };
  Spawned Spawn(std::string name, std::function<void()> fn) {
    auto done = std::make_shared<bool>(false);
    return Spawned{env_.StartThread(std::move(name),
                                    [fn = std::move(fn), done] {
                                      fn();
                                      *done = true;
                                    }),
                   done};
  }
  // Runs the simulation until every one of `tasks` ended (then joins them)
  // or `limit` of virtual time passed, or a violation; whether they ended.
  bool Finish(std::vector<Spawned>& tasks, absl::Duration limit) {
    auto ended = [&] {
      return std::all_of(tasks.begin(), tasks.end(), [](const Spawned& t) { return *t.done; });
    };
    env_.RunUntil(env_.now() + absl::ToInt64Microseconds(limit),
                  [&] { return ended() || !status_.ok(); });
    if (!ended()) return false;
    for (Spawned& t : tasks) t.thread->Join();
    tasks.clear();
    return true;
  }
  std::string Running() const {
    std::string out;
    for (const std::string& t : env_.UnfinishedTasks()) out += StrCat(" [", t, "]");
    return out;
  }

  // Records the first violation (with the virtual time).
  void Violation(std::string what) {
    if (status_.ok()) status_ = absl::InternalError(StrCat(what, " (at ", env_.now(), "us)"));
  }
  absl::Status Fail(std::string what) {
    Violation(std::move(what));
    return status_;
  }

  // The elected master, as an operator reaches it: found in the lock
  // service, called over the network. None if no master holds the lock.
  std::unique_ptr<storage::cell::MasterClient> AdminToMaster() {
    absl::StatusOr<std::string> master = storage::cell::FindMaster(lock_.get(), kCellName, &env_);
    if (!master.ok()) return nullptr;
    return std::make_unique<storage::cell::MasterClient>(
        std::make_shared<SimChannel>(&net_, &env_, "admin", *master), absl::Seconds(5));
  }

  // ---- processes ------------------------------------------------------------------

  void StartServer(Server& s) {
    s.env = std::make_unique<ProcessEnv>(&env_);
    s.lock = std::make_unique<Partitionable>(lock_.get());
    CellClientOptions co;
    co.cell = kCellName;
    co.rpc_timeout = absl::Seconds(1);
    co.retry_for = absl::Seconds(10);
    co.connect = SimConnector(&net_, s.env.get(), s.address);
    s.client = std::make_unique<CellClient>(s.lock.get(), s.env.get(), co);
    storage::TabletServerOptions to;
    to.data_dir = root_;
    to.cell_log_name = StrCat(s.address, "-", ++logs_started_);
    to.sync_log = false;
    to.inline_commit_log = true;
    to.maintenance_interval = absl::ZeroDuration();
    to.resources.block_cache_bytes = 1 << 20;
    to.resources.in_memory_cache_bytes = 1 << 20;
    to.resources.background_threads = 1;
    to.may_split = storage::cell::MaySplit;
    Server* raw = &s;
    to.lease_valid = [raw] { return raw->lease_valid(); };
    const std::string log = to.cell_log_name;
    // This incarnation's client and clock (a zombie's outlive its tasks).
    CellClient* const client = s.client.get();
    ProcessEnv* const penv = s.env.get();
    to.commit_split = [client, penv, address = s.address, log](
                          const TabletEntry& parent, const std::vector<TabletEntry>& children) {
      return storage::cell::CommitSplit(client, penv, address, log, parent, children);
    };
    to.commit_merge = [client, penv, address = s.address, log](const TabletEntry& left,
                                                               const TabletEntry& right,
                                                               const TabletEntry& merged) {
      return storage::cell::CommitMerge(client, penv, address, log, left, right, merged);
    };
    absl::StatusOr<std::unique_ptr<storage::TabletServer>> opened =
        storage::TabletServer::Open(to, s.env.get());
    if (!opened.ok()) {
      Violation(StrCat("tablet server ", s.address, " did not open: ", opened.status().ToString()));
      return;
    }
    s.tablets = std::move(*opened);
    s.metrics = std::make_unique<storage::ServiceMetrics>();
    net_.Restart(s.address);
    s.registry = std::make_unique<SimRegistry>(&net_, &env_, s.address);
    storage::RegisterTabletService(s.tablets.get(), s.registry.get(), s.metrics.get());
    s.registration = std::make_unique<ServerRegistration>(
        s.lock.get(), s.env.get(), kCellName, s.address, kTtl, [this, raw](const absl::Status&) {
          // Cut off from the cell: the process exits (as megastored does).
          env_.Schedule(absl::ZeroDuration(), [this, raw] { Kill(*raw); });
        });
    s.joined = false;
    s.up = true;
    const uint64_t incarnation = ++s.incarnation;
    s.registration->Start([this, raw, incarnation](absl::Status joined) {
      if (raw->incarnation != incarnation || !raw->up) return;
      if (joined.ok()) {
        raw->joined = true;
        return;
      }
      // As megastored: it cannot join (an earlier incarnation's file is
      // still there), so it exits; it is started again later.
      env_.Trace(StrCat(raw->address, " cannot join: ", joined.message()));
      env_.Schedule(absl::ZeroDuration(), [this, raw, incarnation] {
        if (raw->incarnation == incarnation) Kill(*raw);
      });
    });
    env_.Trace(StrCat("start ", s.address, " log ", log));
  }

  // The process dies: it stops answering at once; its tasks unwind (their
  // calls fail) and a reaper closes what it had open, then it restarts.
  void Kill(Server& s) {
    if (!s.up) return;
    s.up = false;
    s.restarting = true;
    net_.Crash(s.address);
    s.lock->cut = true;
    s.client->Cancel();
    env_.Trace(StrCat("kill ", s.address));
    auto zombie = std::make_shared<Server>();
    zombie->address = s.address;
    zombie->env = std::move(s.env);
    zombie->lock = std::move(s.lock);
    zombie->client = std::move(s.client);
    zombie->tablets = std::move(s.tablets);
    zombie->metrics = std::move(s.metrics);
    zombie->registry = std::move(s.registry);
    zombie->registration = std::move(s.registration);
    Server* raw = &s;
    reapers_.push_back(Spawn(StrCat("reap ", s.address), [this, zombie, raw] {
      zombie->registry->Drain();
      zombie->registration.reset();
      // A crash: the memtables are lost; the next owners recover their
      // writes from this incarnation's commit log.
      zombie->tablets->CrashOnClose();
      zombie->tablets.reset();
      zombie->registry.reset();
      zombie->client.reset();
      const absl::Duration down = absl::Milliseconds(300 + env_.Uniform(2700));
      env_.Schedule(down, [this, raw] { Restart(*raw); });
    }));
  }

  void Restart(Server& s) {
    s.restarting = false;
    if (s.up || !status_.ok() || stopping_) return;
    StartServer(s);
  }

  void StartMaster(MasterProc& m) {
    m.env = std::make_unique<ProcessEnv>(&env_);
    m.lock = std::make_unique<Partitionable>(lock_.get());
    MasterOptions mo;
    mo.cell = kCellName;
    mo.data_root = root_;
    mo.session_ttl = kTtl;
    mo.server_ttl = kTtl;
    mo.reconcile_interval = absl::Milliseconds(200);
    mo.server_timeout = absl::Seconds(2);
    mo.balance_margin = 1;
    mo.balance_delay = absl::ZeroDuration();
    // Size-driven merges and the garbage collection (file ages) read what
    // the simulation does not decide: off.
    mo.merge_threshold_bytes = 0;
    mo.gc_grace = absl::Hours(100000);
    mo.rpc_timeout = absl::Seconds(1);
    mo.assign_timeout = absl::Seconds(10);
    mo.probe_timeout = absl::Milliseconds(500);
    mo.connect = SimConnector(&net_, m.env.get(), m.address);
    MasterProc* raw = &m;
    m.master =
        std::make_unique<Master>(m.lock.get(), m.env.get(), mo, [this, raw](const absl::Status&) {
          env_.Schedule(absl::ZeroDuration(), [this, raw] { KillMaster(*raw); });
        });
    net_.Restart(m.address);
    m.registry = std::make_unique<SimRegistry>(&net_, &env_, m.address);
    storage::cell::RegisterMasterService(m.master.get(), m.registry.get());
    m.master->Start(m.address);
    m.up = true;
    env_.Trace(StrCat("start master ", m.address));
  }

  void KillMaster(MasterProc& m) {
    if (!m.up) return;
    m.up = false;
    m.restarting = true;
    net_.Crash(m.address);
    m.lock->cut = true;
    env_.Trace(StrCat("kill master ", m.address));
    auto zombie = std::make_shared<MasterProc>();
    zombie->env = std::move(m.env);
    zombie->lock = std::move(m.lock);
    zombie->master = std::move(m.master);
    zombie->registry = std::move(m.registry);
    MasterProc* raw = &m;
    reapers_.push_back(Spawn(StrCat("reap ", m.address), [this, zombie, raw] {
      zombie->registry->Drain();
      zombie->master.reset();  // joins its reconcile loop
      zombie->registry.reset();
      const absl::Duration down = absl::Milliseconds(500 + env_.Uniform(2500));
      env_.Schedule(down, [this, raw] { RestartMaster(*raw); });
    }));
  }

  void RestartMaster(MasterProc& m) {
    m.restarting = false;
    if (m.up || !status_.ok() || stopping_) return;
    StartMaster(m);
  }

  // Stops every process (as crashes) and waits for the reapers, with a
  // bound; a failed run gives up on its stuck tasks instead of waiting.
  absl::Status Teardown() {
    if (torn_down_) return absl::OkStatus();
    torn_down_ = true;
    absl::Status result;
    if (!status_.ok()) env_.AbandonTasks();
    if (status_.ok() && !Finish(admin_, absl::Seconds(60)))
      result = absl::InternalError(StrCat("operator requests never finished:", Running()));
    faults_over_ = true;
    stopping_ = true;  // no restarts from here on
    for (auto& s : servers_) Kill(*s);
    for (auto& m : masters_) KillMaster(*m);
    if (!Finish(reapers_, absl::Seconds(60)) && result.ok())
      result = absl::InternalError(StrCat("killed processes never finished closing:", Running()));
    if (!result.ok()) env_.AbandonTasks();
    return result;
  }

  // ---- workload -------------------------------------------------------------------

  void ClientLoop(int i, CellSimStats* stats) {
    ProcessEnv env(&env_);
    Partitionable lock(lock_.get());
    CellClientOptions co;
    co.cell = kCellName;
    co.rpc_timeout = absl::Seconds(1);
    co.retry_for = absl::Seconds(15);
    co.connect = SimConnector(&net_, &env, StrCat("c", i));
    CellClient client(&lock, &env, co);
    std::vector<int> mine;
    for (int k = i; k < o_.keys; k += o_.clients) mine.push_back(k);
    if (mine.empty()) return;
    ReadOptions latest;
    latest.filter.cells_per_column = 1;
    for (int op = 0; op < o_.ops_per_client && status_.ok(); ++op) {
      // Spread over the fault period (and a little after it).
      env.SleepFor(absl::Microseconds(env_.Uniform(static_cast<uint64_t>(
          2 * absl::ToInt64Microseconds(o_.fault_period) / std::max(1, o_.ops_per_client)))));
      const int k = mine[env_.Uniform(mine.size())];
      KeyState& ks = keys_[static_cast<size_t>(k)];
      const uint64_t dice = env_.Uniform(100);
      if (dice < 50) {
        const int64_t seq = ++ks.attempted;
        absl::Status s = client.MutateRow(kTable, Key(k),
                                          {Mutation::SetCell(kFamily, "v", StrCat(seq), seq)}, seq);
        if (env_.tracing())
          env_.Trace(
              StrCat("c", i, " write ", Key(k), "#", seq, ": ", s.ok() ? "ok" : s.ToString()));
        if (s.ok()) {
          ks.acked = std::max(ks.acked, seq);
          ++stats->ops_ok;
        } else {
          ++stats->ops_unknown;  // may have happened
        }
      } else if (dice < 85) {
        const int64_t lower = ks.acked;
        absl::StatusOr<std::optional<Row>> r = client.ReadRow(kTable, Key(k), latest);
        if (!r.ok()) {
          ++stats->ops_failed;
          continue;
        }
        ++stats->ops_ok;
        if (env_.tracing()) env_.Trace(StrCat("c", i, " read ", Key(k), ": #", SeqOf(*r)));
        CheckRead(k, lower, SeqOf(*r), "read", stats, client);
      } else {
        // Every client's keys: tasks take turns, so what any client had
        // acknowledged before the scan began is a lower bound.
        std::map<int, int64_t> lower;
        for (int m = 0; m < o_.keys; ++m) lower[m] = keys_[static_cast<size_t>(m)].acked;
        std::map<int, int64_t> seen;
        absl::Status s = client.ReadRows(kTable, RowRange::All(), latest, [&](Row& row) {
          int key = 0;
          if (row.key.size() == 4 && absl::SimpleAtoi(row.key.substr(1), &key)) {
            std::optional<Row> copy(row);
            seen[key] = SeqOf(copy);
          }
          return true;
        });
        if (!s.ok()) {
          ++stats->ops_failed;
          continue;
        }
        ++stats->ops_ok;
        if (env_.tracing()) {
          std::string seen_text;
          for (const auto& [m, seq] : seen) seen_text += StrCat(" ", Key(m), "#", seq);
          env_.Trace(StrCat("c", i, " scan:", seen_text));
        }
        for (const auto& [m, bound] : lower)
          CheckRead(m, bound, seen.count(m) ? seen[m] : 0, "scan", stats, client);
        if (!status_.ok())
          status_ =
              absl::InternalError(StrCat(status_.message(), "; METADATA now:", Placement(client)));
      }
    }
  }

  // A read of key `k` that started after write `lower` was acknowledged
  // saw write `seq`: never older, never one nobody sent.
  void CheckRead(int k, int64_t lower, int64_t seq, const char* how, CellSimStats* stats,
                 CellClient& client) {
    ++stats->reads_checked;
    const KeyState& ks = keys_[static_cast<size_t>(k)];
    std::string problem;
    if (seq < lower) {
      problem = StrCat("a ", how, " of ", Key(k), " returned write ", seq, " after write ", lower,
                       " was acknowledged (an acknowledged write was lost)");
    } else if (seq > ks.attempted) {
      problem = StrCat("a ", how, " of ", Key(k), " returned write ", seq, ", which nobody sent");
    }
    if (problem.empty() || !status_.ok()) return;
    const int64_t at = env_.now();
    Violation(StrCat(problem, " at ", at, "us; METADATA after it:", Placement(client)));
  }

  // ---- faults ---------------------------------------------------------------------

  void ScheduleFault(int64_t fault_end, CellSimStats* stats) {
    const absl::Duration next = absl::Milliseconds(300 + env_.Uniform(1200));
    env_.Schedule(next, [this, fault_end, stats] {
      if (env_.now() >= fault_end || !status_.ok()) return;
      Fault(stats);
      ScheduleFault(fault_end, stats);
    });
  }

  void Fault(CellSimStats* stats) {
    const uint64_t dice = env_.Uniform(100);
    if (dice < 30) {
      Server& s = *servers_[env_.Uniform(servers_.size())];
      if (s.up) {
        ++stats->server_kills;
        Kill(s);
      }
    } else if (dice < 45) {
      for (auto& m : masters_) {
        if (m->up && m->master->is_master()) {
          ++stats->master_kills;
          KillMaster(*m);
          break;
        }
      }
    } else if (dice < 60) {
      // A server cut off from the lock service only: its lease ends, it
      // stops serving and exits; the master moves its tablets.
      Server& s = *servers_[env_.Uniform(servers_.size())];
      if (s.up) {
        env_.Trace(StrCat("cut ", s.address, " from the lock service"));
        s.lock->cut = true;
      }
    } else {
      // A forced split or move, as an operator would ask the master.
      const bool split = dice < 80;
      admin_.push_back(Spawn(split ? "admin split" : "admin move", [this, split, stats] {
        std::unique_ptr<storage::cell::MasterClient> m = AdminToMaster();
        if (m == nullptr) return;
        CellClientOptions co;
        co.cell = kCellName;
        co.rpc_timeout = absl::Seconds(1);
        co.retry_for = absl::Seconds(2);
        co.connect = SimConnector(&net_, &env_, "admin");
        CellClient client(lock_.get(), &env_, co);
        absl::StatusOr<std::vector<storage::cell::TabletRecord>> tablets = client.Tablets(kTable);
        if (!tablets.ok()) return;
        std::erase_if(*tablets, [](const storage::cell::TabletRecord& t) {
          return t.location.table != kTable;
        });
        if (tablets->empty()) return;
        const storage::cell::TabletRecord& t = (*tablets)[env_.Uniform(tablets->size())];
        if (split) {
          // A row inside the tablet other than its first.
          std::vector<std::string> inside;
          for (int k = 0; k < o_.keys; ++k) {
            if (t.location.Contains(Key(k)) && Key(k) != t.location.start_row)
              inside.push_back(Key(k));
          }
          if (!inside.empty() &&
              m->SplitTablet(t.location.tablet_id, inside[env_.Uniform(inside.size())]).ok())
            ++stats->splits;
        } else {
          const std::string to = servers_[env_.Uniform(servers_.size())]->address;
          if (to != t.location.server && m->MoveTablet(t.location.tablet_id, to).ok())
            ++stats->moves;
        }
      }));
    }
  }

  // ---- invariants -----------------------------------------------------------------

  // Every 100 ms: no row of the table is served by two live servers whose
  // lease holds (a split's parent and children on one server are fine).
  void ScheduleOwnerCheck(CellSimStats* stats) {
    env_.Schedule(absl::Milliseconds(100), [this, stats] {
      if (!status_.ok()) return;
      CheckSingleOwner(stats);
      ScheduleOwnerCheck(stats);
    });
  }

  void CheckSingleOwner(CellSimStats* stats) {
    ++stats->owner_checks;
    buggify::Suspend quiet;
    std::vector<std::pair<TabletEntry, std::string>> serving;
    for (auto& s : servers_) {
      if (!s->up || !s->lease_valid()) continue;
      for (const TabletEntry& e : s->tablets->ListTablets(kTable)) {
        if (e.loaded()) serving.emplace_back(e, s->address);
      }
    }
    for (size_t a = 0; a < serving.size(); ++a) {
      for (size_t b = a + 1; b < serving.size(); ++b) {
        const auto& [x, xs] = serving[a];
        const auto& [y, ys] = serving[b];
        if (xs == ys) continue;
        const bool overlap = (y.end_row().empty() || x.start_row() < y.end_row()) &&
                             (x.end_row().empty() || y.start_row() < x.end_row());
        if (overlap) {
          Violation(StrCat("rows served twice: tablet ", x.id(), " [", x.start_row(), ", ",
                           x.end_row(), ") at ", xs, " and tablet ", y.id(), " [", y.start_row(),
                           ", ", y.end_row(), ") at ", ys));
          return;
        }
      }
    }
  }

  // What is wrong with the cell's placement, or "": METADATA must tile the
  // table from "" to "" with no gap, overlap or unfinished split, every
  // tablet must be served where it says, and no server whose lease holds
  // may serve a tablet of the table METADATA does not place there.
  std::string PlacementProblem(CellClient& client, int* tablet_count) {
    absl::StatusOr<std::vector<storage::cell::TabletRecord>> tablets = client.Tablets(kTable);
    if (!tablets.ok()) return StrCat("METADATA unreadable: ", tablets.status().ToString());
    // Only the table's own tablets (the answer may begin with METADATA's).
    std::erase_if(*tablets,
                  [](const storage::cell::TabletRecord& t) { return t.location.table != kTable; });
    std::set<std::pair<std::string, std::string>> placed;  // (server, tablet id)
    std::string expect_start;
    for (const storage::cell::TabletRecord& t : *tablets) {
      const storage::cell::TabletLocation& l = t.location;
      if (l.start_row != expect_start)
        return StrCat("METADATA leaves a gap or overlap before tablet ", l.tablet_id,
                      " (starts at \"", l.start_row, "\", expected \"", expect_start, "\")");
      if (!t.split_left.empty()) return StrCat("tablet ", l.tablet_id, " is still mid-split");
      if (!Serves(l.server, l.tablet_id))
        return StrCat("METADATA places tablet ", l.tablet_id, " at ",
                      l.server.empty() ? std::string("no server") : l.server,
                      ", which does not serve it", Holders(l.tablet_id));
      placed.emplace(l.server, l.tablet_id);
      expect_start = l.end_row;
    }
    if (!expect_start.empty()) return StrCat("METADATA ends the table at \"", expect_start, "\"");
    for (auto& s : servers_) {
      if (!s->up || !s->lease_valid()) continue;
      for (const TabletEntry& e : s->tablets->ListTablets(kTable)) {
        if (e.loaded() && !placed.count({s->address, e.id()}))
          return StrCat(s->address, " serves tablet ", e.id(), " [", e.start_row(), ", ",
                        e.end_row(), "), which METADATA does not place there");
      }
    }
    *tablet_count = static_cast<int>(tablets->size());
    return "";
  }

  // At rest (faults healed, clients done): the placement settles (within a
  // minute of virtual time), then every key holds its last acknowledged
  // write or a later one.
  absl::Status CheckAtRest(CellSimStats* stats) {
    absl::Status result;
    std::vector<Spawned> checker;
    checker.push_back(Spawn("checker", [&] {
      CellClientOptions co;
      co.cell = kCellName;
      co.rpc_timeout = absl::Seconds(2);
      co.retry_for = absl::Seconds(60);
      co.connect = SimConnector(&net_, &env_, "admin");
      CellClient client(lock_.get(), &env_, co);
      std::string problem;
      for (int i = 0; i < 300; ++i) {
        problem = PlacementProblem(client, &stats->tablets);
        if (problem.empty()) break;
        env_.SleepFor(absl::Milliseconds(200));
      }
      if (!problem.empty()) {
        result = absl::InternalError(StrCat("at rest, after a minute: ", problem));
        return;
      }
      ReadOptions latest;
      latest.filter.cells_per_column = 1;
      for (int k = 0; k < o_.keys; ++k) {
        absl::StatusOr<std::optional<Row>> r = client.ReadRow(kTable, Key(k), latest);
        if (!r.ok()) {
          result =
              absl::InternalError(StrCat("reading ", Key(k), " at rest: ", r.status().ToString()));
          return;
        }
        const KeyState& ks = keys_[static_cast<size_t>(k)];
        const int64_t seq = SeqOf(*r);
        if (seq < ks.acked || seq > ks.attempted) {
          result =
              absl::InternalError(StrCat(Key(k), " holds write ", seq, " at rest; acknowledged ",
                                         ks.acked, ", sent ", ks.attempted));
          return;
        }
      }
    }));
    if (!Finish(checker, absl::Minutes(5)) && result.ok())
      result = absl::InternalError("the checker at rest never finished");
    if (!result.ok()) {
      const std::string running = Running();
      if (!running.empty())
        result = absl::InternalError(StrCat(result.message(), "; tasks still running:", running));
    }
    return result;
  }

  // Which servers have the tablet loaded, and whether their lease holds.
  std::string Holders(const std::string& tablet_id) {
    std::string out;
    for (auto& s : servers_) {
      if (!s->up) continue;
      for (const TabletEntry& e : s->tablets->ListTablets(kTable)) {
        if (e.id() != tablet_id) continue;
        out += StrCat("; ", s->address, " lists it (", e.loaded() ? "loaded" : "not loaded",
                      ", lease ", s->lease_valid() ? "valid" : "not valid",
                      s->lock->cut ? ", cut off from the lock service" : "", ")");
      }
      for (const auto& [id, error] : s->tablets->load_errors()) {
        if (id == tablet_id) out += StrCat("; ", s->address, " could not load it: ", error);
      }
    }
    return out;
  }

  // METADATA's records of the table, for a violation's report.
  std::string Placement(CellClient& client) {
    buggify::Suspend quiet;
    absl::StatusOr<std::vector<storage::cell::TabletRecord>> tablets = client.Tablets(kTable);
    if (!tablets.ok()) return StrCat(" unreadable (", tablets.status().message(), ")");
    std::string out;
    for (const auto& t : *tablets) {
      if (t.location.table != kTable) continue;
      out += StrCat(" [", t.location.start_row, ", ", t.location.end_row, ") ",
                    t.location.tablet_id, "@", t.location.server.empty() ? "-" : t.location.server,
                    t.split_left.empty() ? "" : StrCat(" split_left=", t.split_left));
    }
    return out;
  }

  bool Serves(const std::string& server, const std::string& tablet_id) {
    for (auto& s : servers_) {
      if (s->address != server || !s->up) continue;
      for (const TabletEntry& e : s->tablets->ListTablets(kTable)) {
        if (e.id() == tablet_id && e.loaded()) return true;
      }
    }
    return false;
  }

  const CellSimOptions o_;
  SimEnv env_;
  SimNetwork net_;
  TestDir dir_;
  std::string root_;
  std::unique_ptr<storage::lock::EmbeddedLockService> lock_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<MasterProc>> masters_;
  std::vector<KeyState> keys_;
  std::vector<Spawned> clients_, reapers_, admin_;
  bool faults_over_ = false;
  bool stopping_ = false;
  bool torn_down_ = false;
  int logs_started_ = 0;  // each incarnation gets a log name of its own
  absl::Status status_;
};

}  // namespace

CellSimResult RunCellSimulation(const CellSimOptions& options) {
  CellSimResult result;
  {
    CellWorld world(options);
    world.Run(&result);
  }
  return result;
}

}  // namespace megastore::sim
