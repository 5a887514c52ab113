#include "schema/layout.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/lexer.h"

namespace megastore::schema {
namespace {

constexpr char kChildEntity = '\x01';
constexpr char kLocalIndexEntry = '\x02';

std::string Column(const TableDescriptor& t, const FieldDescriptor& f) {
  return t.name() + "." + f.name();
}

absl::StatusOr<KeyValue> AsKeyValue(const Value& v) {
  switch (v.index()) {
    case 0:
      return KeyValue(std::get<int64_t>(v));
    case 1:
      return KeyValue(std::get<uint64_t>(v));
    case 2:
      return KeyValue(std::get<bool>(v));
    case 3:
      return KeyValue(std::get<double>(v));
    case 4:
      return KeyValue(std::get<std::string>(v));
    default:
      return absl::InvalidArgumentError("a message cannot be a key value");
  }
}

}  // namespace

absl::StatusOr<Layout> Layout::Create(const SchemaDescriptor& schema) {
  Layout layout(schema);
  for (const TableDescriptor& t : schema.tables()) {
    MS_RETURN_IF_ERROR(PrimaryKeyColumns(t).status());
    if (!t.entity_group_root() && layout.schema_.FindTable(t.root_table()) == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("table ", t.name(), " has unknown root ", t.root_table()));
    }
  }
  for (const IndexDescriptor& x : schema.indexes()) {
    const TableDescriptor* t = layout.schema_.FindTable(x.table());
    if (t == nullptr)
      return absl::FailedPreconditionError(
          StrCat("index ", x.name(), " is on unknown table ", x.table()));
    for (const KeyPart& p : x.columns()) {
      if (FindField(t->fields(), p.field()) == nullptr) {
        return absl::FailedPreconditionError(
            StrCat("index ", x.name(), " has unknown column ", p.field()));
      }
    }
  }
  return layout;
}

std::string Layout::GlobalIndexTable(const IndexDescriptor& index) const {
  return entity_table() + "." + index.name();
}

absl::StatusOr<std::vector<KeyValue>> Layout::KeyOf(const TableDescriptor& table,
                                                    const Entity& entity) const {
  std::vector<KeyValue> key;
  for (const KeyPart& p : table.primary_key()) {
    const FieldDescriptor* f = FindField(table.fields(), p.field());
    const std::vector<Value>* v = f == nullptr ? nullptr : entity.Find(f->number());
    if (v == nullptr || v->size() != 1) {
      return absl::InvalidArgumentError(
          StrCat(table.name(), ".", p.field(), " (a key column) is not set"));
    }
    MS_ASSIGN_OR_RETURN(KeyValue kv, AsKeyValue((*v)[0]));
    key.push_back(std::move(kv));
  }
  return key;
}

namespace {

// A child table's rows: the group key's parts, the child marker and table
// name, then the rest of the key. A root's row is just its key. `key` may
// be a prefix of at least the group key (the marker follows the group key
// even when nothing else does).
absl::StatusOr<std::string> EncodeEntityKey(const TableDescriptor& table,
                                            const std::vector<KeyColumn>& columns,
                                            const std::vector<KeyValue>& key) {
  const size_t group = table.entity_group_root()
                           ? columns.size()
                           : static_cast<size_t>(table.entity_group_key_size());
  std::string row;
  for (size_t i = 0; i <= key.size(); ++i) {
    if (i == group && !table.entity_group_root()) {
      row.push_back(kChildEntity);
      AppendOrderedBytes(&row, ToLower(table.name()));
    }
    if (i == key.size()) break;
    absl::Status s = AppendKeyPart(&row, columns[i], key[i]);
    if (!s.ok())
      return absl::InvalidArgumentError(StrCat(table.name(), " key column ", i, ": ", s.message()));
  }
  return row;
}

}  // namespace

absl::StatusOr<std::string> Layout::EntityRow(const TableDescriptor& table,
                                              const std::vector<KeyValue>& key) const {
  MS_ASSIGN_OR_RETURN(std::vector<KeyColumn> columns, PrimaryKeyColumns(table));
  if (key.size() != columns.size()) {
    return absl::InvalidArgumentError(
        StrCat(table.name(), " has ", columns.size(), " key columns, got ", key.size()));
  }
  return EncodeEntityKey(table, columns, key);
}

absl::StatusOr<std::string> Layout::RootKey(const TableDescriptor& table,
                                            const std::vector<KeyValue>& key) const {
  MS_ASSIGN_OR_RETURN(std::vector<KeyColumn> columns, PrimaryKeyColumns(table));
  const size_t n = table.entity_group_root() ? columns.size()
                                             : static_cast<size_t>(table.entity_group_key_size());
  columns.resize(n);
  return EncodeKey(columns,
                   std::vector<KeyValue>(key.begin(), key.begin() + static_cast<ptrdiff_t>(n)));
}

absl::StatusOr<std::string> Layout::GroupRow(const TableDescriptor& table,
                                             const std::vector<KeyValue>& key) const {
  const size_t n = table.entity_group_root() ? static_cast<size_t>(table.primary_key_size())
                                             : static_cast<size_t>(table.entity_group_key_size());
  if (key.size() < n)
    return absl::InvalidArgumentError(StrCat("the entity group of table ", table.name(), " needs ",
                                             n, " key value", n == 1 ? "" : "s", ", got ",
                                             key.size()));
  return RootKey(table, key);
}

absl::StatusOr<storage::RowRange> Layout::TableRange(const TableDescriptor& table,
                                                     const std::vector<KeyValue>& prefix) const {
  MS_ASSIGN_OR_RETURN(std::vector<KeyColumn> columns, PrimaryKeyColumns(table));
  const size_t group = table.entity_group_root()
                           ? columns.size()
                           : static_cast<size_t>(table.entity_group_key_size());
  if (prefix.size() < group || prefix.size() > columns.size())
    return absl::InvalidArgumentError(StrCat("a query of ", table.name(), " needs between ", group,
                                             " and ", columns.size(), " key values, got ",
                                             prefix.size()));
  MS_ASSIGN_OR_RETURN(std::string row, EncodeEntityKey(table, columns, prefix));
  // A root entity's group also holds its children: the root itself is
  // exactly its row.
  if (table.entity_group_root()) return storage::RowRange{row, row + std::string(1, '\0')};
  return storage::RowRange{row, PrefixSuccessor(row)};
}

namespace {

std::vector<KeyColumn> IndexColumns(const TableDescriptor& table, const IndexDescriptor& index) {
  std::vector<KeyColumn> out;
  for (const KeyPart& p : index.columns()) {
    const FieldDescriptor* f = FindField(table.fields(), p.field());
    out.push_back(
        KeyColumn{f == nullptr ? FIELD_TYPE_UNSPECIFIED : f->type(), p.descending(), p.scatter()});
  }
  return out;
}

}  // namespace

// Appends the encoded `values` (a prefix of `index`'s columns) to `row`.
absl::Status Layout::AppendIndexValues(std::string* row, const IndexDescriptor& index,
                                       const std::vector<KeyValue>& values) const {
  const TableDescriptor* table = schema_.FindTable(index.table());
  if (table == nullptr)
    return absl::NotFoundError(StrCat("index ", index.name(), " is on an unknown table"));
  const std::vector<KeyColumn> columns = IndexColumns(*table, index);
  if (values.size() > columns.size())
    return absl::InvalidArgumentError(StrCat("index ", index.name(), " has ", columns.size(),
                                             " columns, got ", values.size(), " values"));
  for (size_t i = 0; i < values.size(); ++i) {
    absl::Status s = AppendKeyPart(row, columns[i], values[i]);
    if (!s.ok())
      return absl::InvalidArgumentError(
          StrCat("index ", index.name(), " column ", i, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<storage::RowRange> Layout::LocalIndexRange(
    const IndexDescriptor& index, std::string_view group_row,
    const std::vector<KeyValue>& values) const {
  if (index.scope() != IndexDescriptor::LOCAL || !index.inline_in().empty())
    return absl::InvalidArgumentError(
        StrCat("index ", index.name(), " is not a local index with its own entries"));
  std::string row(group_row);
  row.push_back(kLocalIndexEntry);
  AppendOrderedBytes(&row, ToLower(index.name()));
  MS_RETURN_IF_ERROR(AppendIndexValues(&row, index, values));
  return storage::RowRange{row, PrefixSuccessor(row)};
}

absl::StatusOr<storage::RowRange> Layout::GlobalIndexRange(
    const IndexDescriptor& index, const std::vector<KeyValue>& values) const {
  if (index.scope() != IndexDescriptor::GLOBAL)
    return absl::InvalidArgumentError(StrCat("index ", index.name(), " is not a global index"));
  std::string row;
  MS_RETURN_IF_ERROR(AppendIndexValues(&row, index, values));
  // An empty prefix is the whole index table.
  return storage::RowRange{row, row.empty() ? "" : PrefixSuccessor(row)};
}

absl::StatusOr<std::vector<KeyValue>> Layout::KeyOfGlobalIndexEntry(
    const IndexDescriptor& index, std::string_view entry_row) const {
  return KeyOfIndexEntry(index, "", entry_row);
}

absl::StatusOr<std::vector<std::string>> Layout::IndexEntryRows(const IndexDescriptor& index,
                                                                const Entity& entity) const {
  const TableDescriptor* table = schema_.FindTable(index.table());
  if (table == nullptr)
    return absl::NotFoundError(StrCat("index ", index.name(), " is on an unknown table"));
  MS_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, IndexEntries(*table, entity));
  std::vector<std::string> out;
  const std::string table_name =
      index.scope() == IndexDescriptor::GLOBAL ? GlobalIndexTable(index) : entity_table();
  const std::string inline_prefix = index.name() + ":";
  for (IndexEntry& e : entries) {
    if (e.table != table_name) continue;
    if (!index.inline_in().empty()) {
      if (e.qualifier.compare(0, inline_prefix.size(), inline_prefix) == 0)
        out.push_back(e.qualifier);
    } else if (index.scope() == IndexDescriptor::GLOBAL || e.qualifier.empty()) {
      out.push_back(std::move(e.row));
    }
  }
  if (index.scope() == IndexDescriptor::LOCAL && index.inline_in().empty()) {
    // Local entries of every local index share the entity table: keep this index's.
    MS_ASSIGN_OR_RETURN(std::vector<KeyValue> key, KeyOf(*table, entity));
    MS_ASSIGN_OR_RETURN(std::string group_row, RootKey(*table, key));
    std::string prefix = group_row;
    prefix.push_back(kLocalIndexEntry);
    AppendOrderedBytes(&prefix, ToLower(index.name()));
    out.erase(std::remove_if(
                  out.begin(), out.end(),
                  [&](const std::string& r) { return r.compare(0, prefix.size(), prefix) != 0; }),
              out.end());
  }
  return out;
}

absl::StatusOr<std::vector<KeyValue>> Layout::KeyOfIndexEntry(const IndexDescriptor& index,
                                                              std::string_view group_row,
                                                              std::string_view entry_row) const {
  const TableDescriptor* table = schema_.FindTable(index.table());
  if (table == nullptr)
    return absl::NotFoundError(StrCat("index ", index.name(), " is on an unknown table"));
  std::string prefix;
  if (index.scope() == IndexDescriptor::LOCAL) {
    prefix = std::string(group_row);
    prefix.push_back(kLocalIndexEntry);
    AppendOrderedBytes(&prefix, ToLower(index.name()));
  }
  if (entry_row.substr(0, prefix.size()) != prefix)
    return absl::DataLossError(StrCat("row is not an entry of index ", index.name()));
  std::string_view rest = entry_row.substr(prefix.size());
  for (const KeyColumn& c : IndexColumns(*table, index)) {
    absl::StatusOr<KeyValue> skipped = ConsumeKeyPart(&rest, c);
    if (!skipped.ok())
      return absl::DataLossError(
          StrCat("damaged entry of index ", index.name(), ": ", skipped.status().message()));
  }
  MS_ASSIGN_OR_RETURN(std::vector<KeyColumn> key_columns, PrimaryKeyColumns(*table));
  absl::StatusOr<std::vector<KeyValue>> key = DecodeKey(key_columns, rest);
  if (!key.ok())
    return absl::DataLossError(
        StrCat("damaged entry of index ", index.name(), ": ", key.status().message()));
  return key;
}

absl::StatusOr<std::vector<Layout::IndexEntry>> Layout::IndexEntries(const TableDescriptor& table,
                                                                     const Entity& entity) const {
  std::vector<IndexEntry> out;
  MS_ASSIGN_OR_RETURN(std::vector<KeyValue> key, KeyOf(table, entity));
  MS_ASSIGN_OR_RETURN(std::vector<KeyColumn> key_columns, PrimaryKeyColumns(table));
  MS_ASSIGN_OR_RETURN(std::string encoded_key, EncodeKey(key_columns, key));
  for (const IndexDescriptor& x : schema_.schema().indexes()) {
    if (!EqualsIgnoreCase(x.table(), table.name())) continue;
    // The cross product of the indexed columns' values: at most one column
    // is repeated (msc checks), so this is one entry per element. An unset
    // column means no entry.
    std::vector<std::string> prefixes = {""};
    for (const KeyPart& p : x.columns()) {
      const FieldDescriptor* f = FindField(table.fields(), p.field());
      const std::vector<Value>* values = entity.Find(f->number());
      std::vector<std::string> next;
      std::set<std::string> seen;
      for (const std::string& prefix : prefixes) {
        for (size_t i = 0; values != nullptr && i < values->size(); ++i) {
          MS_ASSIGN_OR_RETURN(KeyValue kv, AsKeyValue((*values)[i]));
          std::string part = prefix;
          MS_RETURN_IF_ERROR(
              AppendKeyPart(&part, KeyColumn{f->type(), p.descending(), p.scatter()}, kv));
          if (seen.insert(part).second) next.push_back(std::move(part));
        }
      }
      prefixes = std::move(next);
    }
    std::vector<std::pair<std::string, std::string>> stored;
    for (const std::string& name : x.storing()) {
      const FieldDescriptor* f = FindField(table.fields(), name);
      if (const std::vector<Value>* v = entity.Find(f->number())) {
        stored.emplace_back(Column(table, *f), EncodeField(schema_, *f, *v));
      }
    }
    for (const std::string& values : prefixes) {
      IndexEntry e;
      e.stored = stored;
      if (!x.inline_in().empty()) {
        // A cell of the parent entity's row: the parent's key is a prefix
        // of this entity's key (msc checks).
        const TableDescriptor* parent = schema_.FindTable(x.inline_in());
        std::vector<KeyValue> parent_key(key.begin(), key.begin() + parent->primary_key_size());
        e.table = entity_table();
        MS_ASSIGN_OR_RETURN(e.row, EntityRow(*parent, parent_key));
        e.qualifier = x.name() + ":" + values + encoded_key;
      } else if (x.scope() == IndexDescriptor::LOCAL) {
        e.table = entity_table();
        MS_ASSIGN_OR_RETURN(e.row, RootKey(table, key));
        e.row.push_back(kLocalIndexEntry);
        AppendOrderedBytes(&e.row, ToLower(x.name()));
        e.row += values + encoded_key;
      } else {
        e.table = GlobalIndexTable(x);
        e.row = values + encoded_key;
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

absl::StatusOr<std::vector<BigtableWrite>> Layout::Mutations(std::string_view table_name,
                                                             const Entity* before,
                                                             const Entity* after,
                                                             int64_t timestamp) const {
  const TableDescriptor* table = schema_.FindTable(table_name);
  if (table == nullptr)
    return absl::NotFoundError(StrCat("schema ", entity_table(), " has no table ", table_name));
  if (before == nullptr && after == nullptr)
    return absl::InvalidArgumentError("no entity to write or delete");
  if (after != nullptr)
    MS_RETURN_IF_ERROR(Validate(schema_, table->fields(), *after, table->name()));
  const Entity& some = after != nullptr ? *after : *before;
  MS_ASSIGN_OR_RETURN(std::vector<KeyValue> key, KeyOf(*table, some));
  if (before != nullptr && after != nullptr) {
    MS_ASSIGN_OR_RETURN(std::vector<KeyValue> old_key, KeyOf(*table, *before));
    if (old_key != key) {
      return absl::InvalidArgumentError(
          StrCat("an update cannot change ", table->name(),
                 "'s primary key; delete the entity and insert a new one"));
    }
  }
  std::vector<BigtableWrite> out;
  // Writes to one row merge into one BigtableWrite.
  std::map<std::pair<std::string, std::string>, size_t> by_row;
  auto write_for = [&](const std::string& bt_table,
                       const std::string& row) -> std::vector<storage::Mutation>& {
    auto [it, inserted] = by_row.emplace(std::pair(bt_table, row), out.size());
    if (inserted) out.push_back(BigtableWrite{bt_table, row, {}, timestamp});
    return out[it->second].mutations;
  };

  // The entity's own cells: set what changed, delete what went away.
  MS_ASSIGN_OR_RETURN(const std::string row, EntityRow(*table, key));
  for (const FieldDescriptor& f : table->fields()) {
    const std::vector<Value>* old_v = before != nullptr ? before->Find(f.number()) : nullptr;
    const std::vector<Value>* new_v = after != nullptr ? after->Find(f.number()) : nullptr;
    if (new_v != nullptr && new_v->empty()) new_v = nullptr;  // an empty repeated field is unset
    if (old_v != nullptr && old_v->empty()) old_v = nullptr;
    if (new_v != nullptr) {
      const std::string bytes = EncodeField(schema_, f, *new_v);
      if (old_v == nullptr || EncodeField(schema_, f, *old_v) != bytes) {
        write_for(entity_table(), row)
            .push_back(
                storage::Mutation::SetCell(kEntityFamily, Column(*table, f), bytes, timestamp));
      }
    } else if (old_v != nullptr) {
      write_for(entity_table(), row)
          .push_back(storage::Mutation::DeleteCells(kEntityFamily, Column(*table, f)));
    }
  }

  // Index entries: remove the ones that went away, write the new and changed.
  std::vector<IndexEntry> old_entries, new_entries;
  if (before != nullptr) {
    MS_ASSIGN_OR_RETURN(old_entries, IndexEntries(*table, *before));
  }
  if (after != nullptr) {
    MS_ASSIGN_OR_RETURN(new_entries, IndexEntries(*table, *after));
  }
  auto id = [](const IndexEntry& e) { return e.table + '\0' + e.row + '\0' + e.qualifier; };
  std::map<std::string, const IndexEntry*> old_by_id;
  for (const IndexEntry& e : old_entries) old_by_id[id(e)] = &e;
  std::set<std::string> kept;
  for (const IndexEntry& e : new_entries) {
    auto it = old_by_id.find(id(e));
    const IndexEntry* old = it == old_by_id.end() ? nullptr : it->second;
    if (old != nullptr) kept.insert(id(e));
    if (old != nullptr && old->stored == e.stored) continue;
    if (!e.qualifier.empty()) {
      // Inline: one cell; its value is the STORING fields.
      std::string value;
      for (const auto& [column, bytes] : e.stored) {
        PutLengthPrefixed(&value, column);
        PutLengthPrefixed(&value, bytes);
      }
      write_for(e.table, e.row)
          .push_back(storage::Mutation::SetCell(kEntityFamily, e.qualifier, value, timestamp));
      continue;
    }
    auto& m = write_for(e.table, e.row);
    if (old == nullptr) m.push_back(storage::Mutation::SetCell(kIndexFamily, "", "", timestamp));
    std::set<std::string> now;
    for (const auto& [column, bytes] : e.stored) {
      now.insert(column);
      m.push_back(storage::Mutation::SetCell(kIndexFamily, column, bytes, timestamp));
    }
    if (old != nullptr) {
      for (const auto& [column, bytes] : old->stored) {
        if (!now.count(column)) m.push_back(storage::Mutation::DeleteCells(kIndexFamily, column));
      }
    }
  }
  for (const IndexEntry& e : old_entries) {
    if (kept.count(id(e))) continue;
    if (!e.qualifier.empty()) {
      write_for(e.table, e.row)
          .push_back(storage::Mutation::DeleteCells(kEntityFamily, e.qualifier));
    } else {
      // Column by column (the marker and the stored fields), never a row
      // delete: deletions stay per column, so the replicated log can bound
      // them by the commit timestamp (docs/schema.md, "Writes").
      auto& m = write_for(e.table, e.row);
      m.push_back(storage::Mutation::DeleteCells(kIndexFamily, ""));
      for (const auto& [column, bytes] : e.stored)
        m.push_back(storage::Mutation::DeleteCells(kIndexFamily, column));
    }
  }
  // Rows with nothing to do (an unchanged update) are dropped.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const BigtableWrite& w) { return w.mutations.empty(); }),
            out.end());
  return out;
}

absl::StatusOr<Entity> Layout::EntityFromRow(const TableDescriptor& table,
                                             const storage::Row& row) const {
  Entity e;
  const std::string prefix = table.name() + ".";
  std::set<std::string> done;
  for (const storage::Cell& c : row.cells) {
    if (c.family != kEntityFamily || c.qualifier.compare(0, prefix.size(), prefix) != 0) continue;
    if (!done.insert(c.qualifier).second) continue;  // an older version
    const FieldDescriptor* f =
        FindField(table.fields(), std::string_view(c.qualifier).substr(prefix.size()));
    if (f == nullptr) continue;  // a dropped field's old cells
    MS_ASSIGN_OR_RETURN(std::vector<Value> values, DecodeField(schema_, *f, c.value));
    e.fields[f->number()] = std::move(values);
  }
  return e;
}

}  // namespace megastore::schema
