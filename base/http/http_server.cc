#include "base/http/http_server.h"

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "base/descriptors.h"
#include "base/logging.h"
#include "base/process_default.h"
#include "base/rpc/listen.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_name.h"

namespace megastore::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using asio::ip::tcp;

namespace {

ProcessDefault<HttpLimits>& LimitsDefault() {
  static auto* d = new ProcessDefault<HttpLimits>;
  return *d;
}

struct Counters {
  std::atomic<uint64_t> accepted{0}, refused{0}, requests{0}, headers_too_large{0},
      bodies_too_large{0}, timed_out{0}, bad_requests{0}, tls_failures{0};
};
Counters& counters() {
  static Counters* c = new Counters;
  return *c;
}

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

}  // namespace

std::string ErrorJson(int http_status, std::string_view status, std::string_view message,
                      const ErrorDetail& detail) {
  std::string details;
  if (!detail.reason.empty()) {
    std::string metadata;
    for (const auto& [k, v] : detail.metadata)
      metadata +=
          StrCat(metadata.empty() ? "" : ",", "\"", JsonEscape(k), "\":\"", JsonEscape(v), "\"");
    details =
        StrCat(R"({"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":")",
               JsonEscape(detail.reason), R"(","domain":"megastore","metadata":{)", metadata, "}}");
  }
  return StrCat(R"({"error":{"code":)", http_status, R"(,"status":")", JsonEscape(status),
                R"(","message":")", JsonEscape(message), R"(","details":[)", details, "]}}\n");
}

Response JsonErrorResponse(int http_status, std::string_view status, std::string_view message,
                           const ErrorDetail& detail) {
  return Response{
      http_status, "application/json", ErrorJson(http_status, status, message, detail), {}};
}

Response MethodNotAllowed(std::string_view path, std::string_view allow) {
  Response r = JsonErrorResponse(405, "INVALID_ARGUMENT", StrCat(path, " takes ", allow),
                                 {"METHOD_NOT_ALLOWED", {{"allow", std::string(allow)}}});
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

void SetDefaultLimits(const HttpLimits& limits) { LimitsDefault().Set(limits); }

HttpLimits DefaultLimits() { return LimitsDefault().Get(); }

absl::Status ValidateLimits(const HttpLimits& l) {
  if (l.max_connections == 0)
    return absl::InvalidArgumentError("HTTP limit max_connections must be positive");
  if (l.max_header_bytes < 1024)
    return absl::InvalidArgumentError(
        StrCat("HTTP limit max_header_bytes ", l.max_header_bytes, " is under 1024"));
  if (l.max_body_bytes == 0)
    return absl::InvalidArgumentError("HTTP limit max_body_bytes must be positive");
  if (l.header_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("HTTP limit header_timeout must be positive");
  if (l.body_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("HTTP limit body_timeout must be positive");
  return absl::OkStatus();
}

HttpStats ProcessStats() {
  const Counters& c = counters();
  HttpStats s;
  s.connections_accepted = c.accepted;
  s.connections_refused = c.refused;
  s.requests = c.requests;
  s.headers_too_large = c.headers_too_large;
  s.bodies_too_large = c.bodies_too_large;
  s.timed_out = c.timed_out;
  s.bad_requests = c.bad_requests;
  s.tls_handshake_failures = c.tls_failures;
  return s;
}

std::string ProcessStatsMetrics() {
  const HttpStats s = ProcessStats();
  std::string out;
  auto counter = [&](std::string_view name, std::string_view help, uint64_t v) {
    out += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v, "\n");
  };
  counter("megastore_http_connections_accepted_total", "HTTP connections accepted.",
          s.connections_accepted);
  counter("megastore_http_connections_refused_total",
          "HTTP connections refused: over --http-max-connections or the "
          "descriptor budget.",
          s.connections_refused);
  counter("megastore_http_requests_total", "HTTP requests read.", s.requests);
  counter("megastore_http_headers_too_large_total",
          "Requests answered 431 (over --http-max-header-bytes).", s.headers_too_large);
  counter("megastore_http_bodies_too_large_total",
          "Requests answered 413 (over --http-max-body-bytes).", s.bodies_too_large);
  counter("megastore_http_timed_out_total",
          "Connections closed for a request or answer slower than "
          "--http-header-timeout/--http-body-timeout.",
          s.timed_out);
  counter("megastore_http_bad_requests_total", "Connections closed for bytes that are not HTTP.",
          s.bad_requests);
  counter("megastore_http_tls_handshake_failures_total",
          "Connections to a TLS listener closed for a failed TLS handshake "
          "(plaintext, no certificate of the CA).",
          s.tls_handshake_failures);
  return out;
}

// Handlers hold a plain Impl*: Impl owns the io_context, and the io thread is
// joined before Impl goes away.
struct HttpServer::Impl {
  Impl(std::string l, int workers, HttpLimits lim, tls::TlsFiles t)
      : listen(std::move(l)),
        limits(lim),
        tls_files(std::move(t)),
        acceptor(io),
        pool(static_cast<size_t>(std::max(1, workers))) {}

  // One connection: its requests, one after another, and their answers.
  struct Conn {
    Conn(Impl* s, tcp::socket socket) : server(s), stream(std::move(socket)) {}
    ~Conn() {
      --server->open;
      ReleaseConnectionDescriptor();
    }
    Impl* server;
    beast::tcp_stream stream;
    std::shared_ptr<ssl::context> tls_context;             // outlives `tls`
    std::unique_ptr<ssl::stream<beast::tcp_stream&>> tls;  // null: plaintext
    beast::flat_buffer buffer;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser;
    int answered = 0;  // requests answered on this connection

    // Calls f with the stream requests and answers go through.
    template <typename F>
    void With(F&& f) {
      if (tls)
        f(*tls);
      else
        f(stream);
    }
  };

  void Accept() {
    acceptor.async_accept(io, [self = this](beast::error_code ec, tcp::socket socket) {
      if (self->stopped) return;
      if (!ec) {
        if (self->open.load() >= self->limits.max_connections || !AcquireConnectionDescriptor()) {
          ++counters().refused;
          MS_LOG_WARN_LIMITED(
              "http: refusing a connection on {}: {}", self->listen,
              self->open.load() >= self->limits.max_connections
                  ? StrCat(self->open.load(), " are open, the limit (max_connections)")
                  : std::string("connections hold every descriptor but the "
                                "reserve kept for storage"));
          socket.close(ec);
        } else {
          ++counters().accepted;
          ++self->open;
          auto c = std::make_shared<Conn>(self, std::move(socket));
          if (self->tls_files.enabled())
            self->Handshake(std::move(c));
          else
            self->Serve(std::move(c));
        }
      }
      self->Accept();
    });
  }

  // A TLS listener: the client's first bytes must open a TLS handshake. A
  // plaintext HTTP request is answered in plaintext, saying so. All of the
  // handshake must happen within the header timeout.
  void Handshake(std::shared_ptr<Conn> c) {
    c->stream.expires_after(ToSteady(limits.header_timeout));
    c->stream.async_read_some(c->buffer.prepare(4096), [this, c](beast::error_code ec, size_t n) {
      if (ec) return;  // closed or timed out before a byte
      c->buffer.commit(n);
      if (static_cast<const unsigned char*>(c->buffer.data().data())[0] != 0x16) {
        ++counters().tls_failures;
        MS_LOG_WARN_LIMITED("http: a plaintext request on {}, which speaks TLS", listen);
        return Reply(c, 11,
                     JsonErrorResponse(400, "FAILED_PRECONDITION",
                                       "this server speaks HTTPS with mutual TLS: "
                                       "use https:// and a client certificate "
                                       "issued by its CA",
                                       {"PLAINTEXT_TO_TLS_PORT", {}}),
                     /*linger=*/true);
      }
      c->tls_context = tls.Current();
      c->tls = std::make_unique<ssl::stream<beast::tcp_stream&>>(c->stream, *c->tls_context);
      // The bytes already read open the handshake. The client sends
      // nothing else before the handshake ends (no early data).
      c->tls->async_handshake(ssl::stream_base::server, c->buffer.data(),
                              [this, c](beast::error_code ec, size_t) {
                                c->buffer.consume(c->buffer.size());
                                if (ec) {
                                  ++counters().tls_failures;
                                  MS_LOG_WARN_LIMITED(
                                      "http: TLS handshake on {} failed: {} (a certificate "
                                      "of another CA, or none?)",
                                      listen, ec.message());
                                  return;
                                }
                                Serve(c);
                              });
    });
  }

  void Serve(std::shared_ptr<Conn> c) {
    c->parser.emplace();
    c->parser->header_limit(
        static_cast<uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
    c->parser->body_limit(limits.max_body_bytes);
    c->stream.expires_after(ToSteady(limits.header_timeout));
    c->With([&](auto& stream) {
      bhttp::async_read_header(
          stream, c->buffer, *c->parser, [this, c, &stream](beast::error_code ec, size_t) {
            if (ec) return Failed(c, ec);
            // A Transfer-Encoding other than chunked last leaves the body's
            // length unknown (RFC 9112 §6.3): refused, else its bytes would
            // be read as the next request.
            if (c->parser->get().count(bhttp::field::transfer_encoding) > 0 &&
                !c->parser->chunked()) {
              ++counters().bad_requests;
              return Reply(c, c->parser->get().version(),
                           JsonErrorResponse(400, "INVALID_ARGUMENT",
                                             "a Transfer-Encoding must end with chunked",
                                             {"BAD_TRANSFER_ENCODING", {}}),
                           /*linger=*/true);
            }
            c->stream.expires_after(ToSteady(limits.body_timeout));
            bhttp::async_read(stream, c->buffer, *c->parser,
                              [this, c](beast::error_code ec, size_t) {
                                if (ec) return Failed(c, ec);
                                c->stream.expires_never();  // the handler may take its time
                                Dispatch(c, c->parser->release());
                              });
          });
    });
  }

  // A request that could not be read: answer what can be answered, close.
  void Failed(const std::shared_ptr<Conn>& c, beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      ++counters().headers_too_large;
      return Reply(
          c, 11,
          JsonErrorResponse(431, "RESOURCE_EXHAUSTED",
                            StrCat("request headers exceed ", limits.max_header_bytes, " bytes"),
                            {"HEADERS_TOO_LARGE", {{"limit", StrCat(limits.max_header_bytes)}}}),
          /*linger=*/true);
    }
    if (ec == bhttp::error::body_limit) {
      ++counters().bodies_too_large;
      return Reply(
          c, 11,
          JsonErrorResponse(413, "RESOURCE_EXHAUSTED",
                            StrCat("request body exceeds ", limits.max_body_bytes, " bytes"),
                            {"BODY_TOO_LARGE", {{"limit", StrCat(limits.max_body_bytes)}}}),
          /*linger=*/true);
    }
    const bool between_requests =
        c->answered > 0 && c->buffer.size() == 0 && !c->parser->got_some();
    if (between_requests && (ec == beast::error::timeout || ec == ssl::error::stream_truncated)) {
      // A kept-alive connection that stayed idle, or whose client went
      // away without TLS's close_notify (most do): nothing wrong.
    } else if (ec == beast::error::timeout) {
      ++counters().timed_out;
      MS_LOG_DEBUG("http: closing a connection on {}: request not received in time", listen);
    } else if (ec != bhttp::error::end_of_stream && ec != asio::error::eof &&
               ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
      ++counters().bad_requests;
      const bool tls_hello = c->tls == nullptr && c->buffer.size() > 0 &&
                             static_cast<const unsigned char*>(c->buffer.data().data())[0] == 0x16;
      MS_LOG_WARN_LIMITED("http: closing a connection on {}: {}", listen,
                          tls_hello ? std::string("it speaks TLS to a "
                                                  "plaintext HTTP port")
                                    : ec.message());
    }
    beast::error_code ignored;
    c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  void Dispatch(std::shared_ptr<Conn> c, bhttp::request<bhttp::string_body> request) {
    ++counters().requests;
    const std::string target(request.target());
    const std::string path = target.substr(0, target.find('?'));
    const unsigned version = request.version();
    // Kept alive if the client wants it, for at most kMaxRequestsPerConnection
    // requests (a client cannot hold a slot of max_connections for ever).
    const bool keep_alive = request.keep_alive() && c->answered + 1 < kMaxRequestsPerConnection;
    const bool head = request.method() == bhttp::verb::head;
    if (auto h = request_handlers.find(path); h != request_handlers.end()) {
      // May block: run it on a worker, answer from the I/O thread.
      const size_t mark = target.find('?');
      Request req{std::string(request.method_string()),
                  path,
                  mark == std::string::npos ? "" : target.substr(mark + 1),
                  std::move(request.body()),
                  std::string(request[bhttp::field::authorization]),
                  c->tls ? tls::PeerPrincipal(c->tls->native_handle()) : ""};
      asio::post(pool,
                 [this, c, version, keep_alive, head, handler = &h->second, req = std::move(req)] {
                   NameThreadOnce("ms-http-worker");
                   Response r = (*handler)(req);
                   asio::post(io, [this, c, version, keep_alive, head, r = std::move(r)]() mutable {
                     Reply(c, version, std::move(r), /*linger=*/false, keep_alive, head);
                   });
                 });
      return;
    }
    auto it = handlers.find(path);
    Response r;
    if (it == handlers.end() && unknown_handler) {
      r = unknown_handler(Request{std::string(request.method_string()), path, "", "", "", ""});
    } else if (it == handlers.end()) {
      std::string known;
      for (const auto& [p, h] : handlers) known += " " + p;
      for (const auto& [p, h] : request_handlers) known += " " + p;
      r = JsonErrorResponse(404, "NOT_FOUND", StrCat("no page ", path, "; try:", known),
                            {"NO_SUCH_PATH", {{"path", path}}});
    } else if (request.method() != bhttp::verb::get && request.method() != bhttp::verb::head) {
      r = MethodNotAllowed(path, "GET, HEAD");
    } else {
      r = it->second();
    }
    Reply(c, version, std::move(r), /*linger=*/false, keep_alive, head);
  }

  // `linger`: the client may still be sending (a request refused half
  // read). Closing with its bytes unread would make the kernel answer
  // with a reset, which can destroy the answer before the client reads
  // it; so after answering, the rest is read and dropped, for a bounded
  // time and number of bytes, before the connection closes.
  //
  // `keep_alive`: the client asked to keep the connection (HTTP/1.1's
  // default); after the answer the connection waits for its next request,
  // idle at most header_timeout.
  //
  // `head`: the answer to a HEAD request: its headers (Content-Length
  // included) without the body.
  void Reply(std::shared_ptr<Conn> c, unsigned version, Response r, bool linger = false,
             bool keep_alive = false, bool head = false) {
    keep_alive = keep_alive && !linger && !stopped;
    // Closing with bytes of a pipelined request unread would reset the
    // connection under the answer: drain them first.
    linger = linger || (!keep_alive && c->buffer.size() > 0);
    auto response = std::make_shared<bhttp::response<bhttp::string_body>>();
    response->version(version);
    response->keep_alive(keep_alive);
    response->result(static_cast<unsigned>(r.status));
    response->set(bhttp::field::content_type, r.content_type);
    response->set(bhttp::field::server, "megastored");
    for (const auto& [name, value] : r.headers) response->set(name, value);
    response->body() = std::move(r.body);
    response->prepare_payload();
    if (head) response->body().clear();  // Content-Length stays: the GET's
    c->stream.expires_after(ToSteady(limits.body_timeout));
    c->With([&](auto& stream) {
      bhttp::async_write(
          stream, *response, [this, c, response, linger, keep_alive](beast::error_code ec, size_t) {
            if (ec == beast::error::timeout) ++counters().timed_out;
            ++c->answered;
            if (keep_alive && !ec) return Serve(c);
            if (c->tls == nullptr) {
              beast::error_code ignored;
              c->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
            }
            if (linger && !ec) {
              c->stream.expires_after(kLingerTime);
              return Drain(c, std::make_shared<std::array<char, 4096>>(), kLingerBytes);
            }
            if (!ec) Close(c);
          });
    });
  }

  // Over TLS, says close_notify before the connection goes. Bounded
  // briefly: the client need not answer it, and a connection waiting for
  // an answer holds a slot of max_connections.
  void Close(const std::shared_ptr<Conn>& c) {
    if (c->tls == nullptr) return;  // c's last reference goes: closed
    c->stream.expires_after(kCloseNotifyTime);
    c->tls->async_shutdown([c](beast::error_code) {});
  }

  static constexpr int kMaxRequestsPerConnection = 1000;
  static constexpr auto kLingerTime = std::chrono::seconds(2);
  static constexpr auto kCloseNotifyTime = std::chrono::milliseconds(250);
  static constexpr size_t kLingerBytes = 16 << 20;

  // Reads and drops what the client still sends, until it closes, an
  // error, kLingerTime (set by the caller, for all reads together) or
  // `left` bytes.
  void Drain(std::shared_ptr<Conn> c, std::shared_ptr<std::array<char, 4096>> buf, size_t left) {
    c->With([&](auto& stream) {
      stream.async_read_some(asio::buffer(*buf),
                             [this, c, buf, left](beast::error_code ec, size_t n) {
                               if (ec || n >= left) return Close(c);
                               Drain(c, buf, left - n);
                             });
    });
  }

  std::atomic<size_t> open{0};  // declared first: Conns die with `io`
  std::string listen;
  const HttpLimits limits;
  const tls::TlsFiles tls_files;
  tls::ContextRef tls;  // held while serving over TLS
  asio::io_context io;
  tcp::acceptor acceptor;
  std::thread thread;
  std::map<std::string, PageHandler> handlers;
  std::map<std::string, RequestHandler> request_handlers;
  RequestHandler unknown_handler;
  asio::thread_pool pool;
  std::atomic<bool> stopped{false};
  std::atomic<int> port{0};
};

HttpServer::HttpServer(std::string listen, int workers, HttpLimits limits, tls::TlsFiles tls)
    : impl_(std::make_shared<Impl>(std::move(listen), workers, limits, std::move(tls))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, PageHandler handler) {
  impl_->handlers[std::move(path)] = std::move(handler);
}

void HttpServer::HandleUnknown(RequestHandler handler) {
  impl_->unknown_handler = std::move(handler);
}

void HttpServer::HandleRequests(std::string path, RequestHandler handler) {
  impl_->request_handlers[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start() {
  MS_RETURN_IF_ERROR(ValidateLimits(impl_->limits));
  if (impl_->tls_files.enabled()) {
    MS_ASSIGN_OR_RETURN(impl_->tls, tls::ContextRef::Acquire(impl_->tls_files, /*server=*/true));
  }
  MS_RETURN_IF_ERROR(rpc::Listen(impl_->acceptor, impl_->listen, "HTTP"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([impl = impl_.get()] {
    SetThreadName("ms-http");
    impl->io.run();
  });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->pool.join();  // handlers still running finish; their answers are dropped
}

int HttpServer::port() const { return impl_->port; }

}  // namespace megastore::http
