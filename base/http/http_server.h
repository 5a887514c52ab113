// A small HTTP/1.1 server (Boost.Beast) for /status and /metrics pages and
// the JSON gateway's requests. Beast stays inside http_server.cc.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace megastore::http {

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called on the server's thread for GET requests of its path.
using PageHandler = std::function<Response()>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;
  std::string body;
};
// Called on a worker thread (it may block) for any request of its path.
using RequestHandler = std::function<Response(const Request&)>;

class HttpServer {
 public:
  // `listen` is host:port (port 0 picks one); `workers` threads run
  // RequestHandlers.
  explicit HttpServer(std::string listen, int workers = 4);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(std::string path, PageHandler handler);  // before Start
  void HandleRequests(std::string path, RequestHandler handler);  // before Start
  absl::Status Start();
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace megastore::http
