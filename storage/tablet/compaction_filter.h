// The RocksDB compaction filter of a tablet's locality group.
//
// Every compaction drops entries outside the tablet's row range (left behind
// by a split). A major compaction (Tablet::CompactTablet, which compacts all
// of a group's SSTables in one CompactFiles call) also drops everything
// RowVisibility calls garbage. Other compactions see only part of the data,
// where dropping a tombstone or counting versions would be unsafe, so they
// keep everything else.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "rocksdb/compaction_filter.h"
#include "storage/model/schema.h"

namespace megastore::storage {

// What the filters of one tablet need; shared by its groups' factories.
struct TabletCompactionContext {
  Env* env = nullptr;
  std::string start_key;  // encoded start row
  std::string end_key;    // encoded end row; "" if unbounded
  // Set once the tablet has checked start/end against the range it recorded;
  // until then no filter drops out-of-range rows (a caller that opened the
  // tablet with a wrong range must get an error, not lose data).
  std::atomic<bool> range_verified{false};

  std::shared_ptr<const CompiledSchema> schema() const {
    absl::MutexLock lock(&mu);
    return schema_;
  }
  void set_schema(std::shared_ptr<const CompiledSchema> s) {
    absl::MutexLock lock(&mu);
    schema_ = std::move(s);
  }

 private:
  mutable absl::Mutex mu;
  std::shared_ptr<const CompiledSchema> schema_ ABSL_GUARDED_BY(mu);
};

class TabletCompactionFilterFactory : public rocksdb::CompactionFilterFactory {
 public:
  explicit TabletCompactionFilterFactory(std::shared_ptr<const TabletCompactionContext> context);

  // While set, manual compactions of this group are major compactions.
  void set_major(bool on) { major_.store(on); }

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override;
  const char* Name() const override { return "megastore.TabletCompactionFilterFactory"; }

 private:
  std::shared_ptr<const TabletCompactionContext> context_;
  std::atomic<bool> major_{false};
};

}  // namespace megastore::storage
