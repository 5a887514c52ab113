// A small HTTP/1.1 server (Boost.Beast) for /status and /metrics pages and
// the JSON gateway's requests. Beast stays inside http_server.cc.
//
// Connections are kept alive between requests (idle at most the header
// timeout). Everything a client controls is bounded
// (HttpLimits): connections held at once, the size of the request head and
// body, and how long the head, the body and the reading of the answer may
// take. A request over a size limit gets 431 or 413 with a JSON error; a
// connection over a time limit is closed; refusals are counted (HttpStats).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/tls/context.h"

namespace megastore::http {

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // More header fields (e.g. {"Allow", "POST"} with a 405).
  std::vector<std::pair<std::string, std::string>> headers;
};

// The one error shape of every JSON answer (the gateway's and the server's
// own refusals), as Google's APIs have it:
//   {"error": {"code": 409, "status": "ABORTED", "message": "...",
//              "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
//                           "reason": "CONFLICT", "domain": "megastore",
//                           "metadata": {"key": "value"}}]}}
// `code` is the HTTP status, `status` the canonical code's name; details
// is empty when `reason` is.
struct ErrorDetail {
  std::string reason;  // machine-readable, UPPER_SNAKE_CASE
  std::vector<std::pair<std::string, std::string>> metadata;
};
std::string ErrorJson(int http_status, std::string_view status, std::string_view message,
                      const ErrorDetail& detail = {});
Response JsonErrorResponse(int http_status, std::string_view status, std::string_view message,
                           const ErrorDetail& detail = {});

// 405 in that shape, with the Allow header: `path` takes only `allow`
// ("GET, HEAD", "POST").
Response MethodNotAllowed(std::string_view path, std::string_view allow);

// Called on the server's thread for GET requests of its path.
using PageHandler = std::function<Response()>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;
  std::string query;  // after the '?' of the target, as sent (not decoded)
  std::string body;
  std::string authorization;  // the Authorization header, if any
  std::string principal;      // over TLS: the client certificate's common name
};
// Called on a worker thread (it may block) for any request of its path.
using RequestHandler = std::function<Response(const Request&)>;

struct HttpLimits {
  // Connections one server holds at once; more are closed on accept.
  // (Each also takes a descriptor from the process's budget, which keeps a
  // reserve for storage: base/descriptors.h.)
  size_t max_connections = 512;
  // Request line plus headers; larger gets 431.
  size_t max_header_bytes = 16 << 10;
  // Request body; larger gets 413.
  size_t max_body_bytes = 4 << 20;
  // From accepting the connection to the end of the headers.
  absl::Duration header_timeout = absl::Seconds(10);
  // From the end of the headers to the end of the body, and for the client
  // to take the answer.
  absl::Duration body_timeout = absl::Seconds(30);
};

// The limits a server gets when not told otherwise; a program sets them
// once from its flags (megastored's --http-* flags) before starting servers.
void SetDefaultLimits(const HttpLimits& limits);
HttpLimits DefaultLimits();
// InvalidArgument naming the limit that makes no sense.
absl::Status ValidateLimits(const HttpLimits& limits);

// Counters of every HTTP server of this process.
struct HttpStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // over max_connections or the descriptor budget
  uint64_t requests = 0;
  uint64_t headers_too_large = 0;       // answered 431
  uint64_t bodies_too_large = 0;        // answered 413
  uint64_t timed_out = 0;               // closed by header_timeout or body_timeout
  uint64_t bad_requests = 0;            // not HTTP: closed
  uint64_t tls_handshake_failures = 0;  // a TLS listener's failed handshakes
};
HttpStats ProcessStats();
// ProcessStats as Prometheus text.
std::string ProcessStatsMetrics();

class HttpServer {
 public:
  // `listen` is host:port (port 0 picks one); `workers` threads run
  // RequestHandlers. With `tls` enabled, every connection is HTTPS with
  // mutual TLS 1.3: the client must present a certificate of the CA.
  explicit HttpServer(std::string listen, int workers = 4, HttpLimits limits = DefaultLimits(),
                      tls::TlsFiles tls = tls::DefaultTls());
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(std::string path, PageHandler handler);  // before Start
  void HandleRequests(std::string path,
                      RequestHandler handler);  // before Start
  // Answers requests of paths no handler serves, any method (on the I/O
  // thread: it must not block). Default: a JSON 404 naming the paths
  // served (and 405 with Allow for a method other than GET on a page).
  void HandleUnknown(RequestHandler handler);  // before Start
  absl::Status Start();
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace megastore::http
