#include "api/connect.h"

#include <algorithm>

#include "base/delayed_transport.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"
#include "server/cluster.h"

namespace megastore {

Connection::~Connection() { db_.reset(); }

absl::StatusOr<std::unique_ptr<Connection>> ConnectToCluster(const std::string& config_path,
                                                             const std::string& datacenter,
                                                             schema::SchemaDescriptor schema,
                                                             DatabaseOptions options) {
  absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(config_path);
  if (!config.ok()) return config.status();
  std::unique_ptr<Connection> c(new Connection());
  std::string known;
  for (const server::DatacenterConfig& dc : config->datacenters()) {
    c->datacenters_.push_back(dc.name());
    known += StrCat(known.empty() ? "" : ", ", dc.name());
  }
  if (std::find(c->datacenters_.begin(), c->datacenters_.end(), datacenter) ==
      c->datacenters_.end())
    return absl::InvalidArgumentError(
        StrCat("datacenter \"", datacenter, "\" is not in ", config_path, " (", known, ")"));
  auto rpc = std::make_unique<rpc::RpcTransport>();
  c->wan_ = std::make_unique<DelayedTransport>(Env::Default(), rpc.get(),
                                               server::OneWayFrom(*config, datacenter));
  c->rpc_ = std::move(rpc);
  options.replicas = server::ReplicasOf(*config);
  options.local = datacenter;
  options.schema = std::move(schema);
  options.transport = c->wan_.get();
  options.replication.max_clock_skew = server::MaxClockSkewOf(*config);
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(std::move(options));
  if (!db.ok()) return db.status();
  c->db_ = std::move(*db);
  return c;
}

}  // namespace megastore
