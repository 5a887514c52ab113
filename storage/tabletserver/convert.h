// Conversions between the tablet engine's types (data_model.h) and their
// wire forms (tablet_service.proto). FromProto functions reject values the
// engine has no meaning for (unknown enum numbers) with InvalidArgument.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "storage/model/data_model.h"
#include "storage/tabletserver/tablet_service.pb.h"

namespace megastore::storage {

void ToProto(const Mutation& m, MutationProto* p);
absl::StatusOr<Mutation> FromProto(const MutationProto& p);
absl::StatusOr<std::vector<Mutation>> FromProto(
    const google::protobuf::RepeatedPtrField<MutationProto>& ps);

void ToProto(const RowFilter& f, RowFilterProto* p);
absl::StatusOr<RowFilter> FromProto(const RowFilterProto& p);

void ToProto(const Row& r, RowProto* p);
Row FromProto(const RowProto& p);

void ToProto(const ReadModifyWriteRule& r, ReadModifyWriteRowRequest::Rule* p);
absl::StatusOr<ReadModifyWriteRule> FromProto(const ReadModifyWriteRowRequest::Rule& p);

void ToProto(const absl::Status& s, StatusProto* p);
absl::Status FromProto(const StatusProto& p);

// The request reading `rows` of `table` with `options`.
ReadRowsRequest ToReadRowsRequest(const std::string& table, const RowSet& rows,
                                  const ReadOptions& options);

}  // namespace megastore::storage
