#include "tests/https_client.h"

// clang-format off
#include <utility>  // before Boost 1.74's asio, which needs std::exchange
// clang-format on
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

namespace megastore::testing {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

std::string Https(int port, const tls::TlsFiles& files, const std::string& method,
                  const std::string& path, const std::string& body, const std::string& headers) {
  boost::system::error_code ec;
  ssl::context ctx(ssl::context::tls_client);
  ctx.load_verify_file(files.ca, ec);
  if (!ec && !files.cert.empty()) ctx.use_certificate_chain_file(files.cert, ec);
  if (!ec && !files.key.empty()) ctx.use_private_key_file(files.key, ssl::context::pem, ec);
  if (ec) return "";
  ctx.set_verify_mode(ssl::verify_peer);
  asio::io_context io;
  ssl::stream<asio::ip::tcp::socket> stream(io, ctx);
  stream.next_layer().connect(
      asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
      ec);
  if (!ec) stream.handshake(ssl::stream_base::client, ec);
  if (ec) return "";
  const std::string req =
      method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
      headers + "\r\n" + body;
  asio::write(stream, asio::buffer(req), ec);
  if (ec) return "";
  std::string resp;
  char buf[4096];
  for (;;) {
    const size_t n = stream.read_some(asio::buffer(buf), ec);
    resp.append(buf, n);
    if (ec) break;  // the server's close_notify, or its close
  }
  return resp;
}

tls::TlsFiles LocalAdminTls(const std::string& data) {
  return tls::TlsFiles{data + "/tls/ca.crt", data + "/tls/admin.crt", data + "/tls/admin.key"};
}

}  // namespace megastore::testing
