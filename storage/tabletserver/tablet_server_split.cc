// Tablet server maintenance: splitting and merging tablets, compaction,
// and the background sweep that flushes, compacts and trims the log.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_name.h"
#include "storage/commitlog/log_format.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_server_internal.h"

namespace megastore::storage {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<TabletEntry>> TabletServer::SplitTablet(std::string_view id,
                                                                   std::string_view requested_row) {
  std::string split_row(requested_row);
  if (split_row.empty()) {
    std::shared_ptr<Tablet> t;
    {
      absl::MutexLock lock(&mu_);
      auto it = loaded_.find(std::string(id));
      if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
      t = it->second.tablet;
    }
    MS_ASSIGN_OR_RETURN(split_row, MiddleRow(*t));
  }
  std::vector<TabletEntry> children(2);
  TabletEntry parent;
  std::shared_ptr<Tablet> tablet;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(std::string(id));
    if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
    parent = it->second.entry;
    tablet = it->second.tablet;
    if (split_row <= parent.start_row() ||
        (!parent.end_row().empty() && split_row >= parent.end_row())) {
      return absl::InvalidArgumentError(StrCat("split row \"", EscapeBytes(split_row),
                                               "\" is not inside tablet ", id, "'s rows"));
    }
    if (options_.may_split && !options_.may_split(parent)) {
      return absl::FailedPreconditionError(StrCat("tablet ", id, " never splits"));
    }
    if (!assigning_.insert(parent.id()).second) {
      return absl::UnavailableError(StrCat("tablet ", id, " is being split or loaded"));
    }
    for (int i = 0; i < 2; ++i) {
      TabletEntry& c = children[i];
      c.set_table(parent.table());
      c.set_id(NewTabletId(parent.table()));
      c.set_path(TabletPath(parent.table(), c.id()));
      c.set_loaded(true);
      creating_.insert(c.id());
    }
  }
  children[0].set_start_row(parent.start_row());
  children[0].set_end_row(split_row);
  children[1].set_start_row(split_row);
  children[1].set_end_row(parent.end_row());
  // Outside the server's lock (reads of the parent continue; its writes
  // wait for the children): the split flushes the parent, so its log
  // records are no longer needed, and committing it in METADATA may be a
  // write to this very server.
  absl::Status committed =
      tablet->Split(split_row, (fs::path(options_.data_dir) / children[0].path()).string(),
                    (fs::path(options_.data_dir) / children[1].path()).string());
  const bool split_done = committed.ok();
  if (committed.ok() && options_.commit_split) committed = options_.commit_split(parent, children);
  absl::MutexLock lock(&mu_);
  assigning_.erase(parent.id());
  for (const TabletEntry& c : children) creating_.erase(c.id());
  auto it = loaded_.find(parent.id());
  std::vector<std::shared_ptr<Tablet>> opened;
  for (const TabletEntry& c : children) {
    if (!committed.ok() || it == loaded_.end()) break;
    absl::StatusOr<std::shared_ptr<Tablet>> t = OpenTabletLocked(c);
    if (t.ok() && cell_mode()) {
      // The children start from the parent's flushed state: no log record
      // before this point concerns them.
      absl::Status adopted = (*t)->AdoptLog(options_.cell_log_name);
      if (!adopted.ok()) t = adopted;
    }
    if (!t.ok()) {
      // Committed, so the parent must not serve on: its rows are the
      // children's now. Their directories stay for whoever loads them next
      // (the master assigns them again); this server stops serving the rows.
      MS_LOG_ERROR("tablet {}: split committed but child {} did not open: {}", parent.id(), c.id(),
                   t.status().ToString());
      opened.clear();
      loaded_.erase(it);
      load_errors_[c.id()] = t.status().ToString();
      return t.status();
    }
    opened.push_back(std::move(*t));
  }
  if (absl::IsUnknown(committed)) {
    // Maybe committed: serve neither; the master assigns what METADATA names.
    MS_LOG_ERROR("tablet {}: {}; no longer served here", parent.id(), committed.ToString());
    if (it != loaded_.end()) loaded_.erase(it);
    auto* entries = state_.mutable_tablets();
    for (int i = 0; i < entries->size(); ++i) {
      if (entries->Get(i).id() == parent.id()) {
        entries->DeleteSubrange(i, 1);
        break;
      }
    }
    return committed;
  }
  if (!committed.ok() || it == loaded_.end()) {
    opened.clear();
    // Not committed: the parent takes writes again (its files are as they
    // were; the split only flushed them).
    if (split_done && !committed.ok()) tablet->UndoSplit();
    if (!committed.ok()) {
      std::error_code ec;
      for (const TabletEntry& c : children)
        fs::remove_all(fs::path(options_.data_dir) / c.path(), ec);
      return committed;
    }
    return absl::AbortedError(
        StrCat("tablet ", id, " was unloaded while it split; the master assigns its children"));
  }
  TabletServerState next;
  *next.mutable_tables() = state_.tables();
  for (const TabletEntry& e : state_.tablets()) {
    if (e.id() != id) *next.add_tablets() = e;
  }
  for (const TabletEntry& c : children) *next.add_tablets() = c;
  if (absl::Status s = CommitStateLocked(std::move(next)); !s.ok()) {
    // Not recorded, so not done: the parent serves on (a start would load
    // it), and the children go.
    opened.clear();
    tablet->UndoSplit();
    std::error_code ec;
    for (const TabletEntry& c : children)
      fs::remove_all(fs::path(options_.data_dir) / c.path(), ec);
    return s;
  }
  loaded_.erase(it);
  for (size_t i = 0; i < 2; ++i) loaded_[children[i].id()] = Loaded{children[i], opened[i]};
  // The children hard-link the parent's files; the parent's directory goes
  // (in a cell, the master's garbage collection deletes it once METADATA no
  // longer names it).
  tablet.reset();
  if (!cell_mode()) {
    std::error_code ec;
    fs::remove_all(fs::path(options_.data_dir) / parent.path(), ec);
  }
  if (options_.after_split) {
    mu_.Unlock();
    options_.after_split(parent, children);
    mu_.Lock();
  }
  return children;
}

absl::StatusOr<std::string> TabletServer::MiddleRow(Tablet& tablet) {
  // Row keys only (one stripped cell per row); the middle by count.
  std::vector<std::string> rows;
  ReadOptions o;
  o.filter.cells_per_column = 1;
  o.filter.strip_value = true;
  RowSet all;
  all.ranges.push_back(RowRange{tablet.start_row(), tablet.end_row()});
  MS_RETURN_IF_ERROR(tablet.ReadRows(all, o, [&](Row& r) {
    rows.push_back(r.key);
    return true;
  }));
  if (rows.size() < 2) {
    return absl::FailedPreconditionError(
        StrCat("tablet ", tablet.path(), " has fewer than two rows: nothing to split"));
  }
  return rows[rows.size() / 2];
}

absl::StatusOr<TabletEntry> TabletServer::MergeTablets(std::string_view left_id,
                                                       std::string_view right_id) {
  if (!cell_mode())
    return absl::FailedPreconditionError("MergeTablets: this tablet server is not in a cell");
  TabletEntry left, right, merged;
  std::shared_ptr<Tablet> l, r;
  {
    absl::MutexLock lock(&mu_);
    auto li = loaded_.find(std::string(left_id)), ri = loaded_.find(std::string(right_id));
    if (li == loaded_.end() || ri == loaded_.end()) {
      return absl::NotFoundError(
          StrCat("tablet ", li == loaded_.end() ? left_id : right_id, " is not loaded"));
    }
    left = li->second.entry;
    right = ri->second.entry;
    if (left.table() != right.table() || left.end_row().empty() ||
        left.end_row() != right.start_row()) {
      return absl::InvalidArgumentError(
          StrCat("tablets ", left_id, " and ", right_id, " are not neighbours"));
    }
    if (assigning_.contains(left.id()) || assigning_.contains(right.id())) {
      return absl::UnavailableError(
          StrCat("tablet ", left_id, " or ", right_id, " is being split or loaded"));
    }
    assigning_.insert(left.id());
    assigning_.insert(right.id());
    l = li->second.tablet;
    r = ri->second.tablet;
    merged.set_table(left.table());
    merged.set_id(NewTabletId(left.table()));
    merged.set_start_row(left.start_row());
    merged.set_end_row(right.end_row());
    merged.set_path(TabletPath(merged.table(), merged.id()));
    merged.set_loaded(true);
    creating_.insert(merged.id());
  }
  // Outside the lock: stop and flush the two (their reads go on), build the
  // merged tablet from their stored entries, commit, swap.
  l->StopWrites();
  r->StopWrites();
  std::shared_ptr<Tablet> m;
  absl::Status s = l->PersistLogPosition(true).status();
  if (s.ok()) s = r->PersistLogPosition(true).status();
  if (s.ok()) {
    // Only the schema needs the server's lock; creating the tablet is I/O.
    TableSchema schema;
    {
      absl::MutexLock lock(&mu_);
      const TableSchema* found = FindTableLocked(merged.table());
      if (found != nullptr) schema = *found;
    }
    absl::StatusOr<std::unique_ptr<Tablet>> opened =
        Tablet::Open(OptionsFor(merged), schema, &resources_, env_);
    if (opened.ok()) {
      m = std::move(*opened);
    } else {
      s = opened.status();
    }
  }
  if (s.ok()) s = m->ImportFrom(*l);
  if (s.ok()) s = m->ImportFrom(*r);
  if (s.ok()) s = m->AdoptLog(options_.cell_log_name);
  if (s.ok() && options_.commit_merge) s = options_.commit_merge(left, right, merged);
  absl::MutexLock lock(&mu_);
  assigning_.erase(left.id());
  assigning_.erase(right.id());
  creating_.erase(merged.id());
  if (absl::IsUnknown(s)) {
    // Maybe committed: serve none of the three; the master assigns what
    // METADATA names (the merged tablet's files are complete and flushed).
    MS_LOG_ERROR("merge into {}: {}; {} and {} no longer served here", merged.id(), s.ToString(),
                 left.id(), right.id());
    m.reset();
    loaded_.erase(left.id());
    loaded_.erase(right.id());
    auto* entries = state_.mutable_tablets();
    for (int i = entries->size() - 1; i >= 0; --i) {
      if (entries->Get(i).id() == left.id() || entries->Get(i).id() == right.id())
        entries->DeleteSubrange(i, 1);
    }
    return s;
  }
  if (!s.ok()) {
    m.reset();
    std::error_code ec;
    fs::remove_all(fs::path(options_.data_dir) / merged.path(), ec);
    l->ResumeWrites();
    r->ResumeWrites();
    return s;
  }
  auto* tablets = state_.mutable_tablets();
  for (int i = tablets->size() - 1; i >= 0; --i) {
    if (tablets->Get(i).id() == left.id() || tablets->Get(i).id() == right.id())
      tablets->DeleteSubrange(i, 1);
  }
  loaded_.erase(left.id());
  loaded_.erase(right.id());
  *state_.add_tablets() = merged;
  loaded_[merged.id()] = Loaded{merged, std::move(m)};
  MS_LOG_INFO("merged tablets {} and {} into {}", left.id(), right.id(), merged.id());
  return merged;
}

absl::Status TabletServer::CompactTablet(std::string_view id) {
  std::shared_ptr<Tablet> t;
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(std::string(id));
    if (it == loaded_.end()) return absl::NotFoundError(StrCat("tablet ", id, " is not loaded"));
    t = it->second.tablet;
  }
  return t->CompactTablet();
}

absl::Status TabletServer::RunMaintenance() {
  if (options_.split_threshold_bytes > 0) {
    std::vector<std::pair<std::string, std::shared_ptr<Tablet>>> big;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, l] : loaded_) {
        if (!options_.may_split || options_.may_split(l.entry)) big.emplace_back(id, l.tablet);
      }
    }
    for (auto& [id, t] : big) {
      if (t->ApproximateSizeBytes() <= options_.split_threshold_bytes) continue;
      absl::StatusOr<std::vector<TabletEntry>> children = SplitTablet(id, "");
      if (children.ok()) {
        MS_LOG_INFO("tablet {} passed {} bytes: split at \"{}\" into {} and {}", id,
                    options_.split_threshold_bytes, EscapeBytes((*children)[1].start_row()),
                    (*children)[0].id(), (*children)[1].id());
      } else if (!absl::IsFailedPrecondition(children.status()) &&
                 !absl::IsNotFound(children.status())) {
        // (NotFound: the master moved it away meanwhile.)
        MS_LOG_WARN("tablet {}: automatic split failed: {}", id, children.status().ToString());
      }
    }
  }
  absl::MutexLock m(&maintenance_mu_);
  std::vector<std::shared_ptr<Tablet>> tablets;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, l] : loaded_) tablets.push_back(l.tablet);
  }
  bool keep_all_segments;
  {
    absl::MutexLock lock(&mu_);
    // A tablet that failed to load was never recovered; its records stay.
    // (In a cell a failed assignment has no records in this server's log.)
    keep_all_segments = !cell_mode() && !load_errors_.empty();
  }
  if (keep_all_segments) {
    for (auto& t : tablets) {
      if (t->UnflushedAgeMicros() >= absl::ToInt64Microseconds(options_.flush_max_age)) {
        MS_RETURN_IF_ERROR(t->PersistLogPosition(false).status());
      }
    }
    return absl::OkStatus();
  }
  const int64_t max_age = absl::ToInt64Microseconds(options_.flush_max_age);
  uint64_t needed_from = log_->last_lsn();
  for (const auto& t : tablets) {
    // Clean tablets just advance their position; dirty ones flush once their
    // oldest write is old enough; younger dirty ones keep their segments.
    const int64_t age = t->UnflushedAgeMicros();
    uint64_t position = t->durable_log_position();
    if (age == 0 || age >= max_age) {
      MS_ASSIGN_OR_RETURN(position, t->PersistLogPosition(false));
    }
    needed_from = std::min(needed_from, position);
  }
  return log_->DeleteSegmentsThrough(needed_from);
}

void TabletServer::ScheduleMaintenance() {
  if (options_.maintenance_interval <= absl::ZeroDuration()) return;
  std::shared_ptr<TimerState> state = timer_state_;
  absl::MutexLock lock(&state->mu);
  if (state->stopping) return;
  state->timer = env_->Schedule(options_.maintenance_interval, [this, state] {
    {
      absl::MutexLock l(&state->mu);
      if (state->stopping) return;  // `this` may be gone
      state->running = true;
    }
    // Not on the Env's timer thread: a flush or a split (which writes
    // METADATA through the cell, and may wait for it) would delay every
    // other timer, lock-session renewals among them.
    std::thread([this, state] {
      SetThreadName("ms-maintenance");
      absl::Status s = RunMaintenance();
      if (!s.ok()) MS_LOG_ERROR("tablet server maintenance: {}", s.ToString());
      ScheduleMaintenance();
      // Last touch of the server: the destructor waits for this.
      absl::MutexLock l(&state->mu);
      state->running = false;
    }).detach();
  });
}

}  // namespace megastore::storage
