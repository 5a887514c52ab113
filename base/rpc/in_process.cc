// In-process calls (rpc.h: CallInProcess): a call to an RpcServer of this
// process goes straight to its workers, without TCP.
#include <chrono>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc_internal.h"
#include "base/thread_name.h"
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

// Where in-process answers run unless held on a worker: never on a
// handler's stack (it may hold its locks), never on a server's pool (it
// may be stopping).
asio::thread_pool& CompletionPool() {
  static asio::thread_pool* pool = new asio::thread_pool(4);
  return *pool;
}

thread_local rpc_internal::HeldAnswers* held_answers = nullptr;

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

struct LocalCall;

// The deadlines of unanswered in-process calls, watched by one thread for
// the process. A call's answer takes its deadline out; the thread sleeps
// until the earliest one, and is woken by a new call only when that call's
// deadline comes well before it (so calls with similar timeouts never wake
// it).
class LocalDeadlines {
 public:
  using Queue = std::multimap<int64_t, std::weak_ptr<LocalCall>>;
  static LocalDeadlines& Get() {
    static LocalDeadlines* deadlines = new LocalDeadlines;  // used until exit
    return *deadlines;
  }
  // Watches `call`, due at `due` (steady-clock microseconds).
  void Add(LocalCall* call, const std::shared_ptr<LocalCall>& shared, int64_t due);
  // Stops watching `call` (nothing if its deadline already fired).
  void Remove(LocalCall* call);

 private:
  LocalDeadlines() = default;
  void Loop();
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // A wake-up this much earlier than planned is not worth a hand-off.
  static constexpr int64_t kSlackMicros = 2000;

  absl::Mutex mu_;
  absl::CondVar wake_;
  Queue queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  // When the thread will look next (INT64_MAX: when woken).
  int64_t next_look_ ABSL_GUARDED_BY(mu_) = INT64_MAX;
};

// One in-process call: answered once, by the handler or by its deadline,
// on the completion pool (or on the worker that answered it, held there
// until its handler returned).
struct LocalCall : std::enable_shared_from_this<LocalCall> {
  LocalCall(std::function<void(absl::StatusOr<std::string>)> d, std::string_view m,
            absl::Duration t)
      : done(std::move(d)), method(m), timeout(t) {}
  void Complete(absl::StatusOr<std::string> reply) {
    if (finished.exchange(true)) return;
    if (watched) LocalDeadlines::Get().Remove(this);
    std::function<void()> answer = [self = shared_from_this(), reply = std::move(reply)]() mutable {
      auto done = std::move(self->done);
      done(std::move(reply));
    };
    if (held_answers != nullptr) return held_answers->Hold(std::move(answer));
    asio::post(CompletionPool(), [answer = std::move(answer)] {
      NameThreadOnce("ms-rpc-complete");
      answer();
    });
  }
  void Expire() {
    Complete(absl::DeadlineExceededError(
        StrCat(method, ": no answer within ", absl::FormatDuration(timeout))));
  }
  std::function<void(absl::StatusOr<std::string>)> done;
  const std::string method;
  const absl::Duration timeout;
  std::atomic<bool> finished{false};
  bool watched = false;  // set before the call is dispatched
  // Where it waits in LocalDeadlines' queue (guarded by its mutex).
  std::optional<LocalDeadlines::Queue::iterator> in_queue;
};

void LocalDeadlines::Add(LocalCall* call, const std::shared_ptr<LocalCall>& shared, int64_t due) {
  absl::MutexLock lock(&mu_);
  call->in_queue = queue_.emplace(due, shared);
  if (!running_) {
    running_ = true;
    std::thread([this] {  // lives as long as the process
      SetThreadName("ms-deadlines");
      Loop();
    })
        .detach();
  }
  if (due + kSlackMicros < next_look_) wake_.Signal();
}

void LocalDeadlines::Remove(LocalCall* call) {
  absl::MutexLock lock(&mu_);
  if (!call->in_queue) return;
  queue_.erase(*call->in_queue);
  call->in_queue.reset();
}

void LocalDeadlines::Loop() {
  std::vector<std::shared_ptr<LocalCall>> due;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        const int64_t now = Now();
        while (!queue_.empty() && queue_.begin()->first <= now) {
          if (std::shared_ptr<LocalCall> c = queue_.begin()->second.lock()) {
            c->in_queue.reset();
            due.push_back(std::move(c));
          }
          queue_.erase(queue_.begin());
        }
        if (!due.empty()) break;
        next_look_ = queue_.empty() ? INT64_MAX : queue_.begin()->first;
        if (next_look_ == INT64_MAX) {
          wake_.Wait(&mu_);
        } else {
          wake_.WaitWithTimeout(&mu_, absl::Microseconds(next_look_ - now));
        }
      }
      next_look_ = 0;  // awake: nobody needs to signal
    }
    for (auto& c : due) c->Expire();
    due.clear();
  }
}

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

HeldAnswers* SetHeldAnswers(HeldAnswers* held) { return std::exchange(held_answers, held); }

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
    auto call = std::make_shared<LocalCall>(std::move(done), method, timeout);
    if (rpc_internal::HasDeadline(timeout)) {
      call->watched = true;
      LocalDeadlines::Get().Add(
          call.get(), call,
          std::chrono::duration_cast<std::chrono::microseconds>(
              (std::chrono::steady_clock::now() + ToSteady(timeout)).time_since_epoch())
              .count());
    }
    return std::make_shared<LocalResponder>(call, server);
  };
  // An answer given while the call is dispatched (an inline handler's, a
  // refusal) never waits on this thread: the caller may block for it.
  struct Unhold {
    rpc_internal::HeldAnswers* outer = rpc_internal::SetHeldAnswers(nullptr);
    ~Unhold() { rpc_internal::SetHeldAnswers(outer); }
  } unhold;
  return DispatchLocal(*server, method, request, std::move(ctx), make_responder);
}

}  // namespace megastore::rpc
