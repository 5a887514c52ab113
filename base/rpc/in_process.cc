// In-process calls (rpc.h: CallInProcess): a call to an RpcServer of this
// process goes straight to its workers, without TCP.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc_internal.h"
#include "base/tls/certs.h"

namespace megastore::rpc {

using rpc_internal::DispatchLocal;
using rpc_internal::ToSteady;

namespace {

// The servers of this process by the addresses callers name them with.
struct LocalServers {
  absl::Mutex mu;
  std::map<std::string, std::weak_ptr<RpcServer::Impl>, std::less<>> by_address ABSL_GUARDED_BY(mu);
};
LocalServers& Locals() {
  static LocalServers* locals = new LocalServers;  // never destroyed: used until exit
  return *locals;
}
std::atomic<bool> in_process_calls{true};

// Where in-process answers and deadlines run: never on a handler's stack
// (it may hold its locks), never on a server's pool (it may be stopping).
asio::thread_pool& CompletionPool() {
  static asio::thread_pool* pool = new asio::thread_pool(4);
  return *pool;
}

// The principal a TCP call from this process would present: the common
// name of its certificate (empty over plaintext).
std::string OwnPrincipal() {
  const TlsFiles files = DefaultTls();
  if (!files.enabled()) return "";
  static absl::Mutex mu;
  static std::map<std::string, std::string>* by_cert = new std::map<std::string, std::string>;
  absl::MutexLock lock(&mu);
  auto it = by_cert->find(files.cert);
  if (it != by_cert->end()) return it->second;
  absl::StatusOr<tls::CertificateInfo> info = tls::ReadCertificateInfo(files.cert);
  const std::string principal = info.ok() ? info->subject_common_name : "";
  (*by_cert)[files.cert] = principal;
  return principal;
}

// One in-process call: answered once, by the handler or by its deadline,
// on its own strand of the completion pool.
struct LocalCall : std::enable_shared_from_this<LocalCall> {
  using Strand = asio::strand<asio::thread_pool::executor_type>;
  LocalCall(Strand s, std::function<void(absl::StatusOr<std::string>)> d)
      : strand(std::move(s)), timer(strand), done(std::move(d)) {}
  void Complete(absl::StatusOr<std::string> reply) {
    if (finished.exchange(true)) return;
    asio::post(strand, [self = shared_from_this(), reply = std::move(reply)]() mutable {
      self->timer.cancel();
      auto done = std::move(self->done);
      done(std::move(reply));
    });
  }
  Strand strand;
  asio::steady_timer timer;  // on the strand
  std::function<void(absl::StatusOr<std::string>)> done;
  std::atomic<bool> finished{false};
};

class LocalResponder : public Responder {
 public:
  LocalResponder(std::shared_ptr<LocalCall> call, std::weak_ptr<RpcServer::Impl> server)
      : call_(std::move(call)), server_(std::move(server)) {}
  ~LocalResponder() override {
    if (!finished_)
      call_->Complete(absl::UnavailableError("the server dropped the call without answering"));
  }
  void Send(std::string) override {}  // unary: a streamed message has no reader
  void Finish(absl::Status status, std::string body) override {
    if (finished_.exchange(true)) return;
    // A stopped server's answers never reach a TCP client either.
    std::shared_ptr<RpcServer::Impl> server = server_.lock();
    if (server == nullptr || rpc_internal::ServerStopped(*server))
      return call_->Complete(absl::UnavailableError("the server stopped before it answered"));
    if (!status.ok()) return call_->Complete(std::move(status));
    if (body.size() > kDefaultMaxFrameBytes)
      return call_->Complete(absl::UnavailableError(StrCat("a reply of ", body.size(),
                                                           " bytes is over the client's limit of ",
                                                           kDefaultMaxFrameBytes)));
    call_->Complete(std::move(body));
  }

 private:
  std::shared_ptr<LocalCall> call_;
  std::weak_ptr<RpcServer::Impl> server_;
  std::atomic<bool> finished_{false};
};

}  // namespace

namespace rpc_internal {

void RegisterLocalServer(const std::vector<std::string>& addresses,
                         const std::shared_ptr<RpcServer::Impl>& server) {
  LocalServers& locals = Locals();
  absl::MutexLock lock(&locals.mu);
  for (const std::string& a : addresses) locals.by_address[a] = server;
}

void UnregisterLocalServer(const std::vector<std::string>& addresses,
                           const RpcServer::Impl* server) {
  LocalServers& locals = Locals();
  absl::MutexLock lock(&locals.mu);
  for (const std::string& a : addresses) {
    auto it = locals.by_address.find(a);
    if (it != locals.by_address.end() && it->second.lock().get() == server)
      locals.by_address.erase(it);
  }
}

}  // namespace rpc_internal

void SetInProcessCalls(bool enabled) { in_process_calls = enabled; }
bool InProcessCalls() { return in_process_calls.load(); }

bool CallInProcess(std::string_view to, std::string_view method, std::string& request,
                   absl::Duration timeout, std::function<void(absl::StatusOr<std::string>)>& done) {
  std::shared_ptr<RpcServer::Impl> server;
  {
    LocalServers& locals = Locals();
    absl::MutexLock lock(&locals.mu);
    auto it = locals.by_address.find(to);
    if (it == locals.by_address.end()) return false;
    server = it->second.lock();
  }
  if (server == nullptr) return false;
  CallContext ctx;
  ctx.peer = "in-process";
  ctx.principal = OwnPrincipal();
  ctx.timeout = timeout;
  // Made only once the server takes the call: until then `done` stays the
  // caller's.
  auto make_responder = [&]() -> std::shared_ptr<Responder> {
    auto call = std::make_shared<LocalCall>(asio::make_strand(CompletionPool().get_executor()),
                                            std::move(done));
    if (rpc_internal::HasDeadline(timeout)) {
      call->timer.expires_after(ToSteady(timeout));
      call->timer.async_wait([weak = std::weak_ptr<LocalCall>(call), timeout,
                              method = std::string(method)](const error_code& ec) {
        if (ec) return;  // answered: cancelled
        if (auto c = weak.lock())
          c->Complete(absl::DeadlineExceededError(
              StrCat(method, ": no answer within ", absl::FormatDuration(timeout))));
      });
    }
    return std::make_shared<LocalResponder>(call, server);
  };
  return DispatchLocal(*server, method, request, std::move(ctx), make_responder);
}

}  // namespace megastore::rpc
