#include "schema/key_codec.h"

#include <limits>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/lexer.h"

namespace megastore::schema {
namespace {

absl::Status Mismatch(const KeyColumn& column, const KeyValue& value) {
  static constexpr const char* kKinds[] = {"an integer", "an unsigned integer", "a bool",
                                           "a double", "a string"};
  return absl::InvalidArgumentError(StrCat("key value is ", kKinds[value.index()],
                                           " but the column is ", FieldType_Name(column.type)));
}

// The ascending encoding of `value` as `column.type`.
absl::Status AppendAscending(std::string* dst, const KeyColumn& column, const KeyValue& value) {
  switch (column.type) {
    case INT32:
    case INT64: {
      const int64_t* v = std::get_if<int64_t>(&value);
      if (v == nullptr) return Mismatch(column, value);
      if (column.type == INT32 &&
          (*v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max())) {
        return absl::InvalidArgumentError(
            StrCat("key value ", *v, " is out of range for an int32 column"));
      }
      AppendOrderedInt64(dst, *v);
      return absl::OkStatus();
    }
    case UINT64: {
      const uint64_t* v = std::get_if<uint64_t>(&value);
      if (v == nullptr) return Mismatch(column, value);
      AppendOrderedUint64(dst, *v);
      return absl::OkStatus();
    }
    case BOOL: {
      const bool* v = std::get_if<bool>(&value);
      if (v == nullptr) return Mismatch(column, value);
      dst->push_back(*v ? '\x01' : '\x00');
      return absl::OkStatus();
    }
    case DOUBLE: {
      const double* v = std::get_if<double>(&value);
      if (v == nullptr) return Mismatch(column, value);
      AppendOrderedDouble(dst, *v);
      return absl::OkStatus();
    }
    case STRING:
    case BYTES: {
      const std::string* v = std::get_if<std::string>(&value);
      if (v == nullptr) return Mismatch(column, value);
      AppendOrderedBytes(dst, *v);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          StrCat("a ", FieldType_Name(column.type), " column cannot be part of a key"));
  }
}

}  // namespace

absl::Status AppendKeyPart(std::string* dst, const KeyColumn& column, const KeyValue& value) {
  std::string part;
  MS_RETURN_IF_ERROR(AppendAscending(&part, column, value));
  if (column.scatter) {
    const uint32_t h = crc32c::Value(part);
    std::string prefix{static_cast<char>(h >> 24), static_cast<char>(h >> 16)};
    part.insert(0, prefix);
  }
  if (column.descending) {
    for (char& c : part) c = static_cast<char>(~c);
  }
  dst->append(part);
  return absl::OkStatus();
}

absl::StatusOr<KeyValue> ConsumeKeyPart(std::string_view* in, const KeyColumn& column) {
  const SortOrder order = column.descending ? SortOrder::kDescending : SortOrder::kAscending;
  const std::string_view start = *in;
  if (column.scatter) {
    if (in->size() < 2) return absl::DataLossError("key ends inside a scatter prefix");
    in->remove_prefix(2);
  }
  KeyValue out;
  bool ok = false;
  switch (column.type) {
    case INT32:
    case INT64: {
      int64_t v;
      ok = ConsumeOrderedInt64(in, &v, order);
      if (ok && column.type == INT32 &&
          (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())) {
        return absl::DataLossError(StrCat("key holds ", v, ", out of range for an int32 column"));
      }
      out = v;
      break;
    }
    case UINT64: {
      uint64_t v;
      ok = ConsumeOrderedUint64(in, &v, order);
      out = v;
      break;
    }
    case BOOL: {
      if (in->empty()) break;
      const uint8_t b = static_cast<uint8_t>(column.descending ? ~(*in)[0] : (*in)[0]);
      if (b > 1) return absl::DataLossError(StrCat("key holds bool byte ", static_cast<int>(b)));
      in->remove_prefix(1);
      out = b == 1;
      ok = true;
      break;
    }
    case DOUBLE: {
      double v;
      ok = ConsumeOrderedDouble(in, &v, order);
      out = v;
      break;
    }
    case STRING:
    case BYTES: {
      std::string v;
      ok = ConsumeOrderedBytes(in, &v, order);
      out = std::move(v);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          StrCat("a ", FieldType_Name(column.type), " column cannot be part of a key"));
  }
  if (!ok)
    return absl::DataLossError(StrCat("malformed ", FieldType_Name(column.type), " key part"));
  if (column.scatter) {
    // The prefix must be the one this value gets; otherwise the key is damaged.
    std::string again;
    MS_RETURN_IF_ERROR(AppendKeyPart(&again, column, out));
    if (again != start.substr(0, start.size() - in->size())) {
      return absl::DataLossError("scatter prefix does not match the key part's value");
    }
  }
  return out;
}

absl::StatusOr<std::string> EncodeKey(const std::vector<KeyColumn>& columns,
                                      const std::vector<KeyValue>& values) {
  if (values.size() > columns.size()) {
    return absl::InvalidArgumentError(
        StrCat("key has ", values.size(), " values for ", columns.size(), " columns"));
  }
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    absl::Status s = AppendKeyPart(&out, columns[i], values[i]);
    if (!s.ok()) return absl::InvalidArgumentError(StrCat("key column ", i, ": ", s.message()));
  }
  return out;
}

absl::StatusOr<std::vector<KeyValue>> DecodeKey(const std::vector<KeyColumn>& columns,
                                                std::string_view key) {
  std::vector<KeyValue> out;
  for (size_t i = 0; i < columns.size(); ++i) {
    absl::StatusOr<KeyValue> v = ConsumeKeyPart(&key, columns[i]);
    if (!v.ok())
      return absl::Status(v.status().code(), StrCat("key column ", i, ": ", v.status().message()));
    out.push_back(std::move(*v));
  }
  if (!key.empty())
    return absl::DataLossError(StrCat("key has ", key.size(), " bytes after its last column"));
  return out;
}

absl::StatusOr<std::vector<KeyColumn>> PrimaryKeyColumns(const TableDescriptor& table) {
  std::vector<KeyColumn> out;
  for (const KeyPart& p : table.primary_key()) {
    const FieldDescriptor* field = nullptr;
    for (const FieldDescriptor& f : table.fields()) {
      if (EqualsIgnoreCase(f.name(), p.field())) field = &f;
    }
    if (field == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("table ", table.name(), " has key column ", p.field(), " but no such field"));
    }
    out.push_back(KeyColumn{field->type(), p.descending(), p.scatter()});
  }
  return out;
}

}  // namespace megastore::schema
