#include "txn/internal.h"

#include "base/coding.h"
#include "base/strings.h"

namespace megastore::txn {

absl::StatusOr<const schema::TableDescriptor*> FindTable(const Context& ctx,
                                                         std::string_view name) {
  const schema::TableDescriptor* t = ctx.layout->schema().FindTable(name);
  if (t == nullptr)
    return absl::NotFoundError(
        StrCat("schema ", ctx.layout->schema().schema().name(), " has no table ", name));
  return t;
}

absl::Status AddChanges(const schema::BigtableWrite& w, replication::RowChange* rc) {
  for (const storage::Mutation& m : w.mutations) {
    replication::CellChange* c = rc->add_cells();
    c->set_family(m.family);
    c->set_qualifier(m.qualifier);
    switch (m.type) {
      case storage::Mutation::Type::kSetCell:
        c->set_value(m.value);
        break;
      case storage::Mutation::Type::kDeleteCells:
        c->set_delete_cells(true);
        break;
      default:
        return absl::InternalError(
            "the schema layout produced a mutation a log entry cannot carry");
    }
  }
  return absl::OkStatus();
}

replication::CellChange SetCell(const char* qualifier, std::string value) {
  replication::CellChange c;
  c.set_family(kEntityFamily);
  c.set_qualifier(qualifier);
  c.set_value(std::move(value));
  return c;
}

replication::CellChange DeleteCell(const char* qualifier) {
  replication::CellChange c;
  c.set_family(kEntityFamily);
  c.set_qualifier(qualifier);
  c.set_delete_cells(true);
  return c;
}

std::string QueuePrefix(const std::string& root, std::string_view queue) {
  std::string row = root;
  row.push_back(schema::kQueueRow);
  AppendOrderedBytes(&row, queue);
  return row;
}

std::string RowAfter(const std::string& root, char kind, std::string_view id) {
  std::string row = root;
  row.push_back(kind);
  row += id;
  return row;
}

}  // namespace megastore::txn
