// Backups on a schedule (docs/backup.md, "On a schedule"): a thread that
// takes full backups and ships the log of a datacenter's groups
// periodically, prunes what the retention window no longer needs, and
// reports what it is doing for /status and /metrics.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "backup/backup_job.h"

namespace megastore::backup {

struct ScheduleOptions {
  std::string dir;
  Transport* transport = nullptr;
  Env* env = nullptr;  // nullptr: Env::Default()
  std::string datacenter;
  std::string replication;  // the datacenter's replication server
  // The schemas whose groups to back up, asked before each job (so a schema
  // applied meanwhile joins).
  std::function<absl::StatusOr<std::vector<schema::SchemaDescriptor>>()> schemas;
  absl::Duration full_interval = absl::Hours(24);
  absl::Duration log_interval = absl::Hours(1);
  absl::Duration retention = absl::ZeroDuration();  // zero: keep everything
  // Before the first job (the cluster is starting).
  absl::Duration first_delay = absl::Seconds(10);
  absl::Duration timeout = absl::Seconds(60);
};

class BackupScheduler {
 public:
  struct Status {
    bool running = false;          // a job is under way
    Progress progress;             // ... and how far it got
    int64_t last_full_micros = 0;  // when the last full job finished well
    int64_t last_log_micros = 0;
    int64_t next_micros = 0;  // when the next job is due
    uint64_t jobs_ok = 0, jobs_failed = 0;
    uint64_t bytes = 0;  // written by finished jobs
    uint64_t pruned_files = 0;
    std::string last_error;  // of the last job that failed (empty: none yet)
  };

  // Starts the thread; the first job runs after `first_delay`, then each
  // kind when its interval has passed since it last succeeded (as the
  // backup's catalog says, so a restart keeps the rhythm).
  static std::unique_ptr<BackupScheduler> Start(ScheduleOptions options);
  // Stops: a running job is cancelled after its current chunk (it resumes
  // at the next start).
  ~BackupScheduler();

  Status status() const;

 private:
  explicit BackupScheduler(ScheduleOptions options);
  void Loop();
  void RunJob(FileKind kind);

  const ScheduleOptions options_;
  Env* const env_;
  std::atomic<bool> cancel_{false};
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  Status status_ ABSL_GUARDED_BY(mu_);
  int64_t full_due_ ABSL_GUARDED_BY(mu_) = 0;  // when each kind runs next
  int64_t log_due_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace megastore::backup
