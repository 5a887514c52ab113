// msadmin datadir rebuild-state: offline repair of a standalone tablet
// server's data directory (the server stopped). Rebuilds a lost or
// damaged state.pb from what the tables and tablets record about
// themselves (docs/msadmin.md, docs/tabletserver.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace megastore::tools {

struct DatadirState {
  std::string verb;  // "rebuild-state"
  std::string data;
  bool yes = false;
  bool json = false;
};

void AddDatadirCommand(CLI::App& app, DatadirState& state);
// Exit code: 0, 1 if it cannot be done (the reasons printed), 2 usage.
int RunDatadir(const DatadirState& state);

}  // namespace megastore::tools
