// Entities and keys as JSON values, driven by the schema (the untyped form
// for tools and the HTTP gateway). Follows protobuf's JSON mapping:
//   int32             a number
//   int64, uint64     a string of decimal digits (a number is accepted too,
//                     if it is an exact integer)
//   bool              true / false
//   double            a number, or "NaN", "Infinity", "-Infinity"
//   string            a string
//   bytes             base64 (standard or web-safe, padding optional)
//   message           an object of its fields by name
//   repeated          an array
// An entity is an object of its fields by name; absent fields are left out.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "schema/entity.h"
#include "schema/key_codec.h"

namespace megastore::schema {

// InvalidArgument naming the field ("Photo.tag[2]") if the object does not
// fit: an unknown field, a value of the wrong kind, an int32 out of range.
// Required fields are not checked here (Validate does, on Put).
absl::StatusOr<Entity> EntityFromJson(const SchemaIndex& schema, const TableDescriptor& table,
                                      const google::protobuf::Struct& json);
google::protobuf::Struct EntityToJson(const SchemaIndex& schema, const TableDescriptor& table,
                                      const Entity& entity);

// A key (or key prefix) given as a JSON array, one value per part of
// `parts` (a table's primary key, an index's columns) of `table`, in order;
// fewer values make a prefix. `what` names it in errors.
absl::StatusOr<std::vector<KeyValue>> KeyFromJson(
    const TableDescriptor& table, const google::protobuf::RepeatedPtrField<KeyPart>& parts,
    const google::protobuf::RepeatedPtrField<google::protobuf::Value>& json, std::string_view what);

}  // namespace megastore::schema
