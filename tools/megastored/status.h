// megastored's /status (HTML) and /metrics (Prometheus text) for the
// datacenter roles running in this process, and the gateway's client if
// there is one. docs/operations.md lists what they show.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/http/http_server.h"
#include "server/cluster.h"
#include "server/datacenter.h"

namespace megastore {
class Database;
class Gateway;
namespace backup {
class BackupScheduler;
}  // namespace backup
}  // namespace megastore

namespace megastore::server {

struct StatusSources {
  std::string command_line;
  std::vector<Datacenter*> datacenters;  // those running (some roles) here
  ClusterConfig config;
  Database* gateway = nullptr;                       // the JSON gateway's client, if any
  const Gateway* gateway_server = nullptr;           // the JSON gateway, if any
  const backup::BackupScheduler* backups = nullptr;  // scheduled backups run here, if any
  // How often the console samples /metrics for its charts.
  absl::Duration console_sample_interval = absl::Seconds(10);
};

// The pages themselves (also for tests).
std::string StatusHtml(const StatusSources& s, int64_t started_micros);
std::string MetricsText(const StatusSources& s);

// Serves both, and the console (tools/megastored/console.h), on `listen`;
// sets `bound` to the address bound. Null (after
// printing why) if it cannot listen.
std::unique_ptr<http::HttpServer> ServeStatus(const std::string& listen, StatusSources sources,
                                              std::string* bound);

}  // namespace megastore::server
