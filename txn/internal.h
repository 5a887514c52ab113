// Internal to txn/: the cells a transaction writes besides entities (queue
// messages, outbox rows, two-phase-commit records) and the helpers the
// module's files share.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "replication/replication.pb.h"
#include "schema/layout.h"
#include "txn/transaction.h"

namespace megastore::txn {

// Every cell of an entity group's rows lives in this family.
inline constexpr char kEntityFamily[] = "e";

// Queue rows: a message's target group, queue, body and source; the
// delivery marker in the receiving group.
inline constexpr char kTargetColumn[] = "t";
inline constexpr char kQueueColumn[] = "q";
inline constexpr char kBodyColumn[] = "b";
inline constexpr char kSourceColumn[] = "s";
inline constexpr char kMarkerColumn[] = "d";
// In the outbox table: the group has messages to deliver.
inline constexpr char kListedColumn[] = "o";
// Two-phase commit rows.
inline constexpr char kWritesColumn[] = "w";
inline constexpr char kDecisionGroupColumn[] = "c";
inline constexpr char kPreparedAtColumn[] = "t";
inline constexpr char kDecisionColumn[] = "x";

// The schema's table `name`, or NotFound naming the schema.
absl::StatusOr<const schema::TableDescriptor*> FindTable(const Context& ctx, std::string_view name);

// One CellChange per Bigtable mutation the layout produced.
absl::Status AddChanges(const schema::BigtableWrite& w, replication::RowChange* rc);

// A change of one cell of kEntityFamily: set to `value`, or deleted.
replication::CellChange SetCell(const char* qualifier, std::string value);
replication::CellChange DeleteCell(const char* qualifier);

// The first row of `queue`'s messages in the group whose root row is `root`.
std::string QueuePrefix(const std::string& root, std::string_view queue);
// The row `root`, `kind` (schema::kOutboxRow, ...), `id`.
std::string RowAfter(const std::string& root, char kind, std::string_view id = {});

}  // namespace megastore::txn
