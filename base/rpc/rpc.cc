#include "base/rpc/rpc.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <atomic>
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
#include "base/rpc/rpc.pb.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::rpc {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using asio::ip::tcp;
using boost::system::error_code;
// A server connection's TLS over the socket it owns (both die with the
// connection, after its last handler).
using TlsStream = ssl::stream<tcp::socket&>;
// A client connection's TLS owns its socket: handlers of a connection
// that broke hold it until they have run, while the client connects anew.
using ClientTlsStream = ssl::stream<tcp::socket>;

namespace {

// Whether `bytes` begin like a TLS handshake record (a TLS client talking
// to a plaintext port).
bool LooksLikeTls(std::string_view bytes) {
  return bytes.size() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 &&
         static_cast<unsigned char>(bytes[2]) <= 0x04;
}

absl::Status ToStatus(const RpcEnvelope& e) {
  if (e.status_code() == 0) return absl::OkStatus();
  if (e.status_code() < 0 || e.status_code() > 16) {
    return absl::InternalError(
        StrCat("peer sent unknown status code ", e.status_code(), ": ", e.status_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(e.status_code()), e.status_message());
}

asio::mutable_buffer ReadBuffer(FrameReader& frames) {
  const auto [data, size] = frames.Prepare();
  return asio::buffer(data, size);
}

std::vector<asio::const_buffer> Buffers(const std::vector<std::string>& frames) {
  std::vector<asio::const_buffer> out;
  out.reserve(frames.size());
  for (const std::string& f : frames) out.push_back(asio::buffer(f));
  return out;
}

ProcessDefault<ServerLimits>& LimitsDefault() {
  static auto* d = new ProcessDefault<ServerLimits>;
  return *d;
}

using SteadyClock = std::chrono::steady_clock;

SteadyClock::duration ToSteady(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

}  // namespace

void SetDefaultServerLimits(const ServerLimits& limits) { LimitsDefault().Set(limits); }

ServerLimits DefaultServerLimits() { return LimitsDefault().Get(); }

absl::Status ValidateServerLimits(const ServerLimits& l) {
  auto positive = [](std::string_view name, auto v) -> absl::Status {
    if (v > decltype(v){}) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat("RPC limit ", name, " must be positive"));
  };
  MS_RETURN_IF_ERROR(positive("max_frame_bytes", l.max_frame_bytes));
  if (l.max_frame_bytes > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(StrCat("RPC limit max_frame_bytes ", l.max_frame_bytes,
                                             " is over the 2 GiB a frame can hold"));
  }
  MS_RETURN_IF_ERROR(positive("max_connections", l.max_connections));
  MS_RETURN_IF_ERROR(positive("max_calls_in_flight", l.max_calls_in_flight));
  MS_RETURN_IF_ERROR(positive("max_queued_reply_bytes", l.max_queued_reply_bytes));
  MS_RETURN_IF_ERROR(positive("idle_timeout", l.idle_timeout));
  MS_RETURN_IF_ERROR(positive("stall_timeout", l.stall_timeout));
  return absl::OkStatus();
}

std::string EncodeFrame(std::string_view payload) {
  std::string frame;
  frame.reserve(kFrameHeaderBytes + payload.size());
  PutFixed32(&frame, static_cast<uint32_t>(payload.size()));
  PutFixed32(&frame, crc32c::Mask(crc32c::Value(payload)));
  frame.append(payload);
  return frame;
}

absl::Status ParseHostPort(std::string_view address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(StrCat("address \"", address, "\" is not HOST:PORT"));
  }
  uint32_t p = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || (p = p * 10 + static_cast<uint32_t>(c - '0')) > 65535) {
      return absl::InvalidArgumentError(StrCat("address \"", address, "\" has a bad port"));
    }
  }
  host->assign(address.substr(0, colon));
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::Status Listen(tcp::acceptor& acceptor, std::string_view listen, std::string_view what) {
  std::string host;
  uint16_t port;
  MS_RETURN_IF_ERROR(ParseHostPort(listen, &host, &port));
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    return absl::InvalidArgumentError(StrCat(what, " address \"", host, "\" is not an IP address"));
  const tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(
        StrCat("cannot serve ", what, " on ", listen, ": ", ec.message()));
  return absl::OkStatus();
}

// ---- server -----------------------------------------------------------------------------

struct RpcServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), acceptor(io), workers(static_cast<size_t>(options.worker_threads)) {}

  struct Connection;
  struct Method {
    Handler handler;
    InlineHandler inline_handler;  // may be empty
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
    if (flush_scheduled) return;
    flush_scheduled = true;
    if (strand.running_in_this_thread()) {
      // An inline handler answering: flush after the frames at hand are
      // dispatched, without waking another thread.
      asio::defer(strand, [self = shared_from_this()] { self->Flush(); });
    } else {
      asio::post(strand, [self = shared_from_this()] { self->Flush(); });
    }
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
      if (quiet &&
          now - std::max(self->last_read, self->last_write) > ToSteady(self->limits.idle_timeout)) {
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
  Strand strand;  // the socket's executor
  tcp::socket socket;
  std::shared_ptr<ssl::context> tls_context;  // outlives `tls`
  std::unique_ptr<TlsStream> tls;             // over `socket`; null for plaintext
  bool handshaking = false;                   // strand only
  std::string peer;
  std::string principal;                          // the TLS peer's certificate name
  FrameReader frames;                             // strand only
  asio::steady_timer timer;                       // strand only
  std::vector<std::string> writing;               // strand only: frames being written
  bool closed = false;                            // strand only
  SteadyClock::time_point last_read, last_write;  // strand only
  std::atomic<bool> paused{false};                // written on the strand only
  std::atomic<size_t> calls_in_flight{0};
  std::mutex out_mu;
  std::vector<std::string> out;  // frames waiting for the next flush
  size_t out_bytes = 0;          // guarded by out_mu: bytes in `out`
  size_t writing_bytes = 0;      // guarded by out_mu: bytes in `writing`
  bool flush_scheduled = false;  // a flush is queued or writing
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
    conn->Send(EncodeFrame(e.SerializeAsString()), streamed);
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
  asio::post(server->workers,
             [m, ctx = std::move(ctx), request = std::move(request),
              responder = std::move(responder)]() { m->handler(ctx, request.body(), responder); });
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
        std::lock_guard<std::mutex> lock(conns_mu);
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

absl::Status RpcServer::Start() {
  MS_RETURN_IF_ERROR(ValidateServerLimits(impl_->options.limits));
  if (impl_->options.tls.enabled()) {
    MS_ASSIGN_OR_RETURN(impl_->tls, tls::ContextRef::Acquire(impl_->options.tls, /*server=*/true));
  }
  MS_RETURN_IF_ERROR(Listen(impl_->acceptor, impl_->options.listen, "RPC"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->work.emplace(impl_->io.get_executor());
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i) {
    impl_->io_threads.emplace_back([impl = impl_.get()] { impl->io.run(); });
  }
  return absl::OkStatus();
}

void RpcServer::Stop() {
  Impl* impl = impl_.get();
  if (impl->stopped.exchange(true)) return;
  if (!impl->io_threads.empty()) {
    absl::Notification closed;
    asio::post(impl->io, [impl, &closed] {
      error_code ec;
      impl->acceptor.close(ec);
      std::vector<std::shared_ptr<Impl::Connection>> conns;
      {
        std::lock_guard<std::mutex> lock(impl->conns_mu);
        conns.assign(impl->conns.begin(), impl->conns.end());
      }
      for (auto& c : conns) asio::post(c->strand, [c] { c->Close("server stopping"); });
      closed.Notify();
    });
    closed.WaitForNotification();
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

std::string ServerStatsMetrics(const std::vector<std::pair<std::string, ServerStats>>& servers) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    uint64_t ServerStats::*field;
  };
  static const Family kFamilies[] = {
      {"megastore_rpc_connections_open", "gauge", "Open RPC connections.",
       &ServerStats::connections_open},
      {"megastore_rpc_connections_accepted_total", "counter", "RPC connections accepted.",
       &ServerStats::connections_accepted},
      {"megastore_rpc_calls_total", "counter", "RPC calls received.", &ServerStats::calls},
      {"megastore_rpc_bad_frames_total", "counter",
       "Connections closed for a malformed or oversized frame.", &ServerStats::bad_frames},
      {"megastore_rpc_oversized_frames_total", "counter",
       "Connections closed for a frame over --max-frame-bytes.", &ServerStats::oversized_frames},
      {"megastore_rpc_connections_refused_total", "counter",
       "Connections refused: over --rpc-max-connections or the descriptor budget.",
       &ServerStats::connections_refused},
      {"megastore_rpc_idle_closed_total", "counter", "Connections closed after --rpc-idle-timeout.",
       &ServerStats::idle_closed},
      {"megastore_rpc_stalled_closed_total", "counter",
       "Connections closed for a half-sent frame or unread replies (--rpc-stall-timeout, reply "
       "queue).",
       &ServerStats::stalled_closed},
      {"megastore_rpc_backpressure_pauses_total", "counter",
       "Times a connection stopped being read: calls in flight or queued replies over their limit.",
       &ServerStats::backpressure_pauses},
      {"megastore_rpc_tls_handshake_failures_total", "counter",
       "Connections closed for a failed or missing TLS handshake (no certificate of the CA, "
       "plaintext).",
       &ServerStats::tls_handshake_failures},
      {"megastore_rpc_calls_refused_total", "counter",
       "Calls refused by the access policy (PERMISSION_DENIED; docs/security.md).",
       &ServerStats::calls_refused},
  };
  std::string out;
  for (const Family& f : kFamilies) {
    out += StrCat("# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name, " ", f.type, "\n");
    for (const auto& [labels, stats] : servers) {
      out +=
          StrCat(f.name, labels.empty() ? "" : StrCat("{", labels, "}"), " ", stats.*f.field, "\n");
    }
  }
  return out;
}

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

// ---- client -----------------------------------------------------------------------------

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
      if (c.timeout != absl::InfiniteDuration()) {
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
    error_code ignored;
    socket.close(ignored);
    if (tls) tls->next_layer().close(ignored);
  }

  void Connected() {
    heard_back = false;
    connecting = false;
    connect_timer.cancel();
    connected = true;
    Read();
    WriteNext();
  }

  // Writes every queued frame in one gathered write.
  void WriteNext() {
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
    if (it == pending.end()) return;  // timed out or stopped early
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
};

RpcClient::RpcClient(ClientOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

RpcClient::~RpcClient() {
  // Cancel everything, then let the io thread run the aborted handlers to
  // completion: they hold references to Impl, which owns the io_context, so
  // stopping the io_context instead would leak both.
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->FailAll(absl::CancelledError("client destroyed"));
    impl->connected = false;
    ++impl->generation;
    impl->CloseSocket();
    impl->tls.reset();
    impl->connect_timer.cancel();
    impl->deadline_timer.cancel();
  });
  impl_->work.reset();
  impl_->thread.join();
}

void RpcClient::CallAsync(std::string_view method, std::string request, absl::Duration timeout,
                          Done done, OnMessage on_message) {
  const uint64_t id = impl_->next_id.fetch_add(1);
  RpcEnvelope e;
  e.set_call_id(id);
  e.set_method(std::string(method));
  e.set_body(std::move(request));
  if (timeout != absl::InfiniteDuration()) e.set_timeout_micros(absl::ToInt64Microseconds(timeout));
  std::string frame = EncodeFrame(e.SerializeAsString());
  if (frame.size() - kFrameHeaderBytes > impl_->options.max_frame_bytes) {
    done(absl::InvalidArgumentError(
        StrCat("request of ", frame.size(), " bytes exceeds the frame limit")));
    return;
  }
  impl_->Submit(Impl::Call{id, std::move(frame), timeout, std::move(done), std::move(on_message)});
}

absl::StatusOr<std::string> RpcClient::Call(std::string_view method, std::string request,
                                            absl::Duration timeout) {
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
