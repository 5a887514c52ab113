// Restoring an entity group from a backup (docs/backup.md, "Restoring"):
// its state at a chosen position or time is rebuilt from the latest full
// backup before it and the log entries after, leaving out chosen entries,
// and written into a cluster as ordinary transactions, so every replica
// agrees and every index follows.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "api/database.h"
#include "backup/backup.pb.h"
#include "backup/backup_verify.h"

namespace megastore::backup {

// A group's rows at one position, as the backup holds them: row -> (family,
// qualifier) -> value (the group's log and other tables' rows excluded).
struct GroupState {
  using Columns = std::map<std::pair<std::string, std::string>, std::string>;
  std::map<std::string, Columns> rows;
  uint64_t position = 0;  // the last position applied
  int64_t timestamp = 0;  // its commit timestamp (or the full backup's)
  uint64_t base = 0;      // the full backup's position it started from
  uint64_t replayed = 0;  // log entries applied on top
  uint64_t skipped = 0;   // entries left out
};

struct StateOptions {
  std::string dir;
  replication::GroupRef group;
  // The point: the last position at or before `to_position`, and whose
  // commit timestamp is at or before `to_time` (micros); neither: the
  // latest the backup has.
  std::optional<uint64_t> to_position;
  std::optional<int64_t> to_time;
  // Log positions left out (each must be after the full backup used).
  std::set<uint64_t> skip;
  // Start from a full backup at or before this position (verification
  // replays the log between two full backups).
  std::optional<uint64_t> base_at_most;
  OpenChunk open;  // for sealed files (nullptr: only unsealed ones can be read)
};

// Rebuilds the group's state from the backup. InvalidArgument when the
// backup cannot reach the point (before its first full backup, past its
// last entry, a skip inside the full backup), DataLoss for damage.
absl::StatusOr<GroupState> BuildState(const StateOptions& options);

// The rows of one full backup file, as a GroupState.
absl::StatusOr<GroupState> FullState(const std::string& dir, const FileEntry& file,
                                     const OpenChunk& open);

// Replays each group's log between consecutive full backups and compares
// the result with the later full backup (`msadmin backup verify
// --replay`): every difference is a problem naming the group, the
// positions and the first row that differs. `groups` counts the groups
// whose chains were replayed.
struct ReplayReport {
  uint64_t groups = 0;
  uint64_t replays = 0;  // full-to-full replays compared
  uint64_t entries = 0;
  std::vector<std::string> problems;
};
absl::StatusOr<ReplayReport> ReplayBackup(const std::string& dir, const OpenChunk& open);

struct RestoreOptions {
  StateOptions state;
  // The group in the target cluster, and a client of it opened with the
  // backup's schema.
  std::string root_table;
  std::vector<schema::KeyValue> root_key;
  Database* db = nullptr;
  // Go on when someone else writes the group meanwhile (their writes are
  // overwritten where they touch the restored entities).
  bool force = false;
  // Entity writes per transaction.
  int batch = 500;
  // Work out what would change (the report's puts and deletes), write
  // nothing.
  bool dry_run = false;
  // After each of the restore's commits (progress).
  std::function<void(const struct RestoreReport&)> on_commit;
};

struct RestoreReport {
  GroupState state;          // what was restored (rows dropped)
  uint64_t live_before = 0;  // the group's position when the restore began
  uint64_t puts = 0, deletes = 0, unchanged = 0;
  uint64_t commits = 0;
  uint64_t last_commit = 0;  // position of the last restore commit
};

// Makes the live group's entities equal the backup's at the point: puts
// the entities that differ or are missing, deletes the ones the backup
// does not have, in transactions of `batch` writes (their indexes, local
// and global, maintained by each transaction). Only entities: a group's
// queue messages, delivery markers and two-phase-commit records are not
// restored. Idempotent: run again, it finds nothing to change. Aborted if
// another writer commits to the group while it runs (unless `force`).
absl::StatusOr<RestoreReport> RestoreGroup(const RestoreOptions& options);

}  // namespace megastore::backup
