// msadmin cell status: a Bigtable cell as its lock service sees it — the
// master (lock holder) and the registered tablet servers (docs/cell.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace megastore::tools {

struct CellState {
  std::string lock_service;  // HOST:PORT or etcd:HOST:PORT,...
  std::string cell;
  bool json = false;
  double timeout = 10;
};

void AddCellCommand(CLI::App& app, CellState& state);
// Exit code: 0, 1 if the lock service cannot be read, 2 usage.
int RunCell(const CellState& state);

}  // namespace megastore::tools
