// msadmin's cluster commands, against a cluster config (docs/msadmin.md):
//   cluster status                      every datacenter's roles and health
//   coordinator disable|enable DC       the operator's coordinator switch
//   replica disable|enable DC           take a replica out and back
//   group catchup TABLE:KEY --datacenter=DC
//   schema apply FILE | schema show     create a schema's tables everywhere
//   group log TABLE:KEY                 an entity group's log at every replica
//   group repair TABLE:KEY [--yes]      bring back a log pushed far past what was applied
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace megastore::tools {

struct ClusterState {
  std::string config;
  bool json = false;
  double timeout = 10;
  std::string command;     // "cluster status", "coordinator disable", ...
  std::string datacenter;  // coordinator disable|enable
  std::string file;        // schema apply
  std::string schema;      // group log: NAME.schema.pb, or a schema applied to the cluster by name
  std::string group;       // group log
  int64_t limit = 20;      // group log: the last N positions
  bool force = false;  // replica disable: even without a remaining majority; group repair: --yes
};

void AddClusterCommands(CLI::App& app, ClusterState& state);
// Exit code: 0 ok, 1 the operation failed (or the cluster is unhealthy), 2 usage.
int RunClusterCommand(const ClusterState& state);

}  // namespace megastore::tools
