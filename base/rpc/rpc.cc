#include "base/rpc/rpc.h"

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/rpc/listen.h"
#include "base/rpc/rpc.pb.h"
#include "base/strings.h"

namespace megastore::rpc {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t kFrameHeaderBytes = 8;

absl::Status ToStatus(const RpcEnvelope& e) {
  if (e.status_code() == 0) return absl::OkStatus();
  if (e.status_code() < 0 || e.status_code() > 16) {
    return absl::InternalError(StrCat("peer sent unknown status code ", e.status_code(), ": ",
                                      e.status_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(e.status_code()), e.status_message());
}

// Checks a frame header; returns the payload length or an error.
absl::StatusOr<uint32_t> CheckHeader(const char* header, size_t max_frame_bytes) {
  const uint32_t length = DecodeFixed32(header);
  if (length > max_frame_bytes) {
    return absl::InvalidArgumentError(
        StrCat("frame of ", length, " bytes exceeds the limit of ", max_frame_bytes));
  }
  return length;
}

absl::Status CheckPayload(const char* header, const std::string& payload, RpcEnvelope* envelope) {
  if (crc32c::Unmask(DecodeFixed32(header + 4)) != crc32c::Value(payload)) {
    return absl::DataLossError("frame checksum mismatch");
  }
  if (!envelope->ParseFromString(payload)) return absl::DataLossError("frame is not an RpcEnvelope");
  return absl::OkStatus();
}

}  // namespace

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
  if (ec) return absl::InvalidArgumentError(StrCat(what, " address \"", host, "\" is not an IP address"));
  const tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot serve ", what, " on ", listen, ": ", ec.message()));
  return absl::OkStatus();
}

// ---- server -----------------------------------------------------------------------------

struct RpcServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), acceptor(io), workers(static_cast<size_t>(options.worker_threads)) {}

  struct Connection;

  ServerOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor;
  asio::thread_pool workers;
  std::vector<std::thread> io_threads;
  std::map<std::string, Handler> handlers;
  std::mutex conns_mu;
  std::set<std::shared_ptr<Connection>> conns;
  std::atomic<int> port{0};
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> accepted{0}, calls{0}, bad_frames{0};

  void Accept();
  struct ResponderImpl;
};

struct RpcServer::Impl::Connection : std::enable_shared_from_this<Connection> {
  Connection(Impl* s, tcp::socket sock) : server(s), socket(std::move(sock)) {
    error_code ec;
    auto ep = socket.remote_endpoint(ec);
    peer = ec ? "unknown" : StrCat(ep.address().to_string(), ":", ep.port());
  }

  void Start() { ReadHeader(); }

  void ReadHeader() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(header, kFrameHeaderBytes),
                     [self](error_code ec, size_t) {
                       if (ec) return self->Close(ec == asio::error::eof ? "" : ec.message());
                       absl::StatusOr<uint32_t> len =
                           CheckHeader(self->header, self->server->options.max_frame_bytes);
                       if (!len.ok()) return self->Reject(len.status());
                       self->payload.resize(*len);
                       self->ReadPayload();
                     });
  }

  void ReadPayload() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(payload), [self](error_code ec, size_t) {
      if (ec) return self->Close(StrCat("connection broke inside a frame: ", ec.message()));
      RpcEnvelope request;
      absl::Status s = CheckPayload(self->header, self->payload, &request);
      if (s.ok() && (request.method().empty() || request.call_id() == 0)) {
        s = absl::InvalidArgumentError("request without method or call id");
      }
      if (!s.ok()) return self->Reject(s);
      self->Dispatch(std::move(request));
      self->ReadHeader();
    });
  }

  void Reject(const absl::Status& why) {
    ++server->bad_frames;
    MS_LOG_WARN("rpc: closing connection from {}: {}", peer, why.message());
    Close("");
  }

  void Dispatch(RpcEnvelope request);

  // Runs on the connection's strand.
  void QueueWrite(std::string frame) {
    if (closed) return;
    queue.push_back(std::move(frame));
    if (!writing) WriteNext();
  }

  void WriteNext() {
    if (queue.empty() || closed) {
      writing = false;
      return;
    }
    writing = true;
    auto self = shared_from_this();
    asio::async_write(socket, asio::buffer(queue.front()), [self](error_code ec, size_t) {
      self->queue.pop_front();
      if (ec) return self->Close(ec.message());
      self->WriteNext();
    });
  }

  void Close(const std::string& reason) {
    if (closed) return;
    closed = true;
    if (!reason.empty()) MS_LOG_DEBUG("rpc: connection from {} closed: {}", peer, reason);
    error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    std::lock_guard<std::mutex> lock(server->conns_mu);
    server->conns.erase(shared_from_this());
  }

  Impl* server;
  tcp::socket socket;
  std::string peer;
  char header[kFrameHeaderBytes];
  std::string payload;
  std::deque<std::string> queue;
  bool writing = false;
  bool closed = false;
};

struct RpcServer::Impl::ResponderImpl : public Responder {
 public:
  ResponderImpl(std::weak_ptr<Connection> conn, uint64_t call_id)
      : conn_(std::move(conn)), call_id_(call_id) {}

  void Send(std::string body) override {
    if (finished_) return;
    RpcEnvelope e;
    e.set_call_id(call_id_);
    e.set_body(std::move(body));
    e.set_more(true);
    Post(e);
  }

  void Finish(absl::Status status, std::string body = {}) override {
    if (finished_.exchange(true)) return;
    RpcEnvelope e;
    e.set_call_id(call_id_);
    e.set_status_code(static_cast<int32_t>(status.code()));
    e.set_status_message(std::string(status.message()));
    if (status.ok()) e.set_body(std::move(body));
    Post(e);
  }

 private:
  void Post(const RpcEnvelope& e) {
    auto conn = conn_.lock();
    if (conn == nullptr) return;
    std::string frame = EncodeFrame(e.SerializeAsString());
    asio::post(conn->socket.get_executor(),
               [conn, frame = std::move(frame)]() mutable { conn->QueueWrite(std::move(frame)); });
  }

  std::weak_ptr<Connection> conn_;
  const uint64_t call_id_;
  std::atomic<bool> finished_{false};
};

void RpcServer::Impl::Connection::Dispatch(RpcEnvelope request) {
  ++server->calls;
  auto responder = std::make_shared<ResponderImpl>(weak_from_this(), request.call_id());
  auto it = server->handlers.find(request.method());
  if (it == server->handlers.end()) {
    responder->Finish(absl::UnimplementedError(StrCat("no method \"", request.method(), "\"")));
    return;
  }
  CallContext ctx;
  ctx.peer = peer;
  if (request.timeout_micros() > 0) ctx.timeout = absl::Microseconds(request.timeout_micros());
  const Handler* handler = &it->second;
  asio::post(server->workers, [handler, ctx = std::move(ctx), request = std::move(request),
                               responder = std::move(responder)]() {
    (*handler)(ctx, request.body(), responder);
  });
}

void RpcServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (!ec) {
      ++accepted;
      socket.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Connection>(this, std::move(socket));
      {
        std::lock_guard<std::mutex> lock(conns_mu);
        conns.insert(conn);
      }
      asio::post(conn->socket.get_executor(), [conn] { conn->Start(); });
    } else if (ec != asio::error::operation_aborted) {
      MS_LOG_WARN("rpc: accept failed: {}", ec.message());
    }
    Accept();
  });
}

RpcServer::RpcServer(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

RpcServer::~RpcServer() { Stop(); }

void RpcServer::Register(std::string method, Handler handler) {
  impl_->handlers[std::move(method)] = std::move(handler);
}

absl::Status RpcServer::Start() {
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
    std::promise<void> closed;
    asio::post(impl->io, [impl, &closed] {
      error_code ec;
      impl->acceptor.close(ec);
      std::vector<std::shared_ptr<Impl::Connection>> conns;
      {
        std::lock_guard<std::mutex> lock(impl->conns_mu);
        conns.assign(impl->conns.begin(), impl->conns.end());
      }
      for (auto& c : conns) asio::post(c->socket.get_executor(), [c] { c->Close("server stopping"); });
      closed.set_value();
    });
    closed.get_future().wait();
  }
  impl->workers.join();
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
  std::lock_guard<std::mutex> lock(impl_->conns_mu);
  s.connections_open = impl_->conns.size();
  return s;
}

// ---- client -----------------------------------------------------------------------------

struct RpcClient::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(ClientOptions o) : options(std::move(o)), socket(io), connect_timer(io) {}

  struct Pending {
    Done done;
    OnMessage on_message;
    std::unique_ptr<asio::steady_timer> timer;
  };

  // Everything below runs on the client's one io thread.
  void Start(uint64_t id, std::string frame, absl::Duration timeout, Done done, OnMessage on_message) {
    Pending p{std::move(done), std::move(on_message), nullptr};
    if (timeout != absl::InfiniteDuration()) {
      p.timer = std::make_unique<asio::steady_timer>(io);
      p.timer->expires_after(std::chrono::microseconds(absl::ToInt64Microseconds(timeout)));
      p.timer->async_wait([self = shared_from_this(), id](error_code ec) {
        if (ec) return;
        self->Complete(id, absl::DeadlineExceededError(StrCat("call to ", self->options.server,
                                                              " timed out")));
      });
    }
    pending.emplace(id, std::move(p));
    queue.push_back(std::move(frame));
    if (connected) {
      if (!writing) WriteNext();
    } else if (!connecting) {
      Connect();
    }
  }

  void Complete(uint64_t id, absl::StatusOr<std::string> result) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    Pending p = std::move(it->second);
    pending.erase(it);
    if (p.timer) p.timer->cancel();
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
    connecting = true;
    error_code ec;
    socket = tcp::socket(io);
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) {
      connecting = false;
      return FailAll(absl::UnavailableError(StrCat("cannot resolve ", options.server, ": ", ec.message())));
    }
    connect_timer.expires_after(std::chrono::microseconds(absl::ToInt64Microseconds(options.connect_timeout)));
    connect_timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->connecting) {
        error_code ignored;
        self->socket.close(ignored);
      }
    });
    asio::async_connect(socket, endpoints, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
      self->connecting = false;
      self->connect_timer.cancel();
      if (ec) {
        return self->FailAll(absl::UnavailableError(
            StrCat("cannot connect to ", self->options.server, ": ", ec.message())));
      }
      error_code ignored;
      self->socket.set_option(tcp::no_delay(true), ignored);
      self->connected = true;
      self->ReadHeader();
      self->WriteNext();
    });
  }

  void WriteNext() {
    if (queue.empty() || !connected) {
      writing = false;
      return;
    }
    writing = true;
    asio::async_write(socket, asio::buffer(queue.front()), [self = shared_from_this()](error_code ec, size_t) {
      if (!self->queue.empty()) self->queue.pop_front();
      if (ec) return self->Broken(StrCat("write failed: ", ec.message()));
      self->WriteNext();
    });
  }

  void ReadHeader() {
    asio::async_read(socket, asio::buffer(header, kFrameHeaderBytes), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Broken(ec == asio::error::eof ? "server closed the connection" : ec.message());
      absl::StatusOr<uint32_t> len = CheckHeader(self->header, self->options.max_frame_bytes);
      if (!len.ok()) return self->Broken(std::string(len.status().message()));
      self->payload.resize(*len);
      asio::async_read(self->socket, asio::buffer(self->payload), [self](error_code ec, size_t) {
        if (ec) return self->Broken(ec.message());
        RpcEnvelope e;
        absl::Status s = CheckPayload(self->header, self->payload, &e);
        if (!s.ok()) return self->Broken(std::string(s.message()));
        self->OnResponse(std::move(e));
        self->ReadHeader();
      });
    });
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
    error_code ec;
    socket.close(ec);
    FailAll(absl::UnavailableError(StrCat("connection to ", options.server, " lost: ", why)));
  }

  ClientOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  tcp::socket socket;
  asio::steady_timer connect_timer;
  bool connected = false, connecting = false, writing = false;
  std::deque<std::string> queue;
  std::map<uint64_t, Pending> pending;
  std::atomic<uint64_t> next_id{1};
  char header[kFrameHeaderBytes];
  std::string payload;
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
    error_code ec;
    impl->socket.close(ec);
    impl->connect_timer.cancel();
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
    done(absl::InvalidArgumentError(StrCat("request of ", frame.size(), " bytes exceeds the frame limit")));
    return;
  }
  asio::post(impl_->io, [impl = impl_, id, frame = std::move(frame), timeout, done = std::move(done),
                         on_message = std::move(on_message)]() mutable {
    impl->Start(id, std::move(frame), timeout, std::move(done), std::move(on_message));
  });
}

absl::StatusOr<std::string> RpcClient::Call(std::string_view method, std::string request,
                                            absl::Duration timeout) {
  std::promise<absl::StatusOr<std::string>> result;
  CallAsync(method, std::move(request), timeout,
            [&result](absl::StatusOr<std::string> r) { result.set_value(std::move(r)); });
  return result.get_future().get();
}

absl::Status RpcClient::Stream(std::string_view method, std::string request, absl::Duration timeout,
                               const OnMessage& on_message) {
  std::promise<absl::Status> result;
  CallAsync(
      method, std::move(request), timeout,
      [&result](absl::StatusOr<std::string> r) { result.set_value(r.status()); }, on_message);
  return result.get_future().get();
}

}  // namespace megastore::rpc
