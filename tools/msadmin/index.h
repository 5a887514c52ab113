// `msadmin index check|repair`: the index consistency checker and repair
// scan (Database::CheckIndexes / RepairIndexes) from the command line
// (docs/msadmin.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace megastore::tools {

struct IndexState {
  std::string config;    // cluster config file (megastored --local writes DIR/cluster.textproto)
  std::string replicas;  // or NAME=TYPE@HOST:PORT,...
  std::string local;
  std::string schema;               // path of NAME.schema.pb (msc --out)
  std::vector<std::string> groups;  // Table:key[,key...]
  double timeout = 30;
  bool repair = false;
  bool json = false;  // --json: one object on stdout
};

// Adds `index check` and `index repair` to `app`; parsing fills `state`.
void AddIndexCommand(CLI::App& app, IndexState& state);
// Runs it. Exit code: 0 consistent (or repaired), 1 problems remain or the
// operation failed, 2 usage.
int RunIndex(const IndexState& state);

}  // namespace megastore::tools
