// RPC over mutual TLS: certificates of the project's own CA (base/tls).
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "base/rpc/rpc.h"
#include "base/test_util.h"
#include "base/tls/certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::rpc {
namespace {

using ::testing::HasSubstr;

class RpcTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tls::CreateCa(dir_.path() + "/ca", "test CA").ok());
    ASSERT_TRUE(tls::CreateCa(dir_.path() + "/other", "another CA").ok());
    Issue("ca", "server", "dc-A", {"127.0.0.1"});
    Issue("ca", "client", "app-1", {});
    Issue("ca", "elsewhere", "dc-B", {"127.0.0.2"});
    Issue("other", "intruder", "app-1", {"127.0.0.1"});
  }

  void Issue(const std::string& ca, const std::string& name, const std::string& cn,
             std::vector<std::string> hosts) {
    tls::CertificateRequest r;
    r.common_name = cn;
    r.hosts = std::move(hosts);
    ASSERT_TRUE(
        tls::IssueCertificate(dir_.path() + "/" + ca, dir_.path() + "/certs", name, r).ok());
  }

  TlsFiles Files(const std::string& name, const std::string& ca = "ca") const {
    return TlsFiles{dir_.path() + "/" + ca + "/ca.crt", dir_.path() + "/certs/" + name + ".crt",
                    dir_.path() + "/certs/" + name + ".key"};
  }

  // A server answering "who" with the caller's principal.
  void StartServer(TlsFiles files, std::string listen = "127.0.0.1:0") {
    ServerOptions o;
    o.listen = std::move(listen);
    o.tls = std::move(files);
    o.worker_threads = 2;
    o.limits.stall_timeout = absl::Milliseconds(500);
    server_ = std::make_unique<RpcServer>(o);
    server_->Register(
        "who", [](const CallContext& ctx, std::string_view, std::shared_ptr<Responder> r) {
          r->Finish(absl::OkStatus(), ctx.principal.empty() ? "(nobody)" : ctx.principal);
        });
    ASSERT_TRUE(server_->Start().ok());
  }

  absl::StatusOr<std::string> Who(TlsFiles files, const std::string& host = "127.0.0.1") {
    ClientOptions o;
    o.server = host + ":" + std::to_string(server_->port());
    o.tls = std::move(files);
    RpcClient client(o);
    return client.Call("who", "", absl::Seconds(5));
  }

  TestDir dir_;
  std::unique_ptr<RpcServer> server_;
};

TEST_F(RpcTlsTest, CallsCarryTheClientsPrincipal) {
  StartServer(Files("server"));
  absl::StatusOr<std::string> who = Who(Files("client"));
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "app-1");
  EXPECT_EQ(server_->stats().tls_handshake_failures, 0u);
}

// A client whose TLS connection broke (the server restarted) connects
// anew, with a new handshake, while the old connection's handlers finish.
TEST_F(RpcTlsTest, AClientReconnectsOverTlsAfterTheServerRestarts) {
  StartServer(Files("server"));
  const int port = server_->port();
  ClientOptions o;
  o.server = "127.0.0.1:" + std::to_string(port);
  o.tls = Files("client");
  RpcClient client(o);
  ASSERT_TRUE(client.Call("who", "", absl::Seconds(5)).ok());
  server_.reset();
  EXPECT_FALSE(client.Call("who", "", absl::Seconds(5)).ok());
  StartServer(Files("server"), "127.0.0.1:" + std::to_string(port));
  absl::StatusOr<std::string> again = client.Call("who", "", absl::Seconds(5));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, "app-1");
}

TEST_F(RpcTlsTest, ACertificateOfAnotherCaIsRefusedOnBothEnds) {
  StartServer(Files("server"));
  absl::StatusOr<std::string> who = Who(Files("intruder", "other"));
  EXPECT_TRUE(absl::IsUnavailable(who.status())) << who.status();
  EXPECT_THAT(who.status().message(), HasSubstr("TLS handshake"));
  // The client side too: a server whose certificate is not the client's CA's.
  server_.reset();
  StartServer(Files("intruder", "other"));
  who = Who(Files("client"));
  EXPECT_TRUE(absl::IsUnavailable(who.status())) << who.status();
  EXPECT_THAT(who.status().message(), HasSubstr("TLS handshake"));
}

TEST_F(RpcTlsTest, AServerCertificateForAnotherHostIsRefused) {
  StartServer(Files("elsewhere"));  // issued for 127.0.0.2 only
  absl::StatusOr<std::string> who = Who(Files("client"));
  EXPECT_TRUE(absl::IsUnavailable(who.status())) << who.status();
  EXPECT_THAT(who.status().message(), HasSubstr("not for 127.0.0.1"));
}

TEST_F(RpcTlsTest, PlaintextAndTlsDoNotMix) {
  StartServer(Files("server"));
  absl::StatusOr<std::string> plain = Who(TlsFiles{});
  EXPECT_TRUE(absl::IsUnavailable(plain.status())) << plain.status();
  EXPECT_THAT(plain.status().message(), HasSubstr("does it require TLS?"));
  EXPECT_GE(server_->stats().tls_handshake_failures, 1u);
  server_.reset();
  StartServer(TlsFiles{});
  absl::StatusOr<std::string> over_tls = Who(Files("client"));
  EXPECT_TRUE(absl::IsUnavailable(over_tls.status())) << over_tls.status();
  EXPECT_THAT(over_tls.status().message(), HasSubstr("TLS handshake"));
  // And plaintext still works there.
  absl::StatusOr<std::string> ok = Who(TlsFiles{});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "(nobody)");
}

// A connection that never starts its handshake is closed after the stall
// timeout (500 ms here), like a half-sent frame.
TEST_F(RpcTlsTest, AConnectionWithoutAHandshakeIsClosed) {
  StartServer(Files("server"));
  const int fd = ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);  // blocks until the server closes
  ::close(fd);
  EXPECT_LE(n, 0);
  EXPECT_EQ(server_->stats().tls_handshake_failures, 1u);
}

// A renewed certificate replaced on disk is presented by connections made
// after ReloadTls (SIGHUP in megastored), not before.
TEST_F(RpcTlsTest, ReloadedCertificatesServeNewConnections) {
  StartServer(Files("server"));
  ClientOptions o;
  o.server = "127.0.0.1:" + std::to_string(server_->port());
  o.tls = Files("client");
  RpcClient held(o);  // keeps the client's context in use
  ASSERT_EQ(*held.Call("who", "", absl::Seconds(5)), "app-1");
  Issue("ca", "client-renewed", "app-2", {});
  for (const char* ext : {".crt", ".key"}) {
    const std::string from = dir_.path() + "/certs/client-renewed" + ext,
                      to = dir_.path() + "/certs/client" + ext;
    ASSERT_EQ(std::rename(from.c_str(), to.c_str()), 0);
  }
  EXPECT_EQ(*Who(Files("client")), "app-1");
  ASSERT_TRUE(tls::ReloadTls().ok());
  EXPECT_EQ(*Who(Files("client")), "app-2");
}

TEST_F(RpcTlsTest, BadFilesAreRefusedByName) {
  EXPECT_TRUE(CheckTls(TlsFiles{}).ok());
  EXPECT_TRUE(CheckTls(Files("server")).ok());
  TlsFiles missing = Files("server");
  missing.key = dir_.path() + "/nope.key";
  EXPECT_THAT(CheckTls(missing).message(), HasSubstr("nope.key"));
  TlsFiles mismatched = Files("server");
  mismatched.key = Files("client").key;
  EXPECT_THAT(CheckTls(mismatched).message(), HasSubstr("is not the key of"));
  TlsFiles partial;
  partial.ca = Files("server").ca;
  EXPECT_THAT(CheckTls(partial).message(), HasSubstr("all three files"));
  ServerOptions o;
  o.tls = missing;
  RpcServer s(o);
  EXPECT_FALSE(s.Start().ok());
}

}  // namespace
}  // namespace megastore::rpc
