// A datacenter's encryption at rest, as its replication server sees it:
// which entity groups are encrypted (their schema says ENCRYPTED, as
// recorded in the datacenter's "megastore.schemas" table) and their keys
// (a GroupKeyStore in the key directory, opened on first need).
//
// Fails closed: a table once seen encrypted stays encrypted for the life of
// the process; a schema table that cannot be read, or that records no
// schema of the group's table, fails the request; a table the key
// directory has keys of is encrypted even if no schema says so; and an
// encrypted group with no key store here is refused rather than written in
// the clear.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "replication/cell_crypto.h"
#include "replication/key_store.h"
#include "replication/schema_table.h"
#include "storage/client/bigtable_client.h"

namespace megastore::replication {

class AtRestEncryption : public GroupEncryption {
 public:
  // `key_dir`: this datacenter's key directory (empty: none; encrypted
  // groups are then refused). `bigtable` and `env` must outlive this.
  AtRestEncryption(Env* env, storage::BigtableClient* bigtable, std::string key_dir);

  void SealingOf(const GroupRef& group, bool create,
                 absl::AnyInvocable<void(absl::StatusOr<GroupSealing>)> done) override;

  // msadmin keys: status, KEK rotation, a group's key destroyed.
  KeysStatusReply Status();
  absl::StatusOr<KeysRotateReply> Rotate();
  absl::StatusOr<KeysDestroyReply> Destroy(const std::string& table, const std::string& root);

  const std::string& key_dir() const { return key_dir_; }
  // The key store's counts, if it is open (metrics; never opens it).
  std::optional<GroupKeyStore::Stats> StoreStats();
  // How long a recorded schema's "not encrypted" is trusted before it is
  // read again, and "no schema was ever recorded here" (a bare test
  // cluster; with schemas recorded, a table without one is refused).
  static constexpr absl::Duration kPlainTableTtl = absl::Seconds(60);
  static constexpr absl::Duration kNoSchemasTtl = absl::Seconds(1);
  static constexpr size_t kMaxCiphers = 100000;

 private:
  void TableEncrypted(const std::string& table,
                      absl::AnyInvocable<void(absl::StatusOr<bool>)> done);
  // What the key directory says of `table` (opening it only if it exists).
  enum class KeyDirectoryKnows { kNothing, kOtherTables, kThisTable };
  KeyDirectoryKnows KeyDirectoryKnowsOf(const std::string& table) ABSL_LOCKS_EXCLUDED(store_mu_);
  // The key store, opened on first use (the error of a failed open is kept
  // for a while, then retried).
  absl::StatusOr<GroupKeyStore*> Store() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  GroupSealing Sealing(const GroupRef& group, bool create);

  Env* const env_;
  storage::BigtableClient* const bigtable_;
  const std::string key_dir_;

  // Held across the key store's disk I/O (a new key's fsync, rotation).
  absl::Mutex store_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<GroupKeyStore> store_ ABSL_GUARDED_BY(store_mu_);
  absl::Status store_error_ ABSL_GUARDED_BY(store_mu_);
  int64_t store_failed_at_ ABSL_GUARDED_BY(store_mu_) = 0;

  // Short: the caches every request looks at.
  absl::Mutex mu_;
  struct TableInfo {
    bool encrypted = false;
    int64_t valid_until = 0;  // env monotonic micros
  };
  std::map<std::string, TableInfo> tables_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const GroupCipher>> ciphers_
      ABSL_GUARDED_BY(mu_);  // by GroupId
};

}  // namespace megastore::replication
