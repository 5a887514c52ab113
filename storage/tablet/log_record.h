// The payload a tablet writes to the shared commit log for one row mutation:
// the row, the mutation time and the mutations, with every server-assigned
// timestamp already resolved, so replaying it reproduces the same cells.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/model/data_model.h"

namespace megastore::storage {

struct LogRecord {
  std::string row;
  int64_t timestamp = 0;  // the mutation time (never kServerTimestamp)
  std::vector<Mutation> mutations;
};

// Appends the encoding of a record to `dst`. Mutations with kServerTimestamp
// are written with `timestamp`.
void EncodeLogRecord(std::string* dst, std::string_view row, int64_t timestamp,
                     absl::Span<const Mutation> mutations);

// DataLoss naming the problem if `payload` is not a well-formed record.
absl::StatusOr<LogRecord> DecodeLogRecord(std::string_view payload);

}  // namespace megastore::storage
