// What all tablets of one process share: the block cache, the in-memory
// cache for in-memory locality groups, the optional row cache (Bigtable's
// scan cache), one write-buffer budget, RocksDB's statistics and our own
// counters. Create one per tablet server; it must outlive its tablets.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "rocksdb/cache.h"
#include "rocksdb/statistics.h"
#include "rocksdb/write_buffer_manager.h"

namespace megastore::storage {

struct TabletResourcesOptions {
  // LRU cache of SSTable blocks, shared by every tablet.
  size_t block_cache_bytes = 256 << 20;
  // Cache for locality groups marked in_memory; blocks are added when a
  // memtable is flushed and when the tablet opens, so the group stays
  // resident as long as it fits.
  size_t in_memory_cache_bytes = 256 << 20;
  // Cache of whole rows for point reads; 0 disables it.
  size_t row_cache_bytes = 0;
  // Budget for all memtables of all tablets; 0 means unlimited.
  size_t write_buffer_bytes = 512 << 20;
  // Threads for RocksDB flushes and compactions, shared by every tablet.
  int background_threads = 2;
};

// A snapshot of the counters, for /metrics.
struct TabletStats {
  uint64_t rows_read = 0;      // rows returned by reads
  uint64_t cells_read = 0;     // cells returned by reads
  uint64_t bytes_read = 0;     // value bytes returned by reads
  uint64_t rows_mutated = 0;   // successful row mutations
  uint64_t bytes_written = 0;  // key and value bytes written
  uint64_t row_cache_hits = 0;
  uint64_t row_cache_misses = 0;
  uint64_t block_cache_hits = 0;
  uint64_t block_cache_misses = 0;
  uint64_t bloom_useful = 0;  // SSTable reads a bloom filter avoided
  uint64_t major_compactions = 0;
  uint64_t splits = 0;
};

class TabletResources {
 public:
  explicit TabletResources(const TabletResourcesOptions& options = {});
  TabletResources(const TabletResources&) = delete;
  TabletResources& operator=(const TabletResources&) = delete;

  const TabletResourcesOptions& options() const { return options_; }
  const std::shared_ptr<rocksdb::Cache>& block_cache() const { return block_cache_; }
  const std::shared_ptr<rocksdb::Cache>& in_memory_cache() const { return in_memory_cache_; }
  // nullptr when disabled.
  rocksdb::Cache* row_cache() const { return row_cache_.get(); }
  const std::shared_ptr<rocksdb::WriteBufferManager>& write_buffer_manager() const {
    return write_buffer_manager_;
  }
  const std::shared_ptr<rocksdb::Statistics>& statistics() const { return statistics_; }

  // A process-unique id for a newly opened tablet (row cache keys).
  uint64_t NextTabletId() { return next_tablet_id_.fetch_add(1) + 1; }

  TabletStats Stats() const;

  // Counters the tablets update.
  struct Counters {
    std::atomic<uint64_t> rows_read{0}, cells_read{0}, bytes_read{0};
    std::atomic<uint64_t> rows_mutated{0}, bytes_written{0};
    std::atomic<uint64_t> row_cache_hits{0}, row_cache_misses{0};
    std::atomic<uint64_t> major_compactions{0}, splits{0};
  };
  Counters& counters() { return counters_; }

 private:
  const TabletResourcesOptions options_;
  std::shared_ptr<rocksdb::Cache> block_cache_;
  std::shared_ptr<rocksdb::Cache> in_memory_cache_;
  std::shared_ptr<rocksdb::Cache> row_cache_;
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffer_manager_;
  std::shared_ptr<rocksdb::Statistics> statistics_;
  std::atomic<uint64_t> next_tablet_id_{0};
  Counters counters_;
};

}  // namespace megastore::storage
