// A LockService over RPC: LockServiceRpc serves one (the embedded
// lock service of a megastored running the `lock` role) as methods "ls.*";
// RemoteLockService is the LockService of a process that reaches it over
// TCP. Watches are ls.Watch streams of bounded length that the client
// renews from the last revision it saw, so no stream outlives its client
// for long.
#pragma once

#include <memory>
#include <string>

#include "base/env.h"
#include "base/rpc/rpc.h"
#include "storage/lock/lock_service.h"

namespace megastore::storage::lock {

class LsRequest;  // lock.proto
class LsReply;

// Serves a LockService as "ls.*" methods. Destroy it after the RPC server
// has stopped and before the service: it ends the watch streams still open.
class LockServiceRpc {
 public:
  // `service` and `env` must outlive this object.
  LockServiceRpc(LockService* service, Env* env);
  ~LockServiceRpc();
  // Registers the methods on `rpc` (before rpc->Start()).
  void Register(rpc::RpcServer* rpc);

 private:
  struct Streams;
  LockService* const service_;
  Env* const env_;
  std::shared_ptr<Streams> streams_;
};

class RemoteLockService : public LockService {
 public:
  explicit RemoteLockService(std::string address, absl::Duration timeout = absl::Seconds(5));
  ~RemoteLockService() override;

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

  // How long one ls.Watch stream runs before the client renews it.
  static constexpr absl::Duration kWatchStream = absl::Seconds(30);

 private:
  void Unary(const std::string& method, const LsRequest& request,
             absl::AnyInvocable<void(absl::StatusOr<LsReply>)> done);

  const absl::Duration timeout_;
  std::shared_ptr<rpc::RpcClient> rpc_;
};

}  // namespace megastore::storage::lock
