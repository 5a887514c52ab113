#include "schema/compiler.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "schema/codegen.h"
#include "schema/parser.h"
#include "schema/printer.h"

namespace megastore::schema {
namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

class Compiler {
 public:
  explicit Compiler(std::string_view source) : source_(source) {}

  CompileResult Run() {
    ParseResult parsed = Parse(source_);
    errors_ = std::move(parsed.errors);
    statements_ = std::move(parsed.statements);
    DeclareAll();
    for (auto& [key, m] : messages_) CheckMessage(m);
    CheckMessageCycles();
    for (const std::string& key : table_order_) CheckTableFields(tables_.at(key));
    for (const std::string& key : table_order_) CheckTableKeys(tables_.at(key));
    for (const std::string& key : table_order_) CheckInTable(tables_.at(key));
    CheckEncryption();
    for (const Statement& s : statements_) {
      if (const auto* x = std::get_if<IndexDecl>(&s)) AddIndex(*x);
      if (const auto* a = std::get_if<AlterDecl>(&s)) Alter(*a);
    }
    CompileResult result;
    std::stable_sort(errors_.begin(), errors_.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.pos.line, a.pos.column) < std::pair(b.pos.line, b.pos.column);
    });
    result.errors = std::move(errors_);
    if (!result.errors.empty()) return result;
    SchemaDescriptor& d = result.descriptor;
    d.set_name(schema_name_.text);
    for (auto& m : message_list_) *d.add_messages() = m->desc;
    for (const std::string& key : table_order_) *d.add_tables() = tables_.at(key).desc;
    for (const std::string& key : index_order_) *d.add_indexes() = indexes_.at(key).desc;
    // Fields whose generated C++ accessors would collide.
    for (const NameClash& c : FindNameClashes(d)) {
      SourcePos pos;
      const std::vector<FieldDecl>* decls = nullptr;
      if (auto t = tables_.find(ToLower(c.owner)); t != tables_.end())
        decls = &t->second.decl->fields;
      if (auto m = messages_.find(ToLower(c.owner)); m != messages_.end())
        decls = &m->second->decl->fields;
      for (size_t i = 0; decls != nullptr && i < decls->size(); ++i) {
        if (EqualsIgnoreCase((*decls)[i].name.text, c.field)) pos = (*decls)[i].name.pos;
      }
      result.errors.push_back(Diagnostic{pos,
                                         "field \"" + c.field + "\" of " + c.owner +
                                             " and field \"" + c.other +
                                             "\" would both generate the C++ name " + c.name,
                                         "rename one of them"});
    }
    return result;
  }

 private:
  struct Fields {
    std::map<std::string, SourcePos> pos;  // by lower-case name
  };
  struct MessageInfo {
    const MessageDecl* decl;
    MessageDescriptor desc;
    Fields fields;
  };
  struct TableInfo {
    const TableDecl* decl;
    TableDescriptor desc;
    Fields fields;
    bool keys_ok = false;  // primary key and entity group checked without error
  };
  struct IndexInfo {
    IndexDescriptor desc;
  };

  void Error(SourcePos pos, std::string message, std::string hint = {}) {
    errors_.push_back(Diagnostic{pos, std::move(message), std::move(hint)});
  }

  // ---- declarations ------------------------------------------------------------------

  void DeclareAll() {
    bool have_schema = false;
    for (const Statement& s : statements_) {
      if (const auto* sc = std::get_if<SchemaDecl>(&s)) {
        if (have_schema) {
          Error(sc->name.pos,
                "a second CREATE SCHEMA (\"" + sc->name.text + "\"); a file holds one schema",
                "the first was \"" + schema_name_.text + "\" at line " +
                    std::to_string(schema_name_.pos.line));
        } else {
          have_schema = true;
          schema_name_ = sc->name;
        }
      } else if (const auto* m = std::get_if<MessageDecl>(&s)) {
        if (!DeclareName(m->name, "message")) continue;
        auto info = std::make_unique<MessageInfo>();
        info->decl = m;
        info->desc.set_name(m->name.text);
        messages_.emplace(ToLower(m->name.text), info.get());
        message_list_.push_back(std::move(info));
      } else if (const auto* t = std::get_if<TableDecl>(&s)) {
        if (!DeclareName(t->name, "table")) continue;
        TableInfo info;
        info.decl = t;
        info.desc.set_name(t->name.text);
        tables_.emplace(ToLower(t->name.text), std::move(info));
        table_order_.push_back(ToLower(t->name.text));
      }
    }
    if (!have_schema) {
      Error(SourcePos{}, "the file has no CREATE SCHEMA statement",
            "start the file with: CREATE SCHEMA YourApp;");
    }
  }

  // Tables and messages share one namespace.
  bool DeclareName(const Name& name, std::string_view kind) {
    auto [it, inserted] =
        declared_.emplace(ToLower(name.text), std::pair(std::string(kind), name.pos));
    if (inserted) return true;
    Error(name.pos, "duplicate " + std::string(kind) + " name \"" + name.text + "\"",
          "a " + it->second.first + " of that name (names ignore case) is declared at line " +
              std::to_string(it->second.second.line));
    return false;
  }

  // ---- fields ----------------------------------------------------------------------------

  // Adds `f` to `fields`/`out`, checking its name and type. Returns false on error.
  bool AddField(const FieldDecl& f, const std::string& owner, Fields* fields,
                google::protobuf::RepeatedPtrField<FieldDescriptor>* out, int number) {
    auto [it, inserted] = fields->pos.emplace(ToLower(f.name.text), f.name.pos);
    if (!inserted) {
      Error(f.name.pos, "duplicate field \"" + f.name.text + "\" in " + owner,
            "it is already declared at line " + std::to_string(it->second.line));
      return false;
    }
    FieldDescriptor* d = out->Add();
    d->set_name(f.name.text);
    d->set_number(number);
    d->set_label(f.label);
    d->set_type(f.type);
    if (f.type == MESSAGE) {
      auto m = messages_.find(ToLower(f.message_type.text));
      if (m == messages_.end()) {
        std::string hint =
            "types are int32, int64, uint64, bool, double, string, bytes, or a CREATE MESSAGE name";
        if (tables_.count(ToLower(f.message_type.text))) {
          hint = "\"" + f.message_type.text +
                 "\" is a table; a field's type must be a scalar or a message";
        }
        Error(f.message_type.pos,
              "unknown type \"" + f.message_type.text + "\" for field \"" + f.name.text + "\"",
              hint);
        out->RemoveLast();
        fields->pos.erase(ToLower(f.name.text));
        return false;
      }
      d->set_message_type(m->second->desc.name());
    }
    return true;
  }

  void CheckMessage(MessageInfo* m) {
    AddFields(m->decl->fields, m->decl->reserved, "message " + m->desc.name(), &m->fields,
              m->desc.mutable_fields(), m->desc.mutable_reserved_numbers());
  }

  // Numbers the fields of a body: "= N" if given, else one more than the
  // highest number so far, skipping reserved ones.
  void AddFields(const std::vector<FieldDecl>& decls, const std::vector<ReservedDecl>& reserved,
                 const std::string& owner, Fields* fields,
                 google::protobuf::RepeatedPtrField<FieldDescriptor>* out,
                 google::protobuf::RepeatedField<int32_t>* reserved_out) {
    std::map<int, SourcePos> taken;
    std::set<int> reserved_set;
    for (const ReservedDecl& r : reserved) {
      if (!reserved_set.insert(r.number).second) {
        Error(r.pos, "field number " + std::to_string(r.number) + " is reserved twice in " + owner);
        continue;
      }
      reserved_out->Add(r.number);
    }
    int highest = 0;
    for (const FieldDecl& f : decls) {
      int number = f.number;
      if (number == 0) {
        number = highest + 1;
        while (reserved_set.count(number)) ++number;
      } else if (reserved_set.count(number)) {
        Error(f.number_pos,
              "field \"" + f.name.text + "\" uses number " + std::to_string(number) + ", which " +
                  owner + " reserves",
              "reserved numbers belong to dropped fields; pick another");
        continue;
      }
      auto [it, inserted] = taken.emplace(number, f.number_pos);
      if (!inserted) {
        Error(f.number != 0 ? f.number_pos : f.name.pos,
              "field \"" + f.name.text + "\" gets number " + std::to_string(number) +
                  ", already used in " + owner,
              "give it another number with = N");
        continue;
      }
      highest = std::max(highest, number);
      AddField(f, owner, fields, out, number);
    }
  }

  // A message that contains itself through required fields cannot be built.
  void CheckMessageCycles() {
    std::set<std::string> reported;
    for (auto& info : message_list_) {
      std::vector<std::string> path;
      std::set<std::string> seen;
      FindCycle(ToLower(info->desc.name()), ToLower(info->desc.name()), &seen, &path, &reported);
    }
  }
  void FindCycle(const std::string& start, const std::string& at, std::set<std::string>* seen,
                 std::vector<std::string>* path, std::set<std::string>* reported) {
    const MessageInfo* m = messages_.at(at);
    for (const FieldDescriptor& f : m->desc.fields()) {
      if (f.type() != MESSAGE || f.label() != REQUIRED) continue;
      const std::string next = ToLower(f.message_type());
      path->push_back(m->desc.name() + "." + f.name());
      if (next == start) {
        if (reported->insert(start).second) {
          const MessageInfo* s = messages_.at(start);
          Error(s->decl->name.pos,
                "message " + s->desc.name() + " contains itself through required fields (" +
                    Join(*path) + "), so no value of it can exist",
                "make one of those fields optional or repeated");
        }
      } else if (seen->insert(next).second) {
        FindCycle(start, next, seen, path, reported);
      }
      path->pop_back();
    }
  }

  void CheckTableFields(TableInfo& t) {
    AddFields(t.decl->fields, t.decl->reserved, "table " + t.desc.name(), &t.fields,
              t.desc.mutable_fields(), t.desc.mutable_reserved_numbers());
  }

  const FieldDescriptor* FindField(const TableDescriptor& t, std::string_view name) {
    for (const FieldDescriptor& f : t.fields()) {
      if (EqualsIgnoreCase(f.name(), name)) return &f;
    }
    return nullptr;
  }
  const FieldDescriptor* FindField(const std::string& table_key, std::string_view name) {
    return FindField(tables_.at(table_key).desc, name);
  }
  std::string FieldList(const TableDescriptor& t) {
    std::vector<std::string> names;
    for (const FieldDescriptor& f : t.fields()) names.push_back(f.name());
    return names.empty() ? "(none)" : Join(names);
  }

  // ---- keys and entity groups ------------------------------------------------------

  void CheckTableKeys(TableInfo& t) {
    const TableDecl& d = *t.decl;
    const size_t errors_before = errors_.size();
    if (!d.primary_key_pos) {
      Error(d.name.pos, "table " + d.name.text + " has no PRIMARY KEY",
            "add a clause after the body, as in: } PRIMARY KEY(user_id), ENTITY GROUP ROOT;");
    }
    std::set<std::string> seen;
    for (const KeyPartDecl& k : d.primary_key) {
      const FieldDescriptor* f = FindField(t.desc, k.field.text);
      if (f == nullptr) {
        Error(k.field.pos,
              "primary key column \"" + k.field.text + "\" is not a field of table " + d.name.text,
              "its fields are: " + FieldList(t.desc));
        continue;
      }
      if (!seen.insert(ToLower(f->name())).second) {
        Error(k.field.pos,
              "column \"" + k.field.text + "\" appears twice in the primary key of " + d.name.text);
        continue;
      }
      if (f->label() != REQUIRED) {
        Error(k.field.pos,
              "primary key column \"" + f->name() + "\" of " + d.name.text + " is " +
                  (f->label() == REPEATED ? "repeated" : "optional") +
                  "; key columns must be required",
              "declare it as: required " + DdlType(*f) + " " + f->name() + ";");
        continue;
      }
      if (f->type() == MESSAGE) {
        Error(k.field.pos, "primary key column \"" + f->name() + "\" has message type " +
                               f->message_type() + "; key columns must be scalars");
        continue;
      }
      KeyPart* p = t.desc.add_primary_key();
      p->set_field(f->name());
      p->set_descending(k.descending);
      p->set_scatter(k.scatter);
    }

    if (d.root_pos && d.group_key_pos) {
      Error(
          *d.group_key_pos,
          "table " + d.name.text + " is an ENTITY GROUP ROOT and also names an ENTITY GROUP KEY",
          "a root starts entity groups; a child table belongs to one: keep one of the two clauses");
    } else if (!d.root_pos && !d.group_key_pos) {
      Error(d.name.pos,
            "table " + d.name.text + " is neither an ENTITY GROUP ROOT nor in an entity group",
            "add ENTITY GROUP ROOT, or ENTITY GROUP KEY(columns) REFERENCES RootTable");
    }
    t.desc.set_entity_group_root(d.root_pos.has_value());
    if (d.encrypted_pos && !d.root_pos) {
      Error(*d.encrypted_pos,
            "table " + d.name.text + " is not an ENTITY GROUP ROOT, so it cannot be ENCRYPTED",
            "encryption is a property of whole entity groups: say ENCRYPTED on the root table");
    }
    t.desc.set_encrypted(d.encrypted_pos.has_value() && d.root_pos.has_value());
    if (d.group_key_pos && !d.root_pos) CheckGroupKey(t);
    t.keys_ok = errors_.size() == errors_before;
  }

  // All root tables of a schema share one Bigtable table, and groups of two
  // roots whose keys encode alike share rows: they must agree on encryption.
  void CheckEncryption() {
    const TableInfo* first = nullptr;
    for (const std::string& key : table_order_) {
      const TableInfo& t = tables_.at(key);
      if (!t.desc.entity_group_root()) continue;
      if (first == nullptr) {
        first = &t;
      } else if (t.desc.encrypted() != first->desc.encrypted()) {
        const TableInfo& plain = t.desc.encrypted() ? *first : t;
        const TableInfo& sealed = t.desc.encrypted() ? t : *first;
        Error(plain.decl->name.pos,
              "root table " + plain.desc.name() + " is not ENCRYPTED but root table " +
                  sealed.desc.name() + " is",
              "the roots of a schema share one Bigtable table: make every root table ENCRYPTED, or "
              "none");
      }
    }
  }
  bool InEncryptedGroup(const TableDescriptor& table) const {
    if (table.entity_group_root()) return table.encrypted();
    auto root = tables_.find(ToLower(table.root_table()));
    return root != tables_.end() && root->second.desc.encrypted();
  }

  void CheckGroupKey(TableInfo& t) {
    const TableDecl& d = *t.decl;
    auto root_it = tables_.find(ToLower(d.references.text));
    if (root_it == tables_.end()) {
      Error(d.references.pos, "REFERENCES unknown table \"" + d.references.text + "\"");
      return;
    }
    const TableInfo& root = root_it->second;
    if (!root.decl->root_pos) {
      std::string hint = "reference the entity group's root table instead";
      if (root.decl->group_key_pos)
        hint = "reference " + root.decl->references.text + ", the root of " + root.desc.name() +
               "'s entity group";
      Error(d.references.pos,
            "table " + d.name.text + " REFERENCES " + root.desc.name() +
                ", which is not an ENTITY GROUP ROOT",
            hint);
      return;
    }
    if (&root == &t) return;  // a root referencing itself was reported above
    t.desc.set_root_table(root.desc.name());
    for (const Name& n : d.group_key) {
      const FieldDescriptor* f = FindField(t.desc, n.text);
      if (f == nullptr) {
        Error(n.pos,
              "entity group key column \"" + n.text + "\" is not a field of table " + d.name.text,
              "its fields are: " + FieldList(t.desc));
        return;
      }
      t.desc.add_entity_group_key(f->name());
    }
    // The child's key must start with the group key, column for column.
    bool prefix = static_cast<int>(d.group_key.size()) <= t.desc.primary_key_size();
    for (size_t i = 0; prefix && i < d.group_key.size(); ++i) {
      prefix =
          EqualsIgnoreCase(t.desc.primary_key(static_cast<int>(i)).field(), d.group_key[i].text);
    }
    if (!prefix) {
      std::vector<std::string> pk;
      for (const KeyPart& p : t.desc.primary_key()) pk.push_back(p.field());
      std::vector<std::string> gk;
      for (const Name& n : d.group_key) gk.push_back(n.text);
      Error(d.group_key.front().pos,
            "entity group key (" + Join(gk) + ") of table " + d.name.text +
                " is not a prefix of its primary key (" + Join(pk) + ")",
            "child rows are stored under their root's key, so the primary key must start with the "
            "entity group key");
      return;
    }
    // ...and those columns must encode exactly like the root's key.
    const TableDescriptor& r = root.desc;
    if (static_cast<int>(d.group_key.size()) != r.primary_key_size()) {
      Error(d.group_key.front().pos, "entity group key of " + d.name.text + " has " +
                                         std::to_string(d.group_key.size()) + " column(s) but " +
                                         r.name() + "'s primary key has " +
                                         std::to_string(r.primary_key_size()));
      return;
    }
    for (int i = 0; i < r.primary_key_size(); ++i) {
      const FieldDescriptor* mine = FindField(t.desc, t.desc.primary_key(i).field());
      const FieldDescriptor* theirs = FindField(r, r.primary_key(i).field());
      if (mine == nullptr || theirs == nullptr) continue;
      const Name& at = d.group_key[static_cast<size_t>(i)];
      if (mine->type() != theirs->type()) {
        Error(at.pos, "entity group key column \"" + mine->name() + "\" is " + DdlType(*mine) +
                          " but " + r.name() + "." + theirs->name() + " is " + DdlType(*theirs));
      } else if (t.desc.primary_key(i).descending() != r.primary_key(i).descending() ||
                 t.desc.primary_key(i).scatter() != r.primary_key(i).scatter()) {
        Error(at.pos,
              "key column \"" + mine->name() + "\" must have the same ASC/DESC and SCATTER as " +
                  r.name() + "." + theirs->name(),
              "a child's key starts with its root's key, encoded the same way");
      }
    }
  }

  void CheckInTable(TableInfo& t) {
    const TableDecl& d = *t.decl;
    if (!d.in_table) {
      if (!t.desc.root_table().empty()) t.desc.set_in_table(t.desc.root_table());
      return;
    }
    auto it = tables_.find(ToLower(d.in_table->text));
    if (it == tables_.end()) {
      Error(d.in_table->pos, "IN TABLE names unknown table \"" + d.in_table->text + "\"");
      return;
    }
    if (d.root_pos) {
      Error(d.in_table->pos,
            "root table " + d.name.text + " cannot be stored IN TABLE " + it->second.desc.name(),
            "entity groups do not nest; only child tables use IN TABLE");
      return;
    }
    if (!t.keys_ok) return;
    const TableInfo& target = it->second;
    const std::string target_root =
        target.desc.entity_group_root() ? target.desc.name() : target.desc.root_table();
    if (!EqualsIgnoreCase(target_root, t.desc.root_table())) {
      Error(d.in_table->pos,
            "table " + d.name.text + " is in " + t.desc.root_table() +
                "'s entity group but IN TABLE " + target.desc.name() + " is not",
            "IN TABLE must name the root or another table of the same entity group");
      return;
    }
    // Follow the chain of IN TABLE clauses; it must end at the root.
    std::set<std::string> visited{ToLower(d.name.text)};
    const TableDecl* at = target.decl;
    while (at != nullptr && at->in_table && !at->root_pos) {
      if (!visited.insert(ToLower(at->name.text)).second) break;
      auto next = tables_.find(ToLower(at->in_table->text));
      at = next == tables_.end() ? nullptr : next->second.decl;
    }
    if (at != nullptr && visited.count(ToLower(at->name.text)) && !at->root_pos) {
      Error(d.in_table->pos, "IN TABLE clauses form a cycle through table " + d.name.text,
            "every chain of IN TABLE must end at the entity group's root");
      return;
    }
    t.desc.set_in_table(target.desc.name());
  }

  // ---- indexes --------------------------------------------------------------------------

  void AddIndex(const IndexDecl& x) {
    auto [existing, inserted] = index_pos_.emplace(ToLower(x.name.text), x.name.pos);
    if (!inserted) {
      Error(x.name.pos, "duplicate index name \"" + x.name.text + "\"",
            "an index of that name (names ignore case) is declared at line " +
                std::to_string(existing->second.line));
      return;
    }
    auto t = tables_.find(ToLower(x.table.text));
    if (t == tables_.end()) {
      Error(x.table.pos, "index " + x.name.text + " is ON unknown table \"" + x.table.text + "\"");
      return;
    }
    const TableDescriptor& table = t->second.desc;
    if (x.scope == IndexDescriptor::GLOBAL && InEncryptedGroup(table)) {
      Error(x.pos,
            "global index " + x.name.text + " is on " + table.name() +
                ", whose entity groups are ENCRYPTED",
            "a global index's entries live outside the groups and would hold their values in the "
            "clear; use a "
            "LOCAL index (its entries are encrypted with the group)");
      return;
    }
    IndexInfo info;
    IndexDescriptor& d = info.desc;
    d.set_name(x.name.text);
    d.set_scope(x.scope);
    d.set_table(table.name());
    bool ok = true;
    int repeated = 0;
    std::set<std::string> in_key;
    for (const KeyPartDecl& k : x.columns) {
      const FieldDescriptor* f = FindField(table, k.field.text);
      if (f == nullptr) {
        Error(k.field.pos,
              "index " + x.name.text + " is on unknown column \"" + k.field.text + "\" of " +
                  table.name(),
              "its fields are: " + FieldList(table));
        ok = false;
        continue;
      }
      if (!in_key.insert(ToLower(f->name())).second) {
        Error(k.field.pos, "column \"" + f->name() + "\" appears twice in index " + x.name.text);
        ok = false;
        continue;
      }
      if (f->type() == MESSAGE) {
        Error(k.field.pos, "index " + x.name.text + " is on column \"" + f->name() +
                               "\" of message type " + f->message_type() +
                               "; only scalar columns can be indexed");
        ok = false;
        continue;
      }
      if (f->label() == REPEATED && ++repeated == 2) {
        Error(k.field.pos,
              "index " + x.name.text + " has a second repeated column, \"" + f->name() + "\"",
              "a repeated column yields one entry per element; an index may have at most one");
        ok = false;
        continue;
      }
      KeyPart* p = d.add_columns();
      p->set_field(f->name());
      p->set_descending(k.descending);
      p->set_scatter(k.scatter);
    }
    std::set<std::string> stored;
    for (const Name& n : x.storing) {
      const FieldDescriptor* f = FindField(table, n.text);
      if (f == nullptr) {
        Error(n.pos,
              "index " + x.name.text + " is STORING unknown column \"" + n.text + "\" of " +
                  table.name(),
              "its fields are: " + FieldList(table));
        ok = false;
        continue;
      }
      bool is_key = false;
      for (const KeyPart& p : table.primary_key()) is_key |= EqualsIgnoreCase(p.field(), f->name());
      if (is_key) {
        Error(n.pos, "index " + x.name.text + " is STORING key column \"" + f->name() + "\"",
              "every index entry already carries the primary key; drop it from STORING");
        ok = false;
        continue;
      }
      if (in_key.count(ToLower(f->name()))) {
        Error(n.pos, "index " + x.name.text + " is STORING \"" + f->name() +
                         "\", which it already indexes");
        ok = false;
        continue;
      }
      if (!stored.insert(ToLower(f->name())).second) {
        Error(n.pos,
              "column \"" + f->name() + "\" appears twice in STORING of index " + x.name.text);
        ok = false;
        continue;
      }
      d.add_storing(f->name());
    }
    if (x.inline_pos) {
      if (x.scope != IndexDescriptor::LOCAL) {
        Error(*x.inline_pos, "global index " + x.name.text + " cannot be INLINE",
              "inline indexes live in an entity of the same entity group: declare it LOCAL");
        ok = false;
      } else if (table.entity_group_root()) {
        Error(*x.inline_pos, "inline index " + x.name.text + " is on root table " + table.name(),
              "an inline index is stored in a parent entity; index a child table of the entity "
              "group");
        ok = false;
      } else if (!table.root_table().empty()) {
        const std::string parent = x.inline_in ? x.inline_in->text : table.root_table();
        auto p = tables_.find(ToLower(parent));
        if (p == tables_.end()) {
          Error(x.inline_in->pos, "INLINE IN names unknown table \"" + parent + "\"");
          ok = false;
        } else if (!IsKeyPrefix(p->second.desc, table) || &p->second.desc == &table) {
          Error(x.inline_in ? x.inline_in->pos : *x.inline_pos,
                "inline index " + x.name.text + " must be stored in an ancestor of " +
                    table.name() + ", and " + p->second.desc.name() + " is not one",
                "the parent's primary key must be a prefix of " + table.name() + "'s, so each " +
                    table.name() + " entity has exactly one parent");
          ok = false;
        } else {
          d.set_inline_in(p->second.desc.name());
        }
      }
    }
    if (!ok) return;
    indexes_.emplace(ToLower(x.name.text), std::move(info));
    index_order_.push_back(ToLower(x.name.text));
  }

  // Whether `parent`'s primary key columns are a prefix of `child`'s (same
  // names, in order) and both are in the same entity group.
  bool IsKeyPrefix(const TableDescriptor& parent, const TableDescriptor& child) {
    const std::string child_root = child.entity_group_root() ? child.name() : child.root_table();
    const std::string parent_root =
        parent.entity_group_root() ? parent.name() : parent.root_table();
    if (!EqualsIgnoreCase(child_root, parent_root)) return false;
    if (parent.primary_key_size() > child.primary_key_size()) return false;
    for (int i = 0; i < parent.primary_key_size(); ++i) {
      if (!EqualsIgnoreCase(parent.primary_key(i).field(), child.primary_key(i).field()))
        return false;
    }
    return true;
  }

  // ---- schema evolution ---------------------------------------------------------------

  void Alter(const AlterDecl& a) {
    if (a.kind == AlterDecl::Kind::kDropIndex) {
      auto it = indexes_.find(ToLower(a.target.text));
      if (it == indexes_.end()) {
        Error(a.target.pos, "DROP INDEX of unknown index \"" + a.target.text + "\"");
        return;
      }
      indexes_.erase(it);
      index_pos_.erase(ToLower(a.target.text));
      index_order_.erase(
          std::find(index_order_.begin(), index_order_.end(), ToLower(a.target.text)));
      return;
    }
    auto t = tables_.find(ToLower(a.table.text));
    if (t == tables_.end()) {
      Error(a.table.pos, "ALTER TABLE of unknown table \"" + a.table.text + "\"");
      return;
    }
    TableInfo& info = t->second;
    TableDescriptor& table = info.desc;
    if (a.kind == AlterDecl::Kind::kAddField) {
      if (a.field.label == REQUIRED) {
        Error(a.field.pos,
              "ALTER TABLE " + table.name() + " ADD of a required field (\"" + a.field.name.text +
                  "\")",
              "existing entities have no value for it: add it as optional (or repeated)");
        return;
      }
      int number = 0;
      for (const FieldDescriptor& f : table.fields()) number = std::max(number, f.number());
      for (int r : table.reserved_numbers()) number = std::max(number, r);
      ++number;
      if (a.field.number != 0) {
        number = a.field.number;
        bool clash = std::find(table.reserved_numbers().begin(), table.reserved_numbers().end(),
                               number) != table.reserved_numbers().end();
        for (const FieldDescriptor& f : table.fields()) clash |= f.number() == number;
        if (clash) {
          Error(a.field.number_pos,
                "number " + std::to_string(number) + " is used or reserved in " + table.name(),
                "leave the number out to get the next free one");
          return;
        }
      }
      AddField(a.field, "table " + table.name(), &info.fields, table.mutable_fields(), number);
      return;
    }
    // kDropField
    const FieldDescriptor* f = FindField(table, a.target.text);
    if (f == nullptr) {
      Error(a.target.pos,
            "ALTER TABLE " + table.name() + " DROP of unknown field \"" + a.target.text + "\"",
            "its fields are: " + FieldList(table));
      return;
    }
    for (const KeyPart& p : table.primary_key()) {
      if (EqualsIgnoreCase(p.field(), f->name())) {
        Error(a.target.pos,
              "cannot drop \"" + f->name() + "\": it is part of " + table.name() + "'s primary key",
              "a table's key cannot change; create a new table instead");
        return;
      }
    }
    if (f->label() == REQUIRED) {
      Error(a.target.pos, "cannot drop required field \"" + f->name() + "\" of " + table.name(),
            "readers of the current schema expect every entity to have it");
      return;
    }
    for (const std::string& key : index_order_) {
      const IndexDescriptor& x = indexes_.at(key).desc;
      if (!EqualsIgnoreCase(x.table(), table.name())) continue;
      bool used = false;
      for (const KeyPart& p : x.columns()) used |= EqualsIgnoreCase(p.field(), f->name());
      for (const std::string& s : x.storing()) used |= EqualsIgnoreCase(s, f->name());
      if (used) {
        Error(a.target.pos, "cannot drop \"" + f->name() + "\": index " + x.name() + " uses it",
              "DROP INDEX " + x.name() + " first");
        return;
      }
    }
    table.add_reserved_numbers(f->number());
    info.fields.pos.erase(ToLower(f->name()));
    auto* fields = table.mutable_fields();
    for (int i = 0; i < fields->size(); ++i) {
      if (&fields->Get(i) == f) {
        fields->DeleteSubrange(i, 1);
        break;
      }
    }
  }

  std::string_view source_;
  std::vector<Statement> statements_;
  std::vector<Diagnostic> errors_;
  Name schema_name_;
  std::map<std::string, std::pair<std::string, SourcePos>> declared_;  // tables and messages
  std::vector<std::unique_ptr<MessageInfo>> message_list_;
  std::map<std::string, MessageInfo*> messages_;
  std::map<std::string, TableInfo> tables_;
  std::vector<std::string> table_order_;
  std::map<std::string, SourcePos> index_pos_;
  std::map<std::string, IndexInfo> indexes_;
  std::vector<std::string> index_order_;
};

}  // namespace

CompileResult CompileSchema(std::string_view source) { return Compiler(source).Run(); }

std::string FormatDiagnostic(std::string_view file, const Diagnostic& d) {
  std::string out = std::string(file) + ":" + std::to_string(d.pos.line) + ":" +
                    std::to_string(d.pos.column) + ": error: " + d.message;
  if (!d.hint.empty()) out += "\n  hint: " + d.hint;
  return out;
}

}  // namespace megastore::schema
