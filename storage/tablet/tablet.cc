// The tablet engine (docs/tablet.md): opening a tablet, its views and
// schema. Writes, reads, redo-log replay and maintenance (flush, compaction,
// split, merge) live in tablet_write.cc, tablet_read.cc, tablet_redo.cc and
// tablet_maintenance.cc.
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
#include "rocksdb/listener.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/tablet/compaction_filter.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/log_record.h"
#include "storage/tablet/row_builder.h"
#include "storage/tablet/tablet_internal.h"

namespace megastore::storage {

using tablet_internal::CheckTimestamp;
using tablet_internal::EncodeRowBound;
using tablet_internal::kFormatVersion;
using tablet_internal::kGroupPrefix;
using tablet_internal::kMetaFormatKey;
using tablet_internal::kMetaRangeKey;
using tablet_internal::kMetaRedoKey;
using tablet_internal::kMetaRedoLogKey;
using tablet_internal::kMetaSeqKey;
using tablet_internal::kMetaSplitFromKey;
using tablet_internal::MetaOptions;
using tablet_internal::RangeString;

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

namespace {

// RocksDB flushes memtables on its own (a full one) as well as when asked.
// Without its WAL, a flushed write is durable in an SSTable whether or not
// its record in the shared commit log is: a lazy record (not yet synced)
// flushed so would outlive earlier lazy records of other tablets that a
// power cut takes with the log's unsynced tail — an applied record kept, the
// rows it vouches for lost. So the log is synced before every flush. Every
// write in a memtable a flush picks was written to the log before the flush
// was scheduled, so before this runs.
class SyncLogBeforeFlush : public rocksdb::EventListener {
 public:
  SyncLogBeforeFlush(TabletLog* log, std::string path) : log_(log), path_(std::move(path)) {}
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    // A listener cannot stop the flush. If the log holds records it cannot
    // make durable (its sync failed, or it had failed before), the flush
    // would make some of them durable out of order: stop the process
    // instead, as after any failed fsync; it restarts from what the log
    // holds.
    if (absl::Status s = log_->SyncWritten(); !s.ok())
      MS_CHECK_OK(absl::Status(s.code(), StrCat("tablet ", path_,
                                                ": syncing the commit log before "
                                                "a flush: ",
                                                s.message())));
  }

 private:
  TabletLog* const log_;
  const std::string path_;
};

}  // namespace

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
    db_options.listeners.push_back(
        std::make_shared<SyncLogBeforeFlush>(options_.log, options_.path));
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
