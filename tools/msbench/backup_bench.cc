#include "tools/msbench/backup_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "backup/backup_file.h"
#include "backup/backup_job.h"
#include "backup/backup_verify.h"
#include "backup/restore.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/compiler.h"
#include "tools/msbench/bench_cluster.h"
#include "tools/msbench/stats.h"
#include "txn/transaction.h"

namespace megastore::tools {
namespace {

constexpr char kSchema[] = R"(
CREATE SCHEMA BackupBench
CREATE TABLE Customer {
  required int64 id;
} PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE Order {
  required int64 id;
  required int64 number;
  required int64 amount;
  optional bytes payload;
} PRIMARY KEY(id, number), ENTITY GROUP KEY(id) REFERENCES Customer;
CREATE LOCAL INDEX OrdersByAmount ON Order(id, amount);
)";

constexpr int64_t kPerCommit = 200;

struct Run {
  double backup_s = 0, verify_s = 0, restore_s = 0;
  uint64_t file_bytes = 0, rows = 0, restored = 0;
};

}  // namespace

int RunBackupBench(const BackupBenchOptions& o) {
  SetLogLevel("warn");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "msbench backup: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  absl::StatusOr<std::vector<replication::ReplicaType>> types = ParseTypes(o.replicas);
  if (!types.ok()) return fail(types.status());
  if ((*types)[0] == replication::ReplicaType::kWitness)
    return fail(absl::InvalidArgumentError("--replicas: A is backed up from and needs data"));
  absl::StatusOr<server::ClusterConfig> config = BenchClusterConfig(*types, "none");
  if (!config.ok()) return fail(config.status());
  config->mutable_log_cleanup()->set_disabled(true);
  std::string ddl = kSchema;
  if (o.encrypted) ddl.replace(ddl.find("ENTITY GROUP ROOT;"), 18, "ENTITY GROUP ROOT, ENCRYPTED;");
  schema::CompileResult compiled = schema::CompileSchema(ddl);
  if (!compiled.ok()) return fail(absl::InternalError("the benchmark's schema does not compile"));
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(compiled.descriptor);
  if (!layout.ok()) return fail(layout.status());
  const schema::TableDescriptor* customer = layout->schema().FindTable("Customer");
  const schema::TableDescriptor* order = layout->schema().FindTable("Order");

  Env* env = Env::Default();
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp)
    root = (std::filesystem::temp_directory_path() / StrCat("msbench-backup-", env->Random64()))
               .string();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return fail(absl::InternalError(StrCat("cannot create ", root, ": ", ec.message())));
  int rc = 0;
  std::vector<Run> runs;
  {
    auto src = server::LocalCluster::Start(env, root + "/source", *config, txn::TablesFor(*layout),
                                           /*sync_log=*/false);
    if (!src.ok()) return fail(src.status());
    if (!(*src)->WaitUntilServing(absl::Seconds(10)))
      return fail(absl::UnavailableError("the coordinators did not get their locks within 10 s"));
    if (absl::Status s = RecordSchema(**src, compiled.descriptor); !s.ok()) return fail(s);
    auto app = OpenAppServer(**src, "A", compiled.descriptor);
    if (!app.ok()) return fail(app.status());
    Database& db = *(*app)->db;

    // The data: --groups groups of --entities orders.
    const std::string payload(static_cast<size_t>(o.value_size), 'v');
    std::vector<replication::GroupRef> groups;
    const int64_t load_start = env->MonotonicMicros();
    for (int64_t g = 0; g < o.groups; ++g) {
      for (int64_t first = 0; first < o.entities; first += kPerCommit) {
        auto c = db.Run("Customer", {g}, [&](Transaction& t) -> absl::Status {
          schema::Entity root_entity;
          root_entity.fields[customer->fields(0).number()] = {g};
          MS_RETURN_IF_ERROR(t.Put("Customer", std::move(root_entity)));
          for (int64_t n = first; n < std::min(o.entities, first + kPerCommit); ++n) {
            schema::Entity e;
            for (const auto& f : order->fields()) {
              if (f.name() == "id") e.fields[f.number()] = {g};
              if (f.name() == "number") e.fields[f.number()] = {n};
              if (f.name() == "amount") e.fields[f.number()] = {n * 7 % 1000};
              if (f.name() == "payload") e.fields[f.number()] = {payload};
            }
            MS_RETURN_IF_ERROR(t.Put("Order", std::move(e)));
          }
          return absl::OkStatus();
        });
        if (!c.ok()) return fail(c.status());
      }
      replication::GroupRef ref;
      ref.set_table(layout->entity_table());
      ref.set_root(*layout->GroupRow(*customer, {g}));
      groups.push_back(std::move(ref));
    }
    if (!o.json)
      std::printf("%lld groups x %lld entities of %lld bytes loaded in %.1f s; replicas %s%s\n",
                  static_cast<long long>(o.groups), static_cast<long long>(o.entities),
                  static_cast<long long>(o.value_size),
                  static_cast<double>(env->MonotonicMicros() - load_start) / 1e6,
                  o.replicas.c_str(), o.encrypted ? ", encrypted" : "");

    for (int r = 0; r < o.runs && rc == 0; ++r) {
      Run run;
      const std::string dir = StrCat(root, "/backup-", r);
      rpc::RpcTransport transport;
      const std::string repl = (*src)->replicas()[0].replication;
      backup::JobOptions jo;
      jo.dir = dir;
      jo.transport = &transport;
      jo.datacenter = "A";
      jo.replication = repl;
      jo.timeout = absl::Seconds(60);
      jo.schema = compiled.descriptor;
      jo.groups = groups;
      int64_t t0 = env->MonotonicMicros();
      absl::StatusOr<backup::JobReport> b = backup::RunBackup(jo);
      run.backup_s = static_cast<double>(env->MonotonicMicros() - t0) / 1e6;
      if (!b.ok() || !b->problems.empty()) {
        rc = fail(b.ok() ? absl::InternalError(b->problems[0]) : b.status());
        break;
      }
      run.rows = b->rows;
      absl::StatusOr<backup::Manifest> m = backup::LoadManifest(dir);
      if (!m.ok()) return fail(m.status());
      for (const backup::FileEntry& f : m->files()) run.file_bytes += f.bytes();

      t0 = env->MonotonicMicros();
      absl::StatusOr<backup::VerifyReport> v = backup::VerifyBackup(
          backup::VerifyOptions{.dir = dir, .transport = &transport, .replication = repl});
      run.verify_s = static_cast<double>(env->MonotonicMicros() - t0) / 1e6;
      if (!v.ok() || !v->problems.empty()) {
        rc = fail(v.ok() ? absl::DataLossError(v->problems[0]) : v.status());
        break;
      }

      // Into a second cluster, empty, as after losing the first.
      auto dst = server::LocalCluster::Start(env, StrCat(root, "/target-", r), *config,
                                             txn::TablesFor(*layout), /*sync_log=*/false);
      if (!dst.ok()) return fail(dst.status());
      if (!(*dst)->WaitUntilServing(absl::Seconds(10)))
        return fail(absl::UnavailableError("the target's coordinators did not start"));
      if (absl::Status s = RecordSchema(**dst, compiled.descriptor); !s.ok()) return fail(s);
      auto target = OpenAppServer(**dst, "A", compiled.descriptor);
      if (!target.ok()) return fail(target.status());
      t0 = env->MonotonicMicros();
      for (int64_t g = 0; g < o.groups && rc == 0; ++g) {
        backup::RestoreOptions ro;
        ro.state.dir = dir;
        ro.state.group = groups[static_cast<size_t>(g)];
        ro.state.open = backup::OpenAt(&transport, repl, absl::Seconds(60));
        ro.root_table = "Customer";
        ro.root_key = {g};
        ro.db = (*target)->db.get();
        absl::StatusOr<backup::RestoreReport> rr = backup::RestoreGroup(ro);
        if (!rr.ok()) rc = fail(rr.status());
        if (rr.ok()) run.restored += rr->puts;
      }
      run.restore_s = static_cast<double>(env->MonotonicMicros() - t0) / 1e6;
      runs.push_back(run);
      std::filesystem::remove_all(dir, ec);
    }
  }
  if (temp) std::filesystem::remove_all(root, ec);
  if (rc != 0 || runs.empty()) return rc == 0 ? 1 : rc;

  auto median = [&](auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return Median(v);
  };
  const double mb = static_cast<double>(runs[0].file_bytes) / 1e6;
  const double backup_s = median([](const Run& r) { return r.backup_s; });
  const double verify_s = median([](const Run& r) { return r.verify_s; });
  const double restore_s = median([](const Run& r) { return r.restore_s; });
  const double groups = static_cast<double>(o.groups);
  const double entities = static_cast<double>(runs[0].restored);
  if (o.json) {
    std::printf(
        "{\"bench\":\"backup\",\"groups\":%lld,\"entities\":%lld,\"value_size\":%lld,"
        "\"encrypted\":%s,\"runs\":%zu,\"backup_mb\":%.2f,\"rows\":%llu,\"backup_s\":%.3f,"
        "\"backup_mb_s\":%.2f,\"backup_groups_s\":%.1f,\"verify_s\":%.3f,\"verify_mb_s\":%.2f,"
        "\"restore_s\":%.3f,\"restore_mb_s\":%.2f,\"restore_groups_s\":%.1f,"
        "\"restore_entities_s\":%.0f}\n",
        static_cast<long long>(o.groups), static_cast<long long>(o.entities),
        static_cast<long long>(o.value_size), o.encrypted ? "true" : "false", runs.size(), mb,
        static_cast<unsigned long long>(runs[0].rows), backup_s, mb / backup_s, groups / backup_s,
        verify_s, mb / verify_s, restore_s, mb / restore_s, groups / restore_s,
        entities / restore_s);
    return 0;
  }
  std::printf("backup: %.1f MB in %llu rows (medians of %zu runs)\n", mb,
              static_cast<unsigned long long>(runs[0].rows), runs.size());
  std::printf("%-26s %9s %9s %9s %11s\n", "", "seconds", "MB/s", "groups/s", "entities/s");
  std::printf("%-26s %9.2f %9.1f %9.1f %11s\n", "backup create (from A)", backup_s, mb / backup_s,
              groups / backup_s, "");
  std::printf("%-26s %9.2f %9.1f %9s %11s\n", "backup verify (opened at A)", verify_s,
              mb / verify_s, "", "");
  std::printf("%-26s %9.2f %9.1f %9.1f %11.0f\n", "restore into a new cluster", restore_s,
              mb / restore_s, groups / restore_s, entities / restore_s);
  return 0;
}

}  // namespace megastore::tools
