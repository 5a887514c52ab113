#include "base/http/http_server.h"

#include <atomic>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "base/logging.h"
#include "base/rpc/listen.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;

// Handlers hold a plain Impl*: Impl owns the io_context, and the io thread is
// joined before Impl goes away.
struct HttpServer::Impl {
  Impl(std::string l, int workers)
      : listen(std::move(l)), acceptor(io), pool(static_cast<size_t>(std::max(1, workers))) {}

  void Accept() {
    acceptor.async_accept(io, [self = this](beast::error_code ec, tcp::socket socket) {
      if (self->stopped) return;
      if (!ec) self->Serve(std::make_shared<tcp::socket>(std::move(socket)));
      self->Accept();
    });
  }

  void Serve(std::shared_ptr<tcp::socket> socket) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto request = std::make_shared<bhttp::request<bhttp::string_body>>();
    bhttp::async_read(*socket, *buffer, *request,
                      [self = this, socket, buffer, request](beast::error_code ec, size_t) {
                        if (ec == bhttp::error::body_limit)
                          return self->Reply(socket, 11, Response{413, "text/plain; charset=utf-8",
                                                                  "request body too large\n"});
                        if (ec) return;
                        const std::string target(request->target());
                        const std::string path = target.substr(0, target.find('?'));
                        const unsigned version = request->version();
                        if (auto h = self->request_handlers.find(path); h != self->request_handlers.end()) {
                          // May block: run it on a worker, answer from the I/O thread.
                          Request req{std::string(request->method_string()), path, std::move(request->body())};
                          asio::post(self->pool, [self, socket, version, handler = &h->second,
                                                  req = std::move(req)] {
                            Response r = (*handler)(req);
                            asio::post(self->io, [self, socket, version, r = std::move(r)]() mutable {
                              self->Reply(socket, version, std::move(r));
                            });
                          });
                          return;
                        }
                        auto it = self->handlers.find(path);
                        Response r;
                        if (request->method() != bhttp::verb::get && request->method() != bhttp::verb::head) {
                          r = Response{405, "text/plain; charset=utf-8", "only GET is supported\n"};
                        } else if (it == self->handlers.end()) {
                          std::string known;
                          for (const auto& [p, h] : self->handlers) known += " " + p;
                          for (const auto& [p, h] : self->request_handlers) known += " " + p;
                          r = Response{404, "text/plain; charset=utf-8", StrCat("no page ", path, "; try:", known, "\n")};
                        } else {
                          r = it->second();
                        }
                        self->Reply(socket, version, std::move(r));
                      });
  }

  void Reply(std::shared_ptr<tcp::socket> socket, unsigned version, Response r) {
    auto response = std::make_shared<bhttp::response<bhttp::string_body>>();
    response->version(version);
    response->keep_alive(false);
    response->result(static_cast<unsigned>(r.status));
    response->set(bhttp::field::content_type, r.content_type);
    response->set(bhttp::field::server, "megastored");
    response->body() = std::move(r.body);
    response->prepare_payload();
    bhttp::async_write(*socket, *response, [socket, response](beast::error_code, size_t) {
      beast::error_code ignored;
      socket->shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  std::string listen;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::thread thread;
  std::map<std::string, PageHandler> handlers;
  std::map<std::string, RequestHandler> request_handlers;
  asio::thread_pool pool;
  std::atomic<bool> stopped{false};
  std::atomic<int> port{0};
};

HttpServer::HttpServer(std::string listen, int workers)
    : impl_(std::make_shared<Impl>(std::move(listen), workers)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, PageHandler handler) {
  impl_->handlers[std::move(path)] = std::move(handler);
}

void HttpServer::HandleRequests(std::string path, RequestHandler handler) {
  impl_->request_handlers[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start() {
  MS_RETURN_IF_ERROR(rpc::Listen(impl_->acceptor, impl_->listen, "HTTP"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
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
