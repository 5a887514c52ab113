// Test helper: opens a tablet server on DIR, runs a write scenario, then
// exits without closing anything, as a crash would (memtables are lost; only
// the commit log and SSTables remain). Used by tablet_server_test, which
// cannot fork() itself safely once RocksDB's threads run.
//
//   crash_writer DIR SCENARIO     SCENARIO: rows200 | big50 | rows20
#include <unistd.h>

#include <cstdio>
#include <string>

#include "storage/tabletserver/tablet_server.h"

using megastore::storage::Mutation;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_writer DIR rows200|big50|rows20\n");
    return 2;
  }
  megastore::RealEnv env(1);
  megastore::storage::TabletServerOptions o;
  o.data_dir = argv[1];
  o.maintenance_interval = absl::ZeroDuration();
  auto server = megastore::storage::TabletServer::Open(o, &env);
  if (!server.ok()) {
    std::fprintf(stderr, "open: %s\n", server.status().ToString().c_str());
    return 3;
  }
  megastore::storage::TableSchema schema;
  schema.set_name("t");
  schema.add_families()->set_name("cf");
  if (!(*server)->CreateTable(schema).ok()) return 4;
  const std::string scenario = argv[2];
  const int rows = scenario == "rows200" ? 200 : scenario == "big50" ? 50 : 20;
  const std::string value = scenario == "big50" ? std::string(100, 'x') : "v";
  for (int i = 0; i < rows; ++i) {
    const std::string v = scenario == "rows200" ? "v" + std::to_string(i) : value;
    if (!(*server)->MutateRow("t", "row" + std::to_string(i), {Mutation::SetCell("cf", "q", v)}).ok()) {
      return 5;
    }
  }
  if (scenario == "rows200" && !(*server)->MutateRow("t", "row7", {Mutation::DeleteRow()}).ok()) return 6;
  ::_exit(0);
}
