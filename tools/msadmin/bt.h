// `msadmin bt`: Bigtable tables and data on a tablet server or a cell, modelled on
// Cloud Bigtable's cbt (docs/msadmin.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace megastore::tools {

struct BtState {
  std::string server;
  std::string config;        // or a cluster config and
  std::string datacenter;    // the datacenter whose Bigtable to use
  std::string cell;          // or a cell by name and
  std::string lock_service;  // its lock service
  double timeout = 30;
  bool force = false;  // raw writes to replicated tables
  bool json = false;   // -o json: lookup and read print JSON lines
  std::string schema;  // --schema: decode the rows of its entity table
  std::vector<std::string> args;
  int verb = -1;
};

// Adds the `bt` subcommand and its verbs to `app`; parsing fills `state`.
void AddBtCommand(CLI::App& app, BtState& state);
// Runs the parsed verb; prints results to stdout and one-line errors to
// stderr. Returns the exit code: 0 ok, 1 the operation failed, 2 usage.
int RunBt(const BtState& state);

}  // namespace megastore::tools
