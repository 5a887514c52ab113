#include "api/gateway_request.h"

#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "base/status.h"
#include "base/strings.h"

namespace megastore::gateway {

absl::Status CheckJsonDepth(std::string_view json, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        if (++depth > max_depth) {
          return absl::InvalidArgumentError(StrCat("request nests objects and arrays deeper than ",
                                                   max_depth, " (at byte ", i, ")"));
        }
        break;
      case '}':
      case ']':
        if (depth > 0) --depth;  // an unbalanced close is the parser's to report
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;

// protobuf's JSON mapping takes a lone value for a repeated field as a list
// of one; the gateway's contract is an array, so anything else is refused,
// naming the field.
absl::Status CheckArrays(const Value& v, const Descriptor* d, const std::string& path) {
  if (v.kind_case() != Value::kStructValue) return absl::OkStatus();  // the parser reports it
  for (const auto& [name, field_value] : v.struct_value().fields()) {
    const FieldDescriptor* f = d->FindFieldByName(name);
    for (int i = 0; f == nullptr && i < d->field_count(); ++i) {
      if (d->field(i)->json_name() == name) f = d->field(i);
    }
    if (f == nullptr) continue;  // the parser reports unknown fields
    const std::string where = path.empty() ? name : StrCat(path, ".", name);
    if (f->is_repeated() && !f->is_map()) {
      if (field_value.kind_case() == Value::kNullValue) continue;
      if (field_value.kind_case() != Value::kListValue) {
        return absl::InvalidArgumentError(StrCat(where, ": must be an array"));
      }
      if (f->message_type() != nullptr &&
          f->message_type()->file()->package() != "google.protobuf") {
        for (int i = 0; i < field_value.list_value().values_size(); ++i) {
          MS_RETURN_IF_ERROR(CheckArrays(field_value.list_value().values(i), f->message_type(),
                                         StrCat(where, "[", i, "]")));
        }
      }
    } else if (f->message_type() != nullptr &&
               f->message_type()->file()->package() != "google.protobuf") {
      MS_RETURN_IF_ERROR(CheckArrays(field_value, f->message_type(), where));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRequest(std::string_view body, google::protobuf::Message* request, int max_depth,
                          bool* too_deep) {
  const std::string& type = request->GetDescriptor()->name();
  if (too_deep != nullptr) *too_deep = false;
  if (absl::Status s = CheckJsonDepth(body, max_depth); !s.ok()) {
    if (too_deep != nullptr) *too_deep = true;
    return absl::InvalidArgumentError(
        StrCat("request is not valid JSON for ", type, ": ", s.message()));
  }
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  const google::protobuf::StringPiece json(body.data(), body.size());
  if (Value shape; google::protobuf::util::JsonStringToMessage(json, &shape).ok()) {
    if (absl::Status s = CheckArrays(shape, request->GetDescriptor(), ""); !s.ok()) {
      return absl::InvalidArgumentError(
          StrCat("request is not valid JSON for ", type, ": ", s.message()));
    }
  }
  if (auto st = google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(body.data(), body.size()), request, o);
      !st.ok()) {
    return absl::InvalidArgumentError(
        StrCat("request is not valid JSON for ", type, ": ", st.message().as_string()));
  }
  return absl::OkStatus();
}

}  // namespace megastore::gateway
