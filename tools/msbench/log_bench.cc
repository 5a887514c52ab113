#include "tools/msbench/log_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/env.h"
#include "base/logging.h"
#include "base/strings.h"
#include "schema/compiler.h"
#include "server/cluster.h"
#include "tools/msbench/bench_cluster.h"
#include "tools/msbench/stats.h"
#include "txn/transaction.h"

namespace megastore::tools {
namespace {

constexpr char kSchema[] = R"(
CREATE SCHEMA LogBench
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
constexpr int64_t kItems = 10;

struct Window {
  std::vector<double> commit_ms, read_ms;
};

// What the replication servers' last clean-up sweeps saw of the group's
// log (the only group: the largest is it), per datacenter.
struct LogSize {
  uint64_t positions = 0, bytes = 0;
  uint64_t removed = 0;  // positions clean-up removed so far
};
std::vector<LogSize> LogSizes(server::LocalCluster& cluster) {
  std::vector<LogSize> out;
  for (int i = 0; i < cluster.size(); ++i) {
    LogSize s;
    if (replication::ReplicationServer* r = cluster.datacenter(i).replication()) {
      const auto st = r->stats();
      s.positions = st.largest_log_positions;
      s.bytes = st.largest_log_bytes;
      s.removed = st.positions_removed;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

int RunLogBench(const LogBenchOptions& o) {
  SetLogLevel("warn");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "msbench log: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  if (o.early < o.window || o.writes < o.early + o.window)
    return fail(absl::InvalidArgumentError(
        StrCat("--writes (", o.writes, ") must leave room for two windows of ", o.window,
               " after --early (", o.early, "), which must be at least one window")));
  absl::StatusOr<std::vector<replication::ReplicaType>> types = ParseTypes(o.replicas);
  if (!types.ok()) return fail(types.status());
  if ((*types)[0] == replication::ReplicaType::kWitness)
    return fail(absl::InvalidArgumentError("--replicas: A runs the client and needs data"));
  absl::StatusOr<server::ClusterConfig> config = BenchClusterConfig(*types, o.wan);
  if (!config.ok()) return fail(config.status());
  server::LogCleanupConfig* cleanup = config->mutable_log_cleanup();
  cleanup->set_disabled(!o.cleanup);
  cleanup->set_without_backup(true);  // this benchmark takes no backups
  cleanup->set_keep_positions(o.keep_positions);
  cleanup->set_keep_age_seconds(0);
  cleanup->set_max_positions(std::max<uint64_t>(o.keep_positions, 20000));
  cleanup->set_interval_seconds(1);

  schema::CompileResult compiled = schema::CompileSchema(kSchema);
  if (!compiled.ok()) return fail(absl::InternalError("the benchmark's schema does not compile"));
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(compiled.descriptor);
  if (!layout.ok()) return fail(layout.status());

  Env* env = Env::Default();
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp)
    root =
        (std::filesystem::temp_directory_path() / StrCat("msbench-log-", env->Random64())).string();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return fail(absl::InternalError(StrCat("cannot create ", root, ": ", ec.message())));
  int rc = 0;
  {
    auto cluster = server::LocalCluster::Start(env, root, *config, txn::TablesFor(*layout), o.sync);
    if (!cluster.ok()) return fail(cluster.status());
    if (!(*cluster)->WaitUntilServing(absl::Seconds(10)))
      return fail(absl::UnavailableError("the coordinators did not get their locks within 10 s"));
    if (absl::Status s = RecordSchema(**cluster, compiled.descriptor); !s.ok()) return fail(s);
    auto app = OpenAppServer(**cluster, "A", compiled.descriptor);
    if (!app.ok()) return fail(app.status());
    Database& db = *(*app)->db;
    const schema::TableDescriptor* item = db.layout().schema().FindTable("Item");
    const std::string payload(static_cast<size_t>(o.value_size), 'x');

    auto write = [&](int64_t i) {
      return db.Run("Counter", {int64_t{0}}, [&](Transaction& t) -> absl::Status {
        schema::Entity e;
        for (const auto& f : item->fields()) {
          if (f.name() == "group_id") e.fields[f.number()] = {int64_t{0}};
          if (f.name() == "id") e.fields[f.number()] = {i % kItems};
          if (f.name() == "value") e.fields[f.number()] = {i};  // every write changes the item
          if (f.name() == "payload") e.fields[f.number()] = {payload};
        }
        return t.Put("Item", std::move(e));
      });
    };
    auto read = [&](int64_t i) {
      return db.Run("Counter", {int64_t{0}}, [&](Transaction& t) -> absl::Status {
        return t.Get("Item", {int64_t{0}, i % kItems}).status();
      });
    };

    if (!o.json)
      std::printf(
          "one group, %lld writes of %lld bytes; replicas %s, WAN %s, log clean-up %s "
          "(keep %llu positions)\n%9s %s\n",
          static_cast<long long>(o.writes), static_cast<long long>(o.value_size),
          o.replicas.c_str(), o.wan.c_str(), o.cleanup ? "on" : "OFF",
          static_cast<unsigned long long>(o.keep_positions), "writes",
          "log kept per datacenter (positions / bytes, as the last clean-up sweep saw it)");
    Window early, late;
    uint64_t max_bytes = 0, max_positions = 0;
    auto report = [&](int64_t done) {
      std::vector<LogSize> sizes = LogSizes(**cluster);
      std::string line;
      // Without clean-up no sweep measures the log: it holds every position.
      if (!o.cleanup) line = StrCat("  every position kept (no clean-up sweeps measure it)");
      for (size_t i = 0; i < sizes.size() && o.cleanup; ++i) {
        max_bytes = std::max(max_bytes, sizes[i].bytes);
        max_positions = std::max(max_positions, sizes[i].positions);
        line += StrCat("  ", static_cast<char>('A' + i), " ", sizes[i].positions, " / ",
                       sizes[i].bytes, " (", sizes[i].removed, " removed)");
      }
      if (o.json) {
        std::printf("{\"bench\":\"log\",\"writes\":%lld,\"sizes\":\"%s\"}\n",
                    static_cast<long long>(done), line.c_str());
      } else {
        std::printf("%9lld%s\n", static_cast<long long>(done), line.c_str());
      }
      std::fflush(stdout);
    };
    const int64_t t_start = env->MonotonicMicros();
    for (int64_t i = 1; i <= o.writes && rc == 0; ++i) {
      Window* w = i > o.early - o.window && i <= o.early ? &early
                  : i > o.writes - o.window              ? &late
                                                         : nullptr;
      const int64_t t0 = env->MonotonicMicros();
      absl::StatusOr<CommitInfo> c = write(i);
      const int64_t t1 = env->MonotonicMicros();
      if (!c.ok()) {
        std::fprintf(stderr, "msbench log: write %lld failed: %s\n", static_cast<long long>(i),
                     c.status().ToString().c_str());
        rc = 1;
        break;
      }
      if (w != nullptr) {
        w->commit_ms.push_back(static_cast<double>(t1 - t0) / 1000.0);
        const int64_t t2 = env->MonotonicMicros();
        absl::StatusOr<CommitInfo> r = read(i);
        const int64_t t3 = env->MonotonicMicros();
        if (!r.ok()) {
          std::fprintf(stderr, "msbench log: current read after write %lld failed: %s\n",
                       static_cast<long long>(i), r.status().ToString().c_str());
          rc = 1;
          break;
        }
        w->read_ms.push_back(static_cast<double>(t3 - t2) / 1000.0);
      }
      if (i % o.report_every == 0) report(i);
    }
    if (rc == 0) {
      // One more sweep's worth of time: the final size after the last writes.
      absl::SleepFor(absl::Seconds(2));
      report(o.writes);
      const double elapsed = static_cast<double>(env->MonotonicMicros() - t_start) / 1e6;
      const double ce = Median(early.commit_ms), cl = Median(late.commit_ms);
      const double re = Median(early.read_ms), rl = Median(late.read_ms);
      const double ce99 = Percentile(early.commit_ms, 0.99),
                   cl99 = Percentile(late.commit_ms, 0.99);
      const double re99 = Percentile(early.read_ms, 0.99), rl99 = Percentile(late.read_ms, 0.99);
      if (o.json) {
        std::printf(
            "{\"bench\":\"log\",\"writes\":%lld,\"cleanup\":%s,\"seconds\":%.1f,"
            "\"max_log_bytes\":%llu,\"max_log_positions\":%llu,"
            "\"commit_p50_early_ms\":%.3f,\"commit_p50_late_ms\":%.3f,"
            "\"commit_p99_early_ms\":%.3f,\"commit_p99_late_ms\":%.3f,"
            "\"read_p50_early_ms\":%.3f,\"read_p50_late_ms\":%.3f,"
            "\"read_p99_early_ms\":%.3f,\"read_p99_late_ms\":%.3f}\n",
            static_cast<long long>(o.writes), o.cleanup ? "true" : "false", elapsed,
            static_cast<unsigned long long>(max_bytes),
            static_cast<unsigned long long>(max_positions), ce, cl, ce99, cl99, re, rl, re99, rl99);
      } else {
        std::printf("largest log seen: %llu positions, %llu bytes; %.1f s in all\n",
                    static_cast<unsigned long long>(max_positions),
                    static_cast<unsigned long long>(max_bytes), elapsed);
        std::printf("%-14s %12s %12s %12s %12s\n", "", "p50 early", "p50 late", "late/early",
                    "p99 early/late");
        std::printf("%-14s %12.3f %12.3f %12.3f %6.2f/%-6.2f\n", "commit ms", ce, cl,
                    ce > 0 ? cl / ce : 0, ce99, cl99);
        std::printf("%-14s %12.3f %12.3f %12.3f %6.2f/%-6.2f\n", "current read", re, rl,
                    re > 0 ? rl / re : 0, re99, rl99);
        std::printf("(early: writes %lld..%lld; late: writes %lld..%lld)\n",
                    static_cast<long long>(o.early - o.window + 1), static_cast<long long>(o.early),
                    static_cast<long long>(o.writes - o.window + 1),
                    static_cast<long long>(o.writes));
      }
    }
    std::fflush(stdout);
  }
  if (temp) std::filesystem::remove_all(root, ec);
  return rc;
}

}  // namespace megastore::tools
