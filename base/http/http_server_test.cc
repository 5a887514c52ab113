#include "base/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    server_ = std::make_unique<HttpServer>("127.0.0.1:0", 2, limits);
    server_->Handle("/page", [] { return Response{200, "text/plain", "a page\n"}; });
    server_->HandleRequests("/echo", [](const Request& r) {
      return Response{200, "text/plain", r.body};
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  int Connect() { return ConnectLoopback(server_->port()); }

  // Sends `request` (possibly only part of one) and returns everything the
  // server answers until it closes (or 10 s pass).
  std::string Exchange(const std::string& request, bool half_close = true) {
    const int fd = Connect();
    if (fd < 0) return "connect failed";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    if (half_close) ::shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
  }

  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ServesPagesAndRequests) {
  Start(HttpLimits{});
  EXPECT_THAT(Exchange("GET /page HTTP/1.1\r\nHost: x\r\n\r\n"), HasSubstr("a page"));
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
              HasSubstr("hello"));
}

// HTTP/1.1 keeps the connection: several requests, one after another (and
// pipelined), each answered; the connection closes once the client does.
TEST_F(HttpServerTest, KeepsConnectionsAliveBetweenRequests) {
  Start(HttpLimits{});
  const std::string out = Exchange(
      "GET /page HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
      "GET /page HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
      "GET /page HTTP/1.1\r\nHost: x\r\n\r\n");
  size_t answers = 0;
  for (size_t at = out.find("HTTP/1.1 200"); at != std::string::npos;
       at = out.find("HTTP/1.1 200", at + 1))
    ++answers;
  EXPECT_EQ(answers, 3u) << "the request after Connection: close is not served: " << out;
  EXPECT_THAT(out, HasSubstr("hello"));
  EXPECT_THAT(out, HasSubstr("Connection: close"));
}

// A HEAD answer has the GET's headers and no body, so the next answer on
// the connection starts where the client expects it.
TEST_F(HttpServerTest, HeadAnswersCarryNoBody) {
  Start(HttpLimits{});
  const std::string out =
      Exchange("HEAD /page HTTP/1.1\r\nHost: x\r\n\r\nGET /page HTTP/1.1\r\nHost: x\r\n\r\n");
  const size_t second = out.find("HTTP/1.1 200", 1);
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_THAT(out.substr(0, second), HasSubstr("Content-Length: 7"));
  EXPECT_THAT(out.substr(0, second), Not(HasSubstr("a page"))) << out;
  EXPECT_THAT(out.substr(second), HasSubstr("a page"));
}

// A body whose length is unknown (a Transfer-Encoding not ending in
// chunked) is refused, not read as the next request.
TEST_F(HttpServerTest, AnUnknownTransferEncodingIsRefused) {
  Start(HttpLimits{});
  const std::string out = Exchange(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
      "GET /page HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(out, HasSubstr("BAD_TRANSFER_ENCODING"));
  EXPECT_THAT(out, Not(HasSubstr("a page"))) << out;
}

// Refusals have the one JSON error shape: unknown paths 404, a wrong
// method 405 with Allow.
TEST_F(HttpServerTest, UnknownPathsAndMethodsGetJsonErrors) {
  Start(HttpLimits{});
  const std::string missing = Exchange("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(missing, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(missing, HasSubstr(R"({"error":{"code":404,"status":"NOT_FOUND","message":)"));
  EXPECT_THAT(missing, HasSubstr("/page"));
  const std::string wrong = Exchange("DELETE /page HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(wrong, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(wrong, HasSubstr("Allow: GET, HEAD"));
  EXPECT_THAT(wrong, HasSubstr(R"("reason":"METHOD_NOT_ALLOWED")"));
}

TEST(ErrorJsonTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  // A path of raw bytes: still valid JSON; well-formed UTF-8 kept.
  EXPECT_EQ(ErrorJson(404, "NOT_FOUND", "no page /\xff\xc3\xa9\xe2\x82 x"),
            "{\"error\":{\"code\":404,\"status\":\"NOT_FOUND\",\"message\":\"no page "
            "/\\ufffd\xc3\xa9\\ufffd\\ufffd x\",\"details\":[]}}\n");
}

TEST(ErrorJsonTest, HasGooglesShapeAndEscapes) {
  EXPECT_EQ(ErrorJson(409, "ABORTED", "lost \"x\"\n"),
            R"({"error":{"code":409,"status":"ABORTED","message":"lost \"x\"\n","details":[]}})"
            "\n");
  EXPECT_EQ(ErrorJson(413, "RESOURCE_EXHAUSTED", "big", {"BODY_TOO_LARGE", {{"limit", "9"}}}),
            R"({"error":{"code":413,"status":"RESOURCE_EXHAUSTED","message":"big","details":[)"
            R"({"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"BODY_TOO_LARGE",)"
            R"("domain":"megastore","metadata":{"limit":"9"}}]}})"
            "\n");
}

TEST_F(HttpServerTest, HugeHeadersGet431AndHugeBodies413) {
  HttpLimits l;
  l.max_header_bytes = 2048;
  l.max_body_bytes = 1000;
  Start(l);
  const HttpStats before = ProcessStats();
  const std::string big_header =
      "GET /page HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(10000, 'a') + "\r\n\r\n";
  const std::string a = Exchange(big_header);
  EXPECT_THAT(a, StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(a, HasSubstr("RESOURCE_EXHAUSTED"));
  const std::string b = Exchange("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
                                 std::string(5000, 'b'));
  EXPECT_THAT(b, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(b, HasSubstr(R"({"error":{"code":413,"status":"RESOURCE_EXHAUSTED")"));
  EXPECT_THAT(
      b,
      HasSubstr(R"("reason":"BODY_TOO_LARGE","domain":"megastore","metadata":{"limit":"1000"})"));
  const HttpStats after = ProcessStats();
  EXPECT_EQ(after.headers_too_large, before.headers_too_large + 1);
  EXPECT_EQ(after.bodies_too_large, before.bodies_too_large + 1);
}

// A client still sending a body the server has refused gets the 413
// itself, not a connection reset that destroys it unread: the server reads
// and drops the rest before closing. (Like most HTTP clients, this one
// sends the whole request before it reads.)
TEST_F(HttpServerTest, A413ReachesAClientStillSendingItsBody) {
  HttpLimits l;
  l.max_body_bytes = 1000;
  Start(l);
  for (int round = 0; round < 5; ++round) {
    const int fd = Connect();
    ASSERT_GE(fd, 0);
    const std::string body(4 << 20, 'b');
    const std::string head =
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    size_t sent = 0;
    while (sent < body.size()) {
      const ssize_t n = ::send(fd, body.data() + sent, body.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    const int recv_errno = n < 0 ? errno : 0;
    ::close(fd);
    EXPECT_EQ(sent, body.size()) << "round " << round << ": the server reset "
                                 << "the connection while the client sent";
    EXPECT_THAT(out, StartsWith("HTTP/1.1 413"))
        << "round " << round << ", sent " << sent << " bytes, recv errno " << recv_errno;
  }
}

TEST_F(HttpServerTest, HalfSentRequestsAreClosedAfterTheirTimeout) {
  HttpLimits l;
  l.header_timeout = absl::Milliseconds(200);
  l.body_timeout = absl::Milliseconds(200);
  Start(l);
  const HttpStats before = ProcessStats();
  const auto start = std::chrono::steady_clock::now();
  // Neither connection finishes its request nor half-closes: before, both
  // were held for ever.
  EXPECT_EQ(Exchange("GET /page HTTP/1.1\r\nHost: x\r\n", false), "");
  EXPECT_EQ(Exchange("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", false),
            "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The stream closes the socket before the handler counts the timeout.
  for (int i = 0; i < 100 && ProcessStats().timed_out < before.timed_out + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ProcessStats().timed_out, before.timed_out + 2);
  EXPECT_THAT(Exchange("GET /page HTTP/1.1\r\nHost: x\r\n\r\n"), HasSubstr("a page"));
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitAreRefused) {
  HttpLimits l;
  l.max_connections = 2;
  Start(l);
  std::vector<int> held;
  for (int i = 0; i < 2; ++i) held.push_back(Connect());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const uint64_t refused = ProcessStats().connections_refused;
  EXPECT_EQ(Exchange("GET /page HTTP/1.1\r\nHost: x\r\n\r\n"), "");
  EXPECT_EQ(ProcessStats().connections_refused, refused + 1);
  for (int fd : held) ::close(fd);
  std::string page;
  for (int tries = 0; tries < 50 && page.find("a page") == std::string::npos; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    page = Exchange("GET /page HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  EXPECT_THAT(page, HasSubstr("a page"));
}

TEST(HttpLimits, NonsenseLimitsAreRefusedByName) {
  HttpLimits l;
  l.max_connections = 0;
  EXPECT_THAT(std::string(ValidateLimits(l).message()), HasSubstr("max_connections"));
  l = HttpLimits{};
  l.header_timeout = absl::ZeroDuration();
  EXPECT_THAT(std::string(ValidateLimits(l).message()), HasSubstr("header_timeout"));
}

}  // namespace
}  // namespace megastore::http
