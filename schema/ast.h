// The syntax tree of a schema file, with source positions for diagnostics.
// parser.h builds it; compiler.h checks it and turns it into a descriptor.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "schema/lexer.h"
#include "schema/schema.pb.h"

namespace megastore::schema {

struct Name {
  std::string text;
  SourcePos pos;
};

struct FieldDecl {
  Label label = LABEL_UNSPECIFIED;
  FieldType type = FIELD_TYPE_UNSPECIFIED;
  Name message_type;  // type == MESSAGE
  Name name;
  SourcePos pos;   // of the label
  int number = 0;  // "= N" after the name; 0 when not given
  SourcePos number_pos;
};

// RESERVED n, ...; inside a body: field numbers that must not be used.
struct ReservedDecl {
  int number = 0;
  SourcePos pos;
};

struct KeyPartDecl {
  Name field;
  bool descending = false;
  bool scatter = false;
};

struct SchemaDecl {
  Name name;
};

struct MessageDecl {
  Name name;
  std::vector<FieldDecl> fields;
  std::vector<ReservedDecl> reserved;
};

struct TableDecl {
  Name name;
  std::vector<FieldDecl> fields;
  std::vector<ReservedDecl> reserved;
  std::optional<SourcePos> primary_key_pos;
  std::vector<KeyPartDecl> primary_key;
  std::optional<SourcePos> root_pos;       // ENTITY GROUP ROOT
  std::optional<SourcePos> encrypted_pos;  // ENCRYPTED
  std::optional<Name> in_table;
  std::optional<SourcePos> group_key_pos;  // ENTITY GROUP KEY(...) REFERENCES T
  std::vector<Name> group_key;
  Name references;
};

struct IndexDecl {
  SourcePos pos;
  IndexDescriptor::Scope scope = IndexDescriptor::SCOPE_UNSPECIFIED;
  Name name;
  Name table;
  std::vector<KeyPartDecl> columns;
  std::vector<Name> storing;
  std::optional<SourcePos> inline_pos;
  std::optional<Name> inline_in;
};

struct AlterDecl {
  enum class Kind { kAddField, kDropField, kDropIndex };
  Kind kind = Kind::kAddField;
  SourcePos pos;
  Name table;       // kAddField, kDropField
  FieldDecl field;  // kAddField
  Name target;      // kDropField: the field; kDropIndex: the index
};

using Statement = std::variant<SchemaDecl, MessageDecl, TableDecl, IndexDecl, AlterDecl>;

struct Diagnostic {
  SourcePos pos;
  std::string message;
  std::string hint;  // may be empty
};

}  // namespace megastore::schema
