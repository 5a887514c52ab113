// Where entities and index entries live in Bigtable, and the one function
// family that turns an entity change into Bigtable mutations
// (docs/schema.md, "Layout in Bigtable"). The transaction layer calls
// Mutations(); nothing else writes entity rows.
//
// Rows of the entity table (named after the schema), for an entity group
// whose root key encodes (key_codec.h) as R:
//
//   R                                   the root entity
//   R 01 <table name> <rest of key>     a child entity (name lower-cased,
//                                       ordered-bytes encoded)
//   R 02 <index name> <values> <key>    a local index entry
//
// so a group is one contiguous row range with its root first. Entity fields
// are cells e:"Table.field"; inline index entries are cells
// e:"Index:<values><key>" of the parent entity. Global index entries are
// rows <values> <key> of the Bigtable table "Schema.Index". Index entry rows
// hold i:"" (an empty marker) and i:"Table.field" per STORING field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "schema/entity.h"
#include "schema/key_codec.h"
#include "storage/model/data_model.h"

namespace megastore::schema {

inline constexpr char kEntityFamily[] = "e";
inline constexpr char kIndexFamily[] = "i";
// Rows of an entity group R besides its entities (R, R 01 table key) and
// local index entries (R 02 index values key): the group's queues.
//   R 03 queue id   a message waiting in queue `queue` of this group
//   R 04 id         delivery marker: message `id` was delivered here
//   R 05 id         outbox: a message this group sent, until delivered
// and two-phase commit's:
//   R 06 txid       the decision of a two-phase transaction coordinated here
//   R 07 txid       writes prepared here, until the decision is applied
inline constexpr char kQueueRow = '\x03';
inline constexpr char kDeliveredRow = '\x04';
inline constexpr char kOutboxRow = '\x05';
inline constexpr char kDecisionRow = '\x06';
inline constexpr char kPreparedRow = '\x07';

// Reserved in every entity table: the entity group's replicated log and
// acceptor state, in the group's root row (replication/log_replica.h).
inline constexpr char kLogFamily[] = "p";

// Mutations for one Bigtable row, to apply with MutateRow(row, mutations,
// timestamp): cells are written, and deletions stamped, at `timestamp`.
struct BigtableWrite {
  std::string table;
  std::string row;
  std::vector<storage::Mutation> mutations;
  int64_t timestamp = 0;
};

class Layout {
 public:
  // FailedPrecondition if the descriptor is inconsistent (msc never writes
  // such a one).
  static absl::StatusOr<Layout> Create(const SchemaDescriptor& schema);

  const SchemaIndex& schema() const { return schema_; }
  // The Bigtable table of every entity and local index entry.
  const std::string& entity_table() const { return schema_.schema().name(); }
  std::string GlobalIndexTable(const IndexDescriptor& index) const;

  // The values of `table`'s primary key in `entity` (InvalidArgument if one
  // is missing).
  absl::StatusOr<std::vector<KeyValue>> KeyOf(const TableDescriptor& table,
                                              const Entity& entity) const;
  // The row of the entity of `table` with primary key `key`.
  absl::StatusOr<std::string> EntityRow(const TableDescriptor& table,
                                        const std::vector<KeyValue>& key) const;

  // The Bigtable writes that take `table`'s entity from `before` to `after`
  // at `timestamp`, indexes included: an insert (before == nullptr), an
  // update (both; the primary key must not change), or a delete (after ==
  // nullptr). InvalidArgument (naming the field) if `after` does not fit the
  // schema or a key changes.
  absl::StatusOr<std::vector<BigtableWrite>> Mutations(std::string_view table, const Entity* before,
                                                       const Entity* after,
                                                       int64_t timestamp) const;

  // The root row of the entity group an entity of `table` with primary key
  // `key` belongs to (the group's row prefix). For a root table, `key` is
  // the root's key; for a child, any key whose entity-group-key prefix is
  // given. InvalidArgument if too few values are given.
  absl::StatusOr<std::string> GroupRow(const TableDescriptor& table,
                                       const std::vector<KeyValue>& key) const;

  // The rows of `table`'s entities whose primary key starts with `prefix`
  // (at least the entity group key: queries stay inside one group), as
  // [start, end) in key order.
  absl::StatusOr<storage::RowRange> TableRange(const TableDescriptor& table,
                                               const std::vector<KeyValue>& prefix) const;
  // The entries of local index `index` in the group whose root row is
  // `group_row`, with indexed values starting with `values`, in index order.
  absl::StatusOr<storage::RowRange> LocalIndexRange(const IndexDescriptor& index,
                                                    std::string_view group_row,
                                                    const std::vector<KeyValue>& values) const;
  // The entries of global index `index` (in its own table) with indexed
  // values starting with `values`, in index order.
  absl::StatusOr<storage::RowRange> GlobalIndexRange(const IndexDescriptor& index,
                                                     const std::vector<KeyValue>& values) const;
  // The rows of `entity`'s entries in index `index` (global or local; for
  // inline indexes, their cells' qualifiers).
  absl::StatusOr<std::vector<std::string>> IndexEntryRows(const IndexDescriptor& index,
                                                          const Entity& entity) const;
  // The primary key of the entity a global index entry's row points to.
  absl::StatusOr<std::vector<KeyValue>> KeyOfGlobalIndexEntry(const IndexDescriptor& index,
                                                              std::string_view entry_row) const;
  // The primary key of the entity a local index entry's row points to.
  absl::StatusOr<std::vector<KeyValue>> KeyOfIndexEntry(const IndexDescriptor& index,
                                                        std::string_view group_row,
                                                        std::string_view entry_row) const;

  // The entity stored in `row` (the latest cell of each e:"Table.field"
  // column); DataLoss for undecodable cells.
  absl::StatusOr<Entity> EntityFromRow(const TableDescriptor& table, const storage::Row& row) const;

 private:
  explicit Layout(const SchemaDescriptor& schema) : schema_(schema) {}

  struct IndexEntry {
    std::string table;      // Bigtable table
    std::string row;        // entry row, or the parent's row for inline entries
    std::string qualifier;  // inline entries: their cell
    std::vector<std::pair<std::string, std::string>> stored;  // "Table.field" -> bytes
  };
  absl::StatusOr<std::vector<IndexEntry>> IndexEntries(const TableDescriptor& table,
                                                       const Entity& entity) const;
  absl::Status AppendIndexValues(std::string* row, const IndexDescriptor& index,
                                 const std::vector<KeyValue>& values) const;
  // The encoded key of the entity group's root (the row prefix of the group).
  absl::StatusOr<std::string> RootKey(const TableDescriptor& table,
                                      const std::vector<KeyValue>& key) const;

  SchemaIndex schema_;
};

}  // namespace megastore::schema
