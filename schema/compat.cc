#include "schema/compat.h"

#include <map>
#include <set>

#include "google/protobuf/util/message_differencer.h"
#include "schema/lexer.h"

namespace megastore::schema {
namespace {

using Fields = google::protobuf::RepeatedPtrField<FieldDescriptor>;

template <typename T>
std::map<std::string, const T*> ByName(const google::protobuf::RepeatedPtrField<T>& items) {
  std::map<std::string, const T*> out;
  for (const T& t : items) out[ToLower(t.name())] = &t;
  return out;
}

void CompareFields(const std::string& owner, const Fields& before, const Fields& after,
                   const google::protobuf::RepeatedField<int32_t>& reserved_after,
                   std::vector<std::string>* errors) {
  std::map<int32_t, const FieldDescriptor*> old_by_number, new_by_number;
  for (const FieldDescriptor& f : before) old_by_number[f.number()] = &f;
  for (const FieldDescriptor& f : after) new_by_number[f.number()] = &f;
  const std::set<int32_t> reserved(reserved_after.begin(), reserved_after.end());
  for (const auto& [number, old] : old_by_number) {
    auto it = new_by_number.find(number);
    if (it == new_by_number.end()) {
      if (old->label() == REQUIRED) {
        errors->push_back(owner + "." + old->name() + " (a required field) was removed");
      } else if (!reserved.count(number)) {
        errors->push_back(owner + "." + old->name() + " was removed without reserving its number " +
                          std::to_string(number) +
                          " (drop it with ALTER TABLE ... DROP, or add RESERVED " +
                          std::to_string(number) + ";)");
      }
      continue;
    }
    const FieldDescriptor& now = *it->second;
    if (!EqualsIgnoreCase(now.name(), old->name())) {
      errors->push_back(owner + " field number " + std::to_string(number) + " was " + old->name() +
                        " and is now " + now.name() +
                        "; fields cannot be renamed (stored cells are named after the field)");
    }
    if (now.type() != old->type() || !EqualsIgnoreCase(now.message_type(), old->message_type())) {
      errors->push_back(owner + "." + old->name() + " changed type");
    }
    if (now.label() != old->label())
      errors->push_back(owner + "." + old->name() + " changed label");
  }
  for (const auto& [number, now] : new_by_number) {
    if (old_by_number.count(number)) continue;
    if (now->label() == REQUIRED) {
      errors->push_back(owner + "." + now->name() +
                        " is a new required field; existing data has no value for it");
    }
  }
}

}  // namespace

std::vector<std::string> CheckCompatible(const SchemaDescriptor& previous,
                                         const SchemaDescriptor& next) {
  std::vector<std::string> errors;
  using google::protobuf::util::MessageDifferencer;
  if (!EqualsIgnoreCase(previous.name(), next.name())) {
    errors.push_back("the schema was " + previous.name() + " and is now " + next.name());
  }
  const auto messages = ByName(next.messages());
  for (const MessageDescriptor& m : previous.messages()) {
    auto it = messages.find(ToLower(m.name()));
    if (it == messages.end()) {
      errors.push_back("message " + m.name() + " was removed");
      continue;
    }
    CompareFields(m.name(), m.fields(), it->second->fields(), it->second->reserved_numbers(),
                  &errors);
  }
  const auto tables = ByName(next.tables());
  for (const TableDescriptor& t : previous.tables()) {
    auto it = tables.find(ToLower(t.name()));
    if (it == tables.end()) {
      errors.push_back("table " + t.name() + " was removed");
      continue;
    }
    const TableDescriptor& now = *it->second;
    bool same_key = now.primary_key_size() == t.primary_key_size();
    for (int i = 0; same_key && i < t.primary_key_size(); ++i) {
      same_key = EqualsIgnoreCase(now.primary_key(i).field(), t.primary_key(i).field()) &&
                 now.primary_key(i).descending() == t.primary_key(i).descending() &&
                 now.primary_key(i).scatter() == t.primary_key(i).scatter();
    }
    if (!same_key) errors.push_back("table " + t.name() + " changed its primary key");
    if (now.entity_group_root() != t.entity_group_root() ||
        !EqualsIgnoreCase(now.root_table(), t.root_table())) {
      errors.push_back("table " + t.name() + " changed its entity group");
    }
    if (now.encrypted() != t.encrypted()) {
      errors.push_back(
          "table " + t.name() +
          (now.encrypted() ? " became ENCRYPTED" : " is no longer ENCRYPTED") +
          "; existing groups keep how they were written: copy the data into a new schema instead");
    }
    CompareFields(t.name(), t.fields(), now.fields(), now.reserved_numbers(), &errors);
  }
  const auto indexes = ByName(next.indexes());
  for (const IndexDescriptor& x : previous.indexes()) {
    auto it = indexes.find(ToLower(x.name()));
    if (it != indexes.end() && !MessageDifferencer::Equivalent(x, *it->second)) {
      errors.push_back("index " + x.name() +
                       " changed; drop it and create the new one under another name");
    }
  }
  return errors;
}

}  // namespace megastore::schema
