// Schema evolution between compiled versions: may a database whose data was
// written under `previous` be served with `next`?
//
// Allowed: new tables, messages and indexes; new optional or repeated
// fields; dropping optional or repeated fields (their numbers must stay
// unused); dropping indexes. Refused: removing a table or message, changing
// a table's primary key or entity group, renaming a field or changing its
// type or label, reusing a dropped field's number, a new required field,
// changing an index in place (create one under a new name instead).
#pragma once

#include <string>
#include <vector>

#include "schema/schema.pb.h"

namespace megastore::schema {

// One message per incompatibility; empty if `next` may replace `previous`.
std::vector<std::string> CheckCompatible(const SchemaDescriptor& previous,
                                         const SchemaDescriptor& next);

}  // namespace megastore::schema
