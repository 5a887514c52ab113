// RemoteBigtable: the Megastore layer's BigtableClient over a tablet
// server's RPC service ("tablet.*"), for a replication server that runs in
// another process than its datacenter's tablet server (megastored --roles).
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "base/rpc/rpc.h"
#include "storage/client/bigtable_client.h"

namespace megastore::storage {

class RemoteBigtable : public BigtableClient {
 public:
  // `address` is the tablet server's HOST:PORT. Every call fails with
  // DeadlineExceeded after `timeout`, or Unavailable if the server cannot be
  // reached; such a write may or may not have been applied (the callers'
  // Paxos records are idempotent). Callbacks run on the RPC client's thread.
  explicit RemoteBigtable(std::string address, absl::Duration timeout = absl::Seconds(10));
  ~RemoteBigtable() override;  // fails calls still pending with Cancelled

  void ReadRow(std::string table, std::string row, ReadOptions options,
               Callback<absl::StatusOr<std::optional<Row>>> done) override;
  void ReadRows(std::string table, RowRange range, ReadOptions options,
                Callback<absl::StatusOr<std::vector<Row>>> done) override;
  void MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override;
  void CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                         std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override;

  const std::string& address() const { return address_; }

 private:
  void Read(std::string table, RowSet rows, const ReadOptions& options,
            Callback<absl::StatusOr<std::vector<Row>>> done);

  const std::string address_;
  const absl::Duration timeout_;
  rpc::RpcClient rpc_;
};

}  // namespace megastore::storage
