// msadmin cell status: a Bigtable cell as its lock service sees it — the
// master (lock holder) and the registered tablet servers — and, when a
// master serves, its view: tablets per server, recent events.
// msadmin tablet ls|split|move: the cell's tablets from METADATA (read
// through the location hierarchy, no master needed); splits and moves go
// through the master (docs/cell.md, docs/msadmin.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace megastore::tools {

struct CellState {
  std::string lock_service;  // HOST:PORT or etcd:HOST:PORT,...
  std::string cell;
  bool json = false;
  double timeout = 10;
  // msadmin tablet VERB
  std::string verb;  // "ls", "split", "move"
  std::string table;
  std::string tablet_id;
  std::string row;
  std::string server;
};

void AddCellCommand(CLI::App& app, CellState& state);
void AddTabletCommand(CLI::App& app, CellState& state);
// Exit code: 0, 1 if the lock service cannot be read, 2 usage.
int RunCell(const CellState& state);
// Exit code: 0, 1 if the operation failed, 2 usage.
int RunTablet(const CellState& state);

}  // namespace megastore::tools
