// InProcessBigtable: the BigtableClient interface over a TabletServer in
// this process, for a datacenter whose Megastore servers and tablet server
// share one process, and for tests.
#pragma once

#include "storage/client/bigtable_client.h"

namespace megastore::storage {

class TabletServer;

// A BigtableClient over a TabletServer in this process: each call runs to
// completion on the caller's thread and calls back before returning.
class InProcessBigtable : public BigtableClient {
 public:
  explicit InProcessBigtable(TabletServer* server) : server_(server) {}

  void ReadRow(std::string table, std::string row, ReadOptions options,
               Callback<absl::StatusOr<std::optional<Row>>> done) override;
  void ReadRows(std::string table, RowRange range, ReadOptions options,
                Callback<absl::StatusOr<std::vector<Row>>> done) override;
  void MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override;
  void CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                         std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override;
  // Lazy: every tablet of the server shares its one commit log, so a later
  // durable write's sync covers these.
  void MutateRowLazily(std::string table, std::string row, std::vector<Mutation> mutations,
                       int64_t timestamp, Callback<absl::Status> done) override;
  void CheckAndMutateRowLazily(std::string table, std::string row, RowFilter predicate,
                               std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                               Callback<absl::StatusOr<bool>> done) override;
  // One sync of the commit log, on the caller's thread.
  void SyncLazyWrites(Callback<absl::Status> done) override;

 private:
  TabletServer* const server_;
};

}  // namespace megastore::storage
