// Scheduled backups in megastored (docs/backup.md, "On a schedule"): the
// process running the replication role of the config's backup datacenter
// runs the schedule.
#pragma once

#include <memory>
#include <vector>

#include "backup/schedule.h"
#include "base/rpc/rpc_transport.h"
#include "server/cluster.h"
#include "server/datacenter.h"

namespace megastore::server {

struct ScheduledBackups {
  std::unique_ptr<rpc::RpcTransport> transport;
  std::unique_ptr<backup::BackupScheduler> scheduler;
};

// The schedule of `config.backup` if one of `dcs` is its datacenter and
// runs the replication role here; empty otherwise.
ScheduledBackups StartScheduledBackups(const ClusterConfig& config,
                                       const std::vector<Datacenter*>& dcs);

}  // namespace megastore::server
