// Tablet maintenance: flush, compaction, importing another tablet's data
// (merge), and splitting into two stored tablets.
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

using tablet_internal::kFormatVersion;
using tablet_internal::kMetaFormatKey;
using tablet_internal::kMetaRangeKey;
using tablet_internal::kMetaRedoKey;
using tablet_internal::kMetaSplitFromKey;
using tablet_internal::MetaOptions;
using tablet_internal::RangeString;

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

void Tablet::DropMemtablesOnClose() {
  const rocksdb::Status s = db_->SetDBOptions({{"avoid_flush_during_shutdown", "true"}});
  if (!s.ok())
    MS_LOG_WARN("tablet {}: cannot skip the flush at close: {}", options_.path, s.ToString());
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

}  // namespace megastore::storage
