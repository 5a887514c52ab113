// `msbench log`: one entity group written many times over, with log
// clean-up on: the group's root-row log must stay under a fixed bound, and
// commits and current reads late in the run must cost what they cost early
// (docs/benchmarks.md, "Log clean-up").
#pragma once

#include <cstdint>
#include <string>

namespace megastore::tools {

struct LogBenchOptions {
  int64_t writes = 100000;       // transactions committed to the one group
  int64_t early = 1000;          // the early sample window ends here
  int64_t window = 1000;         // commits (and current reads) timed per window
  int64_t report_every = 10000;  // a line of root-row sizes every this many writes
  std::string replicas = "full,full,witness";
  std::string wan = "none";
  int64_t value_size = 100;
  uint64_t keep_positions = 1000;  // log_cleanup.keep_positions
  bool cleanup = true;             // false: measure the unbounded log for comparison
  bool sync = false;
  std::string dir;
  bool json = false;
};

int RunLogBench(const LogBenchOptions& options);

}  // namespace megastore::tools
