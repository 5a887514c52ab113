#include "sim/sim_rpc.h"

#include <cstring>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::sim {
namespace {

// A reply on the simulated wire: the count of messages, then each message
// as a 4-byte length and its bytes; the last is the final body.
std::string Pack(const std::vector<std::string>& messages) {
  std::string out;
  auto put32 = [&out](uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  };
  put32(static_cast<uint32_t>(messages.size()));
  for (const std::string& m : messages) {
    put32(static_cast<uint32_t>(m.size()));
    out += m;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Unpack(const std::string& packed) {
  std::vector<std::string> out;
  size_t at = 0;
  auto get32 = [&](uint32_t* v) {
    if (packed.size() - at < 4) return false;
    std::memcpy(v, packed.data() + at, 4);
    at += 4;
    return true;
  };
  uint32_t n = 0;
  if (!get32(&n)) return absl::DataLossError("simulated RPC reply without a count");
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    if (!get32(&len) || packed.size() - at < len)
      return absl::DataLossError("truncated simulated RPC reply");
    out.emplace_back(packed.substr(at, len));
    at += len;
  }
  if (out.empty()) return absl::DataLossError("simulated RPC reply without a body");
  return out;
}

// Collects a handler's answers; the reply leaves once Finish is called.
class PackingResponder : public rpc::Responder {
 public:
  explicit PackingResponder(megastore::Responder respond) : respond_(std::move(respond)) {}
  ~PackingResponder() override {
    absl::MutexLock lock(&mu_);
    if (respond_) respond_(absl::InternalError("the handler dropped the call without answering"));
  }
  void Send(std::string body) override {
    absl::MutexLock lock(&mu_);
    if (respond_) messages_.push_back(std::move(body));
  }
  void Finish(absl::Status status, std::string body) override {
    megastore::Responder respond;
    std::vector<std::string> messages;
    {
      absl::MutexLock lock(&mu_);
      if (!respond_) return;
      respond = std::move(respond_);
      respond_ = nullptr;
      messages = std::move(messages_);
    }
    if (!status.ok()) return respond(std::move(status));
    messages.push_back(std::move(body));
    respond(Pack(messages));
  }

 private:
  absl::Mutex mu_;
  megastore::Responder respond_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

SimRegistry::SimRegistry(SimNetwork* net, Env* env, std::string address)
    : net_(net), env_(env), address_(std::move(address)) {}

SimRegistry::~SimRegistry() {
  Drain();
  tasks_.clear();
}

void SimRegistry::Drain() {
  for (Task& t : tasks_) t.thread->Join();
  tasks_.clear();
}

void SimRegistry::Register(std::string method, rpc::Handler handler) {
  Serve(method, nullptr, std::move(handler));
}

void SimRegistry::RegisterInline(std::string method, rpc::InlineHandler inline_handler,
                                 rpc::Handler handler) {
  Serve(method, std::move(inline_handler), std::move(handler));
}

void SimRegistry::Serve(const std::string& method, rpc::InlineHandler inline_handler,
                        rpc::Handler handler) {
  net_->SetHandler(
      address_, method,
      [this, method, inline_handler, handler](std::string request, megastore::Responder respond) {
        rpc::CallContext ctx;
        ctx.peer = "sim";
        std::shared_ptr<rpc::Responder> responder =
            std::make_shared<PackingResponder>(std::move(respond));
        if (inline_handler && inline_handler(ctx, request, responder)) return;
        // Finished tasks are joined (their threads released) as new ones start.
        std::erase_if(tasks_, [](const Task& t) { return *t.done; });
        ++*running_;
        auto done = std::make_shared<bool>(false);
        tasks_.push_back(Task{env_->StartThread(StrCat(address_, " ", method),
                                                [handler, ctx, request = std::move(request),
                                                 responder, running = running_, done]() mutable {
                                                  handler(ctx, request, std::move(responder));
                                                  --*running;
                                                  *done = true;
                                                }),
                              done});
      });
}

SimChannel::SimChannel(SimNetwork* net, Env* env, std::string from, std::string to)
    : net_(net), env_(env), from_(std::move(from)), to_(std::move(to)) {}

absl::StatusOr<std::vector<std::string>> SimChannel::Exchange(std::string_view method,
                                                              std::string request,
                                                              absl::Duration timeout) {
  if (!net_->up(from_)) return absl::CancelledError(StrCat(from_, " is down"));
  if (!net_->up(to_)) {
    // As the TCP client says it: the caller's retry logic knows this one
    // was never sent.
    env_->SleepFor(absl::Milliseconds(1));
    return absl::UnavailableError(StrCat("cannot connect to ", to_));
  }
  struct State {
    absl::Notification done;
    std::optional<absl::StatusOr<std::string>> reply;
  };
  auto state = std::make_shared<State>();
  auto finish = [state](absl::StatusOr<std::string> r) {
    if (state->done.HasBeenNotified()) return;
    state->reply = std::move(r);
    state->done.Notify();
  };
  net_->TransportFor(from_)->Call(to_, method, std::move(request), timeout, finish);
  // The network drops the callbacks of a crashed caller: our own timer
  // still ends the wait.
  const Env::TimerId guard = env_->Schedule(timeout + absl::Milliseconds(1), [finish]() mutable {
    finish(absl::DeadlineExceededError("request timed out"));
  });
  env_->Wait(state->done);
  env_->Cancel(guard);
  if (!state->reply->ok()) return state->reply->status();
  return Unpack(**state->reply);
}

absl::StatusOr<std::string> SimChannel::Call(std::string_view method, std::string request,
                                             absl::Duration timeout) {
  MS_ASSIGN_OR_RETURN(std::vector<std::string> messages,
                      Exchange(method, std::move(request), timeout));
  return std::move(messages.back());
}

absl::Status SimChannel::Stream(std::string_view method, std::string request,
                                absl::Duration timeout, const OnMessage& on_message) {
  MS_ASSIGN_OR_RETURN(std::vector<std::string> messages,
                      Exchange(method, std::move(request), timeout));
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    if (!on_message(messages[i])) break;
  }
  return absl::OkStatus();
}

rpc::Connector SimConnector(SimNetwork* net, Env* env, std::string from) {
  return [net, env, from](const std::string& address) -> std::shared_ptr<rpc::Channel> {
    return std::make_shared<SimChannel>(net, env, from, address);
  };
}

}  // namespace megastore::sim
