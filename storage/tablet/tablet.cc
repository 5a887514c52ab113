#include "storage/tablet/tablet.h"

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

namespace megastore::storage {

namespace {

constexpr char kMetaFormatKey[] = "format";
constexpr char kMetaRangeKey[] = "range";
constexpr char kMetaSeqKey[] = "seq";
constexpr char kMetaRedoKey[] = "redo";
constexpr char kMetaRedoLogKey[] = "redo_log";
constexpr char kMetaSplitFromKey[] = "split_from";
constexpr char kFormatVersion[] = "1";
constexpr char kGroupPrefix[] = "lg.";

rocksdb::ColumnFamilyOptions MetaOptions() {
  rocksdb::ColumnFamilyOptions o;
  o.write_buffer_size = 1 << 20;
  return o;
}

// Sequence numbers are reserved in blocks: the tablet persists an upper
// bound and writes a new one only when writers pass it.
constexpr uint64_t kSequenceBlock = 1 << 20;

std::string EncodeRowBound(std::string_view row) {
  std::string k;
  key_format::AppendRowPrefix(&k, row);
  return k;
}

std::string RangeString(std::string_view start, std::string_view end) {
  return StrCat("[\"", EscapeBytes(start), "\", ",
                end.empty() ? "end of table" : StrCat("\"", EscapeBytes(end), "\""), ")");
}

absl::Status CheckTimestamp(int64_t ts, std::string_view what) {
  if (ts < kServerTimestamp) {
    return absl::InvalidArgumentError(
        StrCat(what, " ", ts, " is negative (use -1 for the server's time, or 0..2^63-1)"));
  }
  return absl::OkStatus();
}

rocksdb::ReadOptions PointReadOptions() {
  rocksdb::ReadOptions ro;
  ro.prefix_same_as_start = true;    // bloom filters on the row key
  ro.ignore_range_deletions = true;  // the tablet never writes them
  return ro;
}

}  // namespace

struct Tablet::PooledIterator {
  LocalityGroupHandle* group = nullptr;
  std::unique_ptr<rocksdb::Iterator> it;
  std::string upper;           // the current read's upper bound...
  rocksdb::Slice upper_slice;  // ...which the iterator's options point at
};

struct Tablet::LocalityGroupHandle {
  std::string name;
  rocksdb::ColumnFamilyHandle* cf = nullptr;
  rocksdb::CompressionType compression = rocksdb::kNoCompression;
  std::shared_ptr<TabletCompactionFilterFactory> filter_factory;
};

struct Tablet::CachedRow {
  // The row's stored entries, per locality group of the view that read it.
  std::vector<std::vector<std::pair<std::string, std::string>>> groups;
  size_t bytes = 0;
};

Tablet::Tablet(const TabletOptions& options, TabletResources* resources, Env* env)
    : options_(options),
      resources_(resources),
      env_(env),
      tablet_id_(resources->NextTabletId()),
      start_key_(EncodeRowBound(options.start_row)),
      end_key_(options.end_row.empty() ? std::string() : EncodeRowBound(options.end_row)) {}

Tablet::~Tablet() {
  if (db_ == nullptr) return;
  {
    // Asynchronous writes in flight call back into this tablet.
    absl::MutexLock lock(&redo_mu_);
    redo_mu_.Await(absl::Condition(
        +[](std::multiset<uint64_t>* p) { return p->empty(); }, &pending_floors_));
  }
  DropPooledIterators();
  absl::MutexLock lock(&mu_);
  for (auto& g : groups_) {
    if (g->cf != nullptr) db_->DestroyColumnFamilyHandle(g->cf).PermitUncheckedError();
  }
  if (meta_cf_ != nullptr) db_->DestroyColumnFamilyHandle(meta_cf_).PermitUncheckedError();
  const rocksdb::Status s = db_->Close();
  if (!s.ok()) MS_LOG_ERROR("closing tablet {}: {}", options_.path, s.ToString());
}

absl::StatusOr<std::unique_ptr<Tablet>> Tablet::Open(const TabletOptions& options,
                                                     const TableSchema& schema,
                                                     TabletResources* resources, Env* env) {
  if (options.path.empty()) return absl::InvalidArgumentError("tablet path is empty");
  if (!options.end_row.empty() && options.end_row <= options.start_row) {
    return absl::InvalidArgumentError(
        StrCat("tablet range ", RangeString(options.start_row, options.end_row), " is empty"));
  }
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledSchema> compiled,
                      CompiledSchema::Compile(schema));
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create tablet directory ", options.path, ": ", ec.message()));
  }
  std::unique_ptr<Tablet> tablet(new Tablet(options, resources, env));
  MS_RETURN_IF_ERROR(tablet->OpenDB(std::move(compiled)));
  MS_RETURN_IF_ERROR(tablet->LoadOrStoreMeta());
  tablet->compaction_state_->range_verified.store(true);
  return tablet;
}

std::unique_ptr<Tablet::LocalityGroupHandle> Tablet::NewGroupHandle(
    const LocalityGroup& group, rocksdb::ColumnFamilyOptions* cf) {
  auto handle = std::make_unique<LocalityGroupHandle>();
  handle->name = group.name();
  handle->filter_factory = std::make_shared<TabletCompactionFilterFactory>(compaction_state_);
  *cf = LocalityGroupOptions(group, resources_, options_.tuning, KeyFilter::kRowPrefix);
  cf->compaction_filter_factory = handle->filter_factory;
  handle->compression = cf->compression;
  return handle;
}

absl::Status Tablet::OpenDB(std::shared_ptr<const CompiledSchema> schema) {
  rocksdb::DBOptions db_options = TabletDBOptions(resources_, options_.tuning);
  if (options_.log != nullptr) {
    // The shared commit log replaces RocksDB's WAL. Flushing every column
    // family together keeps the stored redo point and the data consistent.
    options_.tuning.use_rocksdb_wal = false;
    db_options.atomic_flush = true;
    // RocksDB still keeps a WAL file (the tablet's few metadata writes use
    // it) and would reserve a write buffer's worth of disk for it (70 MiB);
    // capping the total WAL size caps that reservation too.
    db_options.max_total_wal_size = 64 << 10;
    // Nor preallocate any file: on a full disk a failed fallocate of the
    // (unused) WAL leaves a file writer in error that a later flush syncs,
    // which Debian's RocksDB (built with assertions) turns into an abort.
    db_options.allow_fallocate = false;
  }
  std::vector<std::string> existing;
  // Fails when there is no database yet; then every family is new.
  rocksdb::DB::ListColumnFamilies(db_options, options_.path, &existing).PermitUncheckedError();

  auto context = std::make_shared<TabletCompactionContext>();
  context->env = env_;
  context->start_key = start_key_;
  context->end_key = end_key_;
  context->set_schema(schema);
  compaction_state_ = context;

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, MetaOptions());
  std::vector<std::unique_ptr<LocalityGroupHandle>> groups;
  for (const LocalityGroup& g : schema->locality_groups()) {
    rocksdb::ColumnFamilyOptions cf;
    groups.push_back(NewGroupHandle(g, &cf));
    descriptors.emplace_back(kGroupPrefix + g.name(), cf);
  }
  for (const std::string& name : existing) {
    const bool known = std::any_of(descriptors.begin(), descriptors.end(),
                                   [&](const auto& d) { return d.name == name; });
    if (!known) {
      return absl::FailedPreconditionError(
          StrCat("tablet ", options_.path, " stores column family \"", name,
                 "\" that the schema does not declare (a locality group was removed?)"));
    }
  }

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  MS_RETURN_IF_ERROR(
      FromRocksDB(rocksdb::DB::Open(db_options, options_.path, descriptors, &handles, &db),
                  StrCat("open tablet ", options_.path)));
  db_.reset(db);
  meta_cf_ = handles[0];

  absl::MutexLock lock(&mu_);
  auto view = std::make_shared<View>();
  view->schema = std::move(schema);
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i]->cf = handles[i + 1];
    view->groups.push_back(groups[i].get());
    groups_.push_back(std::move(groups[i]));
  }
  view_ = std::move(view);
  return absl::OkStatus();
}

absl::Status Tablet::LoadOrStoreMeta() {
  const std::string ctx = StrCat("tablet ", options_.path);
  std::string format;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaFormatKey, &format);
  std::string range;
  PutLengthPrefixed(&range, options_.start_row);
  PutLengthPrefixed(&range, options_.end_row);
  if (s.IsNotFound()) {
    rocksdb::WriteBatch batch;
    MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaFormatKey, kFormatVersion), ctx));
    MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRangeKey, range), ctx));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocksDB(db_->Write(wo, &batch), StrCat("initialize ", ctx));
  }
  MS_RETURN_IF_ERROR(FromRocksDB(s, StrCat("read metadata of ", ctx)));
  if (format != kFormatVersion) {
    return absl::FailedPreconditionError(StrCat(ctx, " has storage format \"", EscapeBytes(format),
                                                "\"; this build reads \"", kFormatVersion, "\""));
  }
  std::string stored;
  MS_RETURN_IF_ERROR(FromRocksDB(db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaRangeKey, &stored),
                                 StrCat("read range of ", ctx)));
  if (stored != range) {
    std::string_view in = stored;
    std::string_view start, end;
    if (!ConsumeLengthPrefixed(&in, &start) || !ConsumeLengthPrefixed(&in, &end)) {
      return absl::DataLossError(StrCat(ctx, ": stored row range is corrupt"));
    }
    return absl::FailedPreconditionError(StrCat(ctx, " serves rows ", RangeString(start, end),
                                                ", not ",
                                                RangeString(options_.start_row, options_.end_row)));
  }
  std::string redo;
  s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaRedoKey, &redo);
  if (s.ok()) {
    if (redo.size() != 8) return absl::DataLossError(StrCat(ctx, ": redo point is corrupt"));
    recovered_redo_point_ = DecodeFixed64(redo.data());
  } else if (!s.IsNotFound()) {
    return FromRocksDB(s, StrCat("read redo point of ", ctx));
  }
  s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaRedoLogKey, &recovered_redo_log_);
  if (!s.ok() && !s.IsNotFound()) return FromRocksDB(s, StrCat("read redo log of ", ctx));
  std::string ancestry;
  s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaSplitFromKey, &ancestry);
  if (!s.ok() && !s.IsNotFound()) return FromRocksDB(s, StrCat("read ancestry of ", ctx));
  ancestors_ = absl::StrSplit(ancestry, ' ', absl::SkipEmpty());
  std::string seq;
  s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaSeqKey, &seq);
  if (s.ok()) {
    if (seq.size() != 8) return absl::DataLossError(StrCat(ctx, ": sequence number is corrupt"));
    // Every number used before is below the persisted bound.
    last_seq_.store(DecodeFixed64(seq.data()));
    seq_reserved_.store(DecodeFixed64(seq.data()));
  } else if (!s.IsNotFound()) {
    return FromRocksDB(s, StrCat("read sequence number of ", ctx));
  }
  return absl::OkStatus();
}

std::string Tablet::RowCacheKey(std::string_view row, uint64_t generation) const {
  std::string key;
  PutFixed64(&key, tablet_id_);
  PutFixed64(&key, generation);
  key.append(row);
  return key;
}

std::shared_ptr<const Tablet::View> Tablet::view() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

int64_t Tablet::GcClock(const CompiledSchema& schema) const {
  // Reading the clock costs a little on every read; only max_age needs it.
  return schema.uses_clock() ? env_->NowMicros() : 0;
}

std::shared_ptr<const CompiledSchema> Tablet::schema() const { return view()->schema; }

bool Tablet::ContainsRow(std::string_view row) const {
  return row >= options_.start_row && (options_.end_row.empty() || row < options_.end_row);
}

size_t Tablet::StripeOf(std::string_view row) const {
  return absl::Hash<std::string_view>{}(row) % kLockStripes;
}

absl::Status Tablet::ValidateRow(std::string_view row) const {
  if (row.empty()) return absl::InvalidArgumentError("row key must not be empty");
  if (row.size() > kMaxRowKeyBytes) {
    return absl::InvalidArgumentError(
        StrCat("row key is ", row.size(), " bytes; the limit is ", kMaxRowKeyBytes));
  }
  if (!ContainsRow(row)) {
    return absl::OutOfRangeError(StrCat("row \"", EscapeBytes(row), "\" is outside tablet range ",
                                        RangeString(options_.start_row, options_.end_row)));
  }
  return absl::OkStatus();
}

absl::Status Tablet::ValidateMutations(const CompiledSchema& schema,
                                       absl::Span<const Mutation> mutations) const {
  for (size_t i = 0; i < mutations.size(); ++i) {
    const Mutation& m = mutations[i];
    auto error = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat("mutation ", i, ": ", why));
    };
    if (m.type != Mutation::Type::kDeleteRow && schema.FindFamily(m.family) == nullptr) {
      return error(StrCat("unknown column family \"", EscapeBytes(m.family), "\""));
    }
    if (m.qualifier.size() > kMaxQualifierBytes) {
      return error(
          StrCat("qualifier is ", m.qualifier.size(), " bytes; the limit is ", kMaxQualifierBytes));
    }
    switch (m.type) {
      case Mutation::Type::kSetCell:
        if (m.value.size() > options_.max_value_bytes) {
          return error(StrCat("value is ", m.value.size(), " bytes; the limit is ",
                              options_.max_value_bytes));
        }
        if (absl::Status s = CheckTimestamp(m.timestamp, "cell timestamp"); !s.ok()) {
          return error(ToStd(s.message()));
        }
        break;
      case Mutation::Type::kDeleteCells:
        if (m.start_ts < 0 || m.end_ts < 0 || (m.end_ts != 0 && m.end_ts <= m.start_ts)) {
          return error(StrCat("delete timestamp range [", m.start_ts, ", ", m.end_ts,
                              ") is malformed (end 0 means unbounded)"));
        }
        break;
      case Mutation::Type::kDeleteFamily:
      case Mutation::Type::kDeleteRow:
        break;
    }
  }
  return absl::OkStatus();
}

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

absl::Status Tablet::ImportFrom(Tablet& source) {
  if (source.options_.start_row < options_.start_row ||
      (!options_.end_row.empty() &&
       (source.options_.end_row.empty() || source.options_.end_row > options_.end_row))) {
    return absl::InvalidArgumentError(
        StrCat("tablet ", options_.path, " ", RangeString(options_.start_row, options_.end_row),
               " does not cover ", source.options_.path, " ",
               RangeString(source.options_.start_row, source.options_.end_row)));
  }
  // Only the source's own rows: its files may still hold a split parent's
  // other half, which this tablet must not inherit.
  std::string lower, upper;
  key_format::AppendRowPrefix(&lower, source.options_.start_row);
  if (!source.options_.end_row.empty())
    key_format::AppendRowPrefix(&upper, source.options_.end_row);
  const auto from = source.view();
  const auto to = view();
  constexpr size_t kBatchBytes = 4 << 20;
  for (LocalityGroupHandle* g : from->groups) {
    LocalityGroupHandle* target = nullptr;
    for (LocalityGroupHandle* t : to->groups) {
      if (t->name == g->name) target = t;
    }
    if (target == nullptr) {
      return absl::FailedPreconditionError(StrCat("tablet ", options_.path,
                                                  " has no locality group ", g->name, " to import ",
                                                  source.options_.path, " into"));
    }
    rocksdb::ReadOptions ro;
    rocksdb::Slice lower_slice(lower), upper_slice(upper);
    ro.iterate_lower_bound = &lower_slice;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    ro.fill_cache = false;
    ro.total_order_seek = true;  // across rows: past the row-prefix bloom filters
    std::unique_ptr<rocksdb::Iterator> it(source.db_->NewIterator(ro, g->cf));
    rocksdb::WriteBatch batch;
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      MS_RETURN_IF_ERROR(
          FromRocksDB(batch.Put(target->cf, it->key(), it->value()), "build import batch"));
      if (batch.GetDataSize() >= kBatchBytes) {
        MS_RETURN_IF_ERROR(
            FromRocksDB(db_->Write(wo, &batch), StrCat("import into ", options_.path)));
        batch.Clear();
      }
    }
    MS_RETURN_IF_ERROR(
        FromRocksDB(it->status(), StrCat("read ", source.options_.path, " for a merge")));
    if (batch.Count() > 0)
      MS_RETURN_IF_ERROR(
          FromRocksDB(db_->Write(wo, &batch), StrCat("import into ", options_.path)));
  }
  // Later writes must sort after everything imported.
  uint64_t mine = last_seq_.load();
  while (mine < source.last_sequence() &&
         !last_seq_.compare_exchange_weak(mine, source.last_sequence())) {
  }
  MS_RETURN_IF_ERROR(AssignSequence(1).status());
  return Flush();
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
      [this, p = pending.get()](absl::Status s, uint64_t) { FinishAsyncWrite(p, std::move(s)); });
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
      redo = *pending_floors_.begin();
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
                                 size_t stripe) {
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
  absl::StatusOr<uint64_t> lsn = options_.log->Append(options_.log_id, record);
  if (!lsn.ok()) {
    done();
    return lsn.status();
  }
  uint64_t redo;
  {
    absl::MutexLock lock(&redo_mu_);
    redo = *pending_floors_.begin();
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
                                               absl::Span<const Mutation> false_mutations) {
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
    MS_RETURN_IF_ERROR(ApplyLocked(*v, row, chosen, kServerTimestamp, stripe));
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

absl::StatusOr<std::optional<Row>> Tablet::ReadRow(std::string_view row,
                                                   const ReadOptions& options) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateRow(row));
  MS_RETURN_IF_ERROR(ValidateFilter(options.filter, *v->schema));
  return ReadRowInternal(*v, row, options);
}

absl::StatusOr<std::optional<Row>> Tablet::ReadRowInternal(const View& view, std::string_view row,
                                                           const ReadOptions& options) {
  RowBuilder builder(view.schema.get(), &options, GcClock(*view.schema));
  builder.StartRow(row);
  rocksdb::Cache* cache = resources_->row_cache();
  std::string cache_key;
  std::unique_ptr<CachedRow> fresh;
  const size_t stripe = StripeOf(row);
  uint64_t version_before = 0;

  auto feed_cached = [&](const CachedRow& cached) -> absl::Status {
    for (const auto& group : cached.groups) {
      builder.StartLocalityGroup();
      for (const auto& [k, value] : group) MS_RETURN_IF_ERROR(builder.Add(k, value));
    }
    return absl::OkStatus();
  };

  if (cache != nullptr) {
    cache_key = RowCacheKey(row, cache_generation_.load());
    if (rocksdb::Cache::Handle* h = cache->Lookup(cache_key)) {
      const auto* cached = static_cast<const CachedRow*>(cache->Value(h));
      absl::Status s = cached->groups.size() == view.groups.size()
                           ? feed_cached(*cached)
                           : absl::AbortedError("stale view");
      cache->Release(h);
      if (s.ok()) {
        resources_->counters().row_cache_hits.fetch_add(1, std::memory_order_relaxed);
        return FinishRead(builder);
      }
      if (!absl::IsAborted(s)) return s;
      builder.StartRow(row);
    }
    resources_->counters().row_cache_misses.fetch_add(1, std::memory_order_relaxed);
    version_before = row_versions_[stripe].load();
    fresh = std::make_unique<CachedRow>();
    fresh->groups.resize(view.groups.size());
  }

  // Read every locality group's part of the row from one consistent state.
  // One group (the common case) reads through a pooled iterator; several
  // need iterators created together at one sequence number.
  const std::string lower = EncodeRowBound(row);
  std::unique_ptr<PooledIterator> pooled;
  std::string upper;
  rocksdb::Slice upper_slice;
  std::vector<std::unique_ptr<rocksdb::Iterator>> owned;
  std::vector<rocksdb::Iterator*> iters;
  if (view.groups.size() == 1) {
    MS_ASSIGN_OR_RETURN(pooled, AcquireIterator(view.groups[0]));
    pooled->upper = PrefixSuccessor(lower);
    pooled->upper_slice = rocksdb::Slice(pooled->upper);
    iters.push_back(pooled->it.get());
  } else {
    upper = PrefixSuccessor(lower);
    upper_slice = rocksdb::Slice(upper);
    rocksdb::ReadOptions ro = PointReadOptions();
    ro.iterate_upper_bound = &upper_slice;
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    for (LocalityGroupHandle* g : view.groups) cfs.push_back(g->cf);
    MS_RETURN_IF_ERROR(FromRocksDB(db_->NewIterators(ro, cfs, &iters), "create iterators"));
    for (rocksdb::Iterator* it : iters) owned.emplace_back(it);
  }
  for (size_t g = 0; g < iters.size(); ++g) {
    rocksdb::Iterator* it = iters[g];
    builder.StartLocalityGroup();
    for (it->Seek(lower); it->Valid(); it->Next()) {
      const std::string_view k = it->key().ToStringView();
      const std::string_view value = it->value().ToStringView();
      MS_RETURN_IF_ERROR(builder.Add(k, value));
      if (fresh != nullptr) {
        fresh->bytes += k.size() + value.size() + 32;
        fresh->groups[g].emplace_back(k, value);
      }
    }
    if (!it->status().ok()) return FromRocksDB(it->status(), StrCat("read tablet ", options_.path));
  }
  if (pooled != nullptr) ReleaseIterator(std::move(pooled));

  if (fresh != nullptr) {
    const size_t limit = std::min<size_t>(256 * 1024, resources_->options().row_cache_bytes / 16);
    if (fresh->bytes <= limit) {
      absl::MutexLock lock(&cache_locks_[stripe]);
      if (row_versions_[stripe].load() == version_before) {
        const size_t charge = fresh->bytes;
        cache
            ->Insert(
                cache_key, fresh.release(), charge,
                [](const rocksdb::Slice&, void* value) { delete static_cast<CachedRow*>(value); })
            .PermitUncheckedError();
      }
    }
  }

  return FinishRead(builder);
}

std::optional<Row> Tablet::FinishRead(RowBuilder& builder) {
  Row out;
  if (!builder.Finish(&out)) return std::nullopt;
  size_t bytes = 0;
  for (const Cell& c : out.cells) bytes += c.value.size();
  auto& counters = resources_->counters();
  counters.rows_read.fetch_add(1, std::memory_order_relaxed);
  counters.cells_read.fetch_add(out.cells.size(), std::memory_order_relaxed);
  counters.bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  return out;
}

absl::StatusOr<std::unique_ptr<Tablet::PooledIterator>> Tablet::AcquireIterator(
    LocalityGroupHandle* group) {
  std::unique_ptr<PooledIterator> p;
  {
    absl::MutexLock lock(&pool_mu_);
    for (auto it = iterator_pool_.begin(); it != iterator_pool_.end(); ++it) {
      if ((*it)->group == group) {
        p = std::move(*it);
        iterator_pool_.erase(it);
        break;
      }
    }
  }
  if (p != nullptr) {
    // Cheap unless a flush or compaction changed the LSM tree: then it
    // rebuilds. Either way the iterator now sees the latest writes.
    MS_RETURN_IF_ERROR(FromRocksDB(p->it->Refresh(), "refresh iterator"));
    return p;
  }
  p = std::make_unique<PooledIterator>();
  p->group = group;
  rocksdb::ReadOptions ro = PointReadOptions();
  ro.iterate_upper_bound = &p->upper_slice;
  p->it.reset(db_->NewIterator(ro, group->cf));
  return p;
}

void Tablet::ReleaseIterator(std::unique_ptr<PooledIterator> p) {
  absl::MutexLock lock(&pool_mu_);
  if (iterator_pool_.size() < kMaxPooledIterators) iterator_pool_.push_back(std::move(p));
}

void Tablet::DropPooledIterators() {
  std::vector<std::unique_ptr<PooledIterator>> dropped;
  absl::MutexLock lock(&pool_mu_);
  dropped.swap(iterator_pool_);
}

absl::Status Tablet::ReadRows(const RowSet& rows, const ReadOptions& options,
                              const std::function<bool(Row&)>& on_row) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateFilter(options.filter, *v->schema));
  if (options.rows_limit < 0) {
    return absl::InvalidArgumentError(StrCat("rows_limit ", options.rows_limit, " is negative"));
  }

  // The row set as sorted, disjoint [lower, upper) ranges of encoded keys,
  // clipped to this tablet; "" as upper means unbounded.
  std::vector<std::pair<std::string, std::string>> ranges;
  auto add_range = [&](std::string lower, std::string upper) {
    if (lower < start_key_) lower = start_key_;
    if (!end_key_.empty() && (upper.empty() || upper > end_key_)) upper = end_key_;
    if (!upper.empty() && lower >= upper) return;
    ranges.emplace_back(std::move(lower), std::move(upper));
  };
  if (rows.keys.empty() && rows.ranges.empty()) add_range(start_key_, end_key_);
  for (const std::string& k : rows.keys) {
    if (k.empty() || k.size() > kMaxRowKeyBytes) {
      return absl::InvalidArgumentError(
          StrCat("row set key \"", EscapeBytes(k), "\" is empty or longer than 4 KiB"));
    }
    std::string lower = EncodeRowBound(k);
    std::string upper = PrefixSuccessor(lower);
    add_range(std::move(lower), std::move(upper));
  }
  for (const RowRange& r : rows.ranges) {
    if (!r.end.empty() && r.end < r.start) {
      return absl::InvalidArgumentError(
          StrCat("row range ", RangeString(r.start, r.end), " is inverted"));
    }
    add_range(EncodeRowBound(r.start), r.end.empty() ? std::string() : EncodeRowBound(r.end));
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& r : ranges) {
    if (!merged.empty() && (merged.back().second.empty() || r.first <= merged.back().second)) {
      if (!merged.back().second.empty() && (r.second.empty() || r.second > merged.back().second)) {
        merged.back().second = r.second;
      }
      continue;
    }
    merged.push_back(std::move(r));
  }

  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  ro.ignore_range_deletions = true;
  std::vector<rocksdb::Iterator*> raw_iters;
  if (v->groups.size() == 1) {
    raw_iters.push_back(db_->NewIterator(ro, v->groups[0]->cf));
  } else {
    // Created together, so every group reads the same snapshot.
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    for (LocalityGroupHandle* g : v->groups) cfs.push_back(g->cf);
    MS_RETURN_IF_ERROR(FromRocksDB(db_->NewIterators(ro, cfs, &raw_iters), "create iterators"));
  }
  std::vector<std::unique_ptr<rocksdb::Iterator>> iters(raw_iters.begin(), raw_iters.end());

  RowBuilder builder(v->schema.get(), &options, GcClock(*v->schema));
  int64_t delivered = 0;
  uint64_t cells = 0, bytes = 0;
  Row row;
  std::string prefix;
  absl::Status status;
  for (const auto& [lower, upper] : merged) {
    for (auto& it : iters) it->Seek(lower);
    bool stop = false;
    while (!stop) {
      // The smallest row among the groups' iterators.
      prefix.clear();
      for (auto& it : iters) {
        if (!it->Valid()) continue;
        const std::string_view k = it->key().ToStringView();
        if (!upper.empty() && k >= upper) continue;
        const size_t len = key_format::RowPrefixLength(k);
        if (len == 0) {
          return absl::DataLossError(StrCat("tablet ", options_.path, ": corrupt entry key ",
                                            HexEncode(k.substr(0, 256))));
        }
        if (prefix.empty() || k.substr(0, len) < prefix) prefix.assign(k.substr(0, len));
      }
      if (prefix.empty()) break;
      builder.StartRow();
      for (auto& it : iters) {
        builder.StartLocalityGroup();
        while (it->Valid() && it->key().starts_with(prefix)) {
          MS_RETURN_IF_ERROR(builder.Add(it->key().ToStringView(), it->value().ToStringView()));
          it->Next();
        }
      }
      if (builder.Finish(&row)) {
        ++delivered;
        cells += row.cells.size();
        for (const Cell& c : row.cells) bytes += c.value.size();
        if (!on_row(row) || (options.rows_limit > 0 && delivered >= options.rows_limit)) {
          stop = true;
        }
      }
    }
    for (auto& it : iters) {
      if (!it->status().ok()) {
        return FromRocksDB(it->status(), StrCat("scan tablet ", options_.path));
      }
    }
    if (stop) break;
  }
  resources_->counters().rows_read.fetch_add(delivered, std::memory_order_relaxed);
  resources_->counters().cells_read.fetch_add(cells, std::memory_order_relaxed);
  resources_->counters().bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Tablet::ReplayLogRecord(uint64_t lsn, std::string_view payload) {
  MS_ASSIGN_OR_RETURN(LogRecord record, DecodeLogRecord(payload));
  const auto v = view();
  if (!ContainsRow(record.row)) {
    return absl::FailedPreconditionError(StrCat("commit log record ", lsn, " for tablet ",
                                                options_.log_id, " has row \"",
                                                EscapeBytes(record.row), "\" outside its range ",
                                                RangeString(options_.start_row, options_.end_row)));
  }
  MS_RETURN_IF_ERROR(ValidateMutations(*v->schema, record.mutations));
  const size_t stripe = StripeOf(record.row);
  absl::MutexLock lock(&row_locks_[stripe]);
  {
    absl::MutexLock redo_lock(&redo_mu_);
    if (writes_since_flush_++ == 0) first_unflushed_micros_ = env_->MonotonicMicros();
  }
  return WriteRow(*v, record.row, record.mutations, record.timestamp, stripe, lsn);
}

absl::Status Tablet::AdoptLog(std::string_view log_name) {
  if (options_.log == nullptr) return absl::FailedPreconditionError("tablet has no shared log");
  uint64_t lsn;
  {
    absl::MutexLock lock(&redo_mu_);
    if (!pending_floors_.empty()) {
      return absl::FailedPreconditionError(
          StrCat("tablet ", options_.path, " has writes in flight"));
    }
    lsn = options_.log->last_lsn();
  }
  rocksdb::WriteBatch batch;
  std::string value;
  PutFixed64(&value, lsn);
  MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRedoKey, value), "build write batch"));
  MS_RETURN_IF_ERROR(FromRocksDB(batch.Put(meta_cf_, kMetaRedoLogKey, std::string(log_name)),
                                 "build write batch"));
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  MS_RETURN_IF_ERROR(
      FromRocksDB(db_->Write(wo, &batch), StrCat("record the log of ", options_.path)));
  MS_RETURN_IF_ERROR(Flush());
  absl::MutexLock lock(&redo_mu_);
  recovered_redo_log_ = std::string(log_name);
  recovered_redo_point_ = lsn;
  durable_log_position_ = std::max(durable_log_position_, lsn);
  writes_since_flush_ = 0;
  return absl::OkStatus();
}

uint64_t Tablet::LogWatermarkLocked() const {
  // With no write in flight, every record of this tablet up to the log's
  // last LSN has been applied.
  return pending_floors_.empty() ? options_.log->last_lsn() : *pending_floors_.begin();
}

absl::StatusOr<uint64_t> Tablet::PersistLogPosition(bool force_flush) {
  if (options_.log == nullptr) return absl::FailedPreconditionError("tablet has no shared log");
  uint64_t watermark;
  bool clean;
  {
    absl::MutexLock lock(&redo_mu_);
    watermark = LogWatermarkLocked();
    clean = writes_since_flush_ == 0;
    writes_since_flush_ = 0;
  }
  if (!clean || force_flush) {
    // Everything up to `watermark` is in the memtables this flush persists.
    absl::Status s = Flush();
    if (!s.ok()) {
      absl::MutexLock lock(&redo_mu_);
      ++writes_since_flush_;  // still dirty
      return s;
    }
  }
  absl::MutexLock lock(&redo_mu_);
  durable_log_position_ = std::max(durable_log_position_, watermark);
  return durable_log_position_;
}

uint64_t Tablet::durable_log_position() {
  absl::MutexLock lock(&redo_mu_);
  return std::max(durable_log_position_, recovered_redo_point_);
}

int64_t Tablet::UnflushedAgeMicros() {
  absl::MutexLock lock(&redo_mu_);
  return writes_since_flush_ == 0 ? 0 : env_->MonotonicMicros() - first_unflushed_micros_;
}

absl::Status Tablet::Flush() {
  const auto v = view();
  std::vector<rocksdb::ColumnFamilyHandle*> cfs{meta_cf_};
  for (LocalityGroupHandle* g : v->groups) cfs.push_back(g->cf);
  if (flush_failed_.load()) {
    // After a failed flush (a full disk) RocksDB refuses writes until told
    // to resume; it does so once the flush it retries succeeds.
    MS_RETURN_IF_ERROR(FromRocksDB(db_->Resume(), StrCat("resume tablet ", options_.path)));
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  absl::Status flushed = FromRocksDB(db_->Flush(fo, cfs), StrCat("flush tablet ", options_.path));
  flush_failed_ = !flushed.ok();
  MS_RETURN_IF_ERROR(flushed);
  // Idle pooled iterators would keep the flushed memtables alive.
  DropPooledIterators();
  return absl::OkStatus();
}

absl::Status Tablet::CompactTablet() {
  absl::MutexLock major(&major_compaction_mu_);
  const auto v = view();
  const std::string ctx = StrCat("major compaction of tablet ", options_.path);
  // Everything written so far goes into SSTables, so the compaction sees it;
  // also lets RocksDB delete WAL files that still hold deleted data.
  MS_RETURN_IF_ERROR(Flush());

  // A major compaction must see all of a group's SSTables at once, so stop
  // automatic compactions and let running ones finish first.
  for (LocalityGroupHandle* g : v->groups) {
    MS_RETURN_IF_ERROR(
        FromRocksDB(db_->SetOptions(g->cf, {{"disable_auto_compactions", "true"}}), ctx));
  }
  absl::Status result;
  for (LocalityGroupHandle* g : v->groups) {
    for (int attempt = 0;; ++attempt) {
      uint64_t running = 0;
      while (db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions, &running) &&
             running > 0) {
        // Real adapter code: RocksDB offers no wait-for-compactions call in 7.8.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      rocksdb::ColumnFamilyMetaData meta;
      db_->GetColumnFamilyMetaData(g->cf, &meta);
      std::vector<std::string> files;
      for (const auto& level : meta.levels) {
        for (const auto& f : level.files) files.push_back(f.name);
      }
      if (files.empty()) break;
      rocksdb::CompactionOptions co;
      co.compression = g->compression;
      co.max_subcompactions = 1;
      g->filter_factory->set_major(true);
      const rocksdb::Status s =
          db_->CompactFiles(co, g->cf, files, static_cast<int>(meta.levels.size()) - 1);
      g->filter_factory->set_major(false);
      if (s.ok()) break;
      if (attempt >= 20 || !(s.IsAborted() || s.IsBusy() || s.IsInvalidArgument())) {
        result = FromRocksDB(s, ctx);
        break;
      }
    }
    if (!result.ok()) break;
  }
  for (LocalityGroupHandle* g : v->groups) {
    absl::Status s =
        FromRocksDB(db_->SetOptions(g->cf, {{"disable_auto_compactions", "false"}}), ctx);
    if (result.ok()) result = s;
  }
  // Idle pooled iterators would pin the compacted-away SSTables on disk.
  DropPooledIterators();
  // Cached rows may hold entries the compaction dropped (deleted data that
  // reads below the delete could see): retire every cached row.
  cache_generation_.fetch_add(1);
  if (result.ok()) resources_->counters().major_compactions.fetch_add(1);
  return result;
}

namespace {

// Opens a checkpoint just long enough to record its new row range and the
// tablets it was split from (ids, nearest first, space-separated).
absl::Status StoreRange(const std::string& path, std::string_view start, std::string_view end,
                        std::string_view ancestry) {
  rocksdb::DBOptions db_options;
  db_options.info_log = ProcessRocksDBLogger();
  std::vector<std::string> names;
  MS_RETURN_IF_ERROR(FromRocksDB(rocksdb::DB::ListColumnFamilies(db_options, path, &names),
                                 StrCat("list column families of ", path)));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& n : names) {
    rocksdb::ColumnFamilyOptions o =
        n == rocksdb::kDefaultColumnFamilyName ? MetaOptions() : rocksdb::ColumnFamilyOptions();
    o.disable_auto_compactions = true;
    descriptors.emplace_back(n, o);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  MS_RETURN_IF_ERROR(FromRocksDB(rocksdb::DB::Open(db_options, path, descriptors, &handles, &raw),
                                 StrCat("open split child ", path)));
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string range;
  PutLengthPrefixed(&range, start);
  PutLengthPrefixed(&range, end);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::WriteBatch batch;
  absl::Status s = FromRocksDB(batch.Put(handles[0], kMetaRangeKey, range), "build write batch");
  if (s.ok())
    s = FromRocksDB(batch.Put(handles[0], kMetaSplitFromKey, ancestry), "build write batch");
  if (s.ok()) s = FromRocksDB(db->Write(wo, &batch), StrCat("record range of split child ", path));
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  absl::Status close = FromRocksDB(db->Close(), StrCat("close split child ", path));
  return s.ok() ? close : s;
}

}  // namespace

absl::StatusOr<StoredTablet> Tablet::ReadStored(const std::string& path) {
  const std::string ctx = StrCat("tablet ", path);
  rocksdb::DBOptions db_options;
  db_options.info_log = ProcessRocksDBLogger();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, MetaOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  // Read-only, the metadata family alone: no lock taken, nothing written.
  MS_RETURN_IF_ERROR(
      FromRocksDB(rocksdb::DB::OpenForReadOnly(db_options, path, descriptors, &handles, &raw),
                  StrCat("open ", ctx, " read-only")));
  std::unique_ptr<rocksdb::DB> db(raw);
  auto get = [&](const char* key, std::string* value) -> absl::StatusOr<bool> {
    rocksdb::Status s = db->Get(rocksdb::ReadOptions(), handles[0], key, value);
    if (s.IsNotFound()) return false;
    MS_RETURN_IF_ERROR(FromRocksDB(s, StrCat("read ", key, " of ", ctx)));
    return true;
  };
  StoredTablet out;
  absl::Status result = [&]() -> absl::Status {
    std::string format, range, redo;
    MS_ASSIGN_OR_RETURN(bool has_format, get(kMetaFormatKey, &format));
    if (!has_format) return absl::DataLossError(StrCat(ctx, " has no metadata (not a tablet?)"));
    if (format != kFormatVersion) {
      return absl::FailedPreconditionError(StrCat(ctx, " has storage format \"",
                                                  EscapeBytes(format), "\"; this build reads \"",
                                                  kFormatVersion, "\""));
    }
    MS_ASSIGN_OR_RETURN(bool has_range, get(kMetaRangeKey, &range));
    std::string_view in = range, start, end;
    if (!has_range || !ConsumeLengthPrefixed(&in, &start) || !ConsumeLengthPrefixed(&in, &end) ||
        !in.empty())
      return absl::DataLossError(StrCat(ctx, ": stored row range is missing or corrupt"));
    out.start_row = std::string(start);
    out.end_row = std::string(end);
    std::string ancestry;
    MS_ASSIGN_OR_RETURN(bool has_ancestry, get(kMetaSplitFromKey, &ancestry));
    if (has_ancestry) out.ancestors = absl::StrSplit(ancestry, ' ', absl::SkipEmpty());
    MS_ASSIGN_OR_RETURN(bool has_redo, get(kMetaRedoKey, &redo));
    if (has_redo) {
      if (redo.size() != 8) return absl::DataLossError(StrCat(ctx, ": redo point is corrupt"));
      out.redo_point = DecodeFixed64(redo.data());
    }
    return absl::OkStatus();
  }();
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  db->Close().PermitUncheckedError();
  if (!result.ok()) return result;
  return out;
}

absl::Status Tablet::Split(std::string_view split_row, const std::string& left_path,
                           const std::string& right_path) {
  if (split_row.empty() || split_row <= options_.start_row || !ContainsRow(split_row)) {
    return absl::InvalidArgumentError(StrCat("split row \"", EscapeBytes(split_row),
                                             "\" is not strictly inside tablet range ",
                                             RangeString(options_.start_row, options_.end_row)));
  }
  for (const std::string& p : {left_path, right_path}) {
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) {
      return absl::AlreadyExistsError(StrCat("split target ", p, " already exists"));
    }
  }
  if (left_path == right_path) {
    return absl::InvalidArgumentError("split children need two different paths");
  }
  // No write may be in flight while the children are cut.
  absl::WriterMutexLock gate(&write_gate_);
  MS_RETURN_IF_ERROR(CheckWritable());
  {
    absl::MutexLock lock(&redo_mu_);
    redo_mu_.Await(absl::Condition(
        +[](std::multiset<uint64_t>* p) { return p->empty(); }, &pending_floors_));
  }
  MS_RETURN_IF_ERROR(Flush());
  std::vector<std::string> ancestry{options_.log_id};
  ancestry.insert(ancestry.end(), ancestors_.begin(), ancestors_.end());
  rocksdb::Checkpoint* raw = nullptr;
  MS_RETURN_IF_ERROR(
      FromRocksDB(rocksdb::Checkpoint::Create(db_.get(), &raw), "create checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  const std::string split(split_row);
  for (const auto& [path, start, end] : {std::tuple{left_path, options_.start_row, split},
                                         std::tuple{right_path, split, options_.end_row}}) {
    // Under another name until its metadata says what it is: a crash
    // never leaves a directory named as a child holding the parent's range.
    const std::string cutting = path + ".cutting";
    std::error_code ec;
    std::filesystem::remove_all(cutting, ec);
    MS_RETURN_IF_ERROR(FromRocksDB(checkpoint->CreateCheckpoint(cutting),
                                   StrCat("checkpoint tablet ", options_.path, " into ", cutting)));
    MS_RETURN_IF_ERROR(StoreRange(cutting, start, end, absl::StrJoin(ancestry, " ")));
    std::filesystem::rename(cutting, path, ec);
    if (ec)
      return absl::InternalError(StrCat("rename ", cutting, " to ", path, ": ", ec.message()));
    MS_RETURN_IF_ERROR(SyncDir(std::filesystem::path(path).parent_path().string()));
  }
  split_.store(true);
  resources_->counters().splits.fetch_add(1);
  MS_LOG_INFO("tablet {} split at \"{}\" into {} and {}", options_.path, EscapeBytes(split_row),
              left_path, right_path);
  return absl::OkStatus();
}

void Tablet::UndoSplit() {
  absl::WriterMutexLock gate(&write_gate_);
  split_.store(false);
}

absl::Status Tablet::UpdateSchema(const TableSchema& schema) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledSchema> compiled,
                      CompiledSchema::Compile(schema));
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CompiledSchema::CheckChange(*view_->schema, *compiled));
  return InstallSchemaLocked(std::move(compiled));
}

absl::Status Tablet::InstallSchemaLocked(std::shared_ptr<const CompiledSchema> schema) {
  auto view = std::make_shared<View>();
  for (const LocalityGroup& g : schema->locality_groups()) {
    LocalityGroupHandle* found = nullptr;
    for (auto& h : groups_) {
      if (h->name == g.name()) found = h.get();
    }
    if (found == nullptr) {
      rocksdb::ColumnFamilyOptions cf;
      auto handle = NewGroupHandle(g, &cf);
      MS_RETURN_IF_ERROR(
          FromRocksDB(db_->CreateColumnFamily(cf, kGroupPrefix + g.name(), &handle->cf),
                      StrCat("create locality group ", g.name())));
      found = handle.get();
      groups_.push_back(std::move(handle));
    }
    view->groups.push_back(found);
  }
  compaction_state_->set_schema(schema);
  view->schema = std::move(schema);
  view_ = std::move(view);
  return absl::OkStatus();
}

uint64_t Tablet::ApproximateSizeBytes() {
  // Only the data inside this tablet's rows: a split's children share the
  // parent's SSTables (hard links) until compactions drop the other half,
  // so the files' total would count the parent's size twice.
  std::string start, limit;
  key_format::AppendRowPrefix(&start, options_.start_row);
  if (options_.end_row.empty()) {
    limit.assign(64, '\xff');
  } else {
    key_format::AppendRowPrefix(&limit, options_.end_row);
  }
  const rocksdb::Range range(start, limit);
  rocksdb::SizeApproximationOptions o;
  o.include_memtables = true;
  o.include_files = true;
  const auto v = view();
  uint64_t total = 0;
  for (LocalityGroupHandle* g : v->groups) {
    uint64_t size = 0;
    if (db_->GetApproximateSizes(o, g->cf, &range, 1, &size).ok()) total += size;
  }
  return total;
}

}  // namespace megastore::storage
