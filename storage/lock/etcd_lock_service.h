// EtcdLockService: the lock service on a real etcd 3.4 cluster, through
// etcd's v3 API (its JSON gateway over HTTP): sessions are leases (their
// TTL rounded up to whole seconds), Create and a versioned Delete are
// transactions comparing create_revision / mod_revision, List is a range
// read, watches are /v3/watch streams. A file's version is its
// mod_revision. Paths are stored as keys under an optional prefix, so
// several cells can share one etcd.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "storage/lock/lock_service.h"

namespace megastore::storage::lock {

struct EtcdOptions {
  // Client URLs' HOST:PORT of etcd members; requests go to the first that
  // answers.
  std::vector<std::string> endpoints;
  std::string key_prefix;  // prepended to every path
  absl::Duration timeout = absl::Seconds(5);
  int threads = 4;  // running requests (calls are asynchronous)
};

class EtcdLockService : public LockService {
 public:
  explicit EtcdLockService(EtcdOptions options);
  ~EtcdLockService() override;  // waits for running requests; stops watches

  void OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) override;
  void KeepAlive(SessionId session, Callback<absl::Status> done) override;
  void CloseSession(SessionId session, Callback<absl::Status> done) override;
  void Put(std::string path, std::string contents, SessionId session,
           Callback<absl::StatusOr<int64_t>> done) override;
  void Create(std::string path, std::string contents, SessionId session,
              Callback<absl::StatusOr<bool>> done) override;
  void Get(std::string path, Callback<absl::StatusOr<std::optional<FileInfo>>> done) override;
  void List(std::string prefix, Callback<absl::StatusOr<Listing>> done) override;
  void Delete(std::string path, int64_t if_version, Callback<absl::StatusOr<bool>> done) override;
  std::unique_ptr<Watch> WatchPrefix(std::string prefix, int64_t after,
                                     std::function<void(const WatchEvent&)> on_event,
                                     std::function<void(const absl::Status&)> on_error) override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace megastore::storage::lock
