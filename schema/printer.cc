#include "schema/printer.h"

#include <cctype>

#include "schema/lexer.h"

namespace megastore::schema {
namespace {

std::string N(const std::string& name) {
  bool plain =
      !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) plain &= std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  return plain && !IsKeyword(name) ? name : "`" + name + "`";
}

std::string Label(Label l) {
  switch (l) {
    case REQUIRED:
      return "required";
    case OPTIONAL:
      return "optional";
    default:
      return "repeated";
  }
}

void Body(std::string* out, const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
          const google::protobuf::RepeatedField<int32_t>& reserved) {
  // Numbers are written out unless they are exactly the defaults.
  bool defaults = reserved.empty();
  for (int i = 0; i < fields.size(); ++i) defaults &= fields[i].number() == i + 1;
  *out += " {\n";
  if (!reserved.empty()) {
    *out += "  RESERVED ";
    for (int i = 0; i < reserved.size(); ++i) *out += (i ? ", " : "") + std::to_string(reserved[i]);
    *out += ";\n";
  }
  for (const FieldDescriptor& f : fields) {
    const std::string type = f.type() == MESSAGE ? N(f.message_type()) : DdlType(f);
    *out += "  " + Label(f.label()) + " " + type + " " + N(f.name());
    if (!defaults) *out += " = " + std::to_string(f.number());
    *out += ";\n";
  }
  *out += "}";
}

std::string KeyParts(const google::protobuf::RepeatedPtrField<KeyPart>& parts) {
  std::string out = "(";
  for (int i = 0; i < parts.size(); ++i) {
    out += (i ? ", " : "") + N(parts[i].field());
    if (parts[i].descending()) out += " DESC";
    if (parts[i].scatter()) out += " SCATTER";
  }
  return out + ")";
}

std::string Names(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::string out = "(";
  for (int i = 0; i < names.size(); ++i) out += (i ? ", " : "") + N(names[i]);
  return out + ")";
}

}  // namespace

std::string DdlType(const FieldDescriptor& f) {
  switch (f.type()) {
    case INT32:
      return "int32";
    case INT64:
      return "int64";
    case UINT64:
      return "uint64";
    case BOOL:
      return "bool";
    case DOUBLE:
      return "double";
    case STRING:
      return "string";
    case BYTES:
      return "bytes";
    default:
      return f.message_type();
  }
}

std::string PrintSchema(const SchemaDescriptor& schema) {
  std::string out = "CREATE SCHEMA " + N(schema.name()) + ";\n";
  for (const MessageDescriptor& m : schema.messages()) {
    out += "\nCREATE MESSAGE " + N(m.name());
    Body(&out, m.fields(), m.reserved_numbers());
    out += ";\n";
  }
  for (const TableDescriptor& t : schema.tables()) {
    out += "\nCREATE TABLE " + N(t.name());
    Body(&out, t.fields(), t.reserved_numbers());
    out += " PRIMARY KEY" + KeyParts(t.primary_key());
    if (t.entity_group_root()) {
      out += ",\n  ENTITY GROUP ROOT";
      if (t.encrypted()) out += ",\n  ENCRYPTED";
    } else {
      if (!t.in_table().empty()) out += ",\n  IN TABLE " + N(t.in_table());
      out += ",\n  ENTITY GROUP KEY" + Names(t.entity_group_key()) + " REFERENCES " +
             N(t.root_table());
    }
    out += ";\n";
  }
  if (schema.indexes_size() > 0) out += "\n";
  for (const IndexDescriptor& x : schema.indexes()) {
    out += std::string("CREATE ") + (x.scope() == IndexDescriptor::GLOBAL ? "GLOBAL" : "LOCAL") +
           " INDEX " + N(x.name()) + " ON " + N(x.table()) + KeyParts(x.columns());
    if (x.storing_size() > 0) out += " STORING " + Names(x.storing());
    if (!x.inline_in().empty()) out += " INLINE IN " + N(x.inline_in());
    out += ";\n";
  }
  return out;
}

}  // namespace megastore::schema
