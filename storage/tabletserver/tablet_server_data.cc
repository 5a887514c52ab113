// The tablet server's data path: routing a row to its tablet, writes,
// check-and-mutate, read-modify-write and reads.
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
#include "base/buggify.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/commitlog/log_format.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_server_internal.h"

namespace megastore::storage {

MS_FAULT_POINT(kTabletWriteFails, "tablet server: a row write fails before it is made");
MS_FAULT_POINT(kTabletCheckAndMutateFails,
               "tablet server: a check-and-mutate fails before it is made");
MS_FAULT_POINT(kTabletReadFails, "tablet server: a row or range read fails before it starts");

namespace {

bool Covers(const TabletEntry& e, std::string_view row) {
  return row >= e.start_row() && (e.end_row().empty() || row < e.end_row());
}

}  // namespace

absl::StatusOr<std::shared_ptr<Tablet>> TabletServer::Route(std::string_view table,
                                                            std::string_view row,
                                                            bool may_block) const {
  if (may_block) {
    mu_.ReaderLock();
  } else if (!mu_.ReaderTryLock()) {
    return WouldBlockError();
  }
  absl::Cleanup unlock = [this] { mu_.ReaderUnlock(); };
  if (options_.lease_valid && !options_.lease_valid()) {
    return NotServingError("this server's lock-service session may have expired");
  }
  if (FindTableLocked(table) == nullptr) {
    if (cell_mode())
      return NotServingError(StrCat("no tablet of table ", table, " is served here"));
    return absl::NotFoundError(StrCat("table ", table, " does not exist"));
  }
  for (const auto& [id, l] : loaded_) {
    if (l.entry.table() == table && Covers(l.entry, row)) return l.tablet;
  }
  if (cell_mode()) {
    return NotServingError(StrCat("no tablet of table ", table, " holding row \"", EscapeBytes(row),
                                  "\" is served here"));
  }
  for (const TabletEntry& e : state_.tablets()) {
    if (e.table() == table && Covers(e, row)) {
      auto err = load_errors_.find(e.id());
      return absl::UnavailableError(StrCat("tablet ", e.id(), " serving row \"", EscapeBytes(row),
                                           "\" is not loaded",
                                           err != load_errors_.end() ? ": " + err->second : ""));
    }
  }
  return absl::UnavailableError(
      StrCat("no tablet of table ", table, " covers row \"", EscapeBytes(row), "\""));
}

template <typename Fn>
auto TabletServer::WithTablet(std::string_view table, std::string_view row, Fn fn)
    -> decltype(fn(nullptr)) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::shared_ptr<Tablet>> t = Route(table, row);
    if (!t.ok()) return t.status();
    auto result = fn(t->get());
    // Split or unloaded between routing and the call: route again (to a
    // child, or to the answer that the tablet is not loaded).
    bool retry = false;
    if constexpr (std::is_same_v<decltype(result), absl::Status>) {
      retry = absl::IsFailedPrecondition(result) && !(*t)->accepts_writes();
    } else {
      retry = absl::IsFailedPrecondition(result.status()) && !(*t)->accepts_writes();
    }
    if (retry && attempt >= 3 && cell_mode()) {
      return NotServingError(StrCat("tablet ", (*t)->path(), " is splitting or moving"));
    }
    if (!retry || attempt >= 3) return result;
  }
}

absl::Status TabletServer::SyncLazyWrites() { return log_->SyncWritten(); }

absl::Status TabletServer::MutateRow(std::string_view table, std::string_view row,
                                     absl::Span<const Mutation> mutations, int64_t timestamp,
                                     bool durable) {
  // The asynchronous path, waited for: one routing-and-retry loop for both.
  absl::Status result;
  absl::Notification finished;
  auto write = std::make_unique<Tablet::RowWrite>();
  write->row.assign(row);
  write->mutations.assign(mutations.begin(), mutations.end());
  write->timestamp = timestamp;
  write->durable = durable;
  write->done = [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  };
  MS_RETURN_IF_ERROR(MutateRowAsync(table, write));
  finished.WaitForNotification();
  return result;
}

absl::Status TabletServer::MutateRowAsync(std::string_view table,
                                          std::unique_ptr<Tablet::RowWrite>& write,
                                          bool may_block) {
  // Every write path (the in-process one, RPC's, batches) comes through here.
  if (kTabletWriteFails.Fire())
    return absl::UnavailableError("injected fault: the write was not made");
  for (int attempt = 0;; ++attempt) {
    MS_ASSIGN_OR_RETURN(std::shared_ptr<Tablet> t, Route(table, write->row, may_block));
    absl::Status s = t->MutateRowAsync(write, may_block);
    // Split or unloaded between routing and the call: route again (to a
    // child, or to the answer that the tablet is not loaded). A split marks
    // the parent before the children are routed to, so give the routing a
    // moment (bounded) to catch up.
    if (s.ok() || !absl::IsFailedPrecondition(s) || t->accepts_writes()) return s;
    if (attempt >= 1000)
      return cell_mode() ? NotServingError(StrCat("tablet ", t->path(), " is splitting or moving"))
                         : s;
    if (attempt >= 3) std::this_thread::yield();
  }
}

void TabletServer::MutateRowsAsync(std::string_view table, std::vector<RowMutations> entries,
                                   absl::AnyInvocable<void(std::vector<absl::Status>)> done) {
  struct Batch {
    absl::Mutex mu;
    std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu);
    absl::AnyInvocable<void(std::vector<absl::Status>)> done;
    void Finish(size_t i, absl::Status s) {
      std::vector<absl::Status> all;
      {
        absl::MutexLock lock(&mu);
        statuses[i] = std::move(s);
        if (--pending > 0) return;
        all = std::move(statuses);
      }
      done(std::move(all));
    }
  };
  if (entries.empty()) {
    done({});
    return;
  }
  auto batch = std::make_shared<Batch>();
  {
    absl::MutexLock lock(&batch->mu);
    batch->statuses.resize(entries.size());
    batch->pending = entries.size();
  }
  batch->done = std::move(done);
  for (size_t i = 0; i < entries.size(); ++i) {
    auto write = std::make_unique<Tablet::RowWrite>();
    write->row = std::move(entries[i].row);
    write->mutations = std::move(entries[i].mutations);
    write->done = [batch, i](absl::Status s) { batch->Finish(i, std::move(s)); };
    if (absl::Status s = MutateRowAsync(table, write); !s.ok()) batch->Finish(i, std::move(s));
  }
}

std::vector<absl::Status> TabletServer::MutateRows(std::string_view table,
                                                   absl::Span<const RowMutations> entries) {
  std::vector<absl::Status> out;
  absl::Notification finished;
  MutateRowsAsync(table, std::vector<RowMutations>(entries.begin(), entries.end()),
                  [&](std::vector<absl::Status> statuses) {
                    out = std::move(statuses);
                    finished.Notify();
                  });
  finished.WaitForNotification();
  return out;
}

absl::StatusOr<bool> TabletServer::CheckAndMutateRow(std::string_view table, std::string_view row,
                                                     const RowFilter& predicate,
                                                     absl::Span<const Mutation> true_mutations,
                                                     absl::Span<const Mutation> false_mutations,
                                                     bool durable) {
  if (kTabletCheckAndMutateFails.Fire())
    return absl::UnavailableError("injected fault: the check-and-mutate was not made");
  return WithTablet(table, row, [&](Tablet* t) {
    return t->CheckAndMutateRow(row, predicate, true_mutations, false_mutations, durable);
  });
}

absl::StatusOr<Row> TabletServer::ReadModifyWriteRow(std::string_view table, std::string_view row,
                                                     absl::Span<const ReadModifyWriteRule> rules) {
  return WithTablet(table, row, [&](Tablet* t) { return t->ReadModifyWriteRow(row, rules); });
}

absl::StatusOr<std::optional<Row>> TabletServer::ReadRow(std::string_view table,
                                                         std::string_view row,
                                                         const ReadOptions& options) {
  if (kTabletReadFails.Fire()) return absl::UnavailableError("injected fault: the read failed");
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Tablet> t, Route(table, row));
  return t->ReadRow(row, options);
}

absl::Status TabletServer::ReadRows(std::string_view table, const RowSet& rows,
                                    const ReadOptions& options,
                                    const std::function<bool(Row&)>& on_row) {
  if (kTabletReadFails.Fire()) return absl::UnavailableError("injected fault: the read failed");
  std::vector<std::pair<TabletEntry, std::shared_ptr<Tablet>>> tablets;
  {
    if (options.nonblocking_budget == 0) {
      mu_.ReaderLock();
    } else if (!mu_.ReaderTryLock()) {
      return WouldBlockError();
    }
    absl::Cleanup unlock = [this] { mu_.ReaderUnlock(); };
    if (options_.lease_valid && !options_.lease_valid()) {
      return NotServingError("this server's lock-service session may have expired");
    }
    if (cell_mode()) MS_RETURN_IF_ERROR(CheckServedLocked(table, rows));
    if (FindTableLocked(table) == nullptr)
      return absl::NotFoundError(StrCat("table ", table, " does not exist"));
    for (const TabletEntry& e : state_.tablets()) {
      if (e.table() != table) continue;
      auto it = loaded_.find(e.id());
      tablets.emplace_back(e, it == loaded_.end() ? nullptr : it->second.tablet);
    }
  }
  std::sort(tablets.begin(), tablets.end(),
            [](const auto& a, const auto& b) { return a.first.start_row() < b.first.start_row(); });
  int64_t delivered = 0;
  bool stopped = false;
  for (const auto& [entry, tablet] : tablets) {
    if (stopped) break;
    if (tablet == nullptr) {
      // Only an error if the read touches this tablet's rows.
      bool touches = rows.keys.empty() && rows.ranges.empty();
      for (const std::string& k : rows.keys) touches |= Covers(entry, k);
      for (const RowRange& r : rows.ranges) {
        touches |= (r.end.empty() || r.end > entry.start_row()) &&
                   (entry.end_row().empty() || r.start < entry.end_row());
      }
      if (touches) return absl::UnavailableError(StrCat("tablet ", entry.id(), " is not loaded"));
      continue;
    }
    ReadOptions o = options;
    if (options.rows_limit > 0) o.rows_limit = options.rows_limit - delivered;
    MS_RETURN_IF_ERROR(tablet->ReadRows(rows, o, [&](Row& r) {
      ++delivered;
      if (!on_row(r)) {
        stopped = true;
        return false;
      }
      return true;
    }));
    if (options.rows_limit > 0 && delivered >= options.rows_limit) break;
  }
  return absl::OkStatus();
}

absl::Status TabletServer::CheckServedLocked(std::string_view table, const RowSet& rows) const {
  std::vector<const TabletEntry*> served;
  for (const auto& [id, l] : loaded_) {
    if (l.entry.table() == table) served.push_back(&l.entry);
  }
  std::sort(served.begin(), served.end(), [](const TabletEntry* a, const TabletEntry* b) {
    return a->start_row() < b->start_row();
  });
  auto covered = [&](const std::string& start, const std::string& end) {
    // Walks the served tablets from `start` while they are contiguous.
    std::string at = start;
    for (const TabletEntry* e : served) {
      if (e->end_row() != "" && e->end_row() <= at) continue;
      if (e->start_row() > at) return false;
      if (e->end_row().empty()) return true;
      at = e->end_row();
      if (!end.empty() && at >= end) return true;
    }
    return false;
  };
  std::vector<RowRange> ranges = rows.ranges;
  if (rows.keys.empty() && rows.ranges.empty()) ranges.push_back(RowRange::All());
  for (const RowRange& r : ranges) {
    if (!covered(r.start, r.end)) {
      return NotServingError(StrCat("rows [\"", EscapeBytes(r.start), "\", \"", EscapeBytes(r.end),
                                    "\") of table ", table, " are not all served here"));
    }
  }
  for (const std::string& k : rows.keys) {
    if (!covered(k, k + std::string(1, '\0'))) {
      return NotServingError(
          StrCat("row \"", EscapeBytes(k), "\" of table ", table, " is not served here"));
    }
  }
  return absl::OkStatus();
}

}  // namespace megastore::storage
