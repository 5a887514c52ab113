// The RPC client (base/rpc/rpc.h): one connection to a server, calls
// multiplexed on it, reconnection, deadlines and streams.
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
// clang-format off
#include <utility>  // before Boost 1.74's asio, which needs std::exchange
// clang-format on
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/checksum.h"
#include "base/coding.h"
#include "base/descriptors.h"
#include "base/logging.h"
#include "base/process_default.h"
#include "base/rpc/frame.h"
#include "base/rpc/listen.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc.pb.h"
#include "base/rpc/rpc_internal.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_name.h"

namespace megastore::rpc {

using rpc_internal::Buffers;
using rpc_internal::ReadBuffer;
using rpc_internal::ToStatus;

struct RpcClient::Impl : std::enable_shared_from_this<Impl> {
  using Clock = std::chrono::steady_clock;

  explicit Impl(ClientOptions o)
      : options(std::move(o)),
        socket(io),
        connect_timer(io),
        deadline_timer(io),
        frames(options.max_frame_bytes) {}

  struct Call {
    uint64_t id;
    std::string frame;
    absl::Duration timeout;
    Done done;
    OnMessage on_message;
  };
  struct Pending {
    Done done;
    OnMessage on_message;
    std::optional<std::multimap<Clock::time_point, uint64_t>::iterator> deadline;
  };

  // Any thread: queues a call; one wakeup of the io thread takes every call
  // queued meanwhile.
  void Submit(Call call) {
    {
      std::lock_guard<std::mutex> lock(submit_mu);
      submitted.push_back(std::move(call));
      if (drain_scheduled) return;
      drain_scheduled = true;
    }
    asio::post(io, [self = shared_from_this()] { self->Drain(); });
  }

  // Everything below runs on the client's one io thread.
  void Drain() {
    std::vector<Call> calls;
    {
      std::lock_guard<std::mutex> lock(submit_mu);
      calls.swap(submitted);
      drain_scheduled = false;
    }
    const Clock::time_point now = Clock::now();
    for (Call& c : calls) {
      Pending p{std::move(c.done), std::move(c.on_message), std::nullopt};
      if (rpc_internal::HasDeadline(c.timeout)) {
        const auto at = now + std::chrono::microseconds(absl::ToInt64Microseconds(c.timeout));
        p.deadline = deadlines.emplace(at, c.id);
        ArmDeadlineTimer(at);
      }
      pending.emplace(c.id, std::move(p));
      queue.push_back(std::move(c.frame));
    }
    if (connected) {
      if (!writing) WriteNext();
    } else if (!connecting) {
      Connect();
    }
  }

  // One timer for all deadlines, set to the earliest; a call that finishes
  // early leaves it alone (it fires, finds nothing due and moves on).
  void ArmDeadlineTimer(Clock::time_point at) {
    if (timer_armed && at >= timer_at) return;
    timer_armed = true;
    timer_at = at;
    deadline_timer.expires_at(at);
    deadline_timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;  // re-armed earlier, or shutting down
      self->timer_armed = false;
      self->ExpireDeadlines();
    });
  }

  void ExpireDeadlines() {
    const Clock::time_point now = Clock::now();
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      const uint64_t id = deadlines.begin()->second;
      Complete(id, absl::DeadlineExceededError(StrCat("call to ", options.server, " timed out")));
    }
    if (!deadlines.empty()) ArmDeadlineTimer(deadlines.begin()->first);
  }

  void Complete(uint64_t id, absl::StatusOr<std::string> result) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    Pending p = std::move(it->second);
    pending.erase(it);
    if (p.deadline) deadlines.erase(*p.deadline);
    p.done(std::move(result));
  }

  void FailAll(const absl::Status& s) {
    std::vector<uint64_t> ids;
    for (auto& [id, p] : pending) ids.push_back(id);
    for (uint64_t id : ids) Complete(id, s);
    queue.clear();
    std::vector<Direct*> direct_calls;
    {
      std::lock_guard<std::mutex> lock(direct_mu);
      for (auto& [id, d] : direct) direct_calls.push_back(d);
      direct.clear();
    }
    for (Direct* d : direct_calls) {
      d->result = s;
      d->done.Notify();
    }
  }

  // ---- calls sent by their caller's thread (plaintext, blocking Call) ----
  // A blocking call's frame goes out from the calling thread when the
  // connection is up and the I/O thread is not writing: no wake-up of the
  // I/O thread on the way out. The answer comes back as any other.
  struct Direct {
    absl::Notification done;
    absl::StatusOr<std::string> result;
  };

  void FinishDirect(uint64_t id, absl::StatusOr<std::string> result) {
    Direct* d = nullptr;
    {
      std::lock_guard<std::mutex> lock(direct_mu);
      auto it = direct.find(id);
      if (it == direct.end()) return;
      d = it->second;
      direct.erase(it);
    }
    d->result = std::move(result);
    d->done.Notify();
  }

  // Any thread. Registers call `id` (answered into `d`) and sends `frame`;
  // false, with nothing registered, if it was not sent at all (the caller
  // then submits it as usual). Registered only while the connection is up
  // (under send_mu): a connection that breaks later fails it in FailAll,
  // which runs after CloseSocket.
  bool SendDirect(uint64_t id, Direct* d, const std::string& frame) {
    std::lock_guard<std::mutex> lock(send_mu);
    if (!direct_ok || io_writing) return false;
    {
      std::lock_guard<std::mutex> direct_lock(direct_mu);
      direct[id] = d;
    }
    const ssize_t n =
        ::send(socket.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) {
      std::lock_guard<std::mutex> direct_lock(direct_mu);
      direct.erase(id);  // nothing sent: no answer can come
      return false;
    }
    if (static_cast<size_t>(n) < frame.size()) {
      // The rest before anything else: the I/O thread writes it next.
      direct_rest = frame.substr(static_cast<size_t>(n));
      io_writing = true;
      asio::post(io, [self = shared_from_this()] {
        if (!self->writing) self->WriteNext();
      });
    }
    return true;
  }

  void Connect() {
    std::string host;
    uint16_t port;
    absl::Status s = ParseHostPort(options.server, &host, &port);
    if (!s.ok()) return FailAll(s);
    if (options.tls.enabled()) {
      // This process's certificate now: a reload changes it for the next
      // connection.
      if (!tls_ref.held()) {
        absl::StatusOr<tls::ContextRef> ref =
            tls::ContextRef::Acquire(options.tls, /*server=*/false);
        if (!ref.ok()) return FailAll(ref.status());
        tls_ref = *std::move(ref);
      }
      tls_context = tls_ref.Current();
    }
    connecting = true;
    ++generation;
    error_code ec;
    tls.reset();
    socket = tcp::socket(io);
    frames.Reset();
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) {
      connecting = false;
      return FailAll(
          absl::UnavailableError(StrCat("cannot resolve ", options.server, ": ", ec.message())));
    }
    connect_timer.expires_after(
        std::chrono::microseconds(absl::ToInt64Microseconds(options.connect_timeout)));
    connect_timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->connecting) self->CloseSocket();
    });
    asio::async_connect(
        socket, endpoints,
        [self = shared_from_this(), host, gen = generation](error_code ec, const tcp::endpoint&) {
          if (gen != self->generation) return;
          if (ec) {
            self->connecting = false;
            self->connect_timer.cancel();
            return self->FailAll(absl::UnavailableError(
                StrCat("cannot connect to ", self->options.server, ": ", ec.message())));
          }
          error_code ignored;
          self->socket.set_option(tcp::no_delay(true), ignored);
          if (self->tls_context == nullptr) return self->Connected();
          // Mutual TLS: the server's certificate must be the CA's, for `host`.
          auto stream =
              std::make_shared<ClientTlsStream>(std::move(self->socket), *self->tls_context);
          self->socket = tcp::socket(self->io);
          self->tls = stream;
          stream->set_verify_callback(ssl::host_name_verification(host));
          error_code not_ip;
          asio::ip::make_address(host, not_ip);
          if (not_ip) SSL_set_tlsext_host_name(stream->native_handle(), host.c_str());
          stream->async_handshake(
              ssl::stream_base::client, [self, stream, host, gen](error_code ec) {
                if (gen != self->generation) return;
                if (ec) {
                  self->connecting = false;
                  self->connect_timer.cancel();
                  self->CloseSocket();
                  return self->FailAll(absl::UnavailableError(StrCat(
                      "TLS handshake with ", self->options.server, " failed: ", ec.message(),
                      " (a plaintext server, or a certificate not issued by the CA or not for ",
                      host, "?)")));
                }
                self->Connected();
              });
        });
  }

  // Closes this connection's socket (inside its TLS stream, if any).
  void CloseSocket() {
    std::lock_guard<std::mutex> lock(send_mu);  // no direct send is using it
    direct_ok = false;
    direct_rest.clear();
    io_writing = false;
    error_code ignored;
    socket.close(ignored);
    if (tls) tls->next_layer().close(ignored);
  }

  void Connected() {
    heard_back = false;
    connecting = false;
    connect_timer.cancel();
    connected = true;
    {
      std::lock_guard<std::mutex> lock(send_mu);
      direct_ok = tls == nullptr;
    }
    Read();
    WriteNext();
  }

  // Writes every queued frame in one gathered write.
  void WriteNext() {
    {
      std::lock_guard<std::mutex> lock(send_mu);
      // A direct send's unsent rest goes first.
      if (!direct_rest.empty() && connected) {
        queue.insert(queue.begin(), std::move(direct_rest));
        direct_rest.clear();
      }
      io_writing = connected && !queue.empty();
    }
    if (queue.empty() || !connected) {
      writing = false;
      return;
    }
    writing = true;
    in_flight.clear();
    in_flight.swap(queue);
    auto written = [self = shared_from_this(), gen = generation](error_code ec, size_t) {
      if (gen != self->generation) return;  // an older connection
      if (ec) return self->Broken(StrCat("write failed: ", ec.message()));
      self->WriteNext();
    };
    if (tls) {
      asio::async_write(*tls, Buffers(in_flight),
                        [stream = tls, written = std::move(written)](
                            error_code ec, size_t n) mutable { written(ec, n); });
    } else {
      asio::async_write(socket, Buffers(in_flight), std::move(written));
    }
  }

  void Read() {
    auto got = [self = shared_from_this(), gen = generation](error_code ec, size_t n) {
      if (gen != self->generation) return;
      if (ec) {
        return self->Broken(
            StrCat(ec == asio::error::eof ? "server closed the connection" : ec.message(),
                   self->tls == nullptr && !self->heard_back
                       ? " before answering anything (does it require TLS?)"
                       : ""));
      }
      self->heard_back = true;
      self->frames.Commit(n);
      for (;;) {
        RpcEnvelope e;
        absl::StatusOr<bool> got = self->frames.Next(&e);
        if (!got.ok()) return self->Broken(std::string(got.status().message()));
        if (!*got) break;
        self->OnResponse(std::move(e));
      }
      self->Read();
    };
    if (tls) {
      tls->async_read_some(
          ReadBuffer(frames),
          [stream = tls, got = std::move(got)](error_code ec, size_t n) mutable { got(ec, n); });
    } else {
      socket.async_read_some(ReadBuffer(frames), std::move(got));
    }
  }

  void OnResponse(RpcEnvelope e) {
    auto it = pending.find(e.call_id());
    if (it == pending.end()) {
      if (!e.more()) {
        absl::Status s = ToStatus(e);
        if (s.ok()) {
          FinishDirect(e.call_id(), std::move(*e.mutable_body()));
        } else {
          FinishDirect(e.call_id(), s);
        }
      }
      return;  // else timed out or stopped early
    }
    if (e.more()) {
      if (it->second.on_message && !it->second.on_message(e.body())) {
        Complete(e.call_id(), std::string());
      }
      return;
    }
    absl::Status s = ToStatus(e);
    if (s.ok()) {
      Complete(e.call_id(), std::move(*e.mutable_body()));
    } else {
      Complete(e.call_id(), s);
    }
  }

  void Broken(const std::string& why) {
    connected = false;
    writing = false;
    ++generation;  // late handlers of this connection do nothing
    CloseSocket();
    FailAll(absl::UnavailableError(StrCat("connection to ", options.server, " lost: ", why)));
  }

  ClientOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  tcp::socket socket;
  tls::ContextRef tls_ref;                    // held once connecting over TLS
  std::shared_ptr<ssl::context> tls_context;  // null: plaintext
  std::shared_ptr<ClientTlsStream> tls;  // this connection's, when over TLS (it owns the socket)
  asio::steady_timer connect_timer;
  asio::steady_timer deadline_timer;
  bool timer_armed = false;
  Clock::time_point timer_at;
  uint64_t generation = 0;  // of the connection; bumped when it breaks
  bool connected = false, connecting = false, writing = false;
  bool heard_back = false;             // this connection has received bytes
  std::vector<std::string> queue;      // frames to write next
  std::vector<std::string> in_flight;  // frames being written
  std::map<uint64_t, Pending> pending;
  std::multimap<Clock::time_point, uint64_t> deadlines;
  FrameReader frames;
  std::atomic<uint64_t> next_id{1};

  std::mutex submit_mu;
  std::vector<Call> submitted;   // guarded by submit_mu
  bool drain_scheduled = false;  // guarded by submit_mu

  std::mutex direct_mu;
  std::map<uint64_t, Direct*> direct;  // guarded by direct_mu: blocking calls sent directly
  // Guarded by send_mu (held while the socket is written by a caller, or
  // closed): a caller may send (connected, plaintext); the I/O thread
  // writes or is about to; the unsent rest of a caller's frame.
  std::mutex send_mu;
  bool direct_ok = false;
  bool io_writing = false;
  std::string direct_rest;
};

RpcClient::RpcClient(ClientOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = std::thread([impl = impl_.get()] {
    SetThreadName("ms-rpc-client");
    impl->io.run();
  });
}

RpcClient::~RpcClient() {
  // Cancel everything, then let the io thread run the aborted handlers to
  // completion: they hold references to Impl, which owns the io_context, so
  // stopping the io_context instead would leak both.
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->CloseSocket();  // first: no caller sends (or registers) a call after it
    impl->FailAll(absl::CancelledError("client destroyed"));
    impl->connected = false;
    ++impl->generation;
    impl->tls.reset();
    impl->connect_timer.cancel();
    impl->deadline_timer.cancel();
  });
  impl_->work.reset();
  impl_->thread.join();
}

std::shared_ptr<Channel> Connect(const std::string& address) {
  ClientOptions o;
  o.server = address;
  return std::make_shared<RpcClient>(std::move(o));
}

void RpcClient::CallAsync(std::string_view method, std::string request, absl::Duration timeout,
                          Done done, OnMessage on_message) {
  const uint64_t id = impl_->next_id.fetch_add(1);
  RpcEnvelope e;
  e.set_call_id(id);
  e.set_method(std::string(method));
  e.set_body(std::move(request));
  if (timeout != absl::InfiniteDuration()) e.set_timeout_micros(absl::ToInt64Microseconds(timeout));
  std::string frame = rpc_internal::EncodeEnvelope(e);
  if (frame.size() - kFrameHeaderBytes > impl_->options.max_frame_bytes) {
    done(absl::InvalidArgumentError(
        StrCat("request of ", frame.size(), " bytes exceeds the frame limit")));
    return;
  }
  impl_->Submit(Impl::Call{id, std::move(frame), timeout, std::move(done), std::move(on_message)});
}

absl::StatusOr<std::string> RpcClient::Call(std::string_view method, std::string request,
                                            absl::Duration timeout) {
  // From this thread if the connection is idle; else through the I/O thread.
  {
    const uint64_t id = impl_->next_id.fetch_add(1);
    RpcEnvelope e;
    e.set_call_id(id);
    e.set_method(std::string(method));
    e.set_body(request);
    if (timeout != absl::InfiniteDuration())
      e.set_timeout_micros(absl::ToInt64Microseconds(timeout));
    const std::string frame = rpc_internal::EncodeEnvelope(e);
    Impl::Direct d;
    if (frame.size() - kFrameHeaderBytes <= impl_->options.max_frame_bytes &&
        impl_->SendDirect(id, &d, frame)) {
      if (!d.done.WaitForNotificationWithTimeout(timeout)) {
        bool mine = false;
        {
          std::lock_guard<std::mutex> lock(impl_->direct_mu);
          mine = impl_->direct.erase(id) > 0;
        }
        if (mine) {
          return absl::DeadlineExceededError(
              StrCat("call to ", impl_->options.server, " timed out"));
        }
        d.done.WaitForNotification();  // answered meanwhile
      }
      return std::move(d.result);
    }
  }
  absl::StatusOr<std::string> result;
  absl::Notification finished;
  CallAsync(method, std::move(request), timeout, [&](absl::StatusOr<std::string> r) {
    result = std::move(r);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

absl::Status RpcClient::Stream(std::string_view method, std::string request, absl::Duration timeout,
                               const OnMessage& on_message) {
  absl::Status result;
  absl::Notification finished;
  CallAsync(
      method, std::move(request), timeout,
      [&](absl::StatusOr<std::string> r) {
        result = r.status();
        finished.Notify();
      },
      on_message);
  finished.WaitForNotification();
  return result;
}

}  // namespace megastore::rpc
