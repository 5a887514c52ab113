// A small HTTP/1.1 server (Boost.Beast) for /status and /metrics pages.
// Beast stays inside http_server.cc.
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

class HttpServer {
 public:
  // `listen` is host:port (port 0 picks one).
  explicit HttpServer(std::string listen);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(std::string path, PageHandler handler);  // before Start
  absl::Status Start();
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace megastore::http
