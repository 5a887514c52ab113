#include "replication/at_rest.h"

#include <openssl/crypto.h>

#include <filesystem>

#include "base/coding.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/schema.pb.h"

namespace megastore::replication {

AtRestEncryption::AtRestEncryption(Env* env, storage::BigtableClient* bigtable, std::string key_dir)
    : env_(env), bigtable_(bigtable), key_dir_(std::move(key_dir)) {}

void AtRestEncryption::TableEncrypted(const std::string& table,
                                      absl::AnyInvocable<void(absl::StatusOr<bool>)> done) {
  const int64_t now = env_->MonotonicMicros();
  std::optional<bool> known;
  {
    absl::MutexLock lock(&mu_);
    auto it = tables_.find(table);
    if (it != tables_.end() && (it->second.encrypted || now < it->second.valid_until))
      known = it->second.encrypted;
  }
  if (known) return done(*known);
  storage::ReadOptions o;
  o.filter.families = {kSchemaFamily};
  o.filter.cells_per_column = 1;
  bigtable_->ReadRow(
      kSchemaTable, table, std::move(o),
      [this, table, now,
       done = std::move(done)](absl::StatusOr<std::optional<storage::Row>> row) mutable {
        bool encrypted = false;
        int64_t ttl = absl::ToInt64Microseconds(kPlainTableTtl);
        if (!row.ok() && absl::IsNotFound(row.status())) {
          // No schema was ever recorded in this datacenter (a bare test
          // cluster): nothing is encrypted. Unless the key directory holds
          // keys — then the schema table was lost: this table is encrypted
          // if it has keys, and otherwise nobody can tell.
          const KeyDirectoryKnows knows = KeyDirectoryKnowsOf(table);
          if (knows == KeyDirectoryKnows::kOtherTables)
            return done(
                absl::UnavailableError(StrCat("cannot tell whether table ", table,
                                              " is encrypted: this datacenter's ", kSchemaTable,
                                              " table is missing, yet its key directory holds keys "
                                              "(apply the schemas again)")));
          encrypted = knows == KeyDirectoryKnows::kThisTable;
          ttl = absl::ToInt64Microseconds(kNoSchemasTtl);
        } else if (!row.ok()) {
          return done(absl::UnavailableError(StrCat("cannot tell whether table ", table,
                                                    " is encrypted: reading ", kSchemaTable, ": ",
                                                    row.status().message())));
        } else {
          bool recorded = false;
          if (*row) {
            for (const storage::Cell& c : (*row)->cells) {
              if (c.qualifier != kSchemaColumn) continue;
              schema::SchemaDescriptor d;
              if (!d.ParseFromString(c.value))
                return done(absl::DataLossError(
                    StrCat("the schema of table ", table, " recorded in ", kSchemaTable,
                           " is damaged: cannot tell whether it is encrypted")));
              for (const schema::TableDescriptor& t : d.tables())
                encrypted |= t.entity_group_root() && t.encrypted();
              recorded = true;
            }
          }
          // Schemas are recorded before their tables are made: a group of
          // a table with no recorded schema here is not served until it is.
          if (!recorded)
            return done(absl::UnavailableError(StrCat(
                "no schema of table ", table, " is recorded in this datacenter (", kSchemaTable,
                "): its groups are served once it is (msadmin schema "
                "apply, or megastored --schema)")));
        }
        {
          absl::MutexLock lock(&mu_);
          TableInfo& info = tables_[table];
          info.encrypted |= encrypted;  // once encrypted, always
          info.valid_until = now + ttl;
          encrypted = info.encrypted;
        }
        done(encrypted);
      });
}

AtRestEncryption::KeyDirectoryKnows AtRestEncryption::KeyDirectoryKnowsOf(
    const std::string& table) {
  absl::MutexLock lock(&store_mu_);
  if (store_ == nullptr) {
    if (key_dir_.empty()) return KeyDirectoryKnows::kNothing;
    std::error_code ec;
    const bool exists = std::filesystem::exists(key_dir_, ec);
    if (!exists && !ec) return KeyDirectoryKnows::kNothing;
    // (A directory that cannot even be looked at is opened, and fails.)
  }
  absl::StatusOr<GroupKeyStore*> store = Store();
  // A key directory that does not open: assume the worst.
  if (!store.ok() || (*store)->HasTable(table)) return KeyDirectoryKnows::kThisTable;
  return (*store)->HasAnyTable() ? KeyDirectoryKnows::kOtherTables : KeyDirectoryKnows::kNothing;
}

absl::StatusOr<GroupKeyStore*> AtRestEncryption::Store() {
  if (store_ != nullptr) return store_.get();
  if (key_dir_.empty())
    return absl::FailedPreconditionError(
        "this datacenter has no key directory (megastored --key-dir), so it "
        "cannot store encrypted entity groups");
  const int64_t now = env_->MonotonicMicros();
  if (!store_error_.ok() && now - store_failed_at_ < 5'000'000) return store_error_;
  absl::StatusOr<std::unique_ptr<GroupKeyStore>> store = GroupKeyStore::Open(key_dir_);
  if (!store.ok()) {
    store_error_ = absl::Status(store.status().code(),
                                StrCat("key directory ", key_dir_, ": ", store.status().message()));
    store_failed_at_ = now;
    MS_LOG_ERROR("{}", store_error_.ToString());
    return store_error_;
  }
  store_ = std::move(*store);
  store_error_ = absl::OkStatus();
  MS_LOG_INFO("opened key directory {} ({})", key_dir_, store_->provider().Describe());
  return store_.get();
}

GroupSealing AtRestEncryption::Sealing(const GroupRef& group, bool create) {
  GroupSealing out;
  out.encrypted = true;
  const std::string id = GroupId(group.table(), group.root());
  {
    absl::MutexLock lock(&mu_);
    if (auto it = ciphers_.find(id); it != ciphers_.end()) {
      out.cipher = it->second;
      return out;
    }
  }
  // The key store's I/O (a new key is fsynced) holds only store_mu_:
  // groups whose cipher is cached go on meanwhile.
  absl::MutexLock store_lock(&store_mu_);
  absl::StatusOr<GroupKeyStore*> store = Store();
  if (!store.ok()) {
    out.missing = store.status();
    return out;
  }
  absl::StatusOr<std::string> secret = (*store)->Secret(group.table(), group.root(), create);
  if (!secret.ok()) {
    out.no_key_yet = absl::IsNotFound(secret.status());
    out.missing = secret.status();
    return out;
  }
  absl::StatusOr<std::shared_ptr<const GroupCipher>> cipher =
      GroupCipher::Create(*secret, group.table(), group.root());
  OPENSSL_cleanse(secret->data(), secret->size());
  if (!cipher.ok()) {
    out.missing = cipher.status();
    return out;
  }
  absl::MutexLock lock(&mu_);
  if (ciphers_.size() >= kMaxCiphers) ciphers_.clear();
  ciphers_[id] = *cipher;
  out.cipher = std::move(*cipher);
  return out;
}

void AtRestEncryption::SealingOf(const GroupRef& group, bool create,
                                 absl::AnyInvocable<void(absl::StatusOr<GroupSealing>)> done) {
  TableEncrypted(group.table(), [this, group, create,
                                 done = std::move(done)](absl::StatusOr<bool> encrypted) mutable {
    if (!encrypted.ok()) return done(encrypted.status());
    if (!*encrypted) return done(GroupSealing{});
    done(Sealing(group, create));
  });
}

KeysStatusReply AtRestEncryption::Status() {
  KeysStatusReply reply;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [table, info] : tables_)
      if (info.encrypted) reply.add_encrypted_tables(table);
  }
  if (key_dir_.empty()) return reply;
  reply.set_key_dir(key_dir_);
  absl::MutexLock lock(&store_mu_);
  // Looking does not create the directory: it appears with the first
  // encrypted group stored here.
  std::error_code ec;
  if (store_ == nullptr && !std::filesystem::exists(key_dir_, ec)) {
    reply.set_provider("not created yet: no encrypted entity group stored here");
    return reply;
  }
  absl::StatusOr<GroupKeyStore*> store = Store();
  if (!store.ok()) {
    reply.set_provider(StrCat("unavailable: ", store.status().message()));
    return reply;
  }
  const KeyProvider& p = (*store)->provider();
  reply.set_provider(p.Describe());
  reply.set_active_kek(p.active());
  reply.set_keks(static_cast<uint32_t>(p.keks()));
  reply.set_active_kek_created_micros(p.active_created_micros());
  const GroupKeyStore::Stats s = (*store)->stats();
  reply.set_groups(s.groups);
  reply.set_destroyed(s.destroyed);
  return reply;
}

std::optional<GroupKeyStore::Stats> AtRestEncryption::StoreStats() {
  absl::MutexLock lock(&store_mu_);
  if (store_ == nullptr) return std::nullopt;
  return store_->stats();
}

absl::StatusOr<KeysRotateReply> AtRestEncryption::Rotate() {
  absl::MutexLock lock(&store_mu_);
  MS_ASSIGN_OR_RETURN(GroupKeyStore * store, Store());
  MS_ASSIGN_OR_RETURN(uint64_t rewrapped, store->Rotate());
  KeysRotateReply reply;
  reply.set_active_kek(store->provider().active());
  reply.set_rewrapped(rewrapped);
  MS_LOG_INFO(
      "rotated the key-encryption key of {}: now key {}, {} group keys "
      "re-wrapped",
      key_dir_, reply.active_kek(), rewrapped);
  return reply;
}

absl::StatusOr<KeysDestroyReply> AtRestEncryption::Destroy(const std::string& table,
                                                           const std::string& root) {
  if (table.empty() || root.empty())
    return absl::InvalidArgumentError("keys.Destroy needs a table and a root row");
  absl::MutexLock store_lock(&store_mu_);
  MS_ASSIGN_OR_RETURN(GroupKeyStore * store, Store());
  absl::StatusOr<bool> had = store->Destroy(table, root);
  {
    // Whatever became of the files, the key is gone from memory: no later
    // request may use a cached cipher (a new one is refused by the
    // tombstone, which Destroy keeps in memory even if a write failed).
    absl::MutexLock lock(&mu_);
    ciphers_.erase(GroupId(table, root));
  }
  if (!had.ok()) return had.status();
  KeysDestroyReply reply;
  reply.set_had_key(*had);
  MS_LOG_WARN("destroyed the key of entity group {} of table {}{}", EscapeBytes(root), table,
              *had ? "" : " (it had none)");
  return reply;
}

}  // namespace megastore::replication
