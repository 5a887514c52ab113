#include "tools/megastored/backups.h"

#include <set>

#include "base/await.h"
#include "base/logging.h"
#include "base/strings.h"
#include "replication/schema_table.h"

namespace megastore::server {

namespace {

// The schemas recorded in the datacenter's Bigtable, those `names` lists
// (all if empty).
absl::StatusOr<std::vector<schema::SchemaDescriptor>> RecordedSchemas(
    storage::BigtableClient* bigtable, const std::vector<std::string>& names) {
  absl::StatusOr<std::vector<storage::Row>> rows = Await<std::vector<storage::Row>>([&](auto cb) {
    storage::ReadOptions o;
    o.filter.families = {replication::kSchemaFamily};
    o.filter.cells_per_column = 1;
    bigtable->ReadRows(replication::kSchemaTable, storage::RowRange::All(), o, std::move(cb));
  });
  if (!rows.ok()) return rows.status();
  const std::set<std::string> wanted(names.begin(), names.end());
  std::vector<schema::SchemaDescriptor> out;
  std::set<std::string> found;
  for (const storage::Row& r : *rows) {
    if (!wanted.empty() && wanted.count(r.key) == 0) continue;
    for (const storage::Cell& c : r.cells) {
      if (c.qualifier != replication::kSchemaColumn) continue;
      schema::SchemaDescriptor d;
      if (!d.ParseFromString(c.value))
        return absl::DataLossError(StrCat("the recorded schema ", r.key, " does not parse"));
      found.insert(d.name());
      out.push_back(std::move(d));
    }
  }
  for (const std::string& n : wanted)
    if (found.count(n) == 0)
      return absl::NotFoundError(
          StrCat("backup names schema ", n, ", which was never applied to this cluster"));
  return out;
}

}  // namespace

ScheduledBackups StartScheduledBackups(const ClusterConfig& config,
                                       const std::vector<Datacenter*>& dcs) {
  ScheduledBackups out;
  if (!config.has_backup()) return out;
  const BackupScheduleConfig& b = config.backup();
  std::string name = b.datacenter();
  if (name.empty()) {
    for (const DatacenterConfig& dc : config.datacenters()) {
      if (TypeOf(dc) == replication::ReplicaType::kFull) {
        name = dc.name();
        break;
      }
    }
  }
  Datacenter* here = nullptr;
  for (Datacenter* dc : dcs)
    if (dc->options().name == name && dc->bigtable() != nullptr && dc->replication() != nullptr)
      here = dc;
  if (here == nullptr) return out;
  const DatacenterConfig* dc_config = nullptr;
  for (const DatacenterConfig& dc : config.datacenters())
    if (dc.name() == name) dc_config = &dc;
  if (dc_config == nullptr) return out;

  out.transport = std::make_unique<rpc::RpcTransport>();
  backup::ScheduleOptions o;
  o.dir = b.dir();
  o.transport = out.transport.get();
  o.datacenter = name;
  o.replication = AddressOf(*dc_config, Role::kReplication);
  storage::BigtableClient* bigtable = here->bigtable();
  const std::vector<std::string> names(b.schemas().begin(), b.schemas().end());
  o.schemas = [bigtable, names] { return RecordedSchemas(bigtable, names); };
  if (b.full_interval_seconds() > 0) o.full_interval = absl::Seconds(b.full_interval_seconds());
  if (b.log_interval_seconds() > 0) o.log_interval = absl::Seconds(b.log_interval_seconds());
  o.retention = absl::Seconds(static_cast<int64_t>(b.retention_seconds()));
  // A short schedule (tests, demos) starts soon; a real one after the
  // cluster had a moment to come up.
  o.first_delay = std::min(absl::Seconds(10), o.log_interval);
  MS_LOG_INFO("backups of datacenter {} into {}: full every {}, log every {}, retention {}", name,
              o.dir, absl::FormatDuration(o.full_interval), absl::FormatDuration(o.log_interval),
              o.retention > absl::ZeroDuration() ? absl::FormatDuration(o.retention) : "none");
  out.scheduler = backup::BackupScheduler::Start(std::move(o));
  return out;
}

}  // namespace megastore::server
