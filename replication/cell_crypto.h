// Encryption at rest of one entity group's cells (docs/security.md,
// "Encryption at rest"): what a replica stores for a group of an ENCRYPTED
// schema, and how it reads it back.
//
// Each group has a 32-byte secret of its own (replication/key_store.h);
// HKDF-SHA256 derives from it, bound to the group's table and root row, a
// cell key (AES-256-GCM) and a token key (HMAC-SHA256). Stored cells are
//
//   01 | nonce (12 random bytes) | AES-256-GCM(payload) | tag (16 bytes)
//
// with the cell's stored coordinates — table, row, family, qualifier and
// timestamp — as associated data, so a cell copied to another place, time
// or group fails to open. Data cells' payload is
//
//   flags | [varint length, row] | [varint length, qualifier] | value
//
// carrying the plaintext row and qualifier whenever the stored ones are
// tokens: rows of local index entries (root 02 <index> <values> <key>) are
// stored as root 02 <index> <16-byte token>, and qualifiers that hold
// values (inline index entries, "Index:<values><key>") as ':' and a
// 16-byte token — an HMAC of the plaintext under the token key, so the
// same entry always lands on the same stored row or column and nothing of
// its values shows. Log cells (family "p": acceptor records' values and
// learned entries) seal only their value; their qualifier is the position.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "base/crypto.h"
#include "replication/replication.pb.h"
#include "storage/model/data_model.h"

namespace megastore::replication {

class GroupCipher {
 public:
  // `secret`: the group's key material (crypto::kKeyBytes).
  static absl::StatusOr<std::shared_ptr<const GroupCipher>> Create(std::string_view secret,
                                                                   std::string table,
                                                                   std::string root);

  const std::string& table() const { return table_; }
  const std::string& root() const { return root_; }

  // Where plaintext `row` (a row of this group) is stored.
  std::string StoredRow(std::string_view row) const;
  // True for rows whose stored form is a token (local index entries):
  // their order is not the plaintext order.
  bool TokenizedRow(std::string_view row) const;
  // The stored rows of every tokenized row: [start, end).
  std::string TokenizedStart() const;
  std::string TokenizedEnd() const;
  // The stored rows a scan of plaintext [start, end) over tokenized rows
  // must read: one index's entries if the range stays inside one index,
  // else all of them.
  storage::RowRange TokenizedRange(std::string_view start, std::string_view end) const;
  // Where plaintext `qualifier` of a data family is stored.
  std::string StoredQualifier(std::string_view qualifier) const;

  // A data cell of plaintext (row, qualifier) with `value`, stored at
  // (StoredRow(row), family, StoredQualifier(qualifier), timestamp).
  absl::StatusOr<std::string> SealCell(std::string_view row, std::string_view family,
                                       std::string_view qualifier, int64_t timestamp,
                                       std::string_view value) const;
  struct Opened {
    std::string row;
    std::string qualifier;
    std::string value;
  };
  // The plaintext of a stored data cell; DataLoss naming the cell if it
  // does not open (altered, moved, sealed under another key) or its
  // plaintext coordinates do not map to where it is stored.
  absl::StatusOr<Opened> OpenCell(std::string_view stored_row, std::string_view family,
                                  std::string_view stored_qualifier, int64_t timestamp,
                                  std::string_view sealed) const;

  // A log cell (family "p") of the root row; `binding` (an acceptor's
  // ballot) is authenticated with it.
  absl::StatusOr<std::string> SealLog(std::string_view qualifier, std::string_view value,
                                      std::string_view binding = "") const;
  absl::StatusOr<std::string> OpenLog(std::string_view qualifier, std::string_view sealed,
                                      std::string_view binding = "") const;

  // A piece of a backup of this group (docs/backup.md), bound to
  // `binding`: it opens only under this group's key with the same binding.
  absl::StatusOr<std::string> SealBackup(std::string_view binding, std::string_view payload) const;
  absl::StatusOr<std::string> OpenBackup(std::string_view binding, std::string_view sealed) const;

  // The bytes a sealed cell adds to its value (at most).
  static constexpr size_t kOverhead = 1 + 12 + 16 + 1;

 private:
  GroupCipher(std::string table, std::string root, crypto::AesGcm cell_key, std::string token_key)
      : table_(std::move(table)),
        root_(std::move(root)),
        cell_key_(std::move(cell_key)),
        token_key_(std::move(token_key)) {}
  std::string Aad(std::string_view row, std::string_view family, std::string_view qualifier,
                  int64_t timestamp) const;
  std::string BackupAad(std::string_view binding) const;
  absl::StatusOr<std::string> Seal(std::string_view payload, std::string_view aad) const;
  absl::StatusOr<std::string> Open(std::string_view sealed, std::string_view aad) const;
  absl::Status Damaged(std::string_view row, std::string_view family, std::string_view qualifier,
                       int64_t timestamp, std::string_view why) const;
  // The length of the row prefix kept in the clear for a tokenized row
  // (root 02 <index name>), or 0 if `row` is not one.
  size_t TokenPrefix(std::string_view row) const;

  const std::string table_, root_;
  const crypto::AesGcm cell_key_;
  const std::string token_key_;
};

// What a replica needs to know to store a group: whether its table is
// encrypted and, if so, the group's cipher.
struct GroupSealing {
  bool encrypted = false;
  // Set when encrypted and the group's key is at hand.
  std::shared_ptr<const GroupCipher> cipher;
  // Encrypted without a cipher: why (no key store here, the group has no
  // key yet, its key was destroyed). Reads of a group with no key yet and
  // no data are fine; anything else fails with this status.
  absl::Status missing;
  bool no_key_yet = false;
};

// Which groups are encrypted and their keys, for LogReplica.
class GroupEncryption {
 public:
  virtual ~GroupEncryption() = default;
  // The sealing of `group`. `create`: a write is coming; make the group's
  // key if it has none. Errors (the schema could not be read) fail the
  // request: nothing is stored or returned without knowing.
  virtual void SealingOf(const GroupRef& group, bool create,
                         absl::AnyInvocable<void(absl::StatusOr<GroupSealing>)> done) = 0;
};

}  // namespace megastore::replication
