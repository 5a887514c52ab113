// Long file: the simulated clients, faults, convergence checker and measurements share
// this file's helpers (Group, Row, WriteEntry); the measurements are the next to move out.
#include "sim/cluster.h"

#include <algorithm>
#include <memory>

#include "base/buggify.h"
#include "sim/backup_marks.h"
#include "sim/bank.h"
#include "sim/deployment.h"
#include "sim/log_invariants.h"

namespace megastore::sim {

namespace {

constexpr char kValueColumn[] = "v";

GroupRef Group(int g) {
  GroupRef r;
  r.set_table(kTable);
  r.set_root(StrCat("g", g));
  return r;
}

std::string Row(int g, int k) { return StrCat("g", g, "/k", k); }

// An entry setting the entity to `value` (named by it: each value is
// written once), or deleting it if `del` (named by `value` all the same).
replication::LogEntry WriteEntry(const std::string& row, const std::string& value,
                                 bool del = false) {
  replication::LogEntry e;
  e.set_id(value);
  replication::RowChange* rc = e.add_changes();
  rc->set_row(row);
  replication::CellChange* cc = rc->add_cells();
  cc->set_family(kDataFamily);
  cc->set_qualifier(kValueColumn);
  if (del) {
    cc->set_delete_cells(true);
  } else {
    cc->set_value(value);
  }
  return e;
}

std::optional<std::string> ValueOf(const replication::ReadReply& r) {
  for (int i = 0; i < r.qualifiers_size(); ++i)
    if (r.qualifiers(i) == kValueColumn) return r.values(i);
  return std::nullopt;
}

// ---- clients ------------------------------------------------------------------------

class Clients {
 public:
  Clients(Cluster* cluster, std::vector<Event>* history) : c_(cluster), history_(history) {
    std::vector<int> data_dcs;
    for (size_t i = 0; i < c_->size(); ++i)
      if (c_->type(static_cast<int>(i)) != ReplicaType::kWitness)
        data_dcs.push_back(static_cast<int>(i));
    const int sessions = std::max(1, c_->options().sessions);
    for (int i = 0; i < c_->options().clients; ++i) {
      auto cl = std::make_unique<Client>();
      cl->id = i;
      cl->dc = data_dcs[i % data_dcs.size()];
      cl->address = StrCat("client", i, "@", DcName(cl->dc));
      c_->net().AddNode(cl->address, cl->dc);
      for (int j = 0; j < sessions; ++j) {
        auto se = std::make_unique<Session>();
        se->id = i * sessions + j;
        se->process = se->id;
        se->app = cl.get();
        cl->sessions.push_back(std::move(se));
      }
      clients_.push_back(std::move(cl));
    }
    processes_ = c_->options().clients * sessions;
  }

  void Start() {
    for (auto& cl : clients_) Boot(*cl);
  }

  bool AllDone() const {
    for (const auto& cl : clients_)
      for (const auto& se : cl->sessions)
        if (se->done < c_->options().ops_per_client) return false;
    return true;
  }

  std::string Stuck() const {
    std::string out;
    for (const auto& cl : clients_)
      for (const auto& se : cl->sessions)
        if (se->done < c_->options().ops_per_client)
          out += StrCat(" client", cl->id, "@", DcName(cl->dc), " session ", se->id, " (", se->done,
                        " ops done, ", se->busy ? "an operation open" : "idle", ")");
    return out;
  }

  // What the clients' commits came to (GroupClient::Stats, summed).
  GroupClient::Stats Stats() const {
    GroupClient::Stats sum;
    auto add = [&sum](const GroupClient& gc) {
      const GroupClient::Stats s = gc.stats();
      sum.promotions += s.promotions;
      sum.commits += s.commits;
      sum.entries += s.entries;
      sum.combined += s.combined;
      sum.forwarded += s.forwarded;
    };
    for (const auto& cl : clients_)
      if (cl->gc != nullptr) add(*cl->gc);
    for (const auto& gc : graveyard_) add(*gc);
    return sum;
  }

  // An app server crashes: its operations in flight end with unknown outcomes.
  void Crash(int i) {
    Client& cl = *clients_[i];
    if (!cl.up) return;
    c_->net().Crash(cl.address);
    cl.up = false;
    ++cl.incarnation;
    for (auto& se : cl.sessions)
      if (se->busy) Complete(*se, Event::Type::kInfo, std::nullopt, 0);
    graveyard_.push_back(std::move(cl.gc));
  }

  void Restart(int i) {
    Client& cl = *clients_[i];
    if (cl.up) return;
    c_->net().Restart(cl.address);
    Boot(cl);
  }

  size_t size() const { return clients_.size(); }
  // The highest position of a group whose commit has been acknowledged.
  uint64_t acked(const std::string& root) const {
    auto it = acked_.find(root);
    return it == acked_.end() ? 0 : it->second;
  }
  bool up(int i) const { return clients_[i]->up; }
  // Moves app server i's wall clock by `micros` (either way).
  void JumpClock(int i, int64_t micros) {
    ProcessEnv* env = clients_[i]->env.get();
    env->set_offset(env->offset() + micros);
    c_->env().Trace(StrCat("clock of client", i, " jumps ", micros, "us"));
  }

 private:
  struct Session;
  // An app server: one GroupClient shared by its sessions, whose commits
  // to one group combine into shared log entries.
  struct Client {
    int id = 0;
    int dc = 0;
    std::string address;
    bool up = true;
    uint64_t incarnation = 0;
    std::unique_ptr<ProcessEnv> env;  // its own wall clock
    std::unique_ptr<GroupClient> gc;
    std::vector<std::unique_ptr<Session>> sessions;
  };
  // One stream of operations on an app server, one at a time.
  struct Session {
    int id = 0;
    int process = 0;  // history process id: changes after an unknown outcome
    int done = 0;
    int seq = 0;
    bool busy = false;
    Event invoke;
    Client* app = nullptr;
  };

  void Boot(Client& cl) {
    cl.up = true;
    ++cl.incarnation;
    if (!cl.env) cl.env = std::make_unique<ProcessEnv>(&c_->env());
    cl.gc = std::make_unique<GroupClient>(cl.env.get(), c_->net().TransportFor(cl.address),
                                          c_->ClientOptions(cl.dc));
    for (auto& se : cl.sessions) Next(*se);
  }

  // Runs `fn` later if the session's app server is still the same incarnation.
  template <typename Fn>
  auto Guard(Session& se, Fn fn) {
    Client& cl = *se.app;
    return [&cl, inc = cl.incarnation, fn = std::move(fn)](auto&&... args) mutable {
      if (cl.incarnation != inc) return;
      fn(std::forward<decltype(args)>(args)...);
    };
  }

  void Next(Session& se) {
    if (se.done >= c_->options().ops_per_client) return;
    const absl::Duration think = absl::Microseconds(c_->env().Uniform(20'000));
    c_->env().Schedule(think, [this, &se, inc = se.app->incarnation] {
      if (se.app->incarnation == inc) Begin(se);
    });
  }

  void Record(Session& se, Event e) {
    e.process = se.process;
    e.time = c_->env().now();
    if (c_->env().tracing())
      c_->env().Trace(StrCat("history ", ToJson(e), e.position ? StrCat(" @", e.position) : ""));
    history_->push_back(std::move(e));
  }

  void Invoke(Session& se, Event e) {
    se.busy = true;
    e.type = Event::Type::kInvoke;
    se.invoke = e;
    Record(se, std::move(e));
  }

  void Complete(Session& se, Event::Type type, std::optional<std::string> read_value,
                uint64_t position) {
    Event e = se.invoke;
    e.type = type;
    e.position = position;
    if (e.f == Event::Op::kRead) e.value = std::move(read_value);
    if (e.f != Event::Op::kRead && type == Event::Type::kOk) {
      uint64_t& a = acked_[e.key.substr(0, e.key.find('/'))];
      a = std::max(a, position);
    }
    Record(se, std::move(e));
    se.busy = false;
    ++se.done;
    if (type == Event::Type::kInfo) se.process += processes_;
    if (se.app->up) Next(se);
  }

  void Begin(Session& se) {
    const SimOptions& o = c_->options();
    GroupClient* gc = se.app->gc.get();
    const int g = static_cast<int>(c_->env().Uniform(o.groups));
    const int k = static_cast<int>(c_->env().Uniform(o.keys));
    const uint64_t pick =
        c_->env().Uniform(o.read_weight + o.write_weight + o.cas_weight + o.delete_weight);
    Event e;
    e.key = Row(g, k);
    if (pick < static_cast<uint64_t>(o.read_weight)) {
      e.f = Event::Op::kRead;
      const ReadLevel levels[] = {ReadLevel::kCurrent, ReadLevel::kCurrent, ReadLevel::kSnapshot,
                                  ReadLevel::kInconsistent};
      const ReadLevel level = levels[c_->env().Uniform(4)];
      e.level = replication::ToString(level);
      Invoke(se, e);
      gc->ReadPosition(
          Group(g), level, Guard(se, [this, &se, gc, g, k](absl::StatusOr<LogPosition> p) {
            if (!p.ok()) return Complete(se, Event::Type::kFail, std::nullopt, 0);
            const LogPosition at = *p;
            gc->Read(Group(g), at, Row(g, k), kDataFamily,
                     Guard(se, [this, &se, at](absl::StatusOr<replication::ReadReply> r) {
                       if (!r.ok()) return Complete(se, Event::Type::kFail, std::nullopt, 0);
                       Complete(se, Event::Type::kOk, ValueOf(*r), at.position);
                     }));
          }));
      return;
    }
    const bool del = pick >= static_cast<uint64_t>(o.read_weight + o.write_weight + o.cas_weight);
    const bool cas = !del && pick >= static_cast<uint64_t>(o.read_weight + o.write_weight);
    e.f = del ? Event::Op::kDelete : cas ? Event::Op::kCas : Event::Op::kWrite;
    e.value = StrCat(del ? "d" : "c", se.id, "-", ++se.seq);
    // Half the compare-and-sets read another entity of the group than the
    // one they write (what a transaction's read set and write set can be).
    int rk = k;
    if (cas && o.keys > 1 && c_->env().Uniform(2) == 0)
      rk = (k + 1 + static_cast<int>(c_->env().Uniform(o.keys - 1))) % o.keys;
    if (rk != k) e.read_key = Row(g, rk);
    // The transaction's read (not an operation of its own in the history).
    gc->ReadPosition(
        Group(g), ReadLevel::kCurrent,
        Guard(se, [this, &se, gc, g, k, rk, e, cas](absl::StatusOr<LogPosition> p) mutable {
          if (!p.ok()) return Next(se);  // nothing invoked yet: try another
          const LogPosition at = *p;
          auto commit = [this, &se, gc, g, k, rk, at, cas](Event e) {
            Invoke(se, e);
            // Promotion past a lost position, and combination with other
            // writes in one entry (docs/transactions.md): a blind write
            // read nothing, a compare-and-set the row it read. The history
            // checks each compare-and-set against the log just before it
            // (before its position, and the members ahead of it in a
            // combined entry), so passing a writer of that row fails the
            // seed.
            GroupClient::Reads reads;
            if (c_->options().promote) {
              auto r = std::make_shared<replication::ReadSet>();
              if (cas) r->add_rows(Row(g, rk));
              reads = std::move(r);
            }
            gc->Commit(Group(g), at, WriteEntry(Row(g, k), *e.value, e.f == Event::Op::kDelete),
                       Guard(se,
                             [this, &se](absl::StatusOr<replication::CommitResult> r) {
                               if (r.ok())
                                 return Complete(se, Event::Type::kOk, std::nullopt, r->position);
                               // The contract (group_client.h): Aborted and Unavailable
                               // mean nothing was written; anything else is unknown.
                               const bool failed =
                                   absl::IsAborted(r.status()) || absl::IsUnavailable(r.status());
                               Complete(se, failed ? Event::Type::kFail : Event::Type::kInfo,
                                        std::nullopt, 0);
                             }),
                       0, std::move(reads));
          };
          if (!cas) return commit(e);
          gc->Read(
              Group(g), at, Row(g, rk), kDataFamily,
              Guard(se, [&se, e, commit, this](absl::StatusOr<replication::ReadReply> r) mutable {
                if (!r.ok()) return Next(se);
                e.expected = ValueOf(*r);
                commit(e);
              }));
        }));
  }

  Cluster* const c_;
  std::vector<Event>* const history_;
  std::vector<std::unique_ptr<Client>> clients_;
  int processes_ = 0;  // sessions in all: history process ids are unique modulo this
  std::vector<std::unique_ptr<GroupClient>> graveyard_;
  std::map<std::string, uint64_t> acked_;
};

// ---- faults --------------------------------------------------------------------------

class Faults {
 public:
  Faults(Cluster* c, Clients* clients, int* count) : c_(c), clients_(clients), count_(count) {}

  void Start(int64_t until) {
    until_ = until;
    LinkFaults f;
    f.loss = c_->options().loss;
    f.duplicate = c_->options().duplicate;
    f.jitter = c_->options().jitter;
    c_->net().set_faults(f);
    for (size_t i = 0; i < c_->size(); ++i) BackgroundWriteFaults(static_cast<int>(i));
    ScheduleNext();
  }

  // Called when a fault wipes a read-only replica's data.
  void set_on_wipe(std::function<void(int)> fn) { on_wipe_ = std::move(fn); }

  // Ends every fault: links heal, everything crashed restarts.
  void Heal() {
    healed_ = true;
    c_->net().HealAll();
    c_->net().ClearMethodLoss();
    for (size_t i = 0; i < c_->size(); ++i) {
      const int dc = static_cast<int>(i);
      c_->bigtable(dc)->set_extra_latency(absl::ZeroDuration());
      c_->bigtable(dc)->set_down(false);
      c_->bigtable(dc)->set_write_faults(0, 0, absl::ZeroDuration(), absl::ZeroDuration());
      c_->StartLocks(dc);
      if (!c_->repl_up(dc)) c_->StartRepl(dc);
      if (c_->type(dc) == ReplicaType::kFull && !c_->coord_up(dc)) c_->StartCoordinator(dc);
    }
    for (size_t i = 0; i < clients_->size(); ++i) clients_->Restart(static_cast<int>(i));
  }

 private:
  SimEnv& env() { return c_->env(); }

  void After(absl::Duration d, std::function<void()> fn) {
    env().Schedule(d, [this, fn] {
      if (!healed_) fn();
    });
  }

  // Throughout the fault period every Bigtable makes a few writes late and
  // repeats a few, up to 2 s later.
  void BackgroundWriteFaults(int dc) {
    c_->bigtable(dc)->set_write_faults(0.03, 0.03, absl::Milliseconds(30), absl::Seconds(2));
  }

  absl::Duration Between(int min_ms, int max_ms) {
    return absl::Milliseconds(min_ms + static_cast<int>(env().Uniform(max_ms - min_ms + 1)));
  }

  void ScheduleNext() {
    env().Schedule(Between(200, 1500), [this] {
      if (healed_ || env().now() >= until_) return;
      Inject();
      ScheduleNext();
    });
  }

  // The message kinds a fault may drop selectively.
  static constexpr const char* kSelectiveLoss[] = {"coord.Invalidate", "repl.Apply", "lock.Acquire",
                                                   "repl.Paxos"};

  void Inject() {
    ++*count_;
    const int n = static_cast<int>(c_->size());
    if (on_wipe_) {
      // Topologies with a read-only replica: now and then its disk is
      // replaced (only a replica that does not vote may lose its log: a
      // voter would forget its promises) and it comes back by catch-up,
      // from a snapshot once the others cleaned up their logs.
      for (int i = 0; i < n; ++i) {
        if (c_->type(i) != ReplicaType::kReadOnly || !env().Chance(0.08)) continue;
        // As a disk is replaced: the tablet server goes down, comes back
        // with the table empty.
        c_->bigtable(i)->set_down(true);
        After(Between(200, 1000), [this, i] {
          on_wipe_(i);
          After(Between(100, 500), [this, i] { c_->bigtable(i)->set_down(false); });
        });
        return;
      }
    }
    const int dc = static_cast<int>(env().Uniform(n));
    switch (env().Uniform(13)) {
      case 9: {  // one kind of message is lost, often or always, to one datacenter or all
        std::vector<std::string> kinds = {kSelectiveLoss[env().Uniform(std::size(kSelectiveLoss))]};
        int to = env().Chance(0.5) ? dc : -1;
        if (env().Chance(0.3)) {
          // The asymmetric partition of the paper: writers cannot reach the
          // replica or its coordinator, its lock services still can. Often
          // its locks lapse meanwhile and come back (writers then skip it
          // on the lock survey, and readers there validate around it).
          kinds = {"repl.Paxos", "coord.Invalidate"};
          to = dc;
          if (c_->coord(dc) != nullptr && env().Chance(0.7)) {
            const int64_t lease_ms = absl::ToInt64Milliseconds(c_->options().coordinator_lease);
            c_->coord(dc)->PauseRenewals(absl::Milliseconds(
                lease_ms / 2 + static_cast<int64_t>(env().Uniform(2 * lease_ms))));
            env().Trace(StrCat("coordinator ", DcName(dc), " renewals paused"));
          }
          if (env().Chance(0.5)) {
            // ... and its disk is slow, so its readers' catch-ups take long.
            c_->bigtable(dc)->set_extra_latency(Between(20, 150));
            After(Between(1000, 5000),
                  [this, dc] { c_->bigtable(dc)->set_extra_latency(absl::ZeroDuration()); });
          }
        }
        const double p = 0.3 + 0.7 * static_cast<double>(env().Uniform(101)) / 100.0;
        for (const std::string& m : kinds) c_->net().set_method_loss(m, p, to);
        // Sometimes longer than a commit's deadline (5 s).
        After(Between(300, env().Chance(0.3) ? 7000 : 3000), [this, kinds, to] {
          for (const std::string& m : kinds) c_->net().set_method_loss(m, 0, to);
        });
        break;
      }
      case 10:  // the lock service restarts and forgets its leases
        c_->ForgetLocks(dc);
        break;
      case 11: {  // one link is cut, one way or both
        const int other = (dc + 1 + static_cast<int>(env().Uniform(n - 1))) % n;
        if (other == dc) break;
        const bool both = env().Chance(0.5);
        c_->net().Block(dc, other, true);
        if (both) c_->net().Block(other, dc, true);
        After(Between(300, 3000), [this, dc, other] {
          c_->net().Block(dc, other, false);
          c_->net().Block(other, dc, false);
        });
        break;
      }
      case 12: {  // a burst: the Bigtable applies many writes late, and many twice
        c_->bigtable(dc)->set_write_faults(0.3, 0.3, Between(5, 60), Between(100, 3000));
        env().Trace(StrCat("bigtable ", DcName(dc), " writes late and twice"));
        After(Between(500, 4000), [this, dc] { BackgroundWriteFaults(dc); });
        break;
      }
      case 0: {  // partition one datacenter: both ways, or one way only
        const int mode = static_cast<int>(env().Uniform(3));
        for (int o = 0; o < n; ++o) {
          if (o == dc) continue;
          if (mode != 1) c_->net().Block(dc, o, true);
          if (mode != 2) c_->net().Block(o, dc, true);
        }
        After(Between(300, 3000), [this, dc, n] {
          for (int o = 0; o < n; ++o) {
            if (o == dc) continue;
            c_->net().Block(dc, o, false);
            c_->net().Block(o, dc, false);
          }
        });
        break;
      }
      case 1:  // crash the replication server
        c_->CrashRepl(dc);
        After(Between(100, 2000), [this, dc] { c_->StartRepl(dc); });
        break;
      case 2:  // crash the coordinator (it restarts with every group invalid)
        if (c_->type(dc) != ReplicaType::kFull) break;
        c_->CrashCoordinator(dc);
        After(Between(100, 2000), [this, dc] { c_->StartCoordinator(dc); });
        break;
      case 3: {  // crash an app server
        const int i = static_cast<int>(env().Uniform(clients_->size()));
        clients_->Crash(i);
        After(Between(100, 1500), [this, i] { clients_->Restart(i); });
        break;
      }
      case 4: {  // a slow replica: its network and its disk
        const absl::Duration extra = Between(30, 200);
        c_->net().SetSlow(dc, extra);
        c_->bigtable(dc)->set_extra_latency(extra);
        After(Between(500, 3000), [this, dc] {
          c_->net().SetSlow(dc, absl::ZeroDuration());
          c_->bigtable(dc)->set_extra_latency(absl::ZeroDuration());
        });
        break;
      }
      case 6:  // the datacenter's tablet server is down (its data survives)
        c_->bigtable(dc)->set_down(true);
        env().Trace(StrCat("bigtable ", DcName(dc), " down"));
        After(Between(200, 2000), [this, dc] {
          c_->bigtable(dc)->set_down(false);
          env().Trace(StrCat("bigtable ", DcName(dc), " up"));
        });
        break;
      case 7:  // the lock service restarts (its leases are durable)
        c_->CrashLocks(dc);
        After(Between(100, 1500), [this, dc] { c_->StartLocks(dc); });
        break;
      case 8: {  // an app server's wall clock jumps (up to 10 s either way)
        const int64_t jump = static_cast<int64_t>(env().Uniform(20'000'001)) - 10'000'000;
        clients_->JumpClock(static_cast<int>(env().Uniform(clients_->size())), jump);
        break;
      }
      case 5:  // the coordinator's lock renewals stop reaching the lock services
        if (c_->coord(dc) != nullptr) {
          env().Trace(StrCat("coordinator ", DcName(dc), " renewals paused"));
          c_->coord(dc)->PauseRenewals(Between(2500, 4000));
        }
        break;
    }
  }

  Cluster* const c_;
  Clients* const clients_;
  int* const count_;
  int64_t until_ = 0;
  bool healed_ = false;
  std::function<void(int)> on_wipe_;
};

// ---- convergence and the checkers ---------------------------------------------------------

// Catches every replica up to the highest position any knows, then compares.
absl::Status Converge(Cluster& c, const LogInvariants& learned,
                      std::map<std::string, GroupLog>* logs, SimStats* stats) {
  const SimOptions& o = c.options();
  const int n = static_cast<int>(c.size());
  c.net().AddNode("checker", 0);
  GroupClient checker(&c.env(), c.net().TransportFor("checker"), c.ClientOptions(0));
  for (int g = 0; g < o.groups; ++g) {
    const std::string root = StrCat("g", g);
    uint64_t top = 0;
    for (int dc = 0; dc < n; ++dc) {
      uint64_t applied = 0;
      MS_ASSIGN_OR_RETURN(auto log, c.LearnedLog(dc, root, &applied));
      if (!log.empty()) top = std::max(top, log.rbegin()->first);
      top = std::max(top, applied);
    }
    // A position accepted somewhere but decided nowhere also counts.
    for (int dc = 0; dc < n; ++dc) {
      std::optional<absl::Status> done;
      replication::StateRequest req;
      *req.mutable_group() = Group(g);
      c.net().TransportFor("checker")->Call(Cluster::ReplAddr(dc), "repl.State",
                                            req.SerializeAsString(), absl::Seconds(1),
                                            [&](absl::StatusOr<std::string> r) {
                                              replication::StateReply s;
                                              if (r.ok() && s.ParseFromString(*r))
                                                top = std::max(top, s.top());
                                              done = r.status();
                                            });
      c.env().RunUntil(c.env().now() + 2'000'000, [&] { return done.has_value(); });
    }
    for (int dc = 0; dc < n; ++dc) {
      std::optional<absl::StatusOr<LogPosition>> done;
      checker.CatchUp(Group(g), dc, top, [&](absl::StatusOr<LogPosition> p) { done = p; });
      c.env().RunUntil(c.env().now() + 30'000'000, [&] { return done.has_value(); });
      if (!done)
        return absl::InternalError(
            StrCat("group g", g, ": catch-up of ", DcName(dc), " never finished"));
      if (!done->ok())
        return absl::InternalError(
            StrCat("group g", g, ": catch-up of ", DcName(dc),
                   " failed after the faults stopped: ", done->status().message()));
    }
    // Every replica holds the same chosen value at every position, the one
    // it was learned as (clean-up removed the oldest from the replicas).
    std::map<uint64_t, std::string> agreed = learned.LearnedLog(kTable, root);
    for (uint64_t pos = 1; pos <= top; ++pos)
      if (!agreed.count(pos))
        return absl::InternalError(
            StrCat("group g", g, ": position ", pos, " was never learned by any replica"));
    for (int dc = 0; dc < n; ++dc) {
      uint64_t applied = 0;
      MS_ASSIGN_OR_RETURN(auto log, c.LearnedLog(dc, root, &applied));
      if (applied < top)
        return absl::InternalError(StrCat("group g", g, ": replica ", DcName(dc), " applied ",
                                          applied, " of ", top, " positions after catch-up"));
      for (const auto& [pos, value] : log) {
        auto [it, inserted] = agreed.emplace(pos, value);
        if (!inserted && it->second != value)
          return absl::InternalError(StrCat("group g", g, ": replicas disagree on position ", pos));
      }
    }
    GroupLog& gl = (*logs)[root];
    for (const auto& [pos, value] : agreed) {
      if (pos > top) continue;
      replication::LogEntry e;
      if (!e.ParseFromString(value)) return absl::DataLossError("unparsable log entry");
      LogRecord& rec = gl[pos];
      rec.id = e.id();
      rec.noop = e.noop();
      auto writes = [&e](int from, int to, LogRecord::Writes* out) {
        for (int i = from; i < to && i < e.changes_size(); ++i)
          for (const auto& cc : e.changes(i).cells())
            (*out)[e.changes(i).row()] =
                cc.delete_cells() ? std::nullopt : std::optional<std::string>(cc.value());
      };
      if (e.members_size() == 0) writes(0, e.changes_size(), &rec.writes);
      int next = 0;  // a combined entry: each member's changes follow the last one's
      for (const auto& m : e.members()) {
        rec.members.push_back(LogRecord::Member{m.id(), {}});
        writes(next, next + static_cast<int>(m.changes()), &rec.members.back().writes);
        next += static_cast<int>(m.changes());
      }
    }
    stats->positions += top;
    // Every data replica ends with the same entity values: the log's.
    for (int k = 0; k < o.keys; ++k) {
      std::optional<std::string> want;
      auto note = [&want, row = Row(g, k)](const LogRecord::Writes& writes) {
        auto it = writes.find(row);
        if (it != writes.end()) want = it->second;
      };
      for (const auto& [pos, rec] : gl) {
        note(rec.writes);
        for (const LogRecord::Member& m : rec.members) note(m.writes);
      }
      for (int dc = 0; dc < n; ++dc) {
        if (c.type(dc) == ReplicaType::kWitness) continue;
        MS_ASSIGN_OR_RETURN(auto have, c.LatestValue(dc, Row(g, k)));
        if (have != want)
          return absl::InternalError(StrCat("replica ", DcName(dc), " has ",
                                            have.value_or("nothing"), " for ", Row(g, k),
                                            " but the log says ", want.value_or("nothing")));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

SimResult RunSimulation(const SimOptions& options) {
  SimResult result;
  Cluster cluster(options);
  if (options.trace) cluster.env().set_trace(&result.trace);
  std::unique_ptr<Bank> bank;
  if (options.bank_clients > 0)
    bank = std::make_unique<Bank>(&cluster, options.bank_clients, options.bank_ops);
  if (absl::Status s = cluster.Open(bank ? bank->Tables() : std::vector<storage::TableSchema>{});
      !s.ok()) {
    result.status = s;
    return result;
  }
  if (bank) {
    if (absl::Status s = bank->Setup(); !s.ok()) {
      result.status = s;
      return result;
    }
  }
  Clients clients(&cluster, &result.history);
  Faults faults(&cluster, &clients, &result.stats.faults);
  BackupMarks backups(&cluster);
  SimEnv& env = cluster.env();
  // The coordinator invariant, at every "valid": the replica has accepted,
  // learned or applied every position acknowledged so far (the reader
  // settles what is accepted but not applied before it reads). Checked for
  // the key-value groups; the bank's are checked by its end state.
  absl::Status invariant;
  cluster.set_on_valid([&](int dc, const std::string& root) {
    ++result.stats.valid_checks;
    if (!invariant.ok()) return;
    const uint64_t acked = clients.acked(root);
    absl::StatusOr<uint64_t> held = cluster.HighestHeld(dc, root);
    if (!held.ok()) {
      invariant = held.status();
    } else if (*held < acked) {
      invariant = absl::InternalError(StrCat(
          "the coordinator of ", DcName(dc), " answered \"valid\" for group ", root, " at ",
          env.now(), "us, but its replica has accepted nothing after position ", *held,
          " while position ", acked, " was acknowledged (a current read there would miss it)"));
    }
  });
  // The log's Paxos invariants, at every write of any replica's log.
  std::vector<bool> votes;
  for (ReplicaType t : options.replicas) votes.push_back(replication::Votes(t));
  LogInvariants log_invariants(std::move(votes));
  for (size_t i = 0; i < cluster.size(); ++i) {
    const int dc = static_cast<int>(i);
    cluster.bigtable(dc)->set_write_observer(
        [&, dc](const std::string& table, const std::string& row,
                const std::vector<storage::Mutation>& applied) {
          log_invariants.Observe(dc, table, row, applied, env.now());
        });
  }
  if (options.log_cleanup) {
    backups.Start();
    if (options.wipe_read_only)
      faults.set_on_wipe([&](int dc) {
        if (absl::Status s = cluster.WipeTable(dc); !s.ok() && invariant.ok()) invariant = s;
        log_invariants.Forget(dc, kTable);
        ++result.stats.wipes;
      });
  }
  const int64_t fault_end = env.now() + absl::ToInt64Microseconds(options.fault_period);
  // A broken invariant ends the run at once: what follows it is noise.
  auto broken = [&] { return !invariant.ok() || !log_invariants.status().ok(); };
  auto all_done = [&] { return broken() || (clients.AllDone() && (!bank || bank->AllDone())); };
  clients.Start();
  if (bank) bank->Start();
  if (options.faults) {
    // Off again however this run ends (the next seed enables its own).
    buggify::ScopedEnable fault_points(options.buggify, options.seed);
    faults.Start(fault_end);
    env.RunUntil(fault_end, all_done);
  }
  faults.Heal();
  const int64_t limit = env.now() + absl::ToInt64Microseconds(options.drain_limit);
  if (!broken()) env.RunUntil(limit, all_done);
  if (result.status.ok()) result.status = log_invariants.status();
  if (result.status.ok() && !all_done()) {
    result.status = absl::InternalError(
        StrCat("clients did not finish within ", absl::FormatDuration(options.drain_limit),
               " after the faults stopped:", clients.Stuck(), bank ? bank->Stuck() : ""));
  }
  if (result.status.ok()) result.status = invariant;
  cluster.set_on_valid(nullptr);
  std::map<std::string, GroupLog> logs;
  backups.Stop();
  if (result.status.ok()) result.status = Converge(cluster, log_invariants, &logs, &result.stats);
  result.stats.positions_cleaned = cluster.PositionsCleaned();
  {
    const GroupClient::Stats st = clients.Stats();
    result.stats.promotions = st.promotions;
    result.stats.combined = st.combined;
    result.stats.entries = st.entries;
    result.stats.commits = st.commits;
    result.stats.forwarded = st.forwarded;
    // Writes sent to their group's home were committed (and combined) by
    // its replication server's client.
    const replication::ReplicationServer::Stats home = cluster.HomeStats();
    result.stats.entries += home.home_entries;
    result.stats.learned_on_accept = home.learned_on_accept;
    result.stats.combined += home.home_combined;
  }
  result.stats.snapshot_catchups = log_invariants.snapshots();
  if (result.status.ok()) result.status = log_invariants.status();  // catch-up wrote too
  result.stats.log_checks = log_invariants.checks();
  if (result.status.ok()) result.status = CheckHistory(result.history, logs);
  if (result.status.ok() && bank) result.status = bank->SettleAndCheck();
  if (bank) result.stats.bank_ok = bank->transfers_ok();
  for (const Event& e : result.history) {
    if (e.type == Event::Type::kOk) ++result.stats.ops_ok;
    if (e.type == Event::Type::kFail) ++result.stats.ops_failed;
    if (e.type == Event::Type::kInfo) ++result.stats.ops_unknown;
  }
  for (size_t i = 0; i < cluster.size(); ++i) {
    result.stats.late_writes += cluster.bigtable(static_cast<int>(i))->late_writes();
    result.stats.repeated_writes += cluster.bigtable(static_cast<int>(i))->repeated_writes();
  }
  result.stats.messages = cluster.net().messages_sent();
  result.stats.dropped = cluster.net().messages_dropped();
  result.stats.virtual_micros = env.now();
  for (size_t i = 0; i < cluster.size(); ++i)
    cluster.bigtable(static_cast<int>(i))->set_write_observer(nullptr);
  return result;
}

// ---- measurements ---------------------------------------------------------------------

namespace {

struct Sample {
  std::vector<double> ms;
  uint64_t remote = 0;
  int errors = 0;
};

std::string Line(const std::string& what, const Sample& s) {
  std::vector<double> v = s.ms;
  if (v.empty())
    return StrCat("| ", what, " | no successful operation (", s.errors, " errors) | | | |\n");
  std::sort(v.begin(), v.end());
  const double median = v[v.size() / 2];
  const double p90 = v[std::min(v.size() - 1, v.size() * 9 / 10)];
  return fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", what, median, p90, v.back(),
                     static_cast<double>(s.remote) / static_cast<double>(v.size() + s.errors));
}

// Runs `op` (which calls its argument when finished, with success or not)
// `n` times in a row and measures each in virtual time. `op` may call
// `start_clock` when the part to measure begins (after a preparing step).
using Op = std::function<void(std::function<void()> start_clock, std::function<void(bool)> done)>;
Sample Measure(Cluster& c, const std::string& client, int n, const Op& op) {
  Sample s;
  for (int i = 0; i < n; ++i) {
    std::optional<bool> ok;
    int64_t start = c.env().now();
    uint64_t remote = c.net().remote_messages_of(client);
    op(
        [&] {
          start = c.env().now();
          remote = c.net().remote_messages_of(client);
        },
        [&](bool r) { ok = r; });
    c.env().RunUntil(c.env().now() + 60'000'000, [&] { return ok.has_value(); });
    s.remote += c.net().remote_messages_of(client) - remote;
    if (ok && *ok) {
      s.ms.push_back(static_cast<double>(c.env().now() - start) / 1000.0);
    } else {
      ++s.errors;
    }
    // Let applies and sweeps settle between operations.
    c.env().RunUntil(c.env().now() + 100'000);
  }
  return s;
}

std::string MeasureTopology(uint64_t seed, int ops, std::vector<ReplicaType> types,
                            const std::string& title) {
  SimOptions o;
  o.seed = seed;
  o.replicas = std::move(types);
  o.faults = false;
  Cluster c(o);
  if (absl::Status s = c.Open(); !s.ok()) return StrCat("cannot open: ", s.message(), "\n");
  c.net().AddNode("probe@A", 0);
  GroupClient a(&c.env(), c.net().TransportFor("probe@A"), c.ClientOptions(0));
  c.net().AddNode("probe@B", 1);
  GroupClient b(&c.env(), c.net().TransportFor("probe@B"), c.ClientOptions(1));
  int seq = 0;
  const std::string probe = "probe@A";
  // A transaction's read step, then its commit, timing only the commit.
  auto commit_at = [&](GroupClient& gc, int group) {
    return
        [&gc, group, &seq, &c](std::function<void()> start_clock, std::function<void(bool)> done) {
          std::optional<absl::StatusOr<LogPosition>> pos;
          gc.ReadPosition(Group(group), ReadLevel::kCurrent,
                          [&](absl::StatusOr<LogPosition> p) { pos = p; });
          c.env().RunUntil(c.env().now() + 60'000'000, [&] { return pos.has_value(); });
          if (!pos || !pos->ok()) return done(false);
          start_clock();
          gc.Commit(Group(group), **pos, WriteEntry(Row(group, 0), StrCat("m", ++seq)),
                    [done](absl::StatusOr<replication::CommitResult> r) { done(r.ok()); });
        };
  };
  auto current_read_at = [&](GroupClient& gc, int group) {
    return [&gc, group](std::function<void()>, std::function<void(bool)> done) {
      gc.ReadPosition(Group(group), ReadLevel::kCurrent,
                      [&gc, group, done](absl::StatusOr<LogPosition> p) {
                        if (!p.ok()) return done(false);
                        gc.Read(Group(group), *p, Row(group, 0), kDataFamily,
                                [done](absl::StatusOr<replication::ReadReply> r) { done(r.ok()); });
                      });
    };
  };
  std::string out = StrCat("\n", title,
                           "\n\n| operation at A | median ms | p90 ms | max ms | inter-datacenter "
                           "messages per op |\n|---|---|---|---|---|\n");
  // Warm up: the first write creates the group; the first read validates A.
  Measure(c, probe, 2, commit_at(a, 0));
  Measure(c, probe, 1, current_read_at(a, 0));
  out += Line("commit, uncontended (A leads)", Measure(c, probe, ops, commit_at(a, 0)));
  out += Line("current read, group valid at A", Measure(c, probe, ops, current_read_at(a, 0)));
  // B writes, nominating B as the next leader; then A commits while B's
  // replication server is down: the fast path to B times out.
  Sample leader_down;
  for (int i = 0; i < std::max(1, ops / 5); ++i) {
    Measure(c, "probe@B", 1, commit_at(b, 1));
    c.CrashRepl(1);
    Sample one = Measure(c, probe, 1, commit_at(a, 1));
    leader_down.ms.insert(leader_down.ms.end(), one.ms.begin(), one.ms.end());
    leader_down.remote += one.remote;
    leader_down.errors += one.errors;
    c.StartRepl(1);
    c.env().RunUntil(c.env().now() + 500'000);
  }
  out += Line("commit, nominated leader (B) down", leader_down);
  // A's coordinator down: current reads at A cannot use it.
  c.CrashCoordinator(0);
  out += Line("current read, A's coordinator down", Measure(c, probe, ops, current_read_at(a, 0)));
  out += Line("commit, A's coordinator down", Measure(c, probe, ops, commit_at(a, 0)));
  c.StartCoordinator(0);
  c.env().RunUntil(c.env().now() + 1'000'000);
  // C entirely down (its replication server and coordinator).
  if (c.size() > 2) {
    c.CrashRepl(2);
    if (c.type(2) == ReplicaType::kFull) c.CrashCoordinator(2);
    out += Line("commit, C down (first ones wait out C's lock lease)",
                Measure(c, probe, ops, commit_at(a, 0)));
    out += Line("current read, C down", Measure(c, probe, ops, current_read_at(a, 0)));
  }
  return out;
}

}  // namespace

std::string RunMeasurements(uint64_t seed, int ops) {
  std::string out =
      "One-way latencies A-B 10 ms, A-C 30 ms, B-C 25 ms, 0.2 ms within a datacenter, "
      "1 ms per Bigtable operation (0.5-1.5 ms); request timeout 250 ms; coordinator "
      "lease 2 s. Virtual time, no faults except those named.\n";
  out += MeasureTopology(seed, ops, {ReplicaType::kFull, ReplicaType::kFull, ReplicaType::kFull},
                         "Three full replicas (A, B, C):");
  out += MeasureTopology(seed, ops, {ReplicaType::kFull, ReplicaType::kFull, ReplicaType::kWitness},
                         "Full A and B, witness C:");
  return out;
}

}  // namespace megastore::sim
