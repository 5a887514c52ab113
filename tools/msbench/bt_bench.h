// `msbench bt`: a tablet server over RPC — synced writes from 1 and many
// clients, point reads, scans — with raw RocksDB (sync=true) at the same
// concurrency in the same run.
#pragma once

#include <cstdint>
#include <string>

namespace megastore::tools {

struct BtBenchOptions {
  std::string server;  // HOST:PORT; empty: start one in this process
  int clients = 64;
  int connections = 4;  // RPC connections the clients share
  double seconds = 3;   // per phase
  int64_t value_size = 1000;
  int64_t scan_length = 100;
  int runs = 3;
  uint64_t seed = 1;
  bool json = false;
  std::string dir;  // for the raw RocksDB (and the in-process server)
};

int RunBtBench(const BtBenchOptions& options);

}  // namespace megastore::tools
