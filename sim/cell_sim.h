// The Bigtable cell in the simulator: a lock service, masters, tablet
// servers in cell mode and clients with location caches, all on one SimEnv
// and SimNetwork, with faults and the cell's own invariants. The blocking
// parts (the masters' reconcile loops, RPC handlers, the clients) run as
// simulator tasks, so a seed replays its interleavings exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace megastore::sim {

struct CellSimOptions {
  uint64_t seed = 1;
  int servers = 3;
  int masters = 2;
  int clients = 3;
  int ops_per_client = 30;
  int keys = 40;        // rows k000..; each client writes its own
  bool faults = true;   // kills, restarts, master failover, forced splits and moves, link faults
  bool buggify = true;  // the fault points in the servers' code, while faults run
  absl::Duration fault_period = absl::Seconds(20);
  absl::Duration drain_limit = absl::Seconds(120);
  bool trace = false;
};

struct CellSimStats {
  int ops_ok = 0, ops_failed = 0, ops_unknown = 0;
  int reads_checked = 0;  // reads whose values the invariant checked
  int server_kills = 0, master_kills = 0, splits = 0, moves = 0;
  int owner_checks = 0;  // single-owner checks of the serving servers
  int tablets = 0;       // of the table at the end
  uint64_t messages = 0, dropped = 0;
  int64_t virtual_micros = 0;
};

struct CellSimResult {
  absl::Status status;  // the first invariant violation, if any
  CellSimStats stats;
  std::vector<std::string> trace;
};

CellSimResult RunCellSimulation(const CellSimOptions& options);

}  // namespace megastore::sim
