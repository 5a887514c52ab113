// The RPC layer (base/rpc/rpc.h): framing, limits and the server. The
// client is in rpc_client.cc.
#include "base/rpc/rpc.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/uio.h>

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

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/checksum.h"
#include "base/coding.h"
#include "base/descriptors.h"
#include "base/logging.h"
#include "base/process_default.h"
#include "base/rpc/frame.h"
#include "base/rpc/listen.h"
#include "base/rpc/rpc.pb.h"
#include "base/rpc/rpc_internal.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_batch.h"
#include "base/thread_name.h"

namespace megastore::rpc {

using rpc_internal::Buffers;
using rpc_internal::LooksLikeTls;
using rpc_internal::ReadBuffer;
using rpc_internal::SteadyClock;
using rpc_internal::ToSteady;
// ---- server -----------------------------------------------------------------------------

struct RpcServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), acceptor(io), workers(static_cast<size_t>(options.worker_threads)) {}

  struct Connection;
  struct Method {
    Handler handler;
    InlineHandler inline_handler;    // may be empty
    bool answers_on_worker = false;  // AnswerLocalCallsOnWorker
  };

  ServerOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor;
  asio::thread_pool workers;
  std::vector<std::thread> io_threads;
  std::map<std::string, Method> methods;
  std::mutex conns_mu;
  std::set<std::shared_ptr<Connection>> conns;
  std::atomic<int> port{0};
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> accepted{0}, calls{0}, bad_frames{0}, oversized_frames{0}, refused{0},
      idle_closed{0}, stalled_closed{0}, pauses{0}, tls_failures{0}, calls_refused{0};
  tls::ContextRef tls;  // held while serving over TLS
  // In-process calls post to `workers` holding this lock shared, and Stop()
  // sets `stopped` holding it exclusively before joining them, so none is
  // posted too late.
  absl::Mutex local_mu;
  std::vector<std::string> local_addresses;  // where in-process callers find it

  void Accept();
  struct ResponderImpl;
};

// Reads run on the connection's strand. Responses may be sent from any
// thread: they queue under out_mu, and one flush on the strand writes all
// that queued meanwhile with one gathered write.
//
// Reading pauses while the connection has too many calls in flight or too
// many reply bytes queued (the client is sending faster than it reads), and
// resumes from the strand when a call finishes or a write completes. A timer
// on the strand closes a connection that has been idle, or has left a frame
// or a write unfinished, for too long.
struct RpcServer::Impl::Connection : std::enable_shared_from_this<Connection> {
  using Strand = asio::strand<asio::io_context::executor_type>;
  Connection(Impl* s, Strand st, tcp::socket sock)
      : server(s),
        limits(s->options.limits),
        plaintext(!s->tls.held()),
        strand(std::move(st)),
        socket(std::move(sock)),
        frames(limits.max_frame_bytes),
        timer(strand) {
    error_code ec;
    auto ep = socket.remote_endpoint(ec);
    peer = ec ? "unknown" : StrCat(ep.address().to_string(), ":", ep.port());
  }
  ~Connection() { ReleaseConnectionDescriptor(); }

  void Start() {
    last_read = last_write = SteadyClock::now();
    ArmTimer();
    if (!server->tls.held()) return Read();
    // The context of this process's certificate now (a reload changes it for
    // connections accepted after it).
    tls_context = server->tls.Current();
    // The handshake must finish within the stall timeout (the watchdog).
    tls = std::make_unique<TlsStream>(socket, *tls_context);
    handshaking = true;
    tls->async_handshake(ssl::stream_base::server, [self = shared_from_this()](error_code ec) {
      self->handshaking = false;
      if (self->closed) return;
      if (ec) {
        ++self->server->tls_failures;
        MS_LOG_WARN_LIMITED("rpc: TLS handshake with {} failed: {}{}", self->peer, ec.message(),
                            ec.category() == asio::error::get_ssl_category()
                                ? " (a plaintext client on a TLS port, "
                                  "or a certificate of another CA?)"
                                : "");
        return self->Close("");
      }
      self->principal = tls::PeerPrincipal(self->tls->native_handle());
      self->last_read = SteadyClock::now();
      self->Read();
    });
  }

  // Reads some bytes, through TLS when the connection uses it.
  template <typename Handler>
  void ReadSome(asio::mutable_buffer buffer, Handler&& handler) {
    if (tls) {
      tls->async_read_some(buffer, std::forward<Handler>(handler));
    } else {
      socket.async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  void Read() {
    ReadSome(ReadBuffer(frames), [self = shared_from_this()](error_code ec, size_t n) {
      if (ec) {
        if (ec == asio::error::eof && !self->frames.partial()) return self->Close("");
        return self->Close(self->frames.partial()
                               ? StrCat("connection broke inside a frame: ", ec.message())
                               : ec.message());
      }
      self->last_read = SteadyClock::now();
      self->frames.Commit(n);
      self->DispatchBuffered();
    });
  }

  // Dispatches the complete frames buffered, then reads more; or pauses
  // (leaving frames buffered) while the connection is over its limits.
  void DispatchBuffered() {
    for (;;) {
      if (Overloaded()) {
        paused = true;
        // A call that finished between the check and the flag saw no pause
        // and posted no Resume: look again.
        if (Overloaded()) {
          ++server->pauses;
          return;  // Resume() carries on
        }
        paused = false;
      }
      RpcEnvelope request;
      absl::StatusOr<bool> got = frames.Next(&request);
      if (!got.ok()) return Reject(got.status());
      if (!*got) break;
      if (request.method().empty() || request.call_id() == 0) {
        return Reject(absl::InvalidArgumentError("request without method or call id"));
      }
      Dispatch(std::move(request));
      if (closed) return;
    }
    Read();
  }

  // True while the client has more calls in flight or more replies queued
  // than it may.
  bool Overloaded() {
    if (calls_in_flight.load() >= limits.max_calls_in_flight) return true;
    std::lock_guard<std::mutex> lock(out_mu);
    return out_bytes + writing_bytes > limits.max_queued_reply_bytes;
  }

  // On the strand: reads again if reading was paused and the reason is gone.
  void Resume() {
    if (!paused || closed || Overloaded()) return;
    paused = false;
    DispatchBuffered();
  }

  // Any thread: one of this connection's calls has answered (or dropped its
  // responder without answering).
  void CallDone() {
    calls_in_flight.fetch_sub(1);
    if (paused.load()) asio::post(strand, [self = shared_from_this()] { self->Resume(); });
  }

  void Reject(const absl::Status& why) {
    ++server->bad_frames;
    if (absl::IsResourceExhausted(why)) ++server->oversized_frames;
    if (tls == nullptr && LooksLikeTls(frames.buffered())) {
      MS_LOG_WARN_LIMITED("rpc: closing connection from {}: it speaks TLS to a plaintext port",
                          peer);
    } else {
      MS_LOG_WARN_LIMITED("rpc: closing connection from {}: {}", peer, why.message());
    }
    Close("");
  }

  void Dispatch(RpcEnvelope request);

  // Any thread. `streamed`: a message of a streaming reply, which is cut
  // off if its client lets too much of it queue; a call's final answer is
  // always queued (max_calls_in_flight bounds how many there are).
  void Send(std::string frame, bool streamed) {
    // The post happens under out_mu, so that after DropFurtherOutput() no
    // thread is still about to post.
    std::lock_guard<std::mutex> lock(out_mu);
    if (out_closed) return;
    out_bytes += frame.size();
    out.push_back(std::move(frame));
    if (streamed && out_bytes + writing_bytes > 2 * limits.max_queued_reply_bytes) {
      // Only a stream can get here (unary calls stop at the paused read):
      // its client is not reading what it asked for.
      out_closed = true;
      out.clear();
      out_bytes = 0;
      ++server->stalled_closed;
      asio::post(strand,
                 [self = shared_from_this()] { self->Close("client does not read its replies"); });
      return;
    }
    if (flush_scheduled || batch_flush_pending) return;
    if (plaintext && !strand.running_in_this_thread()) {
      // Nothing is being written, and the answer comes from another thread
      // (a worker, the commit log's): it goes out from that thread without
      // waking the I/O thread — at the end of the thread's batch (a log
      // group's callbacks: one write per connection), or right now.
      if (ThreadBatch::Open()) {
        std::function<void()> flush = [self = shared_from_this()] { self->FlushHere(); };
        if (ThreadBatch::Defer(flush)) {
          batch_flush_pending = true;
          return;
        }
      } else if (SendNow()) {
        return;
      }
    }
    flush_scheduled = true;
    if (strand.running_in_this_thread()) {
      // An inline handler answering: flush after the frames at hand are
      // dispatched, without waking another thread.
      asio::defer(strand, [self = shared_from_this()] { self->Flush(); });
    } else {
      asio::post(strand, [self = shared_from_this()] { self->Flush(); });
    }
  }

  // With out_mu held, on a plaintext connection with no write in progress:
  // sends the queued frames without blocking; true if all of them went
  // (else the rest stays queued, for the strand). Under out_mu the socket
  // is open: Close() drops further output before it closes it.
  bool SendNow() {
    if (out_closed) return true;  // dropped, as the strand's flush would
    while (!out.empty()) {
      iovec iov[64];
      size_t n = 0;
      for (; n < out.size() && n < 64; ++n) iov[n] = {out[n].data(), out[n].size()};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const ssize_t sent = ::sendmsg(socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent <= 0) return false;  // full, or an error the strand's write will meet
      last_direct_write.store(SteadyClock::now().time_since_epoch().count(),
                              std::memory_order_relaxed);  // for the idle watchdog
      size_t left = static_cast<size_t>(sent);
      out_bytes -= left;
      size_t done = 0;
      while (done < out.size() && left >= out[done].size()) left -= out[done++].size();
      out.erase(out.begin(), out.begin() + static_cast<ptrdiff_t>(done));
      // Queued replies went: reading paused for them may go on.
      if (paused.load()) asio::post(strand, [self = shared_from_this()] { self->Resume(); });
      if (left > 0) {
        out.front().erase(0, left);
        return false;
      }
    }
    return true;
  }

  // At the end of a ThreadBatch: sends what queued meanwhile, from here if
  // the socket takes it, else through the strand.
  void FlushHere() {
    std::lock_guard<std::mutex> lock(out_mu);
    batch_flush_pending = false;
    if (flush_scheduled || out.empty() || SendNow()) return;
    flush_scheduled = true;
    asio::post(strand, [self = shared_from_this()] { self->Flush(); });
  }

  void DropFurtherOutput() {
    std::lock_guard<std::mutex> lock(out_mu);
    out_closed = true;
    out.clear();
    out_bytes = 0;
  }

  // On the strand; one gathered write at a time.
  void Flush() {
    if (closed) return;
    {
      std::lock_guard<std::mutex> lock(out_mu);
      writing.swap(out);
      writing_bytes = out_bytes;
      out_bytes = 0;
      if (writing.empty()) {
        flush_scheduled = false;
        return;
      }
    }
    last_write = SteadyClock::now();
    auto written = [self = shared_from_this()](error_code ec, size_t) {
      self->writing.clear();
      {
        std::lock_guard<std::mutex> lock(self->out_mu);
        self->writing_bytes = 0;
      }
      self->last_write = SteadyClock::now();
      if (ec) return self->Close(ec.message());
      self->Resume();
      self->Flush();
    };
    if (tls) {
      asio::async_write(*tls, Buffers(writing), std::move(written));
    } else {
      asio::async_write(socket, Buffers(writing), std::move(written));
    }
  }

  // The strand's watchdog: idle connections, half-sent frames, stuck writes.
  void ArmTimer() {
    const auto tick = std::clamp(ToSteady(std::min(limits.idle_timeout, limits.stall_timeout) / 4),
                                 SteadyClock::duration(std::chrono::milliseconds(5)),
                                 SteadyClock::duration(std::chrono::seconds(1)));
    timer.expires_after(tick);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed) return;
      const auto now = SteadyClock::now();
      const auto stall = ToSteady(self->limits.stall_timeout);
      if (!self->writing.empty() && now - self->last_write > stall) {
        ++self->server->stalled_closed;
        MS_LOG_WARN_LIMITED("rpc: closing connection from {}: a reply has not been read for {}",
                            self->peer, absl::FormatDuration(self->limits.stall_timeout));
        return self->Close("");
      }
      // Frames kept unread while reading is paused are the server's delay,
      // not the client's.
      if (self->handshaking && now - self->last_read > stall) {
        ++self->server->tls_failures;
        MS_LOG_WARN_LIMITED("rpc: closing connection from {}: no TLS handshake within {}",
                            self->peer, absl::FormatDuration(self->limits.stall_timeout));
        return self->Close("");
      }
      if (!self->paused.load() && self->frames.incomplete() && now - self->last_read > stall) {
        ++self->server->stalled_closed;
        MS_LOG_WARN_LIMITED(
            "rpc: closing connection from {}: a frame has been left unfinished for {}", self->peer,
            absl::FormatDuration(self->limits.stall_timeout));
        return self->Close("");
      }
      // A responder dropped without an answer while reading was being
      // paused may have missed its chance to resume it.
      self->Resume();
      if (self->closed) return;
      const bool quiet =
          self->calls_in_flight.load() == 0 && self->writing.empty() && !self->frames.partial();
      if (quiet && now - std::max({self->last_read, self->last_write,
                                   SteadyClock::time_point(SteadyClock::duration(
                                       self->last_direct_write.load(std::memory_order_relaxed)))}) >
                       ToSteady(self->limits.idle_timeout)) {
        ++self->server->idle_closed;
        return self->Close(StrCat("idle for ", absl::FormatDuration(self->limits.idle_timeout)));
      }
      self->ArmTimer();
    });
  }

  void Close(const std::string& reason) {
    if (closed) return;
    closed = true;
    if (!reason.empty()) MS_LOG_DEBUG("rpc: connection from {} closed: {}", peer, reason);
    DropFurtherOutput();
    error_code ec;
    timer.cancel();
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    std::lock_guard<std::mutex> lock(server->conns_mu);
    server->conns.erase(shared_from_this());
  }

  Impl* server;
  const ServerLimits limits;
  const bool plaintext;  // no TLS: answers may be sent from any thread
  Strand strand;         // the socket's executor
  tcp::socket socket;
  std::shared_ptr<ssl::context> tls_context;  // outlives `tls`
  std::unique_ptr<TlsStream> tls;             // over `socket`; null for plaintext
  bool handshaking = false;                   // strand only
  std::string peer;
  std::string principal;                               // the TLS peer's certificate name
  FrameReader frames;                                  // strand only
  asio::steady_timer timer;                            // strand only
  std::vector<std::string> writing;                    // strand only: frames being written
  bool closed = false;                                 // strand only
  SteadyClock::time_point last_read, last_write;       // strand only
  std::atomic<SteadyClock::rep> last_direct_write{0};  // SendNow's last write
  std::atomic<bool> paused{false};                     // written on the strand only
  std::atomic<size_t> calls_in_flight{0};
  std::mutex out_mu;
  std::vector<std::string> out;      // frames waiting for the next flush
  size_t out_bytes = 0;              // guarded by out_mu: bytes in `out`
  size_t writing_bytes = 0;          // guarded by out_mu: bytes in `writing`
  bool flush_scheduled = false;      // a flush is queued or writing
  bool batch_flush_pending = false;  // FlushHere is deferred to a thread's batch end
  bool out_closed = false;
};

struct RpcServer::Impl::ResponderImpl : public Responder {
 public:
  ResponderImpl(std::weak_ptr<Connection> conn, uint64_t call_id)
      : conn_(std::move(conn)), call_id_(call_id) {}
  ~ResponderImpl() override {
    if (!finished_) Done();  // dropped without an answer
  }

  void Send(std::string body) override {
    if (finished_) return;
    RpcEnvelope e;
    e.set_call_id(call_id_);
    e.set_body(std::move(body));
    e.set_more(true);
    Post(e, true);
  }

  void Finish(absl::Status status, std::string body = {}) override {
    if (finished_.exchange(true)) return;
    RpcEnvelope e;
    e.set_call_id(call_id_);
    e.set_status_code(static_cast<int32_t>(status.code()));
    e.set_status_message(std::string(status.message()));
    if (status.ok()) e.set_body(std::move(body));
    Post(e, false);
    Done();
  }

 private:
  void Post(const RpcEnvelope& e, bool streamed) {
    auto conn = conn_.lock();
    if (conn == nullptr) return;
    conn->Send(rpc_internal::EncodeEnvelope(e), streamed);
  }

  void Done() {
    if (auto conn = conn_.lock()) conn->CallDone();
  }

  std::weak_ptr<Connection> conn_;
  const uint64_t call_id_;
  std::atomic<bool> finished_{false};
};

void RpcServer::Impl::Connection::Dispatch(RpcEnvelope request) {
  ++server->calls;
  calls_in_flight.fetch_add(1);
  auto responder = std::make_shared<ResponderImpl>(weak_from_this(), request.call_id());
  auto it = server->methods.find(request.method());
  if (it == server->methods.end()) {
    responder->Finish(absl::UnimplementedError(StrCat("no method \"", request.method(), "\"")));
    return;
  }
  CallContext ctx;
  ctx.peer = peer;
  ctx.principal = principal;
  if (request.timeout_micros() > 0) ctx.timeout = absl::Microseconds(request.timeout_micros());
  if (server->options.authorize) {
    if (absl::Status s = server->options.authorize(ctx, request.method(), request.body());
        !s.ok()) {
      ++server->calls_refused;
      responder->Finish(s);
      return;
    }
  }
  const Method* m = &it->second;
  if (m->inline_handler) {
    std::shared_ptr<Responder> r = responder;
    if (m->inline_handler(ctx, request.body(), r)) return;
  }
  asio::post(server->workers, [m, ctx = std::move(ctx), request = std::move(request),
                               responder = std::move(responder)]() {
    NameThreadOnce("ms-rpc-worker");
    m->handler(ctx, request.body(), responder);
  });
}

void RpcServer::Impl::Accept() {
  auto strand = asio::make_strand(io);
  acceptor.async_accept(strand, [this, strand](error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (!ec) {
      ++accepted;
      size_t open;
      {
        std::lock_guard<std::mutex> lock(conns_mu);
        open = conns.size();
      }
      if (open >= options.limits.max_connections || !AcquireConnectionDescriptor()) {
        ++refused;
        MS_LOG_WARN_LIMITED("rpc: refusing a connection: {}",
                            open >= options.limits.max_connections
                                ? StrCat(open, " are open, the limit (max_connections)")
                                : StrCat("connections hold ", ConnectionDescriptorsInUse(),
                                         " descriptors, all but the reserve kept for storage"));
        socket.close(ec);
        return Accept();
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Connection>(this, strand, std::move(socket));
      {
        // Checked again where Stop() collects the connections to close:
        // one added after that would stay open.
        std::lock_guard<std::mutex> lock(conns_mu);
        if (stopped) return;
        conns.insert(conn);
      }
      asio::post(conn->strand, [conn] { conn->Start(); });
    } else if (ec != asio::error::operation_aborted) {
      MS_LOG_WARN("rpc: accept failed: {}", ec.message());
    }
    Accept();
  });
}

RpcServer::RpcServer(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

RpcServer::~RpcServer() { Stop(); }

void RpcServer::Register(std::string method, Handler handler) {
  impl_->methods[std::move(method)] = Impl::Method{std::move(handler), nullptr};
}

void RpcServer::RegisterInline(std::string method, InlineHandler inline_handler, Handler handler) {
  impl_->methods[std::move(method)] = Impl::Method{std::move(handler), std::move(inline_handler)};
}

void RpcServer::AnswerLocalCallsOnWorker(std::string_view method) {
  auto it = impl_->methods.find(std::string(method));
  MS_CHECK(it != impl_->methods.end(), "AnswerLocalCallsOnWorker: {} is not registered", method);
  it->second.answers_on_worker = true;
}

namespace rpc_internal {

bool DispatchLocal(RpcServer::Impl& server, std::string_view method, std::string& request,
                   CallContext ctx,
                   const std::function<std::shared_ptr<Responder>()>& make_responder) {
  // Shared: in-process calls to one server do not wait for each other, only
  // Stop() (which takes it exclusively) waits for them.
  absl::ReaderMutexLock lock(&server.local_mu);
  if (server.stopped) return false;  // as TCP would: nobody listens there
  ++server.calls;
  std::shared_ptr<Responder> responder = make_responder();
  if (request.size() > server.options.limits.max_frame_bytes) {
    // Over TCP the server closes a connection that sends such a frame.
    ++server.oversized_frames;
    responder->Finish(absl::UnavailableError(StrCat(method, ": a request of ", request.size(),
                                                    " bytes is over the server's limit of ",
                                                    server.options.limits.max_frame_bytes)));
    return true;
  }
  auto it = server.methods.find(std::string(method));
  if (it == server.methods.end()) {
    responder->Finish(absl::UnimplementedError(StrCat("no method \"", method, "\"")));
    return true;
  }
  if (server.options.authorize) {
    if (absl::Status s = server.options.authorize(ctx, method, request); !s.ok()) {
      ++server.calls_refused;
      responder->Finish(s);
      return true;
    }
  }
  const RpcServer::Impl::Method* m = &it->second;
  // An inline handler is tried here, on the caller's thread (it never
  // blocks); its answer still reaches the caller through the completion
  // pool, never from inside this call.
  if (std::shared_ptr<Responder> r = responder;
      m->inline_handler && m->inline_handler(ctx, request, r))
    return true;
  asio::post(server.workers, [m, ctx = std::move(ctx), request = std::move(request),
                              responder = std::move(responder)]() mutable {
    NameThreadOnce("ms-rpc-worker");
    if (!m->answers_on_worker) return m->handler(ctx, request, std::move(responder));
    // In-process answers given on this thread wait for the handler to
    // return, then run here: it holds none of its locks any more.
    HeldAnswers held;
    HeldAnswers* outer = SetHeldAnswers(&held);
    m->handler(ctx, request, std::move(responder));
    SetHeldAnswers(outer);
    held.RunAll();
  });
  return true;
}

bool ServerStopped(const RpcServer::Impl& server) { return server.stopped.load(); }

}  // namespace rpc_internal

absl::Status RpcServer::Start() {
  MS_RETURN_IF_ERROR(ValidateServerLimits(impl_->options.limits));
  if (impl_->options.tls.enabled()) {
    MS_ASSIGN_OR_RETURN(impl_->tls, tls::ContextRef::Acquire(impl_->options.tls, /*server=*/true));
  }
  MS_RETURN_IF_ERROR(Listen(impl_->acceptor, impl_->options.listen, "RPC"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  {
    // In-process callers find it by the address it listens on (and, bound
    // to every interface, by loopback).
    std::string host;
    uint16_t ignored;
    if (ParseHostPort(impl_->options.listen, &host, &ignored).ok()) {
      impl_->local_addresses.push_back(StrCat(host, ":", impl_->port.load()));
      if (host == "0.0.0.0" || host == "::" || host.empty())
        impl_->local_addresses.push_back(StrCat("127.0.0.1:", impl_->port.load()));
    }
    rpc_internal::RegisterLocalServer(impl_->local_addresses, impl_);
  }
  impl_->work.emplace(impl_->io.get_executor());
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i) {
    impl_->io_threads.emplace_back([impl = impl_.get()] {
      SetThreadName("ms-rpc-io");
      impl->io.run();
    });
  }
  return absl::OkStatus();
}

void RpcServer::Stop() {
  Impl* impl = impl_.get();
  {
    absl::MutexLock lock(&impl->local_mu);
    if (impl->stopped.exchange(true)) return;
  }
  rpc_internal::UnregisterLocalServer(impl->local_addresses, impl);
  if (!impl->io_threads.empty()) {
    absl::Notification closed;
    std::vector<std::shared_ptr<Impl::Connection>> conns;
    asio::post(impl->io, [impl, &closed, &conns] {
      error_code ec;
      impl->acceptor.close(ec);
      {
        std::lock_guard<std::mutex> lock(impl->conns_mu);
        conns.assign(impl->conns.begin(), impl->conns.end());
      }
      closed.Notify();
    });
    closed.WaitForNotification();
    // Every connection is closed before the io threads stop: a close still
    // queued when they stop would leave its socket open, and a client
    // writing to it would wait out its deadline instead of being refused.
    absl::BlockingCounter left(static_cast<int>(conns.size()));
    for (auto& c : conns)
      asio::post(c->strand, [c, &left] {
        c->Close("server stopping");
        left.DecrementCount();
      });
    left.Wait();
  }
  impl->workers.join();
  {
    // Answers still to come (from the commit log's thread, say) are dropped
    // from here on instead of being posted to a stopping io_context.
    std::lock_guard<std::mutex> lock(impl->conns_mu);
    for (const auto& c : impl->conns) c->DropFurtherOutput();
  }
  impl->work.reset();
  impl->io.stop();
  for (auto& t : impl->io_threads) t.join();
  impl->io_threads.clear();
  std::lock_guard<std::mutex> lock(impl->conns_mu);
  impl->conns.clear();
}

int RpcServer::port() const { return impl_->port; }

ServerStats RpcServer::stats() const {
  ServerStats s;
  s.connections_accepted = impl_->accepted;
  s.calls = impl_->calls;
  s.bad_frames = impl_->bad_frames;
  s.oversized_frames = impl_->oversized_frames;
  s.connections_refused = impl_->refused;
  s.idle_closed = impl_->idle_closed;
  s.stalled_closed = impl_->stalled_closed;
  s.backpressure_pauses = impl_->pauses;
  s.tls_handshake_failures = impl_->tls_failures;
  s.calls_refused = impl_->calls_refused;
  std::lock_guard<std::mutex> lock(impl_->conns_mu);
  s.connections_open = impl_->conns.size();
  return s;
}

}  // namespace megastore::rpc
