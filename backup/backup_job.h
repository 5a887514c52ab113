// Taking backups of entity groups (docs/backup.md): a full snapshot of each
// group at one log position, or the log entries chosen since the group's
// last backup, read from one datacenter's replica while writes go on, into
// a backup directory (backup_file.h).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backup/backup.pb.h"
#include "base/env.h"
#include "base/transport.h"
#include "replication/replication.pb.h"
#include "schema/schema.pb.h"

namespace megastore::backup {

struct Progress {
  std::string job;
  FileKind kind = FULL;
  uint64_t groups_total = 0;
  uint64_t groups_done = 0;
  uint64_t bytes = 0;  // written to files so far
  uint64_t rows = 0;
  uint64_t entries = 0;
  absl::Duration elapsed;

  // Bytes per second so far (0 before any time has passed).
  double Rate() const;
  // The time left at the rate groups went so far; nullopt before the
  // first group is done.
  std::optional<absl::Duration> Eta() const;
};

struct JobOptions {
  std::string dir;  // the backup directory (created if missing)
  Transport* transport = nullptr;
  Env* env = nullptr;  // nullptr: Env::Default()
  // The datacenter read from, and its replication server's address. A
  // full or read-only replica.
  std::string datacenter;
  std::string replication;
  absl::Duration timeout = absl::Seconds(30);  // each call
  // The schema the groups belong to; its descriptor is kept in the backup.
  schema::SchemaDescriptor schema;
  FileKind kind = FULL;
  // The groups; with `all`, every group of the schema at the datacenter
  // (FULL), or every group the backup holds plus every new one (LOG).
  // LOG with neither: every group of the schema the backup holds.
  std::vector<replication::GroupRef> groups;
  bool all = false;
  std::function<void(const Progress&)> on_progress;
  // Set to stop after the current chunk; the job stays unfinished in the
  // catalog and the next run of the same kind resumes it.
  const std::atomic<bool>* cancel = nullptr;
};

struct JobReport {
  std::string job;
  bool resumed = false;  // an unfinished job was finished first
  uint64_t groups = 0;   // groups that got a file
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t rows = 0;
  uint64_t entries = 0;
  double seconds = 0;
  // Per group: why it got no file, or a full backup instead of log entries.
  std::vector<std::string> notes;
  // Per group: what failed (the job goes on with the next group).
  std::vector<std::string> problems;
};

struct PruneReport {
  uint64_t files = 0;  // deleted
  uint64_t bytes = 0;
  uint64_t kept = 0;  // files left
  uint64_t jobs = 0;  // finished jobs dropped from the catalog
};

// Retention: deletes from backup directory `dir` every file not needed to
// restore any group to a time at or after `horizon` (micros): per group,
// the latest full backup whose commit time is at or before the horizon is
// the oldest file kept, with every log file reaching past it; older full
// backups and log files ending at or before it go. Finished jobs that
// ended before the horizon leave the catalog. A group with no full backup
// that old keeps everything. With `dry_run`, only reports. Takes the
// directory's lock like a backup job.
absl::StatusOr<PruneReport> PruneBackup(const std::string& dir, int64_t horizon, bool dry_run);

// Runs the backup. Cancelled if `cancel` was set; per-group failures are
// in the report's problems; other errors (the directory, the catalog, the
// datacenter unreachable for listing) fail the call.
absl::StatusOr<JobReport> RunBackup(const JobOptions& options);

}  // namespace megastore::backup
