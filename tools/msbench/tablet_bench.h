// `msbench tablet`: the tablet engine against raw RocksDB with equal options.
#pragma once

#include <cstdint>
#include <string>

namespace megastore::tools {

struct TabletBenchOptions {
  int64_t keys = 100000;  // records loaded by the put phase
  int64_t gets = 100000;  // point reads
  int64_t scans = 10000;  // scans of 1..scan_length rows
  int64_t scan_length = 100;
  int64_t value_size = 1000;
  int runs = 3;  // median of this many runs per side
  uint64_t seed = 1;
  bool json = false;
  // The tablet side seals every value as an encrypted group's cell
  // (AES-256-GCM, coordinates as associated data) and opens it on reads.
  bool sealed = false;
  std::string dir;  // where the databases go; a temp dir if empty
};

// Runs the benchmark and prints the results to stdout. Returns the process
// exit code.
int RunTabletBench(const TabletBenchOptions& options);

}  // namespace megastore::tools
