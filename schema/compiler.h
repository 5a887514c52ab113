// Compiles a schema file: parses it, checks it, and produces its descriptor.
//
// Every error in the file is reported (syntax errors first, then semantic
// ones), each with its position and, where one helps, a hint. Names of
// schemas, messages, tables, fields and indexes are case-insensitive: they
// are looked up and compared for duplicates ignoring case, and keep the
// spelling of their declaration.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schema/ast.h"
#include "schema/schema.pb.h"

namespace megastore::schema {

struct CompileResult {
  SchemaDescriptor descriptor;  // meaningful only if ok()
  std::vector<Diagnostic> errors;
  bool ok() const { return errors.empty(); }
};

CompileResult CompileSchema(std::string_view source);

// "FILE:LINE:COL: error: MESSAGE", then "  hint: HINT" on its own line if
// there is one.
std::string FormatDiagnostic(std::string_view file, const Diagnostic& d);

}  // namespace megastore::schema
