// msadmin's backup commands (docs/backup.md):
//   backup create SCHEMA [GROUP...|--all] --to=DIR   full snapshots of groups
//   backup log SCHEMA [GROUP...|--all] --to=DIR      log entries since each group's last backup
//   backup list --from=DIR                           what a backup directory holds
//   backup verify --from=DIR                         read every file, check every checksum
//   backup prune --from=DIR --keep=30d               retention: delete what no restore in the
//   window needs restore --from=DIR SCHEMA GROUP... [--to-position|--to-time] [--skip]
//                                                    a group's state at a point, as new commits
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace megastore::tools {

struct BackupState {
  std::string command;  // "create", "log", "list", "verify"
  std::string config;
  std::string schema;
  std::vector<std::string> groups;
  bool all = false;
  std::string dir;
  std::string datacenter;
  double timeout = 30;
  bool json = false;
  bool quiet = false;
  // restore
  std::string table;        // with --all: only this root table's groups
  int64_t to_position = 0;  // 0: not given
  std::string to_time;
  std::string skip;
  bool force = false;
  bool dry_run = false;
  int batch = 500;
  // prune
  std::string keep;
  // verify
  bool replay = false;
};

void AddBackupCommands(CLI::App& app, BackupState& state);
// Exit code: 0 ok, 1 the operation failed (or found problems), 2 usage.
int RunBackupCommand(const BackupState& state);

}  // namespace megastore::tools
