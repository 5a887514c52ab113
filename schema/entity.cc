#include "schema/entity.h"

#include <cstring>
#include <limits>

#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/lexer.h"

namespace megastore::schema {
namespace {

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

const char* KindName(const Value& v) {
  static constexpr const char* kNames[] = {
      "an integer", "an unsigned integer", "a bool", "a double", "a string", "a message"};
  return kNames[v.index()];
}

// The value kind (Value's alternative index) a field type takes.
size_t KindOf(FieldType type) {
  switch (type) {
    case INT32:
    case INT64:
      return 0;
    case UINT64:
      return 1;
    case BOOL:
      return 2;
    case DOUBLE:
      return 3;
    case STRING:
    case BYTES:
      return 4;
    default:
      return 5;
  }
}

void EncodeValue(const SchemaIndex& schema, const FieldDescriptor& field, const Value& v,
                 std::string* out);

void EncodeMessage(const SchemaIndex& schema, const MessageDescriptor& m, const Entity& e,
                   std::string* out) {
  for (const auto& [number, values] : e.fields) {
    const FieldDescriptor* f = FindFieldByNumber(m.fields(), number);
    if (f == nullptr) continue;  // Validate refuses these
    PutVarint32(out, static_cast<uint32_t>(number));
    PutVarint64(out, values.size());
    for (const Value& v : values) {
      std::string one;
      EncodeValue(schema, *f, v, &one);
      PutLengthPrefixed(out, one);
    }
  }
}

void EncodeValue(const SchemaIndex& schema, const FieldDescriptor& field, const Value& v,
                 std::string* out) {
  switch (v.index()) {
    case 0:
      PutVarint64(out, ZigZag(std::get<int64_t>(v)));
      break;
    case 1:
      PutVarint64(out, std::get<uint64_t>(v));
      break;
    case 2:
      out->push_back(std::get<bool>(v) ? '\x01' : '\x00');
      break;
    case 3: {
      uint64_t bits;
      const double d = std::get<double>(v);
      std::memcpy(&bits, &d, sizeof bits);
      PutFixed64(out, bits);
      break;
    }
    case 4:
      out->append(std::get<std::string>(v));
      break;
    case 5: {
      const MessageDescriptor* m = schema.FindMessage(field.message_type());
      if (m != nullptr) EncodeMessage(schema, *m, *std::get<std::shared_ptr<const Entity>>(v), out);
      break;
    }
  }
}

absl::StatusOr<Value> DecodeValue(const SchemaIndex& schema, const FieldDescriptor& field,
                                  std::string_view in, int depth);

absl::StatusOr<Entity> DecodeMessage(const SchemaIndex& schema, const MessageDescriptor& m,
                                     std::string_view in, int depth) {
  if (depth > 64) return absl::DataLossError("message values nest more than 64 deep");
  Entity e;
  while (!in.empty()) {
    uint32_t number;
    uint64_t count;
    if (!ConsumeVarint32(&in, &number) || !ConsumeVarint64(&in, &count)) {
      return absl::DataLossError(StrCat("malformed field header in a ", m.name(), " value"));
    }
    const FieldDescriptor* f = FindFieldByNumber(m.fields(), static_cast<int32_t>(number));
    if (f == nullptr) return absl::DataLossError(StrCat(m.name(), " has no field number ", number));
    if (count > in.size())
      return absl::DataLossError(
          StrCat("field ", m.name(), ".", f->name(), " claims ", count, " values"));
    std::vector<Value>& values = e.fields[static_cast<int32_t>(number)];
    for (uint64_t i = 0; i < count; ++i) {
      std::string_view one;
      if (!ConsumeLengthPrefixed(&in, &one)) {
        return absl::DataLossError(StrCat("truncated value of ", m.name(), ".", f->name()));
      }
      MS_ASSIGN_OR_RETURN(Value v, DecodeValue(schema, *f, one, depth + 1));
      values.push_back(std::move(v));
    }
  }
  return e;
}

absl::StatusOr<Value> DecodeValue(const SchemaIndex& schema, const FieldDescriptor& field,
                                  std::string_view in, int depth) {
  auto bad = [&] {
    return absl::DataLossError(
        StrCat("malformed ", FieldType_Name(field.type()), " value of ", field.name()));
  };
  switch (field.type()) {
    case INT32:
    case INT64: {
      uint64_t u;
      if (!ConsumeVarint64(&in, &u) || !in.empty()) return bad();
      return Value(UnZigZag(u));
    }
    case UINT64: {
      uint64_t u;
      if (!ConsumeVarint64(&in, &u) || !in.empty()) return bad();
      return Value(u);
    }
    case BOOL:
      if (in.size() != 1 || static_cast<uint8_t>(in[0]) > 1) return bad();
      return Value(in[0] == 1);
    case DOUBLE: {
      uint64_t bits;
      if (!ConsumeFixed64(&in, &bits) || !in.empty()) return bad();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return Value(d);
    }
    case STRING:
    case BYTES:
      return Value(std::string(in));
    case MESSAGE: {
      const MessageDescriptor* m = schema.FindMessage(field.message_type());
      if (m == nullptr)
        return absl::FailedPreconditionError(StrCat("unknown message type ", field.message_type()));
      MS_ASSIGN_OR_RETURN(Entity e, DecodeMessage(schema, *m, in, depth));
      return Value(std::make_shared<const Entity>(std::move(e)));
    }
    default:
      return bad();
  }
}

}  // namespace

const std::vector<Value>* Entity::Find(int32_t number) const {
  auto it = fields.find(number);
  return it == fields.end() ? nullptr : &it->second;
}

bool Equal(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a))
    return std::memcmp(x, &std::get<double>(b), sizeof(double)) == 0;
  if (const auto* x = std::get_if<std::shared_ptr<const Entity>>(&a)) {
    return Equal(**x, *std::get<std::shared_ptr<const Entity>>(b));
  }
  return a == b;
}

bool Equal(const Entity& a, const Entity& b) {
  if (a.fields.size() != b.fields.size()) return false;
  for (auto i = a.fields.begin(), j = b.fields.begin(); i != a.fields.end(); ++i, ++j) {
    if (i->first != j->first || i->second.size() != j->second.size()) return false;
    for (size_t k = 0; k < i->second.size(); ++k) {
      if (!Equal(i->second[k], j->second[k])) return false;
    }
  }
  return true;
}

SchemaIndex::SchemaIndex(const SchemaDescriptor& schema) : schema_(schema) {}

const TableDescriptor* SchemaIndex::FindTable(std::string_view name) const {
  for (const TableDescriptor& t : schema_.tables()) {
    if (EqualsIgnoreCase(t.name(), name)) return &t;
  }
  return nullptr;
}

const MessageDescriptor* SchemaIndex::FindMessage(std::string_view name) const {
  for (const MessageDescriptor& m : schema_.messages()) {
    if (EqualsIgnoreCase(m.name(), name)) return &m;
  }
  return nullptr;
}

const IndexDescriptor* SchemaIndex::FindIndex(std::string_view name) const {
  for (const IndexDescriptor& x : schema_.indexes()) {
    if (EqualsIgnoreCase(x.name(), name)) return &x;
  }
  return nullptr;
}

const FieldDescriptor* FindField(const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
                                 std::string_view name) {
  for (const FieldDescriptor& f : fields) {
    if (EqualsIgnoreCase(f.name(), name)) return &f;
  }
  return nullptr;
}

const FieldDescriptor* FindFieldByNumber(
    const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields, int32_t number) {
  for (const FieldDescriptor& f : fields) {
    if (f.number() == number) return &f;
  }
  return nullptr;
}

absl::Status Validate(const SchemaIndex& schema,
                      const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
                      const Entity& entity, std::string_view path) {
  for (const auto& [number, values] : entity.fields) {
    const FieldDescriptor* f = FindFieldByNumber(fields, number);
    if (f == nullptr)
      return absl::InvalidArgumentError(StrCat(path, " has no field number ", number));
    const std::string name = StrCat(path, ".", f->name());
    if (f->label() != REPEATED && values.size() > 1) {
      return absl::InvalidArgumentError(
          StrCat(name, " is not repeated but has ", values.size(), " values"));
    }
    if (f->label() != REPEATED && values.empty()) {
      return absl::InvalidArgumentError(
          StrCat(name, " has an entry without a value (leave it out instead)"));
    }
    for (const Value& v : values) {
      if (v.index() != KindOf(f->type())) {
        return absl::InvalidArgumentError(
            StrCat(name, " is ", FieldType_Name(f->type()), " but holds ", KindName(v)));
      }
      if (f->type() == INT32) {
        const int64_t x = std::get<int64_t>(v);
        if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
          return absl::InvalidArgumentError(StrCat(name, " is int32 but holds ", x));
        }
      }
      if (f->type() == MESSAGE) {
        const auto& sub = std::get<std::shared_ptr<const Entity>>(v);
        const MessageDescriptor* m = schema.FindMessage(f->message_type());
        if (sub == nullptr)
          return absl::InvalidArgumentError(StrCat(name, " holds a null message"));
        if (m == nullptr)
          return absl::FailedPreconditionError(StrCat("unknown message type ", f->message_type()));
        MS_RETURN_IF_ERROR(Validate(schema, m->fields(), *sub, name));
      }
    }
  }
  for (const FieldDescriptor& f : fields) {
    if (f.label() == REQUIRED && entity.Find(f.number()) == nullptr) {
      return absl::InvalidArgumentError(StrCat(path, ".", f.name(), " is required but not set"));
    }
  }
  return absl::OkStatus();
}

std::string EncodeField(const SchemaIndex& schema, const FieldDescriptor& field,
                        const std::vector<Value>& values) {
  std::string out;
  if (field.label() != REPEATED) {
    if (!values.empty()) EncodeValue(schema, field, values[0], &out);
    return out;
  }
  for (const Value& v : values) {
    std::string one;
    EncodeValue(schema, field, v, &one);
    PutLengthPrefixed(&out, one);
  }
  return out;
}

absl::StatusOr<std::vector<Value>> DecodeField(const SchemaIndex& schema,
                                               const FieldDescriptor& field,
                                               std::string_view bytes) {
  std::vector<Value> out;
  if (field.label() != REPEATED) {
    MS_ASSIGN_OR_RETURN(Value v, DecodeValue(schema, field, bytes, 0));
    out.push_back(std::move(v));
    return out;
  }
  while (!bytes.empty()) {
    std::string_view one;
    if (!ConsumeLengthPrefixed(&bytes, &one)) {
      return absl::DataLossError(StrCat("truncated element of repeated field ", field.name()));
    }
    MS_ASSIGN_OR_RETURN(Value v, DecodeValue(schema, field, one, 0));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace megastore::schema
