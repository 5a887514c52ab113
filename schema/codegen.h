// Generates typed C++ classes for a compiled schema (what `msc --out`
// writes as NAME.schema.h and NAME.schema.cc; docs/schema.md shows the API).
#pragma once

#include <string>
#include <vector>

#include "schema/schema.pb.h"

namespace megastore::schema {

struct GeneratedCode {
  std::string header_name;  // e.g. "PhotoApp.schema.h"
  std::string header;
  std::string source_name;  // e.g. "PhotoApp.schema.cc"
  std::string source;
};

// `include_prefix` is put before the header's name in the source's
// #include (e.g. "gen/" for #include "gen/PhotoApp.schema.h").
GeneratedCode GenerateCpp(const SchemaDescriptor& schema, const std::string& include_prefix = "");

// Two fields of one table or message whose generated C++ names collide
// (e.g. fields `x` and `has_x`: both give has_x()).
struct NameClash {
  std::string owner;  // table or message
  std::string field;
  std::string other;  // the field declared first
  std::string name;   // the C++ name both would generate
};
std::vector<NameClash> FindNameClashes(const SchemaDescriptor& schema);

// The C++ name used for a schema name or field name: invalid characters
// become '_', and names that are C++ keywords or clash with generated
// members get a trailing '_'.
std::string CppName(const std::string& name);

}  // namespace megastore::schema
