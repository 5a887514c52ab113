#include "backup/schedule.h"

#include <algorithm>

#include "backup/backup_file.h"
#include "base/logging.h"
#include "base/strings.h"

namespace megastore::backup {

std::unique_ptr<BackupScheduler> BackupScheduler::Start(ScheduleOptions options) {
  std::unique_ptr<BackupScheduler> s(new BackupScheduler(std::move(options)));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

BackupScheduler::BackupScheduler(ScheduleOptions options)
    : options_(std::move(options)), env_(options_.env != nullptr ? options_.env : Env::Default()) {}

BackupScheduler::~BackupScheduler() {
  cancel_ = true;
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

BackupScheduler::Status BackupScheduler::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void BackupScheduler::Loop() {
  // The rhythm so far, from the catalog: when each kind last finished.
  if (absl::StatusOr<Manifest> m = LoadManifest(options_.dir); m.ok()) {
    absl::MutexLock lock(&mu_);
    for (const Job& j : m->jobs()) {
      if (j.finished_micros() == 0 || !j.problems().empty()) continue;
      int64_t& last = j.kind() == FULL ? status_.last_full_micros : status_.last_log_micros;
      last = std::max(last, j.finished_micros());
    }
  }
  const int64_t start = env_->NowMicros() + absl::ToInt64Microseconds(options_.first_delay);
  {
    absl::MutexLock lock(&mu_);
    full_due_ = std::max(
        start, status_.last_full_micros + absl::ToInt64Microseconds(options_.full_interval));
    log_due_ = std::max(start, std::max(status_.last_log_micros, status_.last_full_micros) +
                                   absl::ToInt64Microseconds(options_.log_interval));
  }
  while (true) {
    int64_t full_due, log_due;
    {
      absl::MutexLock lock(&mu_);
      full_due = full_due_;
      log_due = log_due_;
      status_.next_micros = std::min(full_due, log_due);
    }
    const int64_t wait = std::min(full_due, log_due) - env_->NowMicros();
    if (wait > 0 && stop_.WaitForNotificationWithTimeout(absl::Microseconds(wait))) return;
    if (stop_.HasBeenNotified()) return;
    RunJob(full_due <= log_due ? FULL : LOG);
  }
}

void BackupScheduler::RunJob(FileKind kind) {
  {
    absl::MutexLock lock(&mu_);
    status_.running = true;
    status_.progress = Progress{};
    status_.progress.kind = kind;
  }
  std::string error;
  uint64_t bytes = 0;
  absl::StatusOr<std::vector<schema::SchemaDescriptor>> schemas = options_.schemas();
  if (!schemas.ok()) error = StrCat("the schemas: ", schemas.status().ToString());
  for (const schema::SchemaDescriptor& schema :
       schemas.ok() ? *schemas : std::vector<schema::SchemaDescriptor>()) {
    JobOptions o;
    o.dir = options_.dir;
    o.transport = options_.transport;
    o.env = env_;
    o.datacenter = options_.datacenter;
    o.replication = options_.replication;
    o.timeout = options_.timeout;
    o.schema = schema;
    o.kind = kind;
    o.all = true;
    o.cancel = &cancel_;
    o.on_progress = [this](const Progress& p) {
      absl::MutexLock lock(&mu_);
      status_.progress = p;
    };
    absl::StatusOr<JobReport> r = RunBackup(o);
    if (!r.ok()) {
      error = StrCat("schema ", schema.name(), ": ", r.status().ToString());
    } else {
      bytes += r->bytes;
      if (!r->problems.empty())
        error = StrCat("schema ", schema.name(), ": ", r->problems.size(),
                       " group(s) failed, the first: ", r->problems[0]);
    }
    if (cancel_) break;
  }
  uint64_t pruned = 0;
  // Retention runs even when some groups failed: it never deletes a
  // group's newest full backup inside the window, so nothing a restore
  // needs goes, and one broken group must not keep old data for ever.
  if (options_.retention > absl::ZeroDuration() && !cancel_) {
    absl::StatusOr<PruneReport> p = PruneBackup(
        options_.dir, env_->NowMicros() - absl::ToInt64Microseconds(options_.retention), false);
    if (!p.ok()) error = StrCat("prune: ", p.status().ToString());
    if (p.ok()) pruned = p->files;
  }
  const char* what = kind == FULL ? "full" : "log";
  if (!error.empty() && !cancel_) {
    MS_LOG_WARN("scheduled {} backup into {} failed: {}", what, options_.dir, error);
  } else if (error.empty()) {
    RecordEvent(StrCat("scheduled ", what, " backup into ", options_.dir, ": ", bytes, " bytes, ",
                       pruned, " old file(s) pruned"));
  }
  absl::MutexLock lock(&mu_);
  status_.running = false;
  status_.bytes += bytes;
  status_.pruned_files += pruned;
  const int64_t now = env_->NowMicros();
  const int64_t log_interval = absl::ToInt64Microseconds(options_.log_interval);
  if (error.empty()) {
    status_.jobs_ok++;
    (kind == FULL ? status_.last_full_micros : status_.last_log_micros) = now;
    if (kind == FULL) full_due_ = now + absl::ToInt64Microseconds(options_.full_interval);
    log_due_ = now + log_interval;
  } else {
    status_.jobs_failed++;
    status_.last_error = error;
    // A failed kind is tried again after the log interval; the other keeps
    // its own time (a full job that keeps failing must not starve the log
    // jobs: at a tie the log job goes first).
    if (kind == FULL) {
      full_due_ = now + log_interval + 1;
    } else {
      log_due_ = now + log_interval;
    }
  }
}

}  // namespace megastore::backup
