// megastored's standalone mode (no --local, no --config): one process of a
// Bigtable — a tablet server, a lock service, or a cell's lock service,
// master or tablet server (docs/cell.md).
#pragma once

#include <string>

#include "tools/megastored/flags.h"

namespace megastore::megastored {

// Runs until SIGINT/SIGTERM. Returns the exit code: 0 after a clean
// shutdown, 1 if it could not start, 2 for bad flags (one line on stderr
// naming what is wrong).
int RunStandalone(const Flags& f, const std::string& command_line);

}  // namespace megastore::megastored
