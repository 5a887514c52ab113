// The schema language's grammar (docs/schema.md has it in full):
//
//   file      := statement*
//   statement := CREATE SCHEMA name [;]
//              | CREATE MESSAGE name { field* } [;]
//              | CREATE TABLE name { field* } clause (, clause)* ;
//              | CREATE (LOCAL | GLOBAL) INDEX name ON table ( keypart, ... )
//                  [STORING ( name, ... )] [INLINE [IN table]] ;
//              | ALTER TABLE table ADD field
//              | ALTER TABLE table DROP name ;
//              | DROP INDEX name ;
//   field     := (required | optional | repeated) type name ;
//   type      := int32 | int64 | uint64 | bool | double | string | bytes | name
//   clause    := PRIMARY KEY ( keypart, ... ) | ENTITY GROUP ROOT | IN TABLE table
//              | ENTITY GROUP KEY ( name, ... ) REFERENCES table
//   keypart   := name [ASC | DESC] [SCATTER]
//
// Keywords are case-insensitive and reserved; quote a name that is a keyword
// with backquotes. Every name is at most kMaxNameBytes of printable ASCII;
// a schema's name is a plain identifier (it names files and a namespace).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "schema/ast.h"

namespace megastore::schema {

inline constexpr size_t kMaxNameBytes = 128;

struct ParseResult {
  std::vector<Statement> statements;
  // Syntax errors, in source order. Parsing recovers at the next field or
  // statement, so one pass reports every error it can.
  std::vector<Diagnostic> errors;
};

ParseResult Parse(std::string_view source);

}  // namespace megastore::schema
