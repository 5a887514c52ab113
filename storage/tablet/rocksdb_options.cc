#include "storage/tablet/rocksdb_options.h"

#include <cstdarg>
#include <cstdio>

#include "base/logging.h"
#include "base/strings.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "storage/tablet/key_format.h"

namespace megastore::storage {

namespace {

// RocksDB's own messages go to the process's log, not to a LOG file in
// every tablet's directory: fewer files, and no file writer that a full
// disk can leave in an error state (Debian's RocksDB asserts on writing to
// one again).
class ProcessLogger : public rocksdb::Logger {
 public:
  ProcessLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      MS_LOG_WARN_LIMITED("rocksdb: {}", buf);
    } else {
      MS_LOG_DEBUG("rocksdb: {}", buf);
    }
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> ProcessRocksDBLogger() {
  static const std::shared_ptr<rocksdb::Logger> logger = std::make_shared<ProcessLogger>();
  return logger;
}

rocksdb::DBOptions TabletDBOptions(TabletResources* resources, const StorageTuning&) {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.write_buffer_manager = resources->write_buffer_manager();
  o.statistics = resources->statistics();
  o.max_background_jobs = resources->options().background_threads;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.info_log = ProcessRocksDBLogger();
  o.keep_log_file_num = 3;
  o.max_manifest_file_size = 64 << 20;
  // An empty tablet must cost kilobytes of disk, not the 4 MiB RocksDB
  // reserves for a MANIFEST by default.
  o.manifest_preallocation_size = 64 << 10;
  return o;
}

namespace {

// Extracts the encoded row key from an entry key, so bloom filters and prefix
// seeks work per row.
class RowPrefixTransform : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "megastore.RowPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return rocksdb::Slice(key.data(), key_format::RowPrefixLength(key.ToStringView()));
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return key_format::RowPrefixLength(key.ToStringView()) > 0;
  }
};

}  // namespace

rocksdb::ColumnFamilyOptions LocalityGroupOptions(const LocalityGroup& group,
                                                  TabletResources* resources,
                                                  const StorageTuning& tuning, KeyFilter filter) {
  rocksdb::ColumnFamilyOptions o;
  o.write_buffer_size = tuning.write_buffer_bytes;
  o.level_compaction_dynamic_level_bytes = true;

  switch (group.compression()) {
    case LocalityGroup::ZSTD: {
      o.compression = rocksdb::kZSTD;
      const uint32_t dict =
          group.has_zstd_dictionary_bytes() ? group.zstd_dictionary_bytes() : 16 * 1024;
      o.compression_opts.max_dict_bytes = static_cast<int>(dict);
      o.compression_opts.zstd_max_train_bytes = static_cast<int>(dict * 100);
      // Bound the memory that dictionary training buffers per SSTable.
      o.compression_opts.max_dict_buffer_bytes = uint64_t{dict} * 256;
      break;
    }
    case LocalityGroup::LZ4:
      o.compression = rocksdb::kLZ4Compression;
      break;
    default:
      o.compression = rocksdb::kNoCompression;
      break;
  }

  rocksdb::BlockBasedTableOptions t;
  t.block_size = group.has_block_size() ? group.block_size() : 8 * 1024;
  const uint32_t bloom_bits = group.has_bloom_bits_per_key() ? group.bloom_bits_per_key() : 10;
  if (bloom_bits > 0) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(bloom_bits));
  }
  if (group.in_memory()) {
    t.block_cache = resources->in_memory_cache();
    t.prepopulate_block_cache = rocksdb::BlockBasedTableOptions::PrepopulateBlockCache::kFlushOnly;
    t.cache_index_and_filter_blocks = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
  } else {
    t.block_cache = resources->block_cache();
  }
  if (filter == KeyFilter::kRowPrefix) {
    static const auto extractor = std::make_shared<RowPrefixTransform>();
    o.prefix_extractor = extractor;
    t.whole_key_filtering = false;
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

absl::Status FromRocksDB(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = StrCat(context, ": ", s.ToString());
  // A full disk is a resource running out, not a bug: writes fail with it,
  // reads go on, and the engine resumes once space returns.
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kSpaceLimit)
    return absl::ResourceExhaustedError(msg);
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(msg);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(msg);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(msg);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(msg);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
      return absl::UnavailableError(msg);
    case rocksdb::Status::kAborted:
      return absl::AbortedError(msg);
    case rocksdb::Status::kTimedOut:
      return absl::DeadlineExceededError(msg);
    case rocksdb::Status::kIncomplete:
    case rocksdb::Status::kShutdownInProgress:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace megastore::storage
