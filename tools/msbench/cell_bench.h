// `msbench cell`: a Bigtable cell of processes (lock service, master, N
// tablet servers on one data root) driven by the client library from this
// process — aggregate write and read throughput with 1, 2, 3... tablet
// servers, and the time to recover a SIGKILLed server's tablet against the
// amount of commit log the master has to split.
#pragma once

#include <string>
#include <vector>

namespace megastore::tools {

struct CellBenchOptions {
  std::vector<int> servers = {1, 2, 3};
  int clients = 32;
  double seconds = 5;  // per phase
  int tablets = 16;    // the table is created split into this many
  int64_t value_size = 256;
  int runs = 3;
  std::vector<double> recovery_mb = {1, 8, 32};
  std::string session_ttl = "2s";
  bool sync = true;
  bool json = false;
  std::string dir;  // default: a fresh temp dir, removed afterwards
};

int RunCellBench(const CellBenchOptions& options);

}  // namespace megastore::tools
