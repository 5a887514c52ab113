// RocksDB options for tablets, in one place, so the tablet and the
// benchmark's raw-RocksDB baseline use the same settings.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/status.h"
#include "storage/model/schema.pb.h"
#include "storage/tablet/resources.h"

namespace megastore::storage {

struct StorageTuning {
  // Memtable size of each locality group before it is flushed.
  size_t write_buffer_bytes = 64 << 20;
  // Keep RocksDB's own write-ahead log (the tablet server's shared commit log
  // replaces it; standalone tablets need it to survive a crash).
  bool use_rocksdb_wal = true;
  // fdatasync every write before acknowledging it.
  bool sync_writes = false;
};

rocksdb::DBOptions TabletDBOptions(TabletResources* resources, const StorageTuning& tuning);

// RocksDB's messages, into this process's log (no LOG files in tablet
// directories).
std::shared_ptr<rocksdb::Logger> ProcessRocksDBLogger();

// What a locality group's bloom filters hold.
enum class KeyFilter {
  kWholeKey,   // whole keys, for DB::Get (the raw-RocksDB baseline)
  kRowPrefix,  // encoded row keys, for the tablet's per-row seeks
};

// Block size, compression, bloom filter and caching of one locality group.
rocksdb::ColumnFamilyOptions LocalityGroupOptions(const LocalityGroup& group,
                                                  TabletResources* resources,
                                                  const StorageTuning& tuning,
                                                  KeyFilter filter = KeyFilter::kRowPrefix);

// Converts a RocksDB status at the storage boundary; `context` says what was
// being done ("open tablet /x/y").
absl::Status FromRocksDB(const rocksdb::Status& s, std::string_view context);

}  // namespace megastore::storage
