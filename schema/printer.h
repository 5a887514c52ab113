// Prints a schema descriptor as DDL that compiles back to the same
// descriptor (names quoted where needed, field numbers written out when they
// are not simply 1, 2, 3, ...).
#pragma once

#include <string>

#include "schema/schema.pb.h"

namespace megastore::schema {

std::string PrintSchema(const SchemaDescriptor& schema);

// A field's type as DDL spells it: int32 ... bytes, or its message's name.
std::string DdlType(const FieldDescriptor& field);

}  // namespace megastore::schema
