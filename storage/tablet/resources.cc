#include "storage/tablet/resources.h"

#include "rocksdb/env.h"

namespace megastore::storage {

TabletResources::TabletResources(const TabletResourcesOptions& options)
    : options_(options),
      block_cache_(rocksdb::NewLRUCache(options.block_cache_bytes)),
      in_memory_cache_(rocksdb::NewLRUCache(options.in_memory_cache_bytes)),
      row_cache_(options.row_cache_bytes > 0 ? rocksdb::NewLRUCache(options.row_cache_bytes)
                                             : nullptr),
      write_buffer_manager_(
          std::make_shared<rocksdb::WriteBufferManager>(options.write_buffer_bytes)),
      statistics_(rocksdb::CreateDBStatistics()) {
  statistics_->set_stats_level(rocksdb::StatsLevel::kExceptTimers);
  rocksdb::Env::Default()->SetBackgroundThreads(options.background_threads,
                                                rocksdb::Env::Priority::LOW);
  rocksdb::Env::Default()->SetBackgroundThreads(1, rocksdb::Env::Priority::HIGH);
}

TabletStats TabletResources::Stats() const {
  TabletStats s;
  s.rows_read = counters_.rows_read.load();
  s.cells_read = counters_.cells_read.load();
  s.bytes_read = counters_.bytes_read.load();
  s.rows_mutated = counters_.rows_mutated.load();
  s.bytes_written = counters_.bytes_written.load();
  s.row_cache_hits = counters_.row_cache_hits.load();
  s.row_cache_misses = counters_.row_cache_misses.load();
  s.major_compactions = counters_.major_compactions.load();
  s.splits = counters_.splits.load();
  s.block_cache_hits = statistics_->getTickerCount(rocksdb::BLOCK_CACHE_HIT);
  s.block_cache_misses = statistics_->getTickerCount(rocksdb::BLOCK_CACHE_MISS);
  s.bloom_useful = statistics_->getTickerCount(rocksdb::BLOOM_FILTER_USEFUL) +
                   statistics_->getTickerCount(rocksdb::BLOOM_FILTER_PREFIX_USEFUL);
  return s;
}

}  // namespace megastore::storage
