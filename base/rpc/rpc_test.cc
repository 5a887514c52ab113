#include "base/rpc/rpc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/random.h"
#include "base/rpc/rpc.pb.h"
#include "base/rpc/rpc_internal.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::rpc {
namespace {

using ::testing::HasSubstr;

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.limits.max_frame_bytes = 1 << 20;
    o.worker_threads = 8;
    server_ = std::make_unique<RpcServer>(o);
    server_->Register("echo",
                      [](const CallContext&, std::string_view req, std::shared_ptr<Responder> r) {
                        r->Finish(absl::OkStatus(), std::string(req));
                      });
    server_->Register("fail",
                      [](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
                        r->Finish(absl::NotFoundError("no such thing"));
                      });
    server_->Register("count",
                      [](const CallContext&, std::string_view req, std::shared_ptr<Responder> r) {
                        const int n = std::stoi(std::string(req));
                        for (int i = 0; i < n; ++i) r->Send(std::to_string(i));
                        r->Finish(absl::OkStatus());
                      });
    server_->Register("slow",
                      [this](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
                        release_.WaitForNotificationWithTimeout(absl::Seconds(30));
                        r->Finish(absl::OkStatus(), "late");
                      });
    server_->RegisterInline(
        "maybe",
        [this](const CallContext&, std::string_view req, std::shared_ptr<Responder>& r) {
          if (req != "inline") return false;
          ++inline_calls_;
          inline_thread_ = std::this_thread::get_id();
          r->Finish(absl::OkStatus(), "answered inline");
          return true;
        },
        [](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
          r->Finish(absl::OkStatus(), "answered by a worker");
        });
    ASSERT_TRUE(server_->Start().ok());
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    server_.reset();
  }

  std::unique_ptr<RpcClient> Client() {
    ClientOptions o;
    o.server = address_;
    return std::make_unique<RpcClient>(o);
  }

  // Sends raw bytes on a fresh TCP connection and waits for the server to
  // close it. Returns true if it closed.
  bool SendRawAndExpectClose(const std::string& bytes) {
    const int fd = RawConnect();
    if (fd < 0) return false;
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    char buf[256];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    ::close(fd);
    return n == 0;
  }

  // Connects a raw TCP socket to the server; -1 on failure.
  int RawConnect() { return ConnectLoopback(server_->port()); }

  static std::string RequestFrame(uint64_t id, const std::string& method, const std::string& body) {
    RpcEnvelope e;
    e.set_call_id(id);
    e.set_method(method);
    e.set_body(body);
    return EncodeFrame(e.SerializeAsString());
  }

  // Reads `n` response frames from `fd`; their bodies by call id.
  static std::map<uint64_t, std::string> ReadResponses(int fd, size_t n) {
    std::map<uint64_t, std::string> out;
    std::string in;
    char buf[4096];
    while (out.size() < n) {
      const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
      if (got <= 0) break;
      in.append(buf, static_cast<size_t>(got));
      while (in.size() >= 8) {
        const uint32_t len = static_cast<uint8_t>(in[0]) | static_cast<uint8_t>(in[1]) << 8 |
                             static_cast<uint8_t>(in[2]) << 16 |
                             static_cast<uint32_t>(static_cast<uint8_t>(in[3])) << 24;
        if (in.size() < 8 + len) break;
        RpcEnvelope e;
        EXPECT_TRUE(e.ParseFromArray(in.data() + 8, static_cast<int>(len)));
        out[e.call_id()] = e.body();
        in.erase(0, 8 + len);
      }
    }
    return out;
  }

  std::unique_ptr<RpcServer> server_;
  std::string address_;
  absl::Notification release_;
  std::atomic<int> inline_calls_{0};
  std::thread::id inline_thread_;  // where "maybe" last answered inline
};

// An envelope serialized straight into its frame is the frame of its
// serialization, for an empty body and a large one.
TEST(RpcFrameTest, AnEnvelopeEncodesAsTheFrameOfItsSerialization) {
  for (size_t body : {size_t{0}, size_t{3}, size_t{200000}}) {
    RpcEnvelope e;
    e.set_call_id(7);
    e.set_status_code(5);
    e.set_status_message("nope");
    e.set_body(std::string(body, 'x'));
    EXPECT_EQ(rpc_internal::EncodeEnvelope(e), EncodeFrame(e.SerializeAsString())) << body;
  }
}

TEST_F(RpcTest, UnaryCallsReturnBodiesAndStatuses) {
  auto c = Client();
  auto r = c->Call("echo", std::string("hi\0there", 8), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::string("hi\0there", 8));
  auto f = c->Call("fail", "", absl::Seconds(10));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), "no such thing");
  auto u = c->Call("nope", "", absl::Seconds(10));
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(RpcTest, StreamsDeliverEveryMessageThenFinish) {
  auto c = Client();
  std::vector<std::string> got;
  ASSERT_TRUE(c->Stream("count", "5", absl::Seconds(10), [&](std::string_view m) {
                 got.emplace_back(m);
                 return true;
               }).ok());
  EXPECT_EQ(got, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  got.clear();
  ASSERT_TRUE(c->Stream("count", "100", absl::Seconds(10), [&](std::string_view m) {
                 got.emplace_back(m);
                 return got.size() < 3;
               }).ok());
  EXPECT_EQ(got.size(), 3u);
}

TEST_F(RpcTest, DeadlinesExpireWithoutBlockingOtherCalls) {
  auto c = Client();
  auto slow = c->Call("slow", "", absl::Milliseconds(50));
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c->Call("echo", "x", absl::Seconds(10)).ok());
}

TEST_F(RpcTest, AShorterDeadlineAfterALongerOneStillExpiresOnTime) {
  auto c = Client();
  absl::Notification long_done;
  c->CallAsync("slow", "", absl::Seconds(20),
               [&](absl::StatusOr<std::string>) { long_done.Notify(); });
  const absl::Time start = absl::Now();
  auto r = c->Call("slow", "", absl::Milliseconds(100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  release_.Notify();
  long_done.WaitForNotification();
}

TEST_F(RpcTest, ManyConcurrentCallsShareOneConnection) {
  auto c = Client();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const std::string body = std::to_string(t * 1000 + i);
        auto r = c->Call("echo", body, absl::Seconds(10));
        if (r.ok() && *r == body) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 800);
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
}

TEST_F(RpcTest, UnreachableServerIsUnavailable) {
  ClientOptions o;
  o.server = "127.0.0.1:1";
  RpcClient c(o);
  auto r = c.Call("echo", "x", absl::Seconds(10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot connect to 127.0.0.1:1"));
  ClientOptions bad;
  bad.server = "no-port";
  RpcClient c2(bad);
  EXPECT_EQ(c2.Call("echo", "x", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RpcTest, GarbageFramesCloseTheirConnectionAndTheServerKeepsServing) {
  Random rng(9);
  EXPECT_TRUE(SendRawAndExpectClose(rng.Bytes(64)));                               // random bytes
  EXPECT_TRUE(SendRawAndExpectClose(std::string("\xff\xff\xff\x7f\0\0\0\0", 8)));  // huge length
  std::string frame = EncodeFrame("not an envelope at all");
  EXPECT_TRUE(SendRawAndExpectClose(frame));  // bad payload
  frame = EncodeFrame("x");
  frame[5] ^= 1;
  EXPECT_TRUE(SendRawAndExpectClose(frame));                            // bad checksum
  EXPECT_TRUE(SendRawAndExpectClose(EncodeFrame("abc").substr(0, 9)));  // truncated
  for (int i = 0; i < 50; ++i) SendRawAndExpectClose(rng.Bytes(rng.Uniform(300)));
  EXPECT_GE(server_->stats().bad_frames, 4u);
  auto c = Client();
  auto r = c->Call("echo", "still here", absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "still here");
}

TEST_F(RpcTest, ClientReconnectsAfterTheServerRestarts) {
  auto c = Client();
  ASSERT_TRUE(c->Call("echo", "a", absl::Seconds(10)).ok());
  const int port = server_->port();
  if (!release_.HasBeenNotified()) release_.Notify();
  server_.reset();
  EXPECT_EQ(c->Call("echo", "b", absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnavailable);
  ServerOptions o;
  o.listen = "127.0.0.1:" + std::to_string(port);
  server_ = std::make_unique<RpcServer>(o);
  server_->Register("echo",
                    [](const CallContext&, std::string_view req, std::shared_ptr<Responder> r) {
                      r->Finish(absl::OkStatus(), std::string(req));
                    });
  ASSERT_TRUE(server_->Start().ok());
  auto r = c->Call("echo", "c", absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(RpcTest, ManyFramesInOneSegmentAreAllAnswered) {
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  std::string bytes;
  for (uint64_t id = 1; id <= 20; ++id)
    bytes += RequestFrame(id, "echo", "body" + std::to_string(id));
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  const auto got = ReadResponses(fd, 20);
  ::close(fd);
  ASSERT_EQ(got.size(), 20u);
  for (uint64_t id = 1; id <= 20; ++id) EXPECT_EQ(got.at(id), "body" + std::to_string(id));
}

TEST_F(RpcTest, AFrameArrivingByteByByteIsAnswered) {
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  const std::string bytes = RequestFrame(7, "echo", "slowly");
  for (char c : bytes) {
    ASSERT_EQ(::send(fd, &c, 1, MSG_NOSIGNAL), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto got = ReadResponses(fd, 1);
  ::close(fd);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at(7), "slowly");
}

TEST_F(RpcTest, FramesLargerThanOneReadRoundTrip) {
  auto c = Client();
  Random rng(3);
  const std::string big = rng.Bytes(900 << 10);
  auto r = c->Call("echo", big, absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, big);
  EXPECT_EQ(*c->Call("echo", "small after big", absl::Seconds(10)), "small after big");
}

TEST_F(RpcTest, InlineHandlersAnswerOrDeclineToAWorker) {
  auto c = Client();
  EXPECT_EQ(*c->Call("maybe", "inline", absl::Seconds(10)), "answered inline");
  EXPECT_EQ(*c->Call("maybe", "other", absl::Seconds(10)), "answered by a worker");
  EXPECT_EQ(inline_calls_.load(), 1);
}

// Through RpcTransport, a server of this process is called without TCP:
// the same answers, statuses, deadlines and inline handlers; a stopped
// server is unreachable as over TCP; turned off, calls go over TCP.
TEST_F(RpcTest, CallsToAServerOfThisProcessSkipTcpWithTheSameAnswers) {
  ASSERT_TRUE(InProcessCalls());
  RpcTransport transport;
  auto call = [&](const std::string& method, const std::string& request,
                  absl::Duration timeout = absl::Seconds(5)) {
    absl::StatusOr<std::string> result;
    absl::Notification done;
    transport.Call(address_, method, request, timeout, [&](absl::StatusOr<std::string> r) {
      result = std::move(r);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  };
  const uint64_t tcp_before = server_->stats().connections_accepted;
  EXPECT_EQ(*call("echo", std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(call("fail", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(call("nope", "").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(*call("maybe", "inline"), "answered inline");
  EXPECT_EQ(*call("maybe", "other"), "answered by a worker");
  // An inline handler runs on the caller's thread; its answer never does.
  {
    std::thread::id answered_on;
    absl::Notification done;
    transport.Call(address_, "maybe", "inline", absl::Seconds(5), [&](absl::StatusOr<std::string>) {
      answered_on = std::this_thread::get_id();
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(inline_thread_, std::this_thread::get_id());
    EXPECT_NE(answered_on, std::this_thread::get_id());
  }
  absl::StatusOr<std::string> slow = call("slow", "", absl::Milliseconds(50));
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded) << slow.status();
  EXPECT_EQ(server_->stats().connections_accepted, tcp_before) << "no TCP connection was made";

  SetInProcessCalls(false);
  EXPECT_EQ(*call("echo", "over tcp"), "over tcp");
  SetInProcessCalls(true);
  EXPECT_GT(server_->stats().connections_accepted, tcp_before);

  // A transport that goes fails its unanswered calls with Cancelled, as
  // its TCP clients do, and drops the answers that come later.
  {
    auto doomed = std::make_unique<RpcTransport>();
    absl::StatusOr<std::string> result;
    int calls = 0;
    doomed->Call(address_, "slow", "", absl::Seconds(30), [&](absl::StatusOr<std::string> r) {
      result = std::move(r);
      ++calls;
    });
    doomed.reset();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
    release_.Notify();
    absl::SleepFor(absl::Milliseconds(50));  // the late answer, dropped
    EXPECT_EQ(calls, 1);
  }

  server_->Stop();
  absl::StatusOr<std::string> gone = call("echo", "x");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
}

// A method whose in-process answers are held on its worker: the caller's
// callback runs on that worker once the handler has returned; a blocking
// in-process call made from such a handler (to an inline handler, which
// answers while the call is dispatched, or to a worker) never waits for
// its own thread; and the deadline of a short call fires on time while
// longer ones wait.
TEST(RpcLocalAnswersTest, AnswersHeldOnTheWorkerRunAfterTheHandlerWithoutDeadlock) {
  ASSERT_TRUE(InProcessCalls());
  ServerOptions o;
  o.worker_threads = 4;
  RpcServer server(o);
  RpcTransport transport;
  std::string address;
  std::atomic<bool> handler_returned{false};
  std::thread::id handler_thread;
  absl::Notification release;
  server.Register("held", [&](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
    handler_thread = std::this_thread::get_id();
    handler_returned = false;
    r->Finish(absl::OkStatus(), "held");
    absl::SleepFor(absl::Milliseconds(20));  // the answer must still wait
    handler_returned = true;
  });
  server.Register("echo",
                  [](const CallContext&, std::string_view req, std::shared_ptr<Responder> r) {
                    r->Finish(absl::OkStatus(), std::string(req));
                  });
  server.RegisterInline(
      "inline",
      [](const CallContext&, std::string_view, std::shared_ptr<Responder>& r) {
        r->Finish(absl::OkStatus(), "inline");
        return true;
      },
      [](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
        r->Finish(absl::OkStatus(), "worker");
      });
  auto blocking = [&](const std::string& method, absl::Duration timeout = absl::Seconds(10)) {
    absl::StatusOr<std::string> result;
    absl::Notification done;
    transport.Call(address, method, "x", timeout, [&](absl::StatusOr<std::string> r) {
      result = std::move(r);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  };
  server.Register("nested",
                  [&](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
                    absl::StatusOr<std::string> a = blocking("inline");
                    absl::StatusOr<std::string> b = blocking("echo");
                    absl::StatusOr<std::string> c = blocking("no such method");
                    r->Finish(absl::OkStatus(), StrCat(a.value_or("?"), ",", b.value_or("?"), ",",
                                                       static_cast<int>(c.status().code())));
                  });
  server.Register("never", [&](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    r->Finish(absl::OkStatus(), "late");
  });
  for (const char* m : {"held", "nested", "never"}) server.AnswerLocalCallsOnWorker(m);
  ASSERT_TRUE(server.Start().ok());
  address = "127.0.0.1:" + std::to_string(server.port());

  for (int i = 0; i < 3; ++i) {
    std::thread::id answered_on;
    bool returned_first = false;
    absl::Notification done;
    transport.Call(address, "held", "", absl::Seconds(10), [&](absl::StatusOr<std::string> r) {
      EXPECT_EQ(r.value_or(""), "held");
      answered_on = std::this_thread::get_id();
      returned_first = handler_returned.load();
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(answered_on, handler_thread);
    EXPECT_TRUE(returned_first) << "the answer ran before its handler returned";
  }
  absl::StatusOr<std::string> nested = blocking("nested");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(*nested, StrCat("inline,x,", static_cast<int>(absl::StatusCode::kUnimplemented)));

  // A call waiting 30 s does not hold back a later one's 100 ms deadline.
  absl::Notification long_done;
  transport.Call(address, "never", "", absl::Seconds(30),
                 [&](absl::StatusOr<std::string>) { long_done.Notify(); });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> short_call = blocking("never", absl::Milliseconds(100));
  EXPECT_EQ(short_call.status().code(), absl::StatusCode::kDeadlineExceeded) << short_call.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  release.Notify();
  long_done.WaitForNotification();
}

// Blocking calls go out from their own thread when the connection is idle
// (a frame the socket takes only partly is finished by the I/O thread
// before anything else): mixed with asynchronous calls and big frames from
// many threads, every answer reaches its own caller; deadlines hold.
TEST_F(RpcTest, BlockingCallsFromManyThreadsGetTheirOwnAnswers) {
  auto c = Client();
  std::atomic<int> right{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        // Every 10th is big: 900 KB, more than the socket takes at once.
        std::string req = std::to_string(t) + ":" + std::to_string(i) + ":";
        req.resize(i % 10 == 0 ? 900 << 10 : 100 + i, static_cast<char>('a' + t));
        absl::StatusOr<std::string> r = c->Call("echo", req, absl::Seconds(20));
        (r.ok() && *r == req ? right : wrong)++;
      }
    });
  }
  absl::BlockingCounter async_done(200);
  for (int i = 0; i < 200; ++i) {
    c->CallAsync("echo", "async" + std::to_string(i), absl::Seconds(20),
                 [&, i](absl::StatusOr<std::string> r) {
                   (r.ok() && *r == "async" + std::to_string(i) ? right : wrong)++;
                   async_done.DecrementCount();
                 });
  }
  for (auto& t : threads) t.join();
  async_done.Wait();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(right.load(), 8 * 100 + 200);

  auto slow = c->Call("slow", "", absl::Milliseconds(50));
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded) << slow.status();
  EXPECT_EQ(*c->Call("echo", "after", absl::Seconds(5)), "after");
  // The server goes away under a waiting call: Unavailable, not a hang.
  std::thread releaser([&] {  // Stop() waits for the handler
    absl::SleepFor(absl::Milliseconds(400));
    release_.Notify();
  });
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    server_->Stop();
  });
  auto cut = c->Call("slow", "", absl::Seconds(20));
  stopper.join();
  releaser.join();
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kUnavailable) << cut.status();
  auto gone = c->Call("echo", "x", absl::Seconds(5));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
}

TEST_F(RpcTest, ManyOutstandingAsyncCallsCompleteWithTheirOwnResults) {
  auto c = Client();
  constexpr int kCalls = 2000;
  std::atomic<int> right{0};
  absl::BlockingCounter done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    c->CallAsync(
        i % 10 == 0 ? "fail" : "echo", std::to_string(i), absl::Seconds(10),
        [&, i](absl::StatusOr<std::string> r) {
          if (i % 10 == 0 ? absl::IsNotFound(r.status()) : (r.ok() && *r == std::to_string(i)))
            ++right;
          done.DecrementCount();
        });
  }
  done.Wait();
  EXPECT_EQ(right.load(), kCalls);
}

// ---- what one peer may take ---------------------------------------------------------------

// Resident memory of this process, in bytes.
size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

class RpcLimitsTest : public ::testing::Test {
 protected:
  void Start(ServerLimits limits) {
    ServerOptions o;
    o.limits = limits;
    o.worker_threads = 4;
    server_ = std::make_unique<RpcServer>(o);
    server_->Register("echo",
                      [](const CallContext&, std::string_view req, std::shared_ptr<Responder> r) {
                        r->Finish(absl::OkStatus(), std::string(req));
                      });
    // Answers with 256 KiB.
    server_->Register("big",
                      [](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
                        r->Finish(absl::OkStatus(), std::string(256 << 10, 'b'));
                      });
    // Streams 64 KiB messages until the connection goes away.
    server_->Register("flood",
                      [this](const CallContext&, std::string_view, std::shared_ptr<Responder> r) {
                        for (int i = 0; i < 4096 && !stop_.HasBeenNotified(); ++i)
                          r->Send(std::string(64 << 10, 'f'));
                        r->Finish(absl::OkStatus());
                      });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    stop_.Notify();
    server_.reset();
  }

  int RawConnect() { return ConnectLoopback(server_->port()); }
  // True if the server closes `fd` (recv returns 0 or a reset) within 10 s.
  static bool ClosedByServer(int fd) {
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  static std::string Frame(uint64_t id, const std::string& method, const std::string& body = "") {
    RpcEnvelope e;
    e.set_call_id(id);
    e.set_method(method);
    e.set_body(body);
    return EncodeFrame(e.SerializeAsString());
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  std::unique_ptr<RpcServer> server_;
  absl::Notification stop_;
};

TEST_F(RpcLimitsTest, AFrameHeaderAloneAllocatesNothing) {
  Start(ServerLimits{});  // the default 64 MiB frame limit
  const size_t before = ResidentBytes();
  // 32 peers each announce a 60 MiB frame and send nothing more: before,
  // the server allocated (and zero-filled) all of it, 1.9 GiB.
  std::string header;
  PutFixed32(&header, 60 << 20);
  PutFixed32(&header, 0);
  std::vector<int> fds;
  for (int i = 0; i < 32; ++i) {
    const int fd = RawConnect();
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, header.data(), header.size(), MSG_NOSIGNAL), 8);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const size_t after = ResidentBytes();
  EXPECT_LT(after, before + (64 << 20))
      << "resident memory grew from " << before << " to " << after;
  for (int fd : fds) ::close(fd);
  RpcClient c(ClientOptions{Address()});
  EXPECT_TRUE(c.Call("echo", "x", absl::Seconds(10)).ok());
}

TEST_F(RpcLimitsTest, AnOversizedFrameIsRefusedAndCounted) {
  ServerLimits l;
  l.max_frame_bytes = 4096;
  Start(l);
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  const std::string frame = Frame(1, "echo", std::string(8192, 'x'));
  ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_EQ(server_->stats().oversized_frames, 1u);
  RpcClient c(ClientOptions{Address()});
  EXPECT_TRUE(c.Call("echo", "small", absl::Seconds(10)).ok());
}

TEST_F(RpcLimitsTest, ConnectionsBeyondTheLimitAreRefused) {
  ServerLimits l;
  l.max_connections = 3;
  Start(l);
  std::vector<std::unique_ptr<RpcClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<RpcClient>(ClientOptions{Address()}));
    ASSERT_TRUE(clients.back()->Call("echo", "x", absl::Seconds(10)).ok());
  }
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_GE(server_->stats().connections_refused, 1u);
  clients.pop_back();  // frees a slot
  for (int tries = 0; tries < 100 && server_->stats().connections_open >= 3; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RpcClient again(ClientOptions{Address()});
  EXPECT_TRUE(again.Call("echo", "y", absl::Seconds(10)).ok());
}

TEST_F(RpcLimitsTest, AClientThatDoesNotReadIsNotBufferedWithoutBound) {
  ServerLimits l;
  l.max_queued_reply_bytes = 1 << 20;
  l.max_calls_in_flight = 16;
  Start(l);
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  // 1,000 requests for 256 KiB each: 250 MiB of replies the client does not read yet.
  constexpr int kCalls = 1000;
  std::string requests;
  for (int i = 1; i <= kCalls; ++i) requests += Frame(static_cast<uint64_t>(i), "big");
  const size_t before = ResidentBytes();
  std::thread sender([&] { ::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL); });
  // Once the server has stopped reading, whatever it holds is all it will.
  for (int i = 0; i < 500 && server_->stats().backpressure_pauses == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(server_->stats().backpressure_pauses,
            1u);  // not ASSERT: the sender thread must be joined
  const size_t during = ResidentBytes();
  EXPECT_LT(during, before + (48 << 20))
      << "resident memory grew from " << before << " to " << during;
  // Reading now gets every answer: reading resumes as the queue drains.
  int answered = 0;
  std::string in;
  char buf[1 << 16];
  while (answered < kCalls) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    size_t at = 0;
    while (in.size() - at >= 8) {
      const uint32_t len = DecodeFixed32(in.data() + at);
      if (in.size() - at < 8 + len) break;
      ++answered;
      at += 8 + len;
    }
    in.erase(0, at);
  }
  sender.join();
  ::close(fd);
  EXPECT_EQ(answered, kCalls);
}

TEST_F(RpcLimitsTest, AStreamToAClientThatDoesNotReadIsCutOff) {
  ServerLimits l;
  l.max_queued_reply_bytes = 1 << 20;
  Start(l);
  const int fd = RawConnect();
  ASSERT_GE(fd, 0);
  const std::string frame = Frame(1, "flood");
  ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
  for (int i = 0; i < 500 && server_->stats().stalled_closed == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->stats().stalled_closed, 1u);
  ::close(fd);
}

TEST_F(RpcLimitsTest, IdleAndHalfSentConnectionsAreClosed) {
  ServerLimits l;
  l.idle_timeout = absl::Milliseconds(200);
  l.stall_timeout = absl::Milliseconds(200);
  Start(l);
  const int idle = RawConnect();
  const int half = RawConnect();
  ASSERT_GE(idle, 0);
  ASSERT_GE(half, 0);
  const std::string frame = Frame(1, "echo", "never finished");
  ::send(half, frame.data(), frame.size() / 2, MSG_NOSIGNAL);
  EXPECT_TRUE(ClosedByServer(idle));
  EXPECT_TRUE(ClosedByServer(half));
  ::close(idle);
  ::close(half);
  const ServerStats s = server_->stats();
  EXPECT_EQ(s.idle_closed, 1u);
  EXPECT_EQ(s.stalled_closed, 1u);
  // A client whose connection was closed while idle reconnects.
  RpcClient c(ClientOptions{Address()});
  ASSERT_TRUE(c.Call("echo", "a", absl::Seconds(10)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(c.Call("echo", "b", absl::Seconds(10)).ok());
}

TEST(RpcLimitsValidation, NonsenseLimitsAreRefusedByName) {
  ServerLimits l;
  l.max_connections = 0;
  EXPECT_THAT(std::string(ValidateServerLimits(l).message()), HasSubstr("max_connections"));
  l = ServerLimits{};
  l.idle_timeout = -absl::Seconds(1);
  EXPECT_THAT(std::string(ValidateServerLimits(l).message()), HasSubstr("idle_timeout"));
  ServerOptions o;
  o.limits.max_frame_bytes = 0;
  RpcServer s(o);
  EXPECT_FALSE(s.Start().ok());
}

TEST(RpcAddressTest, ParsesHostAndPort) {
  std::string host;
  uint16_t port;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:8080", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseHostPort("[::1]:9", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(ParseHostPort("host:99999", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort(":80", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("host", &host, &port).ok());
}

}  // namespace
}  // namespace megastore::rpc
