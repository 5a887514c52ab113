// What msbench's Megastore benchmarks (txn, log) share: a cluster of
// datacenters in this process on loopback with emulated WAN delays, its
// schema recorded as megastored records it, and app servers on top.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/database.h"
#include "base/delayed_transport.h"
#include "base/rpc/rpc_transport.h"
#include "replication/log_replica.h"
#include "server/cluster.pb.h"
#include "server/datacenter.h"

namespace megastore::tools {

// "full,full,witness" as replica types (InvalidArgument naming the flag).
absl::StatusOr<std::vector<replication::ReplicaType>> ParseTypes(const std::string& spec);

// A cluster config of datacenters A, B, ... of `types` on loopback port 0,
// with the one-way delays of `wan` ("A-B=10ms,A-C=30ms", or "none").
absl::StatusOr<server::ClusterConfig> BenchClusterConfig(
    const std::vector<replication::ReplicaType>& types, const std::string& wan);

// Records `schema` in every datacenter's schema table, as megastored does
// (the replicas learn from it, e.g., that the schema is encrypted).
absl::Status RecordSchema(server::LocalCluster& cluster, const schema::SchemaDescriptor& schema);

// An app server in datacenter `here`: its RPC transport with the WAN delays
// in front, and the Database on top.
struct AppServer {
  std::unique_ptr<rpc::RpcTransport> rpc;
  std::unique_ptr<DelayedTransport> wan;
  std::unique_ptr<Database> db;
};
// `combine`, `forward`: GroupClientOptions' of its client library.
absl::StatusOr<std::unique_ptr<AppServer>> OpenAppServer(server::LocalCluster& cluster,
                                                         const std::string& here,
                                                         const schema::SchemaDescriptor& schema,
                                                         bool combine = true, bool forward = true);

// The p-th quantile (0..1) of `v` (reorders it); 0 for an empty one.
double Percentile(std::vector<double>& v, double p);

}  // namespace megastore::tools
