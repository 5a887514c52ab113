// Reading and checking a cluster config (server/cluster.proto).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/delayed_transport.h"
#include "base/tls/context.h"
#include "replication/group_client.h"
#include "replication/replication_server.h"
#include "replication/schema_table.h"
#include "server/cluster.pb.h"

namespace megastore::server {

// Parses protobuf text and checks it: InvalidArgument naming the line and
// column of a syntax error, or the datacenter/link that is wrong
// (duplicate names, unknown types, links to unknown datacenters, no
// datacenter, a missing address unless `allow_port0`).
absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& text, std::string_view file,
                                                 bool local_mode = false);
absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path, bool local_mode = false);
// LoadClusterConfig for a tool or an application: unless the process was
// given TLS files (rpc::DefaultTls), the config's client_tls become its
// default.
absl::StatusOr<ClusterConfig> LoadClusterConfigForClient(const std::string& path);

// The TLS files of `dc`'s processes (its tls over the cluster's), or an
// empty set when the config names no TLS.
tls::TlsFiles ServerTlsOf(const ClusterConfig& config, const DatacenterConfig& dc);
// The TLS files of a tool or application (client_tls, CA from tls).
tls::TlsFiles ClientTlsOf(const ClusterConfig& config);
std::string ToText(const ClusterConfig& config);

replication::ReplicaType TypeOf(const DatacenterConfig& dc);
// "full", "witness" or "read-only": the config's name of a replica type.
const char* TypeName(replication::ReplicaType type);

// A datacenter's roles (megastored --roles).
// kMaster is a Bigtable cell's master (megastored --cell); a --config
// datacenter's roles ("all") are the other four.
enum class Role { kTablet, kLock, kCoordinator, kReplication, kMaster };
inline constexpr Role kAllRoles[] = {Role::kTablet, Role::kLock, Role::kCoordinator,
                                     Role::kReplication};
const char* RoleName(Role role);
// Parses "tablet,lock,..." (or "all"); InvalidArgument naming an unknown role.
absl::StatusOr<std::vector<Role>> ParseRoles(std::string_view text);
// Where `role` of `dc` listens: its roles { } entry, else its address.
const std::string& AddressOf(const DatacenterConfig& dc, Role role);
// The distinct addresses of `dc`'s processes, each with the roles there
// (a witness or read-only replica has no coordinator).
std::vector<std::pair<std::string, std::vector<Role>>> ProcessesOf(const DatacenterConfig& dc);
// What the client library needs: every datacenter as a replica (all roles
// on its address).
std::vector<replication::ReplicaInfo> ReplicasOf(const ClusterConfig& config);
// The clock skew a replica tolerates in a log entry's timestamp
// (max_clock_skew_ms, or the default).
absl::Duration MaxClockSkewOf(const ClusterConfig& config);
// The log clean-up rules of the cluster's replication servers
// (log_cleanup, with its defaults).
replication::LogCleanupOptions LogCleanupOf(const ClusterConfig& config);
// One-way delays by (from, to) datacenter name.
std::map<std::pair<std::string, std::string>, absl::Duration> DelaysOf(const ClusterConfig& config);
// The emulated WAN as seen from datacenter `here`: the delay of a message
// to a node address of the config (zero for unknown addresses), for a
// DelayedTransport of an app server there.
DelayedTransport::OneWay OneWayFrom(const ClusterConfig& config, const std::string& here);

// Where schemas applied to the cluster are kept (replication/schema_table.h).
using replication::kSchemaColumn;
using replication::kSchemaFamily;
using replication::kSchemaTable;

// The built-in local default: three full datacenters A, B, C on loopback
// (ports picked at start), WAN A-B 10 ms, A-C 30 ms, B-C 25 ms one way.
ClusterConfig DefaultLocalConfig(int datacenters = 3);

}  // namespace megastore::server
