// A datacenter's keys for encryption at rest (docs/security.md, "Encryption
// at rest"): envelope encryption with a secret per entity group.
//
//   KeyProvider     key-encryption keys (KEKs): wraps and unwraps group
//                   secrets. FileKeyProvider keeps them in the key
//                   directory's "kek" file; an external KMS would implement
//                   the same interface and keep them out of the machine.
//   GroupKeyStore   one random 32-byte secret per entity group, wrapped
//                   under the active KEK, kept in the key directory —
//                   never in the data directory, so data files and backups
//                   alone open nothing. Destroying a group's secret makes
//                   every copy of its data unreadable (crypto-shredding);
//                   rotating the KEK re-wraps the secrets without touching
//                   any data.
//
// Files of the key directory (owner-only: 0700 directory, 0600 files):
//   kek               KekFile, checksummed (FileKeyProvider)
//   group-keys        GroupKeySnapshot, checksummed, replaced atomically
//   group-keys.log    GroupKeyRecords appended since the snapshot, each
//                     fixed32 length | masked CRC-32C | record
//   LOCK              held (flock) by the one process using the directory
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "replication/keys.pb.h"

namespace megastore::replication {

class KeyProvider {
 public:
  virtual ~KeyProvider() = default;
  // Where the keys come from, for status pages ("key file /k/kek").
  virtual std::string Describe() const = 0;
  virtual uint32_t active() const = 0;
  virtual int64_t active_created_micros() const = 0;
  virtual int keks() const = 0;
  // `secret` sealed under the active KEK, bound to `context`.
  virtual absl::StatusOr<std::string> Wrap(std::string_view secret, std::string_view context) = 0;
  // DataLoss if it does not open (another KEK, altered, other context);
  // NotFound if KEK `kek` is not known.
  virtual absl::StatusOr<std::string> Unwrap(uint32_t kek, std::string_view wrapped,
                                             std::string_view context) = 0;
  // Makes a new active KEK (kept durably before it returns).
  virtual absl::StatusOr<uint32_t> Rotate() = 0;
  // Forgets every KEK but the active one (nothing is wrapped under them).
  virtual absl::Status RetireInactive() = 0;
};

class FileKeyProvider : public KeyProvider {
 public:
  // The KEKs of `path`, created (one fresh KEK, mode 0600) if it does not
  // exist and `create`; a missing file is DataLoss otherwise. Errors name
  // the file.
  static absl::StatusOr<std::unique_ptr<FileKeyProvider>> Open(std::string path,
                                                               bool create = true);

  std::string Describe() const override;
  uint32_t active() const override;
  int64_t active_created_micros() const override;
  int keks() const override;
  absl::StatusOr<std::string> Wrap(std::string_view secret, std::string_view context) override;
  absl::StatusOr<std::string> Unwrap(uint32_t kek, std::string_view wrapped,
                                     std::string_view context) override;
  absl::StatusOr<uint32_t> Rotate() override;
  absl::Status RetireInactive() override;

 private:
  FileKeyProvider(std::string path, KekFile file)
      : path_(std::move(path)), file_(std::move(file)) {}
  absl::Status Save(const KekFile& file);
  const Kek* Find(uint32_t id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  KekFile file_ ABSL_GUARDED_BY(mu_);
};

class GroupKeyStore {
 public:
  // Opens (creating it, owner-only) the key directory `dir`, with `provider`
  // (nullptr: a FileKeyProvider on dir/kek). FailedPrecondition if another
  // process holds it; DataLoss naming the file and offset for a damaged
  // file (a torn last record of the log, from a crash, is dropped: it was
  // never used).
  static absl::StatusOr<std::unique_ptr<GroupKeyStore>> Open(
      std::string dir, std::unique_ptr<KeyProvider> provider = nullptr);
  ~GroupKeyStore();

  // The secret of the group (table, root). Without one: with `create`, a
  // fresh secret, durable in the key directory before it is returned;
  // otherwise NotFound. FailedPrecondition if the group's key was
  // destroyed (it never gets another).
  absl::StatusOr<std::string> Secret(std::string_view table, std::string_view root, bool create);
  // Destroys the group's key: its wrapped secret leaves every file of the
  // key directory before this returns, and a tombstone refuses a new one.
  // Returns whether it had a live key.
  absl::StatusOr<bool> Destroy(std::string_view table, std::string_view root);
  // A new active KEK; every group secret re-wrapped under it, the old
  // KEKs forgotten. Returns how many secrets were re-wrapped.
  absl::StatusOr<uint64_t> Rotate();

  // Whether any group of `table` has (or had) a key here.
  bool HasTable(std::string_view table) const;
  // Whether any group at all has (or had) a key here.
  bool HasAnyTable() const;

  struct Stats {
    uint64_t groups = 0;
    uint64_t destroyed = 0;
  };
  Stats stats() const;
  const std::string& dir() const { return dir_; }
  const KeyProvider& provider() const { return *provider_; }

  static constexpr uint32_t kMaxRecordBytes = 64 << 10;

 private:
  GroupKeyStore(std::string dir, std::unique_ptr<KeyProvider> provider, int lock_fd)
      : dir_(std::move(dir)), provider_(std::move(provider)), lock_fd_(lock_fd) {}
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Append(const GroupKeyRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the snapshot of every record and empties the log.
  absl::Status Compact() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remember(GroupKeyRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const std::unique_ptr<KeyProvider> provider_;
  const int lock_fd_;
  mutable absl::Mutex mu_;
  int log_fd_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t log_records_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, GroupKeyRecord> groups_ ABSL_GUARDED_BY(mu_);  // by GroupId
  absl::flat_hash_set<std::string> tables_ ABSL_GUARDED_BY(mu_);                  // of every record
  // A destroyed secret may still be in a file.
  bool needs_compaction_ ABSL_GUARDED_BY(mu_) = false;
  // An append failed and could not be taken back: no more appends.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  uint64_t destroyed_ ABSL_GUARDED_BY(mu_) = 0;
};

// The context a group's wrapped secret is bound to (and the store's map key).
std::string GroupId(std::string_view table, std::string_view root);

}  // namespace megastore::replication
