#include "schema/entity_json.h"

#include <cmath>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "base/strings.h"

namespace megastore::schema {

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr double kMaxExact = 9007199254740992.0;  // 2^53

const char* KindName(const Value& v) {
  switch (v.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue:
      return "a number";
    case Value::kStringValue:
      return "a string";
    case Value::kBoolValue:
      return "a bool";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "an array";
    default:
      return "nothing";
  }
}

absl::Status Wrong(std::string_view path, std::string_view want, const Value& v) {
  return absl::InvalidArgumentError(StrCat(path, ": expected ", want, ", got ", KindName(v)));
}

absl::StatusOr<int64_t> ToInt64(const Value& v, std::string_view path) {
  if (v.kind_case() == Value::kStringValue) {
    int64_t out;
    if (absl::SimpleAtoi(v.string_value(), &out)) return out;
    return absl::InvalidArgumentError(
        StrCat(path, ": \"", v.string_value(), "\" is not an integer"));
  }
  if (v.kind_case() == Value::kNumberValue) {
    const double d = v.number_value();
    if (d == std::floor(d) && std::fabs(d) <= kMaxExact) return static_cast<int64_t>(d);
    return absl::InvalidArgumentError(
        StrCat(path, ": ", d, " is not an exact integer (use a string)"));
  }
  return Wrong(path, "an integer (number or string)", v);
}

absl::StatusOr<uint64_t> ToUint64(const Value& v, std::string_view path) {
  if (v.kind_case() == Value::kStringValue) {
    uint64_t out;
    if (absl::SimpleAtoi(v.string_value(), &out)) return out;
    return absl::InvalidArgumentError(
        StrCat(path, ": \"", v.string_value(), "\" is not an unsigned integer"));
  }
  if (v.kind_case() == Value::kNumberValue) {
    const double d = v.number_value();
    if (d == std::floor(d) && d >= 0 && d <= kMaxExact) return static_cast<uint64_t>(d);
    return absl::InvalidArgumentError(StrCat(path, ": ", d, " is not an exact unsigned integer"));
  }
  return Wrong(path, "an unsigned integer (number or string)", v);
}

absl::StatusOr<double> ToDouble(const Value& v, std::string_view path) {
  if (v.kind_case() == Value::kNumberValue) return v.number_value();
  if (v.kind_case() == Value::kStringValue) {
    const std::string& s = v.string_value();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    double out;
    if (absl::SimpleAtod(s, &out)) return out;
  }
  return Wrong(path, "a number", v);
}

absl::StatusOr<schema::Value> Scalar(const SchemaIndex& schema, const FieldDescriptor& f,
                                     const Value& v, std::string_view path);

absl::StatusOr<Entity> FieldsFromJson(
    const SchemaIndex& schema, const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
    const Struct& json, std::string_view path) {
  Entity e;
  for (const auto& [name, v] : json.fields()) {
    const FieldDescriptor* f = FindField(fields, name);
    const std::string here = StrCat(path, ".", name);
    if (f == nullptr) return absl::InvalidArgumentError(StrCat(here, ": no such field"));
    if (v.kind_case() == Value::kNullValue) continue;  // absent
    std::vector<schema::Value> values;
    if (f->label() == REPEATED) {
      if (v.kind_case() != Value::kListValue) return Wrong(here, "an array", v);
      for (int i = 0; i < v.list_value().values_size(); ++i) {
        absl::StatusOr<schema::Value> x =
            Scalar(schema, *f, v.list_value().values(i), StrCat(here, "[", i, "]"));
        if (!x.ok()) return x.status();
        values.push_back(std::move(*x));
      }
      if (values.empty()) continue;
    } else {
      absl::StatusOr<schema::Value> x = Scalar(schema, *f, v, here);
      if (!x.ok()) return x.status();
      values.push_back(std::move(*x));
    }
    e.fields[f->number()] = std::move(values);
  }
  return e;
}

absl::StatusOr<schema::Value> Scalar(const SchemaIndex& schema, const FieldDescriptor& f,
                                     const Value& v, std::string_view path) {
  switch (f.type()) {
    case INT32: {
      absl::StatusOr<int64_t> x = ToInt64(v, path);
      if (!x.ok()) return x.status();
      if (*x < std::numeric_limits<int32_t>::min() || *x > std::numeric_limits<int32_t>::max())
        return absl::InvalidArgumentError(StrCat(path, ": ", *x, " is out of range for int32"));
      return schema::Value(*x);
    }
    case INT64: {
      absl::StatusOr<int64_t> x = ToInt64(v, path);
      if (!x.ok()) return x.status();
      return schema::Value(*x);
    }
    case UINT64: {
      absl::StatusOr<uint64_t> x = ToUint64(v, path);
      if (!x.ok()) return x.status();
      return schema::Value(*x);
    }
    case BOOL:
      if (v.kind_case() != Value::kBoolValue) return Wrong(path, "true or false", v);
      return schema::Value(v.bool_value());
    case DOUBLE: {
      absl::StatusOr<double> x = ToDouble(v, path);
      if (!x.ok()) return x.status();
      return schema::Value(*x);
    }
    case STRING:
      if (v.kind_case() != Value::kStringValue) return Wrong(path, "a string", v);
      return schema::Value(v.string_value());
    case BYTES: {
      if (v.kind_case() != Value::kStringValue) return Wrong(path, "a base64 string", v);
      std::string out;
      if (!absl::Base64Unescape(v.string_value(), &out) &&
          !absl::WebSafeBase64Unescape(v.string_value(), &out))
        return absl::InvalidArgumentError(StrCat(path, ": not base64"));
      return schema::Value(std::move(out));
    }
    case MESSAGE: {
      if (v.kind_case() != Value::kStructValue) return Wrong(path, "an object", v);
      const MessageDescriptor* m = schema.FindMessage(f.message_type());
      if (m == nullptr)
        return absl::InternalError(StrCat(path, ": unknown message type ", f.message_type()));
      absl::StatusOr<Entity> sub = FieldsFromJson(schema, m->fields(), v.struct_value(), path);
      if (!sub.ok()) return sub.status();
      return schema::Value(std::make_shared<const Entity>(std::move(*sub)));
    }
    default:
      return absl::InternalError(StrCat(path, ": field of unknown type"));
  }
}

Value ScalarToJson(const SchemaIndex& schema, const FieldDescriptor& f, const schema::Value& v);

Struct FieldsToJson(const SchemaIndex& schema,
                    const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields,
                    const Entity& e) {
  Struct out;
  for (const auto& [number, values] : e.fields) {
    const FieldDescriptor* f = FindFieldByNumber(fields, number);
    if (f == nullptr) continue;  // a dropped field's old value
    Value& slot = (*out.mutable_fields())[f->name()];
    if (f->label() == REPEATED) {
      auto* list = slot.mutable_list_value();
      for (const schema::Value& v : values) *list->add_values() = ScalarToJson(schema, *f, v);
    } else if (!values.empty()) {
      slot = ScalarToJson(schema, *f, values[0]);
    }
  }
  return out;
}

Value ScalarToJson(const SchemaIndex& schema, const FieldDescriptor& f, const schema::Value& v) {
  Value out;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (f.type() == INT32)
      out.set_number_value(static_cast<double>(*i));
    else
      out.set_string_value(std::to_string(*i));
  } else if (const auto* u = std::get_if<uint64_t>(&v)) {
    out.set_string_value(std::to_string(*u));
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out.set_bool_value(*b);
  } else if (const auto* d = std::get_if<double>(&v)) {
    if (std::isnan(*d))
      out.set_string_value("NaN");
    else if (std::isinf(*d))
      out.set_string_value(*d > 0 ? "Infinity" : "-Infinity");
    else
      out.set_number_value(*d);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    out.set_string_value(f.type() == BYTES ? absl::Base64Escape(*s) : *s);
  } else if (const auto* m = std::get_if<std::shared_ptr<const Entity>>(&v)) {
    const MessageDescriptor* md = schema.FindMessage(f.message_type());
    if (md != nullptr && *m) *out.mutable_struct_value() = FieldsToJson(schema, md->fields(), **m);
  }
  return out;
}

}  // namespace

absl::StatusOr<Entity> EntityFromJson(const SchemaIndex& schema, const TableDescriptor& table,
                                      const google::protobuf::Struct& json) {
  return FieldsFromJson(schema, table.fields(), json, table.name());
}

google::protobuf::Struct EntityToJson(const SchemaIndex& schema, const TableDescriptor& table,
                                      const Entity& entity) {
  return FieldsToJson(schema, table.fields(), entity);
}

absl::StatusOr<std::vector<KeyValue>> KeyFromJson(
    const TableDescriptor& table, const google::protobuf::RepeatedPtrField<KeyPart>& parts,
    const google::protobuf::RepeatedPtrField<google::protobuf::Value>& json,
    std::string_view what) {
  if (json.size() > parts.size())
    return absl::InvalidArgumentError(
        StrCat(what, ": ", json.size(), " values given, but it has ", parts.size(), " parts"));
  std::vector<KeyValue> out;
  for (int i = 0; i < json.size(); ++i) {
    const FieldDescriptor* f = FindField(table.fields(), parts[i].field());
    const std::string path = StrCat(what, "[", i, "] (", table.name(), ".", parts[i].field(), ")");
    if (f == nullptr) return absl::InternalError(StrCat(path, ": no such field"));
    const google::protobuf::Value& v = json[i];
    switch (f->type()) {
      case INT32:
      case INT64: {
        absl::StatusOr<int64_t> x = ToInt64(v, path);
        if (!x.ok()) return x.status();
        out.emplace_back(*x);
        break;
      }
      case UINT64: {
        absl::StatusOr<uint64_t> x = ToUint64(v, path);
        if (!x.ok()) return x.status();
        out.emplace_back(*x);
        break;
      }
      case BOOL:
        if (v.kind_case() != google::protobuf::Value::kBoolValue)
          return Wrong(path, "true or false", v);
        out.emplace_back(v.bool_value());
        break;
      case DOUBLE: {
        absl::StatusOr<double> x = ToDouble(v, path);
        if (!x.ok()) return x.status();
        out.emplace_back(*x);
        break;
      }
      case STRING:
        if (v.kind_case() != google::protobuf::Value::kStringValue)
          return Wrong(path, "a string", v);
        out.emplace_back(v.string_value());
        break;
      case BYTES: {
        std::string bytes;
        if (v.kind_case() != google::protobuf::Value::kStringValue ||
            (!absl::Base64Unescape(v.string_value(), &bytes) &&
             !absl::WebSafeBase64Unescape(v.string_value(), &bytes)))
          return Wrong(path, "a base64 string", v);
        out.emplace_back(std::move(bytes));
        break;
      }
      default:
        return absl::InvalidArgumentError(StrCat(path, ": a field of this type cannot be a key"));
    }
  }
  return out;
}

}  // namespace megastore::schema
