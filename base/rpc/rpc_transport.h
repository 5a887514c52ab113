// The production Transport: requests travel as RPCs (base/rpc) to nodes
// named "host:port". One RpcClient per destination, created on first use.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/rpc/rpc.h"
#include "base/transport.h"

namespace megastore::rpc {

class RpcTransport : public Transport {
 public:
  RpcTransport();
  ~RpcTransport() override;

  void Call(std::string_view to, std::string_view method, std::string request,
            absl::Duration timeout, ReplyCallback done) override;

 private:
  RpcClient* ClientFor(std::string_view to);

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<RpcClient>, std::less<>> clients_ ABSL_GUARDED_BY(mu_);
  // Calls made in-process and not answered yet: as over TCP, the
  // destructor fails them with Cancelled, and answers after that are
  // dropped (their callbacks may point into objects already gone).
  struct LocalCalls;
  std::shared_ptr<LocalCalls> local_;
};

// Serves a Transport-style handler as `method` on `server` (before Start()).
void Serve(RpcServer& server, std::string method, megastore::Handler handler);

}  // namespace megastore::rpc
