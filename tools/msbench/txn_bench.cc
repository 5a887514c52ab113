#include "tools/msbench/txn_bench.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/database.h"
#include "base/delayed_transport.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/random.h"
#include "base/rpc/rpc_transport.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_name.h"
#include "replication/schema_table.h"
#include "schema/compiler.h"
#include "server/datacenter.h"
#include "storage/tabletserver/tablet_server.h"
#include "tools/msbench/bench_cluster.h"
#include "tools/msbench/etcd_baseline.h"
#include "tools/msbench/stats.h"
#include "txn/transaction.h"

namespace megastore::tools {
namespace {

// Each transaction works on one item of its group (--rows-per-group of
// them): by default it reads it and writes it back incremented, a
// read-modify-write, so concurrent writers to one group conflict (Megastore
// serializes a group's transactions through its log).
constexpr char kSchema[] = R"(
CREATE SCHEMA Bench
CREATE TABLE Counter {
  required int64 group_id;
} PRIMARY KEY(group_id), ENTITY GROUP ROOT;
CREATE TABLE Item {
  required int64 group_id;
  required int64 id;
  required int64 value;
  optional bytes payload;
} PRIMARY KEY(group_id, id), ENTITY GROUP KEY(group_id) REFERENCES Counter;
)";

// What one transaction does with its item.
enum class Kind { kReadModifyWrite, kBlindWrite, kRead };

struct Cell {
  int clients = 0;
  int64_t groups = 0;
  double throughput = 0;          // committed transactions per second
  double p50_ms = 0, p99_ms = 0;  // a transaction from Begin to the end of Commit, retries included
  double conflict_rate = 0;       // commit attempts that lost their position
  double retries_per_txn = 0;     // Run's retries per committed transaction
  double promotions = 0;          // positions lost and promoted past, per committed transaction
  double per_entry = 0;           // committed transactions per log entry they were in
  double fast_path = 0;           // commits chosen by the leader's ballot-0 accept
  double lock_missed = 0;         // advisory lock requests that went ahead without the lock
  double cpu_us = 0;  // this process's CPU time (cluster and clients) per committed transaction
  double invalidations = 0;     // coordinator invalidations sent per commit
  double catchups = 0;          // catch-ups (reads that found their replica behind) per transaction
  double first_read_again = 0;  // first reads whose position needed more than the one request
  double sent_home = 0;         // commits sent to their hot group's home, per commit attempted
  uint64_t committed = 0;
  uint64_t errors = 0;  // transactions that failed (Unavailable, gave up, ...)
  std::string first_error;
};

class Bench {
 public:
  // `cluster`: where hot groups' homes count what they committed.
  Bench(const TxnBenchOptions& o, server::LocalCluster* cluster,
        std::vector<std::unique_ptr<AppServer>> servers, std::vector<int> placement)
      : o_(o), cluster_(cluster), servers_(std::move(servers)), placement_(std::move(placement)) {
    payload_.assign(static_cast<size_t>(o.value_size), 'x');
    options_.advisory_lock = o.advisory_lock;
    options_.promote = o.promote;
    const schema::TableDescriptor* table =
        servers_.front()->db->layout().schema().FindTable("Item");
    for (const auto& f : table->fields()) {
      if (f.name() == "group_id") group_field_ = f.number();
      if (f.name() == "id") id_field_ = f.number();
      if (f.name() == "value") value_field_ = f.number();
      if (f.name() == "payload") payload_field_ = f.number();
    }
  }

  // One transaction on item `item` of group `g`.
  absl::StatusOr<CommitInfo> Transact(Database& db, int64_t g, int64_t item,
                                      Kind kind = Kind::kReadModifyWrite) {
    return db.Run(
        "Counter", {g},
        [&](Transaction& t) -> absl::Status {
          int64_t value = 0;
          if (kind != Kind::kBlindWrite) {
            absl::StatusOr<std::optional<schema::Entity>> e = t.Get("Item", {g, item});
            if (!e.ok()) return e.status();
            if (kind == Kind::kRead) return absl::OkStatus();
            if (e->has_value()) value = std::get<int64_t>((**e).fields.at(value_field_).at(0));
          }
          schema::Entity next;
          next.fields[group_field_] = {g};
          next.fields[id_field_] = {item};
          // A blind write writes a value of its own: the same value again
          // would change nothing, and an unchanged entity commits nothing.
          next.fields[value_field_] = {kind == Kind::kBlindWrite ? blind_seq_.fetch_add(1) + 1
                                                                 : value + 1};
          next.fields[payload_field_] = {payload_};
          return t.Put("Item", std::move(next));
        },
        options_);
  }

  // The next transaction's kind for the configured workload.
  Kind NextKind(Random& rng) const {
    if (o_.workload == "blind") return Kind::kBlindWrite;
    if (o_.workload == "read-mostly" && rng.Uniform(10) != 0) return Kind::kRead;
    return Kind::kReadModifyWrite;
  }

  // Commits once in each of the first `groups` groups, `threads` at a time,
  // then reads each once at every datacenter clients run in.
  absl::Status Preload(int64_t groups, int threads) {
    MS_RETURN_IF_ERROR(EveryGroup(groups, threads, [&](int t, int64_t g) {
      return Transact(*servers_[static_cast<size_t>(Site(t))]->db, g, 0).status();
    }));
    // Then one current read of each group at every datacenter clients run
    // in, so each coordinator there knows the group (as a running system's
    // do): a coordinator that has not seen a group sends its first current
    // read to a majority of replicas (--no-preload measures that).
    std::vector<int> sites = placement_;
    std::sort(sites.begin(), sites.end());
    sites.erase(std::unique(sites.begin(), sites.end()), sites.end());
    for (int site : sites) {
      Database& db = *servers_[static_cast<size_t>(site)]->db;
      MS_RETURN_IF_ERROR(EveryGroup(groups, threads, [&](int, int64_t g) {
        return db
            .Run(
                "Counter", {g},
                [&](Transaction& txn) {
                  return txn.Get("Item", {g, int64_t{0}}).status();
                },
                options_)
            .status();
      }));
    }
    return absl::OkStatus();
  }

  // Client `t`'s datacenter (an index into servers_).
  int Site(int t) const { return placement_[static_cast<size_t>(t) % placement_.size()]; }

  // Runs fn(thread, group) once for each of the first `groups` groups from
  // `threads` threads; the first error stops its thread and is returned.
  absl::Status EveryGroup(int64_t groups, int threads,
                          const std::function<absl::Status(int, int64_t)>& fn) {
    std::atomic<int64_t> next{0};
    std::vector<absl::Status> errors(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int64_t g = next.fetch_add(1); g < groups; g = next.fetch_add(1)) {
          if (absl::Status s = fn(t, g); !s.ok()) {
            errors[static_cast<size_t>(t)] = s;
            return;
          }
        }
      });
    }
    for (auto& t : pool) t.join();
    for (const absl::Status& s : errors)
      if (!s.ok()) return s;
    return absl::OkStatus();
  }

  Cell Measure(int clients, int64_t groups, uint64_t seed) {
    // Groups the previous cell made hot cool down first: every cell starts
    // with each app server proposing its own commits.
    if (o_.forward)
      absl::SleepFor(replication::GroupClientOptions().hot_for + absl::Milliseconds(500));
    Cell cell;
    cell.clients = clients;
    cell.groups = groups;
    std::vector<replication::GroupClient::Stats> before;
    uint64_t retries_before = 0;
    const HomeCounts homes_before = Homes();
    for (auto& s : servers_) {
      before.push_back(s->db->context().client->stats());
      retries_before += s->db->retries();
    }
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
    std::vector<uint64_t> errors(static_cast<size_t>(clients), 0);
    std::vector<std::string> first_error(static_cast<size_t>(clients));
    std::vector<std::thread> threads;
    Env* env = Env::Default();
    const double cpu_before = OwnCpuSeconds();
    const int64_t start = env->MonotonicMicros();
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        SetThreadName("msbench-client");
        Random rng(seed * 1000003 + static_cast<uint64_t>(c));
        Database& db = *servers_[static_cast<size_t>(Site(c))]->db;
        while (!stop.load(std::memory_order_relaxed)) {
          const int64_t g = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(groups)));
          const int64_t item =
              static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(o_.rows_per_group)));
          const Kind kind = NextKind(rng);
          const int64_t t0 = env->MonotonicMicros();
          absl::StatusOr<CommitInfo> r = Transact(db, g, item, kind);
          const int64_t t1 = env->MonotonicMicros();
          if (r.ok()) {
            latencies[static_cast<size_t>(c)].push_back(static_cast<double>(t1 - t0) / 1000.0);
          } else {
            if (errors[static_cast<size_t>(c)]++ == 0)
              first_error[static_cast<size_t>(c)] = r.status().ToString();
            absl::SleepFor(absl::Milliseconds(10));  // do not spin on a failing cluster
          }
        }
      });
    }
    absl::SleepFor(absl::Seconds(o_.seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double elapsed = static_cast<double>(env->MonotonicMicros() - start) / 1e6;
    const double cpu = OwnCpuSeconds() - cpu_before;
    std::vector<double> all;
    for (size_t c = 0; c < latencies.size(); ++c) {
      all.insert(all.end(), latencies[c].begin(), latencies[c].end());
      cell.errors += errors[c];
      if (cell.first_error.empty()) cell.first_error = first_error[c];
    }
    cell.committed = all.size();
    cell.throughput = static_cast<double>(all.size()) / elapsed;
    if (!all.empty()) cell.cpu_us = cpu * 1e6 / static_cast<double>(all.size());
    cell.p50_ms = Percentile(all, 0.50);
    cell.p99_ms = Percentile(all, 0.99);
    uint64_t commits = 0, fast = 0, conflicts = 0, retries = 0, locked = 0, unlocked = 0;
    uint64_t promotions = 0, entries = 0, forwarded = 0;
    uint64_t invalidations = 0, catchups = 0, first_reads = 0, first_again = 0;
    for (size_t i = 0; i < servers_.size(); ++i) {
      const auto now = servers_[i]->db->context().client->stats();
      commits += now.commits - before[i].commits;
      fast += now.fast_path - before[i].fast_path;
      conflicts += now.conflicts - before[i].conflicts;
      promotions += now.promotions - before[i].promotions;
      forwarded += now.forwarded - before[i].forwarded;
      entries += now.entries - before[i].entries;
      locked += now.locks_granted - before[i].locks_granted;
      invalidations += now.invalidations - before[i].invalidations;
      catchups += now.catchups - before[i].catchups;
      first_reads += now.first_reads - before[i].first_reads;
      first_again += now.first_reads_again - before[i].first_reads_again;
      unlocked += now.locks_missed - before[i].locks_missed;
      retries += servers_[i]->db->retries();
    }
    retries -= retries_before;
    // Commits sent to their group's home (GroupClient::Stats::forwarded)
    // count as commits of their app server, in entries the home made.
    const HomeCounts homes = Homes();
    entries += homes.entries - homes_before.entries;
    promotions += homes.promotions - homes_before.promotions;
    if (commits + conflicts > 0)
      cell.conflict_rate =
          static_cast<double>(conflicts) / static_cast<double>(commits + conflicts);
    if (commits > 0) cell.fast_path = static_cast<double>(fast) / static_cast<double>(commits);
    if (commits + conflicts > 0)
      cell.sent_home = static_cast<double>(forwarded) / static_cast<double>(commits + conflicts);
    if (commits > 0)
      cell.invalidations = static_cast<double>(invalidations) / static_cast<double>(commits);
    if (cell.committed > 0)
      cell.catchups = static_cast<double>(catchups) / static_cast<double>(cell.committed);
    if (first_reads + first_again > 0)
      cell.first_read_again =
          static_cast<double>(first_again) / static_cast<double>(first_reads + first_again);
    if (locked + unlocked > 0)
      cell.lock_missed = static_cast<double>(unlocked) / static_cast<double>(locked + unlocked);
    if (entries > 0) cell.per_entry = static_cast<double>(commits) / static_cast<double>(entries);
    if (cell.committed > 0)
      cell.promotions = static_cast<double>(promotions) / static_cast<double>(cell.committed);
    if (cell.committed > 0)
      cell.retries_per_txn = static_cast<double>(retries) / static_cast<double>(cell.committed);
    return cell;
  }

 private:
  // The entries and promotions of the commits hot groups' homes made.
  struct HomeCounts {
    uint64_t entries = 0, promotions = 0;
  };
  HomeCounts Homes() const {
    HomeCounts h;
    for (int i = 0; i < cluster_->size(); ++i) {
      replication::ReplicationServer* r = cluster_->datacenter(i).replication();
      if (r == nullptr) continue;
      const replication::ReplicationServer::Stats s = r->stats();
      h.entries += s.home_entries;
      h.promotions += s.home_promotions;
    }
    return h;
  }

  const TxnBenchOptions& o_;
  server::LocalCluster* const cluster_;
  std::vector<std::unique_ptr<AppServer>> servers_;
  std::vector<int> placement_;  // client i runs at servers_[placement_[i % size]]
  std::string payload_;
  TransactionOptions options_;
  int group_field_ = 0, id_field_ = 0, value_field_ = 0, payload_field_ = 0;  // Item's fields
  std::atomic<int64_t> blind_seq_{0};  // the values blind writes write
};

// The median of one figure over runs.
template <typename F>
double MedianOf(const std::vector<Cell>& runs, F f) {
  std::vector<double> v;
  for (const Cell& c : runs) v.push_back(f(c));
  return Median(v);
}

}  // namespace

int RunTxnBench(const TxnBenchOptions& o) {
  SetLogLevel("warn");
  rpc::SetInProcessCalls(!o.tcp);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "msbench txn: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  absl::StatusOr<std::vector<replication::ReplicaType>> types = ParseTypes(o.replicas);
  if (!types.ok()) return fail(types.status());
  // The cluster: datacenters A, B, ... of those types on loopback, with the WAN between them.
  absl::StatusOr<server::ClusterConfig> config = BenchClusterConfig(*types, o.wan);
  if (!config.ok()) return fail(config.status());
  const server::ClusterConfig& cluster_config = *config;
  std::vector<std::string> names;
  for (const server::DatacenterConfig& dc : cluster_config.datacenters())
    names.push_back(dc.name());
  const auto wan = server::DelaysOf(cluster_config);
  std::vector<int> placement;
  for (absl::string_view dc : absl::StrSplit(o.at, ',', absl::SkipWhitespace())) {
    auto it = std::find(names.begin(), names.end(), dc);
    if (it == names.end())
      return fail(absl::InvalidArgumentError(
          StrCat("--at: no datacenter ", dc, " (have ", absl::StrJoin(names, ","), ")")));
    if ((*types)[static_cast<size_t>(it - names.begin())] == replication::ReplicaType::kWitness)
      return fail(absl::InvalidArgumentError(
          StrCat("--at: ", dc, " is a witness; app servers need a replica with data")));
    placement.push_back(static_cast<int>(it - names.begin()));
  }
  if (placement.empty()) return fail(absl::InvalidArgumentError("--at names no datacenter"));

  std::string ddl = kSchema;
  if (o.encrypted) ddl.replace(ddl.find("ENTITY GROUP ROOT;"), 18, "ENTITY GROUP ROOT, ENCRYPTED;");
  schema::CompileResult compiled = schema::CompileSchema(ddl);
  if (!compiled.ok()) return fail(absl::InternalError("the benchmark's schema does not compile"));
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(compiled.descriptor);
  if (!layout.ok()) return fail(layout.status());

  Env* env = Env::Default();
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp)
    root =
        (std::filesystem::temp_directory_path() / StrCat("msbench-txn-", env->Random64())).string();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return fail(absl::InternalError(StrCat("cannot create ", root, ": ", ec.message())));
  int rc = 0;
  {
    auto cluster =
        server::LocalCluster::Start(env, root, cluster_config, txn::TablesFor(*layout), o.sync);
    if (!cluster.ok()) return fail(cluster.status());
    if (!(*cluster)->WaitUntilServing(absl::Seconds(10)))
      return fail(absl::UnavailableError("the coordinators did not get their locks within 10 s"));
    // Recorded as megastored records it: the replicas learn from it that
    // the schema is encrypted (their keys go under ROOT/keys).
    if (absl::Status s = RecordSchema(**cluster, compiled.descriptor); !s.ok()) return fail(s);
    // One app server per datacenter that runs clients.
    std::vector<std::unique_ptr<AppServer>> servers;
    std::vector<int> server_of(names.size(), -1);
    std::vector<int> client_servers;
    for (int dc : placement) {
      if (server_of[static_cast<size_t>(dc)] < 0) {
        auto s = OpenAppServer(**cluster, names[static_cast<size_t>(dc)], compiled.descriptor,
                               o.combine, o.forward);
        if (!s.ok()) return fail(s.status());
        server_of[static_cast<size_t>(dc)] = static_cast<int>(servers.size());
        servers.push_back(std::move(*s));
      }
      client_servers.push_back(server_of[static_cast<size_t>(dc)]);
    }
    Bench bench(o, cluster->get(), std::move(servers), client_servers);

    // The floor: a commit needs at least one round trip from the client's
    // datacenter to the nearest other voter.
    std::vector<double> floors;
    for (int dc : placement) {
      double best = 0;
      for (size_t v = 0; v < names.size(); ++v) {
        if (static_cast<int>(v) == dc || (*types)[v] == replication::ReplicaType::kReadOnly)
          continue;
        auto d = wan.find({names[static_cast<size_t>(dc)], names[v]});
        const double rtt = d == wan.end() ? 0 : 2 * absl::ToDoubleMilliseconds(d->second);
        if (best == 0 || rtt < best) best = rtt;
      }
      floors.push_back(best);
    }
    const double floor_ms = floors.empty() ? 0 : *std::min_element(floors.begin(), floors.end());

    // The baseline, up beside the cluster (each idles while the other is
    // measured): run by run, our cells then etcd's, so both see the same
    // background load.
    std::unique_ptr<EtcdBaseline> etcd;
    if (o.baseline == "etcd") {
      absl::StatusOr<std::unique_ptr<EtcdBaseline>> started =
          EtcdBaseline::Start(o.etcd_binary, root + "/etcd");
      if (!started.ok()) return fail(started.status());
      etcd = std::move(*started);
    }
    const int64_t max_groups = *std::max_element(o.groups.begin(), o.groups.end());
    const int max_clients = *std::max_element(o.clients.begin(), o.clients.end());
    if (o.preload) {
      const int64_t t0 = env->MonotonicMicros();
      if (absl::Status s = bench.Preload(max_groups, std::max(max_clients, 16)); !s.ok()) {
        std::fprintf(stderr, "msbench txn: preloading %lld groups failed: %s\n",
                     static_cast<long long>(max_groups), s.ToString().c_str());
        rc = 1;
      } else if (!o.json) {
        std::printf("preloaded %lld groups in %.1f s\n", static_cast<long long>(max_groups),
                    static_cast<double>(env->MonotonicMicros() - t0) / 1e6);
      }
    }
    if (rc == 0 && !o.json) {
      std::printf(
          "workload %s on one of %lld entities per group, replicas %s, clients at %s, WAN "
          "one-way %s, %s writes, %s, %s, %s, %s, %s, %s, %.1f s per cell, median of %d "
          "run(s)\n",
          o.workload.c_str(), static_cast<long long>(o.rows_per_group), o.replicas.c_str(),
          o.at.c_str(), o.wan.c_str(), o.sync ? "synced" : "unsynced",
          o.tcp ? "every call over TCP" : "in-process calls between datacenters",
          o.advisory_lock ? "advisory locks" : "no advisory locks",
          o.promote ? "promotion" : "no promotion",
          o.combine ? "combined entries" : "one commit per entry",
          o.forward ? "hot groups' commits sent home" : "no commits sent home",
          o.encrypted ? "encrypted at rest" : "not encrypted", o.seconds, o.runs);
      std::printf("one WAN round trip (client to nearest other voter): %.1f ms\n", floor_ms);
      std::printf("%7s %7s %9s %8s %8s %8s %9s %8s %8s %8s %9s %7s %7s", "clients", "groups",
                  "txn/s", "p50 ms", "p99 ms", "p50/RTT", "conflict", "retry/tx", "promo/tx",
                  "tx/entry", "fast-path", "errors", "cpu us");
      if (o.baseline == "etcd") std::printf(" %9s %8s", "etcd put/s", "vs etcd");
      std::printf("\n");
    }
    std::map<std::pair<int, int64_t>, std::vector<Cell>> results;
    std::map<int, std::vector<EtcdFigures>> etcd_results;
    for (int run = 0; rc == 0 && run < o.runs; ++run) {
      for (int64_t groups : o.groups)
        for (int clients : o.clients)
          results[{clients, groups}].push_back(
              bench.Measure(clients, groups, o.seed + static_cast<uint64_t>(run)));
      if (etcd)
        for (int clients : o.clients)
          etcd_results[clients].push_back(etcd->Measure(clients, max_groups * o.rows_per_group,
                                                        o.value_size, o.seconds,
                                                        o.seed + static_cast<uint64_t>(run)));
    }
    // etcd's median puts/s at `clients`, 0 without the baseline.
    auto etcd_median = [&](int clients, auto figure) {
      auto it = etcd_results.find(clients);
      if (it == etcd_results.end() || it->second.empty()) return 0.0;
      std::vector<double> v;
      for (const EtcdFigures& f : it->second) v.push_back(figure(f));
      return Median(v);
    };
    for (int64_t groups : o.groups) {
      for (int clients : o.clients) {
        if (rc != 0) break;
        const std::vector<Cell>& runs = results[{clients, groups}];
        const double tput = MedianOf(runs, [](const Cell& c) { return c.throughput; });
        const double p50 = MedianOf(runs, [](const Cell& c) { return c.p50_ms; });
        const double p99 = MedianOf(runs, [](const Cell& c) { return c.p99_ms; });
        const double conflict = MedianOf(runs, [](const Cell& c) { return c.conflict_rate; });
        const double retry = MedianOf(runs, [](const Cell& c) { return c.retries_per_txn; });
        const double promoted = MedianOf(runs, [](const Cell& c) { return c.promotions; });
        const double per_entry = MedianOf(runs, [](const Cell& c) { return c.per_entry; });
        const double fast = MedianOf(runs, [](const Cell& c) { return c.fast_path; });
        const double missed = MedianOf(runs, [](const Cell& c) { return c.lock_missed; });
        const double cpu_us = MedianOf(runs, [](const Cell& c) { return c.cpu_us; });
        const double invalidations = MedianOf(runs, [](const Cell& c) { return c.invalidations; });
        const double catchups = MedianOf(runs, [](const Cell& c) { return c.catchups; });
        const double again = MedianOf(runs, [](const Cell& c) { return c.first_read_again; });
        const double sent_home = MedianOf(runs, [](const Cell& c) { return c.sent_home; });
        uint64_t errors = 0;
        std::string first_error;
        for (const Cell& c : runs) {
          errors += c.errors;
          if (first_error.empty()) first_error = c.first_error;
        }
        const double ratio = floor_ms > 0 ? p50 / floor_ms : 0;
        const double etcd_puts =
            etcd_median(clients, [](const EtcdFigures& f) { return f.puts_per_s; });
        const double vs_etcd = etcd_puts > 0 ? tput / etcd_puts : 0;
        if (o.json) {
          std::printf(
              "{\"bench\":\"txn\",\"clients\":%d,\"groups\":%lld,\"workload\":\"%s\","
              "\"rows_per_group\":%lld,\"replicas\":\"%s\",\"at\":\"%s\","
              "\"wan\":\"%s\",\"sync\":%s,\"tcp\":%s,\"seconds\":%.2f,\"runs\":%d,\"txn_per_s\":%."
              "1f,"
              "\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"rtt_ms\":%.1f,\"p50_over_rtt\":%.3f,"
              "\"conflict_rate\":%.4f,\"retries_per_txn\":%.4f,\"promotions_per_txn\":%.4f,"
              "\"promote\":%s,\"combine\":%s,\"forward\":%s,\"txns_per_entry\":%.3f,\"fast_path_"
              "rate\":%.4f,"
              "\"advisory_lock\":%s,\"lock_missed_rate\":%.4f,\"encrypted\":%s,\"errors\":%llu,"
              "\"cpu_us_per_txn\":%.0f,\"invalidations_per_commit\":%.4f,"
              "\"catchups_per_txn\":%.4f,\"first_read_again_rate\":%.4f,\"sent_home_rate\":%.4f%s}"
              "\n",
              clients, static_cast<long long>(groups), o.workload.c_str(),
              static_cast<long long>(o.rows_per_group), o.replicas.c_str(), o.at.c_str(),
              o.wan.c_str(), o.sync ? "true" : "false", o.tcp ? "true" : "false", o.seconds, o.runs,
              tput, p50, p99, floor_ms, ratio, conflict, retry, promoted,
              o.promote ? "true" : "false", o.combine ? "true" : "false",
              o.forward ? "true" : "false", per_entry, fast, o.advisory_lock ? "true" : "false",
              missed, o.encrypted ? "true" : "false", static_cast<unsigned long long>(errors),
              cpu_us, invalidations, catchups, again, sent_home,
              etcd ? fmt::format(",\"etcd_puts_per_s\":{:.1f},\"ratio_vs_etcd\":{:.3f}", etcd_puts,
                                 vs_etcd)
                         .c_str()
                   : "");
        } else {
          std::printf(
              "%7d %7lld %9.1f %8.1f %8.1f %8.2f %8.1f%% %8.3f %8.3f %8.2f %8.1f%% %7llu %7.0f",
              clients, static_cast<long long>(groups), tput, p50, p99, ratio, 100 * conflict, retry,
              promoted, per_entry, 100 * fast, static_cast<unsigned long long>(errors), cpu_us);
          if (etcd) std::printf(" %9.1f %7.2fx", etcd_puts, vs_etcd);
          std::printf("\n");
        }
        if (o.advisory_lock && !o.json && missed > 0)
          std::printf("        advisory lock missed (went ahead unlocked): %.1f%%\n", 100 * missed);
        if (!o.json && again > 0)
          std::printf("        first reads that needed more than one request: %.1f%%\n",
                      100 * again);
        if (!o.json && sent_home > 0)
          std::printf(
              "        commits sent to their group's home: %.1f%% (the fast-path column counts "
              "the others)\n",
              100 * sent_home);
        if (errors > 0 && !o.json) std::printf("        first error: %s\n", first_error.c_str());
      }
    }
    // The baseline's own figures.
    for (int clients : o.clients) {
      if (rc != 0 || !etcd) break;
      const auto& runs = etcd_results[clients];
      const double puts = etcd_median(clients, [](const EtcdFigures& f) { return f.puts_per_s; });
      const double p50 = etcd_median(clients, [](const EtcdFigures& f) { return f.p50_ms; });
      const double p99 = etcd_median(clients, [](const EtcdFigures& f) { return f.p99_ms; });
      const double cpu_us =
          etcd_median(clients, [](const EtcdFigures& f) { return f.cpu_us_per_put; });
      uint64_t errors = 0;
      std::string first_error;
      for (const EtcdFigures& f : runs) {
        errors += f.errors;
        if (first_error.empty()) first_error = f.first_error;
      }
      if (o.json) {
        std::printf(
            "{\"bench\":\"etcd\",\"members\":3,\"clients\":%d,\"value_size\":%lld,"
            "\"seconds\":%.2f,\"runs\":%d,\"puts_per_s\":%.1f,\"p50_ms\":%.2f,\"p99_ms\":%.2f,"
            "\"cpu_us_per_put\":%.0f,\"errors\":%llu}\n",
            clients, static_cast<long long>(o.value_size), o.seconds, o.runs, puts, p50, p99,
            cpu_us, static_cast<unsigned long long>(errors));
      } else {
        if (clients == o.clients.front())
          std::printf(
              "etcd (%s), 3 members on loopback, WAL synced on every commit, puts of %lld bytes "
              "through its JSON gateway:\n",
              o.etcd_binary.c_str(), static_cast<long long>(o.value_size));
        std::printf(
            "%7d clients %9.1f puts/s  p50 %6.1f ms  p99 %6.1f ms  cpu %5.0f us/put  errors %llu\n",
            clients, puts, p50, p99, cpu_us, static_cast<unsigned long long>(errors));
        if (errors > 0) std::printf("        first error: %s\n", first_error.c_str());
      }
    }
    std::fflush(stdout);
  }
  if (temp) std::filesystem::remove_all(root, ec);
  return rc;
}

}  // namespace megastore::tools
