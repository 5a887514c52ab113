#include "storage/tabletserver/remote_bigtable.h"

#include "base/strings.h"
#include "storage/tabletserver/convert.h"
#include "storage/tabletserver/tablet_service.pb.h"

namespace megastore::storage {

namespace {

rpc::ClientOptions ClientFor(const std::string& address) {
  rpc::ClientOptions o;
  o.server = address;
  return o;
}

// rpc::RpcClient's callbacks are copyable; ours are not: they wait here.
template <typename T>
std::shared_ptr<BigtableClient::Callback<T>> Park(BigtableClient::Callback<T> done) {
  return std::make_shared<BigtableClient::Callback<T>>(std::move(done));
}

}  // namespace

RemoteBigtable::RemoteBigtable(std::string address, absl::Duration timeout)
    : address_(std::move(address)), timeout_(timeout), rpc_(ClientFor(address_)) {}

RemoteBigtable::~RemoteBigtable() = default;

void RemoteBigtable::Read(std::string table, RowSet rows, const ReadOptions& options,
                          Callback<absl::StatusOr<std::vector<Row>>> done) {
  ReadRowsRequest r = ToReadRowsRequest(table, rows, options);
  // The rows arrive in chunks, then the final status.
  struct Reading {
    std::vector<Row> rows;
    absl::Status parse_error;
  };
  auto reading = std::make_shared<Reading>();
  auto parked = Park(std::move(done));
  rpc_.CallAsync(
      "tablet.ReadRows", r.SerializeAsString(), timeout_,
      [reading, parked](absl::StatusOr<std::string> final) {
        if (!reading->parse_error.ok()) return (*parked)(reading->parse_error);
        if (!final.ok()) return (*parked)(final.status());
        (*parked)(std::move(reading->rows));
      },
      [reading, address = address_](std::string_view message) {
        ReadRowsResponse chunk;
        if (!chunk.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
          reading->parse_error =
              absl::InternalError(StrCat("malformed tablet.ReadRows response from ", address));
          return false;
        }
        for (const RowProto& p : chunk.rows()) reading->rows.push_back(FromProto(p));
        return true;
      });
}

void RemoteBigtable::ReadRow(std::string table, std::string row, ReadOptions options,
                             Callback<absl::StatusOr<std::optional<Row>>> done) {
  RowSet rows;
  rows.keys.push_back(std::move(row));
  Read(std::move(table), std::move(rows), options,
       [done = std::move(done)](absl::StatusOr<std::vector<Row>> read) mutable {
         if (!read.ok()) return done(read.status());
         if (read->empty()) return done(std::optional<Row>());
         done(std::optional<Row>(std::move(read->front())));
       });
}

void RemoteBigtable::ReadRows(std::string table, RowRange range, ReadOptions options,
                              Callback<absl::StatusOr<std::vector<Row>>> done) {
  RowSet rows;
  rows.ranges.push_back(std::move(range));
  Read(std::move(table), std::move(rows), options, std::move(done));
}

void RemoteBigtable::MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                               int64_t timestamp, Callback<absl::Status> done) {
  MutateRowRequest r;
  r.set_force(true);  // Megastore's own writes to its replicated tables
  r.set_table(std::move(table));
  r.set_row(std::move(row));
  for (const Mutation& m : mutations) ToProto(m, r.add_mutations());
  if (timestamp != kServerTimestamp) r.set_timestamp(timestamp);
  auto parked = Park(std::move(done));
  rpc_.CallAsync("tablet.MutateRow", r.SerializeAsString(), timeout_,
                 [parked](absl::StatusOr<std::string> reply) { (*parked)(reply.status()); });
}

void RemoteBigtable::CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                                       std::vector<Mutation> if_true,
                                       std::vector<Mutation> if_false,
                                       Callback<absl::StatusOr<bool>> done) {
  CheckAndMutateRowRequest r;
  r.set_force(true);
  r.set_table(std::move(table));
  r.set_row(std::move(row));
  ToProto(predicate, r.mutable_predicate());
  for (const Mutation& m : if_true) ToProto(m, r.add_true_mutations());
  for (const Mutation& m : if_false) ToProto(m, r.add_false_mutations());
  auto parked = Park(std::move(done));
  rpc_.CallAsync("tablet.CheckAndMutateRow", r.SerializeAsString(), timeout_,
                 [parked, address = address_](absl::StatusOr<std::string> reply) {
                   if (!reply.ok()) return (*parked)(reply.status());
                   CheckAndMutateRowResponse resp;
                   if (!resp.ParseFromString(*reply))
                     return (*parked)(absl::InternalError(
                         StrCat("malformed tablet.CheckAndMutateRow response from ", address)));
                   (*parked)(resp.predicate_matched());
                 });
}

}  // namespace megastore::storage
