// megastored: runs megastore's server roles: a standalone Bigtable tablet
// server (--roles=tablet), every role of one datacenter from a cluster
// config (--config --datacenter), or a whole cluster in one process
// (--local=N). `megastored --help` lists every flag.
//
// One function per mode: RunCluster (cluster_roles.cc) for --local and
// --config, RunStandalone (standalone.cc) for a Bigtable process alone.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "base/cli.h"
#include "base/init.h"
#include "tools/megastored/cluster_roles.h"
#include "tools/megastored/flags.h"
#include "tools/megastored/signals.h"
#include "tools/megastored/standalone.h"

namespace megastore::megastored {
namespace {

std::string CommandLine(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

// --local or --config: the Megastore roles of one datacenter, or of all.
int RunClusterMode(Flags& f, const std::string& command_line) {
  server::ClusterFlags& cluster = f.cluster;
  cluster.data = f.data;
  cluster.http = f.http;
  cluster.sync = !f.no_sync;
  cluster.log_preallocate = !f.no_log_preallocate;
  cluster.accept_log_loss = f.accept_log_loss;
  cluster.roles = f.roles;
  if (cluster.no_tls && f.tls.enabled()) {
    std::fprintf(stderr, "megastored: --no-tls and --tls-* contradict each other\n");
    return 2;
  }
  server::BlockServerSignals();
  return server::RunCluster(cluster, command_line);
}

// The flags of the cluster modes that mean nothing alone.
int CheckStandaloneFlags(const Flags& f) {
  if (f.cluster.no_tls) {
    std::fprintf(
        stderr,
        "megastored: --no-tls is for --local (elsewhere TLS is on only when --tls-* gives it)\n");
    return 2;
  }
  if (!f.cluster.gateway.empty() || !f.cluster.schemas.empty() || !f.cluster.datacenter.empty()) {
    std::fprintf(stderr,
                 "megastored: --gateway, --schema and --datacenter need --local or --config\n");
    return 2;
  }
  return -1;
}

int Main(int argc, char** argv) {
  CLI::App app{kUsage};
  Flags f;
  AddFlags(app, f);
  if (const int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (const int rc = ApplyProcessFlags(f); rc >= 0) return rc;
  const std::string command_line = CommandLine(argc, argv);
  if (f.cluster.local > 0 || !f.cluster.config.empty()) return RunClusterMode(f, command_line);
  if (const int rc = CheckStandaloneFlags(f); rc >= 0) return rc;
  return RunStandalone(f, command_line);
}

}  // namespace
}  // namespace megastore::megastored

int main(int argc, char** argv) {
  megastore::InitProcess();
  return megastore::megastored::Main(argc, argv);
}
