// Tablet writes: row mutations (blocking and asynchronous), their
// validation and sequence numbers, check-and-mutate and read-modify-write.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/tablet/compaction_filter.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/log_record.h"
#include "storage/tablet/row_builder.h"
#include "storage/tablet/tablet.h"
#include "storage/tablet/tablet_internal.h"

namespace megastore::storage {

using tablet_internal::CheckTimestamp;
using tablet_internal::kMetaRedoKey;
using tablet_internal::kMetaSeqKey;
using tablet_internal::kSequenceBlock;

void Tablet::StopWrites() {
  absl::WriterMutexLock gate(&write_gate_);
  writes_stopped_.store(true);
  absl::MutexLock lock(&redo_mu_);
  redo_mu_.Await(absl::Condition(
      +[](std::multiset<uint64_t>* p) { return p->empty(); }, &pending_floors_));
}

void Tablet::ResumeWrites() {
  absl::WriterMutexLock gate(&write_gate_);
  writes_stopped_.store(false);
}

absl::Status Tablet::CheckWritable() const {
  if (writes_stopped_.load()) {
    return absl::FailedPreconditionError(
        StrCat("tablet ", options_.path, " no longer accepts writes (unloaded)"));
  }
  if (split_.load()) {
    return absl::FailedPreconditionError(
        StrCat("tablet ", options_.path, " was split; write to its children"));
  }
  return absl::OkStatus();
}

absl::Status Tablet::ValidateWrite(const CompiledSchema& schema, std::string_view row,
                                   absl::Span<const Mutation> mutations, int64_t timestamp) const {
  MS_RETURN_IF_ERROR(ValidateRow(row));
  if (mutations.empty()) return absl::InvalidArgumentError("MutateRow needs at least one mutation");
  MS_RETURN_IF_ERROR(CheckTimestamp(timestamp, "mutation timestamp"));
  return ValidateMutations(schema, mutations);
}

absl::Status Tablet::MutateRow(std::string_view row, absl::Span<const Mutation> mutations,
                               int64_t timestamp) {
  if (options_.log == nullptr) {
    const auto v = view();
    MS_RETURN_IF_ERROR(ValidateWrite(*v->schema, row, mutations, timestamp));
    absl::ReaderMutexLock gate(&write_gate_);
    MS_RETURN_IF_ERROR(CheckWritable());
    const size_t stripe = StripeOf(row);
    absl::MutexLock lock(&row_locks_[stripe]);
    return ApplyLocked(*v, row, mutations, timestamp, stripe);
  }
  // With a shared log every plain write takes the asynchronous path, so that
  // writes to a row apply in log order.
  absl::Status result;
  absl::Notification finished;
  auto write = std::make_unique<RowWrite>();
  write->row.assign(row);
  write->mutations.assign(mutations.begin(), mutations.end());
  write->timestamp = timestamp;
  write->done = [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  };
  MS_RETURN_IF_ERROR(MutateRowAsync(write));
  finished.WaitForNotification();
  return result;
}

std::vector<absl::Status> Tablet::MutateRows(absl::Span<const RowMutations> entries,
                                             int64_t timestamp) {
  // Queue every row, then wait once: the rows share group commits.
  std::vector<absl::Status> statuses(entries.size());
  absl::BlockingCounter pending(static_cast<int>(entries.size()));
  for (size_t i = 0; i < entries.size(); ++i) {
    auto write = std::make_unique<RowWrite>();
    write->row = entries[i].row;
    write->mutations = entries[i].mutations;
    write->timestamp = timestamp;
    write->done = [&statuses, &pending, i](absl::Status result) {
      statuses[i] = std::move(result);
      pending.DecrementCount();
    };
    if (absl::Status s = MutateRowAsync(write); !s.ok()) {
      statuses[i] = std::move(s);
      pending.DecrementCount();
    }
  }
  pending.Wait();
  return statuses;
}

struct Tablet::AsyncWrite {
  std::unique_ptr<RowWrite> write;
  std::shared_ptr<const View> view;
  int64_t now = 0;
  size_t stripe = 0;
  uint64_t floor = 0;
};

absl::Status WouldBlockError() {
  return absl::AbortedError("the write would wait for a lock; retry where blocking is allowed");
}

bool IsWouldBlock(const absl::Status& s) {
  return absl::IsAborted(s) && s.message() == WouldBlockError().message();
}

absl::Status Tablet::MutateRowAsync(std::unique_ptr<RowWrite>& write, bool may_block) {
  RowWrite& w = *write;
  std::shared_ptr<const View> v = view();
  MS_RETURN_IF_ERROR(ValidateWrite(*v->schema, w.row, w.mutations, w.timestamp));
  const size_t stripe = StripeOf(w.row);
  if (may_block) {
    write_gate_.ReaderLock();
  } else if (!write_gate_.ReaderTryLock()) {
    return WouldBlockError();
  }
  absl::Cleanup release_gate = [this] { write_gate_.ReaderUnlock(); };
  MS_RETURN_IF_ERROR(CheckWritable());
  if (options_.log == nullptr) {
    // The write happens here and now, through RocksDB's own WAL.
    if (!may_block) return WouldBlockError();
    absl::Status s;
    {
      absl::MutexLock lock(&row_locks_[stripe]);
      s = ApplyLocked(*v, w.row, w.mutations, w.timestamp, stripe);
    }
    std::unique_ptr<RowWrite> taken = std::move(write);
    taken->done(std::move(s));
    return absl::OkStatus();
  }

  const int64_t now = w.timestamp >= 0 ? w.timestamp : env_->NowMicros();
  std::string record;
  EncodeLogRecord(&record, w.row, now, w.mutations);
  uint64_t floor;
  // Under the row lock, so a CheckAndMutateRow or ReadModifyWriteRow of the
  // stripe either sees this write in flight and waits for it, or finished
  // before it.
  if (may_block) {
    row_locks_[stripe].Lock();
  } else if (!row_locks_[stripe].TryLock()) {
    return WouldBlockError();
  }
  {
    absl::Cleanup release_row = [&] { row_locks_[stripe].Unlock(); };
    absl::MutexLock lock(&redo_mu_);
    // While this write is in flight, the redo point stored with any batch
    // stays below the LSN it will get: `floor` is a lower bound of it.
    floor = options_.log->last_lsn();
    pending_floors_.insert(floor);
    ++async_in_flight_[stripe];
    if (writes_since_flush_++ == 0) first_unflushed_micros_ = env_->MonotonicMicros();
  }
  auto pending = std::make_unique<AsyncWrite>();
  pending->view = std::move(v);
  pending->now = now;
  pending->stripe = stripe;
  pending->floor = floor;
  pending->write = std::move(write);
  absl::StatusOr<uint64_t> lsn = options_.log->AppendAsync(
      options_.log_id, record,
      [this, p = pending.get()](absl::Status s, uint64_t) { FinishAsyncWrite(p, std::move(s)); },
      pending->write->durable);
  if (!lsn.ok()) {
    write = std::move(pending->write);  // the caller keeps it
    absl::MutexLock lock(&redo_mu_);
    pending_floors_.erase(pending_floors_.find(floor));
    --async_in_flight_[stripe];
    return lsn.status();
  }
  pending.release();  // FinishAsyncWrite owns it now
  return absl::OkStatus();
}

void Tablet::FinishAsyncWrite(AsyncWrite* raw, absl::Status status) {
  std::unique_ptr<AsyncWrite> p(raw);
  RowWrite& w = *p->write;
  // Records are applied in LSN order, one at a time, on the log's thread:
  // writes to one row apply in the order they were logged.
  if (status.ok()) {
    uint64_t redo;
    {
      absl::MutexLock lock(&redo_mu_);
      redo = std::min(*pending_floors_.begin(), options_.log->synced_lsn());
    }
    status = WriteRow(*p->view, w.row, w.mutations, p->now, p->stripe, redo);
  }
  {
    absl::MutexLock lock(&redo_mu_);
    pending_floors_.erase(pending_floors_.find(p->floor));
    --async_in_flight_[p->stripe];
  }
  // The tablet may be gone from here on (its destructor waited for us).
  w.done(std::move(status));
}

void Tablet::AwaitStripeIdle(size_t stripe) {
  if (options_.log == nullptr) return;
  struct Arg {
    Tablet* t;
    size_t stripe;
  } arg{this, stripe};
  absl::MutexLock lock(&redo_mu_);
  redo_mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->t->async_in_flight_[a->stripe] == 0; },
      &arg));
}

absl::Status Tablet::ApplyLocked(const View& view, std::string_view row,
                                 absl::Span<const Mutation> mutations, int64_t timestamp,
                                 size_t stripe, bool durable) {
  const int64_t now = timestamp >= 0 ? timestamp : env_->NowMicros();
  if (options_.log == nullptr) return WriteRow(view, row, mutations, now, stripe, std::nullopt);

  // Log first, then apply. While this write is in flight, the redo point
  // stored with any batch stays below the LSN it will get: `floor` is a
  // lower bound of that LSN, known before the append.
  uint64_t floor;
  {
    absl::MutexLock lock(&redo_mu_);
    floor = options_.log->last_lsn();
    pending_floors_.insert(floor);
    if (writes_since_flush_++ == 0) first_unflushed_micros_ = env_->MonotonicMicros();
  }
  auto done = [&] {
    absl::MutexLock lock(&redo_mu_);
    pending_floors_.erase(pending_floors_.find(floor));
  };
  std::string record;
  EncodeLogRecord(&record, row, now, mutations);
  absl::StatusOr<uint64_t> lsn = options_.log->Append(options_.log_id, record, durable);
  if (!lsn.ok()) {
    done();
    return lsn.status();
  }
  uint64_t redo;
  {
    absl::MutexLock lock(&redo_mu_);
    redo = std::min(*pending_floors_.begin(), options_.log->synced_lsn());
  }
  absl::Status s = WriteRow(view, row, mutations, now, stripe, redo);
  done();
  return s;
}

absl::Status Tablet::WriteRow(const View& view, std::string_view row,
                              absl::Span<const Mutation> mutations, int64_t now, size_t stripe,
                              std::optional<uint64_t> redo) {
  // Each mutation gets its own sequence number, so a later mutation in the
  // list masks or survives an earlier one exactly as if applied in order.
  MS_ASSIGN_OR_RETURN(const uint64_t base, AssignSequence(mutations.size()));
  rocksdb::WriteBatch batch;
  if (redo) {
    std::string value;
    PutFixed64(&value, *redo);
    MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRedoKey, value), "build write batch"));
  }
  std::string key, value;
  // A tombstone's value records when it was written (the server's clock),
  // so a timestamp_deletes family's grace counts from then (row_visibility.h).
  std::string written;
  for (const Mutation& m : mutations) {
    if (m.type == Mutation::Type::kSetCell) continue;
    PutFixed64(&written, static_cast<uint64_t>(std::max<int64_t>(0, env_->NowMicros())));
    break;
  }
  size_t bytes = 0;
  auto put = [&](rocksdb::ColumnFamilyHandle* cf) {
    bytes += key.size() + value.size();
    return batch.Put(cf, key, value);
  };
  auto group_of = [&](std::string_view family) {
    return view.groups[view.schema->FindFamily(family)->locality_group]->cf;
  };
  for (size_t i = 0; i < mutations.size(); ++i) {
    const Mutation& m = mutations[i];
    const uint64_t seq = base + i;
    value.clear();
    rocksdb::Status s;
    switch (m.type) {
      case Mutation::Type::kSetCell:
        key.clear();
        key_format::AppendCellKey(&key, row, m.family, m.qualifier,
                                  m.timestamp >= 0 ? m.timestamp : now);
        key_format::AppendValue(&value, seq, m.value);
        s = put(group_of(m.family));
        break;
      case Mutation::Type::kDeleteCells:
        key = key_format::ColumnTombstoneKey(row, m.family, m.qualifier, now, m.start_ts, m.end_ts);
        key_format::AppendValue(&value, seq, written);
        s = put(group_of(m.family));
        break;
      case Mutation::Type::kDeleteFamily:
        key = key_format::FamilyTombstoneKey(row, m.family, now);
        key_format::AppendValue(&value, seq, written);
        s = put(group_of(m.family));
        break;
      case Mutation::Type::kDeleteRow:
        key = key_format::RowTombstoneKey(row, now);
        key_format::AppendValue(&value, seq, written);
        for (LocalityGroupHandle* g : view.groups) {
          s = put(g->cf);
          if (!s.ok()) break;
        }
        break;
    }
    MS_RETURN_IF_ERROR(FromRocksDB(s, "build write batch"));
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = !options_.tuning.use_rocksdb_wal;
  wo.sync = options_.tuning.sync_writes;
  const rocksdb::Status s = db_->Write(wo, &batch);
  // Invalidate cached copies even on failure: a failed write may be partly
  // visible after a crash-recovery, never serve a stale row.
  if (rocksdb::Cache* cache = resources_->row_cache()) {
    absl::MutexLock lock(&cache_locks_[stripe]);
    row_versions_[stripe].fetch_add(1);
    cache->Erase(RowCacheKey(row, cache_generation_.load()));
  }
  if (!s.ok()) return FromRocksDB(s, StrCat("write to tablet ", options_.path));
  resources_->counters().rows_mutated.fetch_add(1, std::memory_order_relaxed);
  resources_->counters().bytes_written.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Tablet::AssignSequence(size_t n) {
  const uint64_t base = last_seq_.fetch_add(n) + 1;
  const uint64_t last = base + n - 1;
  if (last <= seq_reserved_.load()) return base;
  absl::MutexLock lock(&reserve_mu_);
  if (last <= seq_reserved_.load()) return base;
  // Persist the new bound before any write uses a number above the old one:
  // with RocksDB's WAL the bound precedes those writes in the log; without
  // it, flushing the metadata makes the bound durable first.
  const uint64_t bound = last + kSequenceBlock;
  std::string value;
  PutFixed64(&value, bound);
  rocksdb::WriteOptions wo;
  wo.disableWAL = !options_.tuning.use_rocksdb_wal;
  wo.sync = options_.tuning.sync_writes;
  const std::string ctx = StrCat("reserve sequence numbers in tablet ", options_.path);
  MS_RETURN_IF_ERROR(FromRocksDB(db_->Put(wo, meta_cf_, kMetaSeqKey, value), ctx));
  if (!options_.tuning.use_rocksdb_wal) {
    // Every family, not only the metadata's: the redo point stored there
    // must never reach disk ahead of the data it vouches for.
    MS_RETURN_IF_ERROR(Flush());
  }
  seq_reserved_.store(bound);
  return base;
}

absl::StatusOr<bool> Tablet::CheckAndMutateRow(std::string_view row, const RowFilter& predicate,
                                               absl::Span<const Mutation> true_mutations,
                                               absl::Span<const Mutation> false_mutations,
                                               bool durable) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateRow(row));
  MS_RETURN_IF_ERROR(ValidateFilter(predicate, *v->schema));
  MS_RETURN_IF_ERROR(ValidateMutations(*v->schema, true_mutations));
  MS_RETURN_IF_ERROR(ValidateMutations(*v->schema, false_mutations));
  absl::ReaderMutexLock gate(&write_gate_);
  MS_RETURN_IF_ERROR(CheckWritable());
  const size_t stripe = StripeOf(row);
  absl::MutexLock lock(&row_locks_[stripe]);
  AwaitStripeIdle(stripe);
  ReadOptions ro;
  ro.filter = predicate;
  MS_ASSIGN_OR_RETURN(std::optional<Row> current, ReadRowInternal(*v, row, ro));
  const bool matched = current.has_value();
  const auto& chosen = matched ? true_mutations : false_mutations;
  if (!chosen.empty()) {
    MS_RETURN_IF_ERROR(ApplyLocked(*v, row, chosen, kServerTimestamp, stripe, durable));
  }
  return matched;
}

absl::StatusOr<Row> Tablet::ReadModifyWriteRow(std::string_view row,
                                               absl::Span<const ReadModifyWriteRule> rules) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateRow(row));
  if (rules.empty())
    return absl::InvalidArgumentError("ReadModifyWriteRow needs at least one rule");
  ReadOptions ro;
  ro.filter.cells_per_column = 1;
  for (size_t i = 0; i < rules.size(); ++i) {
    if (v->schema->FindFamily(rules[i].family) == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("rule ", i, ": unknown column family \"", EscapeBytes(rules[i].family), "\""));
    }
    if (rules[i].qualifier.size() > kMaxQualifierBytes) {
      return absl::InvalidArgumentError(StrCat("rule ", i, ": qualifier is too long"));
    }
    ro.filter.families.push_back(rules[i].family);
  }
  absl::ReaderMutexLock gate(&write_gate_);
  MS_RETURN_IF_ERROR(CheckWritable());
  const size_t stripe = StripeOf(row);
  absl::MutexLock lock(&row_locks_[stripe]);
  AwaitStripeIdle(stripe);
  MS_ASSIGN_OR_RETURN(std::optional<Row> current, ReadRowInternal(*v, row, ro));

  // Latest cell per column, updated rule by rule. Every new cell of a column
  // gets one timestamp: the server's clock, or just above the column's newest
  // cell before this call if that is later.
  const int64_t now = env_->NowMicros();
  std::map<std::pair<std::string, std::string>, Cell> cells;
  std::map<std::pair<std::string, std::string>, int64_t> new_timestamp;
  if (current) {
    for (Cell& c : current->cells) {
      auto column = std::make_pair(c.family, c.qualifier);
      new_timestamp[column] =
          std::max(now, c.timestamp < kMaxTimestamp ? c.timestamp + 1 : kMaxTimestamp);
      cells.emplace(std::move(column), std::move(c));
    }
  }
  std::map<std::pair<std::string, std::string>, Cell> updated;
  for (size_t i = 0; i < rules.size(); ++i) {
    const ReadModifyWriteRule& r = rules[i];
    const auto column = std::make_pair(r.family, r.qualifier);
    auto it = cells.find(column);
    const std::string old_value = it == cells.end() ? std::string() : it->second.value;
    std::string new_value;
    if (r.type == ReadModifyWriteRule::Type::kAppend) {
      new_value = old_value + r.append_value;
      if (new_value.size() > options_.max_value_bytes) {
        return absl::InvalidArgumentError(StrCat("rule ", i, ": appending makes the value ",
                                                 new_value.size(), " bytes; the limit is ",
                                                 options_.max_value_bytes));
      }
    } else {
      int64_t old_number = 0;
      if (it != cells.end()) {
        if (old_value.size() != 8) {
          return absl::FailedPreconditionError(StrCat(
              "rule ", i, ": cannot increment ", r.family, ":", EscapeBytes(r.qualifier),
              ": its value is ", old_value.size(), " bytes, not an 8-byte big-endian integer"));
        }
        std::string_view in = old_value;
        uint64_t u;
        ConsumeOrderedUint64(&in, &u);
        old_number = static_cast<int64_t>(u);
      }
      int64_t result;
      if (__builtin_add_overflow(old_number, r.increment, &result)) {
        return absl::FailedPreconditionError(StrCat("rule ", i, ": incrementing ", old_number,
                                                    " by ", r.increment, " overflows int64"));
      }
      AppendOrderedUint64(&new_value, static_cast<uint64_t>(result));
    }
    auto ts = new_timestamp.emplace(column, now).first->second;
    Cell c{r.family, r.qualifier, ts, new_value};
    cells[column] = c;
    updated[column] = std::move(c);
  }
  std::vector<Mutation> mutations;
  Row result;
  result.key.assign(row);
  for (auto& [column, cell] : updated) {
    mutations.push_back(Mutation::SetCell(cell.family, cell.qualifier, cell.value, cell.timestamp));
    result.cells.push_back(std::move(cell));
  }
  MS_RETURN_IF_ERROR(ApplyLocked(*v, row, mutations, kServerTimestamp, stripe));
  return result;
}

}  // namespace megastore::storage
