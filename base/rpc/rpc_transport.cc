#include "base/rpc/rpc_transport.h"

namespace megastore::rpc {

RpcTransport::~RpcTransport() {
  // Destroying the clients fails their pending calls (Cancelled) first.
  std::map<std::string, std::unique_ptr<RpcClient>, std::less<>> clients;
  {
    absl::MutexLock lock(&mu_);
    clients.swap(clients_);
  }
}

RpcClient* RpcTransport::ClientFor(std::string_view to) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(to);
  if (it == clients_.end()) {
    ClientOptions o;
    o.server = std::string(to);
    o.connect_timeout = absl::Seconds(2);
    it = clients_.emplace(std::string(to), std::make_unique<RpcClient>(o)).first;
  }
  return it->second.get();
}

void RpcTransport::Call(std::string_view to, std::string_view method, std::string request,
                        absl::Duration timeout, ReplyCallback done) {
  // RpcClient takes a copyable callback.
  auto shared = std::make_shared<ReplyCallback>(std::move(done));
  std::function<void(absl::StatusOr<std::string>)> reply = [shared](absl::StatusOr<std::string> r) {
    (*shared)(std::move(r));
  };
  if (InProcessCalls() && CallInProcess(to, method, request, timeout, reply)) return;
  ClientFor(to)->CallAsync(method, std::move(request), timeout, std::move(reply));
}

void Serve(RpcServer& server, std::string method, megastore::Handler handler) {
  server.Register(std::move(method),
                  [handler = std::move(handler)](const CallContext&, std::string_view request,
                                                 std::shared_ptr<rpc::Responder> responder) {
                    handler(std::string(request), [responder](absl::StatusOr<std::string> reply) {
                      if (reply.ok()) return responder->Finish(absl::OkStatus(), std::move(*reply));
                      responder->Finish(reply.status());
                    });
                  });
}

}  // namespace megastore::rpc
