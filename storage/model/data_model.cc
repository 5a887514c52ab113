#include "storage/model/data_model.h"

#include "base/coding.h"
#include "base/strings.h"

namespace megastore::storage {

Mutation Mutation::SetCell(std::string family, std::string qualifier, std::string value,
                           int64_t timestamp) {
  Mutation m;
  m.type = Type::kSetCell;
  m.family = std::move(family);
  m.qualifier = std::move(qualifier);
  m.value = std::move(value);
  m.timestamp = timestamp;
  return m;
}

Mutation Mutation::DeleteCells(std::string family, std::string qualifier, int64_t start_ts,
                               int64_t end_ts) {
  Mutation m;
  m.type = Type::kDeleteCells;
  m.family = std::move(family);
  m.qualifier = std::move(qualifier);
  m.start_ts = start_ts;
  m.end_ts = end_ts;
  return m;
}

Mutation Mutation::DeleteFamily(std::string family) {
  Mutation m;
  m.type = Type::kDeleteFamily;
  m.family = std::move(family);
  return m;
}

Mutation Mutation::DeleteRow() {
  Mutation m;
  m.type = Type::kDeleteRow;
  return m;
}

bool ByteRange::Contains(std::string_view s) const {
  if (s < start) return false;
  if (!end) return true;
  return s < *end || (end_inclusive && s == *end);
}

absl::Status ByteRange::Validate(std::string_view what) const {
  if (!end) return absl::OkStatus();
  if (*end < start || (*end == start && !end_inclusive)) {
    return absl::InvalidArgumentError(
        StrCat(what, " is empty or inverted: start \"", EscapeBytes(start), "\", end \"",
               EscapeBytes(*end), "\"", end_inclusive ? " (inclusive)" : " (exclusive)"));
  }
  return absl::OkStatus();
}

RowRange RowRange::Prefix(std::string_view prefix) {
  return RowRange{std::string(prefix), PrefixSuccessor(prefix)};
}

bool RowFilter::PassesAll() const {
  return families.empty() && qualifier_match == QualifierMatch::kAll && timestamp_start == 0 &&
         timestamp_end == 0 && !value_range && cells_per_column == 0 && !strip_value;
}

}  // namespace megastore::storage
