#include "storage/tabletserver/in_process_bigtable.h"

#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage {

void InProcessBigtable::ReadRow(std::string table, std::string row, ReadOptions options,
                                Callback<absl::StatusOr<std::optional<Row>>> done) {
  done(server_->ReadRow(table, row, options));
}

void InProcessBigtable::ReadRows(std::string table, RowRange range, ReadOptions options,
                                 Callback<absl::StatusOr<std::vector<Row>>> done) {
  RowSet rows;
  rows.ranges.push_back(std::move(range));
  std::vector<Row> out;
  absl::Status s = server_->ReadRows(table, rows, options, [&](Row& row) {
    out.push_back(std::move(row));
    return true;
  });
  if (!s.ok()) return done(s);
  done(std::move(out));
}

void InProcessBigtable::MutateRow(std::string table, std::string row,
                                  std::vector<Mutation> mutations, int64_t timestamp,
                                  Callback<absl::Status> done) {
  done(server_->MutateRow(table, row, mutations, timestamp));
}

void InProcessBigtable::CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                                          std::vector<Mutation> if_true,
                                          std::vector<Mutation> if_false,
                                          Callback<absl::StatusOr<bool>> done) {
  done(server_->CheckAndMutateRow(table, row, predicate, if_true, if_false));
}

void InProcessBigtable::MutateRowLazily(std::string table, std::string row,
                                        std::vector<Mutation> mutations, int64_t timestamp,
                                        Callback<absl::Status> done) {
  done(server_->MutateRow(table, row, mutations, timestamp, /*durable=*/false));
}

void InProcessBigtable::CheckAndMutateRowLazily(std::string table, std::string row,
                                                RowFilter predicate, std::vector<Mutation> if_true,
                                                std::vector<Mutation> if_false,
                                                Callback<absl::StatusOr<bool>> done) {
  done(server_->CheckAndMutateRow(table, row, predicate, if_true, if_false, /*durable=*/false));
}

void InProcessBigtable::SyncLazyWrites(Callback<absl::Status> done) {
  done(server_->SyncLazyWrites());
}

}  // namespace megastore::storage
