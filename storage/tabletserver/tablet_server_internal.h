// Internal to the tablet server (tablet_server*.cc): its files' names in
// the data directory, and the adapter that lets tablets write the commit
// log.
#pragma once

#include <string_view>

#include "storage/commitlog/commit_log.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage {

namespace tablet_server_internal {

inline constexpr char kStateFile[] = "state.pb";
inline constexpr char kTableSchemaFile[] = "schema.pb";

}  // namespace tablet_server_internal

class TabletServer::LogAdapter : public TabletLog {
 public:
  explicit LogAdapter(commitlog::CommitLog* log) : log_(log) {}
  absl::StatusOr<uint64_t> AppendAsync(std::string_view tablet_id, std::string_view record,
                                       Callback done, bool durable) override {
    return log_->AppendAsync(tablet_id, record, std::move(done), durable);
  }
  absl::StatusOr<uint64_t> Append(std::string_view tablet_id, std::string_view record,
                                  bool durable) override {
    return log_->Append(tablet_id, record, durable);
  }
  uint64_t last_lsn() const override { return log_->last_lsn(); }
  uint64_t synced_lsn() const override { return log_->synced_lsn(); }
  absl::Status SyncWritten() override { return log_->SyncWritten(); }

 private:
  commitlog::CommitLog* log_;
};

}  // namespace megastore::storage
