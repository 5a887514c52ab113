// A Bigtable client whose answers do nothing once its owner is gone.
//
// A replication server's log replica chains several Bigtable calls per
// request, and nothing waits for those chains when the server stops: an
// answer that arrives while the server is destroyed, or that the client
// fails with Cancelled when it is destroyed after the server (a remote
// Bigtable, the client of a split datacenter's replication process), would
// run the replica's and the server's continuations in freed memory. The
// server passes its replica this wrapper and calls End() before its members
// go: answers from then on are dropped (their requests were made by a
// server that is stopping, whose callers time out), and End() waits for the
// answers already running.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/lifetime.h"
#include "storage/client/bigtable_client.h"

namespace megastore::replication {

class GuardedBigtable : public storage::BigtableClient {
 public:
  explicit GuardedBigtable(storage::BigtableClient* inner) : inner_(inner) {}

  // From now on answers are dropped; returns once those running have ended.
  // Not from inside an answer (it would wait for itself).
  void End() { life_->End(); }

  void ReadRow(std::string table, std::string row, storage::ReadOptions options,
               Callback<absl::StatusOr<std::optional<storage::Row>>> done) override {
    inner_->ReadRow(std::move(table), std::move(row), std::move(options), Guard(std::move(done)));
  }
  void ReadRows(std::string table, storage::RowRange range, storage::ReadOptions options,
                Callback<absl::StatusOr<std::vector<storage::Row>>> done) override {
    inner_->ReadRows(std::move(table), std::move(range), std::move(options),
                     Guard(std::move(done)));
  }
  void MutateRow(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override {
    inner_->MutateRow(std::move(table), std::move(row), std::move(mutations), timestamp,
                      Guard(std::move(done)));
  }
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override {
    inner_->CheckAndMutateRow(std::move(table), std::move(row), std::move(predicate),
                              std::move(if_true), std::move(if_false), Guard(std::move(done)));
  }
  void MutateRowLazily(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                       int64_t timestamp, Callback<absl::Status> done) override {
    inner_->MutateRowLazily(std::move(table), std::move(row), std::move(mutations), timestamp,
                            Guard(std::move(done)));
  }
  void CheckAndMutateRowLazily(std::string table, std::string row, storage::RowFilter predicate,
                               std::vector<storage::Mutation> if_true,
                               std::vector<storage::Mutation> if_false,
                               Callback<absl::StatusOr<bool>> done) override {
    inner_->CheckAndMutateRowLazily(std::move(table), std::move(row), std::move(predicate),
                                    std::move(if_true), std::move(if_false),
                                    Guard(std::move(done)));
  }
  void SyncLazyWrites(Callback<absl::Status> done) override {
    inner_->SyncLazyWrites(Guard(std::move(done)));
  }

 private:
  template <typename T>
  Callback<T> Guard(Callback<T> done) {
    return [life = life_, done = std::move(done)](T r) mutable {
      Lifetime::Entry in(life);
      if (in) done(std::move(r));
    };
  }

  storage::BigtableClient* const inner_;
  const std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();
};

}  // namespace megastore::replication
