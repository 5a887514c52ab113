// `msbench backup`: backup and restore throughput (docs/benchmarks.md,
// "Backups"): groups of entities loaded into three datacenters in this
// process, a full backup of all of them, a check of it, and a restore of
// every group into a second, empty cluster.
#pragma once

#include <cstdint>
#include <string>

namespace megastore::tools {

struct BackupBenchOptions {
  int64_t groups = 100;
  int64_t entities = 100;     // per group
  int64_t value_size = 1000;  // bytes per entity
  std::string replicas = "full,full,witness";
  bool encrypted = false;
  int runs = 3;
  std::string dir;
  bool json = false;
};

int RunBackupBench(const BackupBenchOptions& options);

}  // namespace megastore::tools
