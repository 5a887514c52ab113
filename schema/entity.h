// Entities in memory, independent of generated code: the values of a table
// row (or of a message-typed field) by field number, checked against the
// schema, and the byte format each field's value is stored in.
//
// Stored format of one field (one Bigtable cell):
//   non-repeated  the value's encoding
//   repeated      each element as varint length + encoding (no cell if empty)
// Encodings: int32/int64 zigzag varint; uint64 varint; bool one byte 0/1;
// double its 8 IEEE-754 bytes, little-endian (exact: -0.0 and NaN payloads
// survive); string/bytes the bytes; message: for each present field in
// number order, varint number, varint count, then count x (varint length +
// encoding).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "schema/schema.pb.h"

namespace megastore::schema {

struct Entity;

// int64_t for int32 and int64, uint64_t, bool, double, std::string for
// string and bytes, Entity for messages.
using Value =
    std::variant<int64_t, uint64_t, bool, double, std::string, std::shared_ptr<const Entity>>;

struct Entity {
  // Field number -> values: one for a set required/optional field, any
  // number for a repeated one; absent fields have no entry.
  std::map<int32_t, std::vector<Value>> fields;

  const std::vector<Value>* Find(int32_t number) const;
};

// Deep equality (doubles compared bit for bit).
bool Equal(const Entity& a, const Entity& b);
bool Equal(const Value& a, const Value& b);

// Looks fields and messages up in a schema descriptor by name (ignoring
// case).
class SchemaIndex {
 public:
  explicit SchemaIndex(const SchemaDescriptor& schema);
  const SchemaDescriptor& schema() const { return schema_; }
  const TableDescriptor* FindTable(std::string_view name) const;
  const MessageDescriptor* FindMessage(std::string_view name) const;
  const IndexDescriptor* FindIndex(std::string_view name) const;

 private:
  SchemaDescriptor schema_;
};

const FieldDescriptor* FindField(const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
                                 std::string_view name);
const FieldDescriptor* FindFieldByNumber(
    const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields, int32_t number);

// InvalidArgument naming the field (as "Table.field.sub") if `entity` does
// not fit `fields`: an unknown field number, a value of the wrong kind, an
// int32 out of range, a missing required field, several values for a
// non-repeated field.
absl::Status Validate(const SchemaIndex& schema,
                      const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
                      const Entity& entity, std::string_view path);

// One field's stored bytes, and back. The values must be valid (Validate).
std::string EncodeField(const SchemaIndex& schema, const FieldDescriptor& field,
                        const std::vector<Value>& values);
absl::StatusOr<std::vector<Value>> DecodeField(const SchemaIndex& schema,
                                               const FieldDescriptor& field,
                                               std::string_view bytes);

}  // namespace megastore::schema
