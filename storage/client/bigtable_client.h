// BigtableClient: the asynchronous Bigtable operations the Megastore layer
// uses (docs/architecture.md), as an interface so the same replication code runs
// against an in-process tablet server, a remote cell, or the simulator's
// Bigtable on virtual time.
//
// Every callback runs exactly once. It may run before the call returns (the
// in-process client answers inline), so callers must not hold a lock that
// the callback takes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "storage/model/data_model.h"

namespace megastore::storage {

class BigtableClient {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(T)>;

  virtual ~BigtableClient() = default;

  // The row's cells selected by `options`, or nullopt if none.
  virtual void ReadRow(std::string table, std::string row, ReadOptions options,
                       Callback<absl::StatusOr<std::optional<Row>>> done) = 0;
  // The rows in [range.start, range.end) with a cell selected by `options`,
  // in row order (options.rows_limit bounds how many).
  virtual void ReadRows(std::string table, RowRange range, ReadOptions options,
                        Callback<absl::StatusOr<std::vector<Row>>> done) = 0;
  // Applies `mutations` to `row` atomically; deletions are stamped, and
  // kServerTimestamp cells written, at `timestamp`.
  virtual void MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                         int64_t timestamp, Callback<absl::Status> done) = 0;
  // Atomically: if any cell of `row` passes `predicate`, applies
  // `if_true`, else `if_false`; reports which.
  virtual void CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                                 std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                                 Callback<absl::StatusOr<bool>> done) = 0;

  // Lazy writes: as MutateRow / CheckAndMutateRow, but the write need not
  // be durable when `done` runs — it becomes durable no later than the
  // next durable write made through this client. For writes whose
  // durability a later write implies (an entry's data before the record
  // that says it was applied). Where that cannot be promised (several
  // commit logs behind the client, a remote server), they are durable
  // writes: the default.
  virtual void MutateRowLazily(std::string table, std::string row, std::vector<Mutation> mutations,
                               int64_t timestamp, Callback<absl::Status> done) {
    MutateRow(std::move(table), std::move(row), std::move(mutations), timestamp, std::move(done));
  }
  virtual void CheckAndMutateRowLazily(std::string table, std::string row, RowFilter predicate,
                                       std::vector<Mutation> if_true,
                                       std::vector<Mutation> if_false,
                                       Callback<absl::StatusOr<bool>> done) {
    CheckAndMutateRow(std::move(table), std::move(row), std::move(predicate), std::move(if_true),
                      std::move(if_false), std::move(done));
  }
  // Makes every lazy write acknowledged so far durable; `done` runs once
  // it is. Nothing to do (the default) where lazy writes are durable ones.
  // A client that forwards lazy writes forwards this too.
  virtual void SyncLazyWrites(Callback<absl::Status> done) { done(absl::OkStatus()); }
};

}  // namespace megastore::storage
