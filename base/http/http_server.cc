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
  explicit Impl(std::string l) : listen(std::move(l)), acceptor(io) {}

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
                        if (ec) return;
                        auto response = std::make_shared<bhttp::response<bhttp::string_body>>();
                        response->version(request->version());
                        response->keep_alive(false);
                        const std::string target(request->target());
                        const std::string path = target.substr(0, target.find('?'));
                        auto it = self->handlers.find(path);
                        Response r;
                        if (request->method() != bhttp::verb::get && request->method() != bhttp::verb::head) {
                          r = Response{405, "text/plain; charset=utf-8", "only GET is supported\n"};
                        } else if (it == self->handlers.end()) {
                          std::string known;
                          for (const auto& [p, h] : self->handlers) known += " " + p;
                          r = Response{404, "text/plain; charset=utf-8", StrCat("no page ", path, "; try:", known, "\n")};
                        } else {
                          r = it->second();
                        }
                        response->result(static_cast<unsigned>(r.status));
                        response->set(bhttp::field::content_type, r.content_type);
                        response->set(bhttp::field::server, "megastored");
                        response->body() = std::move(r.body);
                        response->prepare_payload();
                        bhttp::async_write(*socket, *response, [socket, response](beast::error_code, size_t) {
                          beast::error_code ignored;
                          socket->shutdown(tcp::socket::shutdown_send, ignored);
                        });
                      });
  }

  std::string listen;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::thread thread;
  std::map<std::string, PageHandler> handlers;
  std::atomic<bool> stopped{false};
  std::atomic<int> port{0};
};

HttpServer::HttpServer(std::string listen) : impl_(std::make_shared<Impl>(std::move(listen))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, PageHandler handler) {
  impl_->handlers[std::move(path)] = std::move(handler);
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
}

int HttpServer::port() const { return impl_->port; }

}  // namespace megastore::http
