#include "replication/key_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/time/clock.h"
#include "base/checksum.h"
#include "base/coding.h"
#include "base/crypto.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/strings.h"

namespace megastore::replication {

namespace {

int64_t NowMicros() { return absl::ToUnixMicros(absl::Now()); }

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> SealUnder(std::string_view key, std::string_view plaintext,
                                      std::string_view aad) {
  const std::string nonce = crypto::RandomBytes(crypto::kNonceBytes);
  std::string out = nonce;
  if (absl::Status s = crypto::SealAesGcm(key, nonce, plaintext, aad, &out); !s.ok()) return s;
  return out;
}

// Unreadable by others from its first byte, whatever the umask.
absl::Status CheckPrivate(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("cannot stat", path);
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(StrCat(path, " is readable or writable by others (mode ",
                                                fmt::format("{:o}", st.st_mode & 0777),
                                                "): key files must be owner-only; chmod 600 it"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string GroupId(std::string_view table, std::string_view root) {
  std::string id = "megastore group key v1|";
  PutLengthPrefixed(&id, table);
  PutLengthPrefixed(&id, root);
  return id;
}

// ---- FileKeyProvider
// ---------------------------------------------------------

absl::StatusOr<std::unique_ptr<FileKeyProvider>> FileKeyProvider::Open(std::string path,
                                                                       bool create) {
  absl::StatusOr<std::string> payload = ReadChecksummedFile(path, 1 << 20);
  KekFile file;
  if (absl::IsNotFound(payload.status()) && !create) {
    return absl::DataLossError(StrCat(path,
                                      " is missing, but group keys wrapped under it exist "
                                      "beside it: restore it from the key directory's backup "
                                      "(a new one would open none of them)"));
  }
  if (absl::IsNotFound(payload.status())) {
    Kek* k = file.add_keys();
    k->set_id(1);
    k->set_material(crypto::RandomBytes(crypto::kKeyBytes));
    k->set_created_micros(NowMicros());
    file.set_active(1);
    if (absl::Status s = WriteChecksummedFile(path, file.SerializeAsString(), 0600); !s.ok())
      return s;
    MS_LOG_INFO("made a new key-encryption key in {}", path);
  } else if (!payload.ok()) {
    return payload.status();
  } else {
    if (absl::Status s = CheckPrivate(path); !s.ok()) return s;
    if (!file.ParseFromString(*payload))
      return absl::DataLossError(StrCat(path, ": not a key-encryption key file"));
  }
  bool active_found = false;
  for (const Kek& k : file.keys()) {
    if (k.material().size() != crypto::kKeyBytes)
      return absl::DataLossError(StrCat(path, ": key ", k.id(), " has ", k.material().size(),
                                        " bytes, not ", crypto::kKeyBytes));
    active_found |= k.id() == file.active();
  }
  if (!active_found)
    return absl::DataLossError(StrCat(path, ": its active key ", file.active(), " is not in it"));
  return std::unique_ptr<FileKeyProvider>(new FileKeyProvider(std::move(path), std::move(file)));
}

std::string FileKeyProvider::Describe() const { return "key file " + path_; }

uint32_t FileKeyProvider::active() const {
  absl::ReaderMutexLock lock(&mu_);
  return file_.active();
}

int64_t FileKeyProvider::active_created_micros() const {
  absl::ReaderMutexLock lock(&mu_);
  const Kek* k = Find(file_.active());
  return k == nullptr ? 0 : k->created_micros();
}

int FileKeyProvider::keks() const {
  absl::ReaderMutexLock lock(&mu_);
  return file_.keys_size();
}

const Kek* FileKeyProvider::Find(uint32_t id) const {
  for (const Kek& k : file_.keys())
    if (k.id() == id) return &k;
  return nullptr;
}

absl::Status FileKeyProvider::Save(const KekFile& file) {
  return WriteChecksummedFile(path_, file.SerializeAsString(), 0600);
}

absl::StatusOr<std::string> FileKeyProvider::Wrap(std::string_view secret,
                                                  std::string_view context) {
  absl::ReaderMutexLock lock(&mu_);
  const Kek* k = Find(file_.active());
  if (k == nullptr) return absl::InternalError("no active key-encryption key");
  return SealUnder(k->material(), secret, context);
}

absl::StatusOr<std::string> FileKeyProvider::Unwrap(uint32_t kek, std::string_view wrapped,
                                                    std::string_view context) {
  absl::ReaderMutexLock lock(&mu_);
  const Kek* k = Find(kek);
  if (k == nullptr)
    return absl::NotFoundError(StrCat("key-encryption key ", kek, " is not in ", path_));
  if (wrapped.size() < crypto::kNonceBytes)
    return absl::DataLossError("a wrapped key is truncated");
  return crypto::OpenAesGcm(k->material(), wrapped.substr(0, crypto::kNonceBytes),
                            wrapped.substr(crypto::kNonceBytes), context);
}

absl::StatusOr<uint32_t> FileKeyProvider::Rotate() {
  absl::MutexLock lock(&mu_);
  KekFile next = file_;
  uint32_t id = 0;
  for (const Kek& k : next.keys()) id = std::max(id, k.id());
  Kek* k = next.add_keys();
  k->set_id(id + 1);
  k->set_material(crypto::RandomBytes(crypto::kKeyBytes));
  k->set_created_micros(NowMicros());
  next.set_active(id + 1);
  if (absl::Status s = Save(next); !s.ok()) return s;
  file_ = std::move(next);
  return id + 1;
}

absl::Status FileKeyProvider::RetireInactive() {
  absl::MutexLock lock(&mu_);
  KekFile next;
  next.set_active(file_.active());
  for (const Kek& k : file_.keys())
    if (k.id() == file_.active()) *next.add_keys() = k;
  if (next.keys_size() == file_.keys_size()) return absl::OkStatus();
  if (absl::Status s = Save(next); !s.ok()) return s;
  file_ = std::move(next);
  return absl::OkStatus();
}

// ---- GroupKeyStore
// -------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GroupKeyStore>> GroupKeyStore::Open(
    std::string dir, std::unique_ptr<KeyProvider> provider) {
  if (absl::Status s = CreatePrivateDirectories(dir); !s.ok()) return s;
  if (absl::Status s = CheckPrivate(dir); !s.ok()) return s;
  const std::string lock_path = dir + "/LOCK";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return Errno("cannot open", lock_path);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(
        StrCat("key directory ", dir,
               " is in use by another process (each datacenter's keys have one "
               "owner)"));
  }
  if (provider == nullptr) {
    // A new KEK only for a new key directory: next to existing group keys,
    // a missing kek file is a loss to report, not to paper over.
    std::error_code ec, log_ec;
    const uintmax_t log_size = std::filesystem::file_size(dir + "/group-keys.log", log_ec);
    const bool has_keys =
        std::filesystem::exists(dir + "/group-keys", ec) || (!log_ec && log_size > 0);
    absl::StatusOr<std::unique_ptr<FileKeyProvider>> file =
        FileKeyProvider::Open(dir + "/kek", /*create=*/!has_keys);
    if (!file.ok()) {
      ::close(lock_fd);
      return file.status();
    }
    provider = std::move(*file);
  }
  std::unique_ptr<GroupKeyStore> store(
      new GroupKeyStore(std::move(dir), std::move(provider), lock_fd));
  absl::MutexLock lock(&store->mu_);
  if (absl::Status s = store->Load(); !s.ok()) return s;
  return store;
}

GroupKeyStore::~GroupKeyStore() {
  absl::MutexLock lock(&mu_);
  if (log_fd_ >= 0) ::close(log_fd_);
  ::close(lock_fd_);  // releases the flock
}

void GroupKeyStore::Remember(GroupKeyRecord record) {
  tables_.insert(record.table());
  std::string id = GroupId(record.table(), record.root());
  auto [it, inserted] = groups_.try_emplace(std::move(id));
  if (!inserted && it->second.destroyed()) return;  // a tombstone is forever
  if (record.destroyed()) {
    ++destroyed_;
    record.clear_wrapped();
    record.clear_kek();
  }
  it->second = std::move(record);
}

absl::Status GroupKeyStore::Load() {
  const std::string snapshot_path = dir_ + "/group-keys";
  absl::StatusOr<std::string> snapshot = ReadChecksummedFile(snapshot_path, size_t{1} << 30);
  if (snapshot.ok()) {
    GroupKeySnapshot s;
    if (!s.ParseFromString(*snapshot))
      return absl::DataLossError(StrCat(snapshot_path, ": not a group key snapshot"));
    for (GroupKeyRecord& r : *s.mutable_groups()) Remember(std::move(r));
  } else if (!absl::IsNotFound(snapshot.status())) {
    return snapshot.status();
  }
  const std::string log_path = dir_ + "/group-keys.log";
  absl::StatusOr<std::string> log = ReadFileToString(log_path, size_t{1} << 30);
  if (!log.ok() && !absl::IsNotFound(log.status())) return log.status();
  uint64_t replayed = 0;
  if (log.ok()) {
    std::string_view in = *log;
    while (!in.empty()) {
      const size_t offset = log->size() - in.size();
      uint32_t length = 0, masked = 0;
      std::string_view record = in;
      const bool header = ConsumeFixed32(&record, &length) && ConsumeFixed32(&record, &masked);
      // A length no record has is damage, wherever it is; a torn append
      // has a whole, sane header or none.
      if (header && length > kMaxRecordBytes)
        return absl::DataLossError(StrCat(log_path, ": the record at offset ", offset, " claims ",
                                          length, " bytes; the file is damaged"));
      if (!header || record.size() < length) {
        // A torn append: the process died writing it, so it was never
        // used. Its bytes are kept aside anyway (the records before it go
        // into the snapshot), in case they were something else.
        const std::string aside = StrCat(log_path, ".torn-", absl::ToUnixSeconds(absl::Now()));
        MS_LOG_WARN(
            "{}: a torn record at offset {} (a crash while appending); "
            "its {} bytes are kept as {}",
            log_path, offset, in.size(), aside);
        if (absl::Status s = WriteFileAtomically(aside, std::string(in), 0600); !s.ok()) return s;
        break;
      }
      const std::string_view payload = record.substr(0, length);
      GroupKeyRecord r;
      if (crc32c::Unmask(masked) != crc32c::Value(payload) ||
          !r.ParseFromString(std::string(payload)))
        return absl::DataLossError(StrCat(log_path, ": the record at offset ", offset,
                                          " fails its checksum; the file is "
                                          "damaged (restore the key directory "
                                          "from its own backup)"));
      Remember(std::move(r));
      ++replayed;
      in = record.substr(length);
    }
  }
  log_fd_ = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd_ < 0) return Errno("cannot open", log_path);
  // The log's (and LOCK's) directory entries survive a crash.
  if (absl::Status s = SyncDir(dir_); !s.ok()) return s;
  // Anything in the log (possibly a torn tail, or a record a crash left
  // after a destroy) goes into a fresh snapshot.
  if (log.ok() && !log->empty()) return Compact();
  return absl::OkStatus();
}

absl::Status GroupKeyStore::Append(const GroupKeyRecord& record) {
  const std::string payload = record.SerializeAsString();
  std::string framed;
  PutFixed32(&framed, static_cast<uint32_t>(payload.size()));
  PutFixed32(&framed, crc32c::Mask(crc32c::Value(payload)));
  framed += payload;
  const std::string path = dir_ + "/group-keys.log";
  if (!broken_.ok()) return broken_;
  const off_t before = ::lseek(log_fd_, 0, SEEK_END);
  if (before < 0) return Errno("cannot seek in", path);
  // A failed append is taken back, so later records never follow a
  // partial one; if even that fails, the store refuses writes until it is
  // reopened (and Load sees the damage).
  auto undo = [&](absl::Status why) {
    if (::ftruncate(log_fd_, before) != 0 || ::fdatasync(log_fd_) != 0)
      broken_ = absl::Status(why.code(), StrCat(why.message(),
                                                "; taking the partial record back failed too: "
                                                "the key directory refuses new keys until it is "
                                                "compacted (a destroy) or reopened"));
    return why;
  };
  size_t done = 0;
  while (done < framed.size()) {
    const ssize_t n = ::write(log_fd_, framed.data() + done, framed.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return undo(Errno("cannot append to", path));
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(log_fd_) != 0) return undo(Errno("cannot sync", path));
  ++log_records_;
  return absl::OkStatus();
}

absl::Status GroupKeyStore::Compact() {
  GroupKeySnapshot snapshot;
  for (const auto& [id, r] : groups_) *snapshot.add_groups() = r;
  if (absl::Status s =
          WriteChecksummedFile(dir_ + "/group-keys", snapshot.SerializeAsString(), 0600);
      !s.ok())
    return s;
  const std::string path = dir_ + "/group-keys.log";
  if (::ftruncate(log_fd_, 0) != 0) return Errno("cannot truncate", path);
  if (::fsync(log_fd_) != 0) return Errno("cannot sync", path);
  log_records_ = 0;
  needs_compaction_ = false;
  broken_ = absl::OkStatus();  // the log is empty: nothing partial in it
  return absl::OkStatus();
}

absl::StatusOr<std::string> GroupKeyStore::Secret(std::string_view table, std::string_view root,
                                                  bool create) {
  const std::string id = GroupId(table, root);
  absl::MutexLock lock(&mu_);
  if (auto it = groups_.find(id); it != groups_.end()) {
    const GroupKeyRecord& r = it->second;
    if (r.destroyed())
      return absl::FailedPreconditionError(
          StrCat("the key of entity group ", EscapeBytes(root), " of table ", table,
                 " was destroyed: its data can no longer be read or written"));
    absl::StatusOr<std::string> secret = provider_->Unwrap(r.kek(), r.wrapped(), id);
    if (!secret.ok())
      return absl::DataLossError(StrCat("the key of entity group ", EscapeBytes(root), " of table ",
                                        table, " does not unwrap with key-encryption key ", r.kek(),
                                        " of ", provider_->Describe(), ": ",
                                        secret.status().message()));
    return secret;
  }
  if (!create)
    return absl::NotFoundError(
        StrCat("entity group ", EscapeBytes(root), " of table ", table, " has no key in ", dir_));
  std::string secret = crypto::RandomBytes(crypto::kKeyBytes);
  GroupKeyRecord r;
  r.set_table(std::string(table));
  r.set_root(std::string(root));
  r.set_kek(provider_->active());
  absl::StatusOr<std::string> wrapped = provider_->Wrap(secret, id);
  if (!wrapped.ok()) return wrapped.status();
  r.set_wrapped(std::move(*wrapped));
  r.set_created_micros(NowMicros());
  if (absl::Status s = Append(r); !s.ok()) return s;
  tables_.insert(r.table());
  groups_[id] = std::move(r);
  if (log_records_ > 4096 && log_records_ > groups_.size() / 2) {
    if (absl::Status s = Compact(); !s.ok())
      MS_LOG_WARN("compacting key directory {}: {}", dir_, s.ToString());
  }
  return secret;
}

absl::StatusOr<bool> GroupKeyStore::Destroy(std::string_view table, std::string_view root) {
  const std::string id = GroupId(table, root);
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(id);
  const bool had = it != groups_.end() && !it->second.destroyed();
  if (it == groups_.end() || !it->second.destroyed()) {
    GroupKeyRecord tombstone;
    tombstone.set_table(std::string(table));
    tombstone.set_root(std::string(root));
    tombstone.set_destroyed(true);
    tombstone.set_created_micros(NowMicros());
    // In memory first: whatever the files say, this process never hands
    // the secret out again.
    groups_[id] = tombstone;
    tables_.insert(std::string(table));
    ++destroyed_;
    needs_compaction_ = true;
    // If the append fails, the snapshot still takes the tombstone.
    if (absl::Status s = Append(tombstone); !s.ok()) {
      if (absl::Status c = Compact(); !c.ok()) return s;
      return had;
    }
  }
  // The wrapped secret may still be in the snapshot or the log: rewrite
  // both without it (again, if an earlier try failed).
  if (needs_compaction_) {
    if (absl::Status s = Compact(); !s.ok()) return s;
  }
  return had;
}

absl::StatusOr<uint64_t> GroupKeyStore::Rotate() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<uint32_t> kek = provider_->Rotate();
  if (!kek.ok()) return kek.status();
  // Re-wrap into a copy: if anything fails, the store keeps its records
  // (the old KEK is still in the provider, so they still open).
  absl::flat_hash_map<std::string, GroupKeyRecord> next = groups_;
  uint64_t rewrapped = 0;
  for (auto& [id, r] : next) {
    if (r.destroyed() || r.kek() == *kek) continue;
    absl::StatusOr<std::string> secret = provider_->Unwrap(r.kek(), r.wrapped(), id);
    if (!secret.ok())
      return absl::DataLossError(StrCat("re-wrapping the key of entity group ",
                                        EscapeBytes(r.root()), " of table ", r.table(), ": ",
                                        secret.status().message()));
    absl::StatusOr<std::string> wrapped = provider_->Wrap(*secret, id);
    if (!wrapped.ok()) return wrapped.status();
    r.set_kek(*kek);
    r.set_wrapped(std::move(*wrapped));
    ++rewrapped;
  }
  groups_.swap(next);
  if (absl::Status s = Compact(); !s.ok()) {
    groups_.swap(next);
    return s;
  }
  if (absl::Status s = provider_->RetireInactive(); !s.ok()) return s;
  return rewrapped;
}

bool GroupKeyStore::HasTable(std::string_view table) const {
  absl::MutexLock lock(&mu_);
  return tables_.contains(absl::string_view(table.data(), table.size()));
}

bool GroupKeyStore::HasAnyTable() const {
  absl::MutexLock lock(&mu_);
  return !tables_.empty();
}

GroupKeyStore::Stats GroupKeyStore::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.destroyed = destroyed_;
  s.groups = groups_.size() - destroyed_;
  return s;
}

}  // namespace megastore::replication
