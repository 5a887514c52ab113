#include "base/rpc/rpc_transport.h"

namespace megastore::rpc {

struct RpcTransport::LocalCalls {
  absl::Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, std::shared_ptr<ReplyCallback>> pending ABSL_GUARDED_BY(mu);
  int running ABSL_GUARDED_BY(mu) = 0;  // answers being delivered right now
  bool closed ABSL_GUARDED_BY(mu) = false;
};

RpcTransport::RpcTransport() : local_(std::make_shared<LocalCalls>()) {}

RpcTransport::~RpcTransport() {
  // In-process calls still unanswered fail with Cancelled, as the clients'
  // do below; an answer being delivered is waited for, later ones dropped.
  std::map<uint64_t, std::shared_ptr<ReplyCallback>> pending;
  {
    absl::MutexLock lock(&local_->mu);
    local_->closed = true;
    local_->mu.Await(absl::Condition(
        +[](LocalCalls* l) ABSL_NO_THREAD_SAFETY_ANALYSIS { return l->running == 0; },
        local_.get()));
    pending.swap(local_->pending);
  }
  for (auto& [id, done] : pending) (*done)(absl::CancelledError("the transport is closing"));
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
  if (InProcessCalls()) {
    uint64_t id;
    {
      absl::MutexLock lock(&local_->mu);
      id = ++local_->next_id;
      local_->pending[id] = shared;
    }
    std::function<void(absl::StatusOr<std::string>)> local = [calls = local_,
                                                              id](absl::StatusOr<std::string> r) {
      std::shared_ptr<ReplyCallback> done;
      {
        absl::MutexLock lock(&calls->mu);
        auto it = calls->pending.find(id);
        if (calls->closed || it == calls->pending.end()) return;  // cancelled meanwhile
        done = std::move(it->second);
        calls->pending.erase(it);
        ++calls->running;
      }
      (*done)(std::move(r));
      absl::MutexLock lock(&calls->mu);
      --calls->running;
    };
    if (CallInProcess(to, method, request, timeout, local)) return;
    absl::MutexLock lock(&local_->mu);
    local_->pending.erase(id);
  }
  std::function<void(absl::StatusOr<std::string>)> reply = [shared](absl::StatusOr<std::string> r) {
    (*shared)(std::move(r));
  };
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
