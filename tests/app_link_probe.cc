// A stand-in application server for the link check (check_app_link.sh): it
// links the application library (api/, txn/, replication/, the cluster
// configuration) exactly as an app does, with every shared library on its
// link line recorded as needed, so the check sees the library's whole link
// line, not only what this program happens to call.
#include <cstdio>

#include "api/database.h"
#include "server/cluster.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app_link_probe CLUSTER_CONFIG\n");
    return 2;
  }
  auto config = megastore::server::LoadClusterConfigForClient(argv[1]);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  megastore::DatabaseOptions options;
  options.replicas = megastore::server::ReplicasOf(*config);
  auto db = megastore::Database::Open(options);
  std::printf("%s\n", db.ok() ? "opened" : std::string(db.status().message()).c_str());
  return 0;
}
