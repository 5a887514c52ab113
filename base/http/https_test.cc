// HTTP over mutual TLS, and certificate reload (base/tls/context.h).
#include <sys/socket.h>
#include <unistd.h>

// clang-format off
#include <utility>  // before Boost 1.74's asio, which needs std::exchange
// clang-format on
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <thread>

#include "base/http/http_server.h"
#include "base/test_util.h"
#include "base/tls/certs.h"
#include "base/tls/context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::http {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;

class HttpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tls::CreateCa(dir_.path() + "/ca", "test CA").ok());
    ASSERT_TRUE(tls::CreateCa(dir_.path() + "/other", "another CA").ok());
    Issue("ca", "certs", "server", "status-1", {"127.0.0.1"});
    Issue("ca", "certs", "client", "operator", {});
    Issue("other", "certs", "intruder", "operator", {});
  }

  void Issue(const std::string& ca, const std::string& out, const std::string& name,
             const std::string& cn, std::vector<std::string> hosts, int days = 825) {
    tls::CertificateRequest r;
    r.common_name = cn;
    r.hosts = std::move(hosts);
    r.days = days;
    ASSERT_TRUE(
        tls::IssueCertificate(dir_.path() + "/" + ca, dir_.path() + "/" + out, name, r).ok());
  }

  tls::TlsFiles Files(const std::string& name, const std::string& ca = "ca") const {
    return tls::TlsFiles{dir_.path() + "/" + ca + "/ca.crt",
                         dir_.path() + "/certs/" + name + ".crt",
                         dir_.path() + "/certs/" + name + ".key"};
  }

  void StartServer() {
    server_ = std::make_unique<HttpServer>("127.0.0.1:0", 1, DefaultLimits(), Files("server"));
    server_->Handle("/status", [] { return Response{200, "text/plain", "all well\n"}; });
    ASSERT_TRUE(server_->Start().ok());
  }

  struct Answer {
    std::string error;             // the handshake's or the request's
    std::string server_principal;  // the certificate the server presented
    int status = 0;
    std::string body;
  };

  // GET /status over HTTPS with `files`.
  Answer Get(const tls::TlsFiles& files) {
    Answer a;
    ssl::context ctx(ssl::context::tls_client);
    ctx.load_verify_file(files.ca);
    if (!files.cert.empty()) {
      ctx.use_certificate_chain_file(files.cert);
      ctx.use_private_key_file(files.key, ssl::context::pem);
    }
    ctx.set_verify_mode(ssl::verify_peer);
    asio::io_context io;
    beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(stream).connect(asio::ip::tcp::endpoint(
        asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(server_->port())));
    beast::error_code ec;
    stream.handshake(ssl::stream_base::client, ec);
    if (ec) {
      a.error = ec.message();
      return a;
    }
    a.server_principal = tls::PeerPrincipal(stream.native_handle());
    bhttp::request<bhttp::string_body> req{bhttp::verb::get, "/status", 11};
    req.set(bhttp::field::host, "127.0.0.1");
    bhttp::write(stream, req, ec);
    beast::flat_buffer buffer;
    bhttp::response<bhttp::string_body> res;
    if (!ec) bhttp::read(stream, buffer, res, ec);
    if (ec) {
      a.error = ec.message();
      return a;
    }
    a.status = static_cast<int>(res.result_int());
    a.body = res.body();
    return a;
  }

  TestDir dir_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpsTest, PagesAreServedOverMutualTls) {
  StartServer();
  Answer a = Get(Files("client"));
  ASSERT_EQ(a.error, "");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "all well\n");
  EXPECT_EQ(a.server_principal, "status-1");
}

TEST_F(HttpsTest, ClientsWithoutACertificateOfTheCaAreRefused) {
  StartServer();
  const uint64_t failures = ProcessStats().tls_handshake_failures;
  tls::TlsFiles none = Files("client");
  none.cert.clear();
  none.key.clear();
  Answer a = Get(none);
  EXPECT_EQ(a.status, 0);
  EXPECT_NE(a.error, "");
  a = Get(Files("intruder", "other"));
  EXPECT_EQ(a.status, 0);
  EXPECT_NE(a.error, "");
  // TLS 1.3 clients learn of the refusal only on their first read, after
  // their handshake; the server counts it.
  for (int i = 0; i < 100 && ProcessStats().tls_handshake_failures < failures + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(ProcessStats().tls_handshake_failures, failures + 2);
}

TEST_F(HttpsTest, PlaintextRequestsAreToldToUseHttps) {
  StartServer();
  const int fd = ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /status HTTP/1.1\r\nHost: x\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_THAT(reply, HasSubstr("400"));
  EXPECT_THAT(reply, HasSubstr("speaks HTTPS"));
}

TEST_F(HttpsTest, ReloadTakesReplacedCertificatesForNewConnections) {
  StartServer();
  ASSERT_EQ(Get(Files("client")).server_principal, "status-1");
  const auto before = tls::CertificatesInUse();
  // The operator replaces the server's files (a renewed certificate).
  Issue("ca", "renewed", "server", "status-2", {"127.0.0.1"}, 30);
  namespace fs = std::filesystem;
  for (const char* ext : {".crt", ".key"})
    fs::copy_file(dir_.path() + "/renewed/server" + ext, dir_.path() + "/certs/server" + ext,
                  fs::copy_options::overwrite_existing);
  EXPECT_EQ(Get(Files("client")).server_principal,
            "status-1");  // not yet reloaded
  const uint64_t reloads = tls::TlsReloadStats().reloads;
  ASSERT_TRUE(tls::ReloadTls().ok());
  EXPECT_EQ(tls::TlsReloadStats().reloads, reloads + 1);
  Answer a = Get(Files("client"));
  EXPECT_EQ(a.server_principal, "status-2");
  EXPECT_EQ(a.status, 200);
  bool seen = false;
  for (const tls::CertificateInUse& c : tls::CertificatesInUse()) {
    if (c.path != Files("server").cert) continue;
    seen = true;
    EXPECT_EQ(c.principal, "status-2");
    EXPECT_LT(c.not_after_unix, absl::ToUnixSeconds(absl::Now() + absl::Hours(24 * 31)));
  }
  EXPECT_TRUE(seen);
  EXPECT_THAT(tls::TlsMetrics(),
              HasSubstr("megastore_tls_certificate_expiry_timestamp_seconds{path=\""));
  EXPECT_THAT(tls::TlsStatusText(), HasSubstr("(principal status-2): expires"));
}

TEST_F(HttpsTest, AFailedReloadKeepsTheCertificatesInUse) {
  StartServer();
  ASSERT_EQ(Get(Files("client")).status, 200);
  // A half-written renewal: the key no longer matches the certificate.
  Issue("ca", "renewed", "server", "status-2", {"127.0.0.1"});
  std::filesystem::copy_file(dir_.path() + "/renewed/server.crt", dir_.path() + "/certs/server.crt",
                             std::filesystem::copy_options::overwrite_existing);
  const uint64_t failures = tls::TlsReloadStats().failures;
  absl::Status s = tls::ReloadTls();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("kept the certificates in use"));
  EXPECT_THAT(s.message(), HasSubstr("server.key"));
  EXPECT_EQ(tls::TlsReloadStats().failures, failures + 1);
  EXPECT_THAT(tls::TlsStatusText(), HasSubstr("FAILED"));
  Answer a = Get(Files("client"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.server_principal, "status-1");
}

}  // namespace
}  // namespace megastore::http
