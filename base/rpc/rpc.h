// RPC over TCP: length-prefixed, checksummed protobuf frames (rpc.proto) on
// Boost.Asio. Asio stays inside rpc.cc; this header is cheap to include.
//
// The server reads frames from each connection and runs handlers on a worker
// pool, so a handler may block; a method may also have an inline handler that
// runs on the I/O thread when it can answer without blocking. Each read takes
// every frame that has arrived; responses that queue up while one is being
// written go out together in one gathered write. A malformed,
// oversized or corrupt frame closes that connection with a logged reason; the
// server itself never stops on bad input.
//
// The client multiplexes concurrent calls over one connection per server,
// reconnecting when it breaks; every call has a deadline and its own status.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/tls/context.h"

namespace megastore::rpc {

inline constexpr size_t kDefaultMaxFrameBytes = 64 << 20;

// Encodes one frame: header + payload.
std::string EncodeFrame(std::string_view payload);

// Sends a handler's answers. A unary handler calls Finish once; a streaming
// handler calls Send any number of times, then Finish. Thread-safe; may be
// used after the handler returns. Calls after Finish are ignored.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Send(std::string body) = 0;
  virtual void Finish(absl::Status status, std::string body = {}) = 0;
};

struct CallContext {
  std::string peer;
  // Over TLS, the common name of the certificate the peer presented (its
  // principal); empty over plaintext.
  std::string principal;
  absl::Duration timeout = absl::InfiniteDuration();
};

// Mutual TLS 1.3 (base/tls/context.h).
using tls::CheckTls;
using tls::DefaultTls;
using tls::SetDefaultTls;
using tls::TlsFiles;

using Handler = std::function<void(const CallContext& ctx, std::string_view request,
                                   std::shared_ptr<Responder> responder)>;

// A handler that runs on the connection's I/O thread, saving the hand-off to
// a worker. It must not block: it either takes the call (returns true; it
// answers through `responder`, now or later from another thread) or declines
// without answering (returns false), and the method's regular Handler then
// runs on a worker.
using InlineHandler = std::function<bool(const CallContext& ctx, std::string_view request,
                                         std::shared_ptr<Responder>& responder)>;

// What one peer may take from a server. Every limit refuses with a logged
// reason (rate-limited) and a counter in ServerStats; none stops the server.
struct ServerLimits {
  // Largest request frame; a header announcing more closes the connection
  // before anything is allocated for it. A frame's buffer grows only as its
  // bytes arrive, so a header alone costs nothing.
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Connections this listener holds at once; more are closed on accept.
  // (Connections also take a descriptor from the process's budget, which
  // keeps a reserve for storage: base/descriptors.h.)
  size_t max_connections = 4096;
  // Calls of one connection being handled at once; beyond it the server
  // stops reading that connection until some finish (backpressure). With
  // max_frame_bytes it bounds what one connection's answers can hold.
  size_t max_calls_in_flight = 1024;
  // Reply bytes queued for one connection; beyond it the server stops
  // reading its requests until the client has read some. A streaming
  // reply queued past twice this closes the connection (the client is not
  // reading).
  size_t max_queued_reply_bytes = 64 << 20;
  // A connection with no call in flight and no bytes moving this long is
  // closed (the client reconnects on its next call).
  absl::Duration idle_timeout = absl::Minutes(10);
  // A frame begun but not completed, or a reply write not completed, for
  // this long closes the connection.
  absl::Duration stall_timeout = absl::Seconds(60);
};

// The limits an RpcServer gets when its options do not say otherwise; a
// program sets them once from its flags (megastored's --rpc-* flags) before
// starting servers.
void SetDefaultServerLimits(const ServerLimits& limits);
ServerLimits DefaultServerLimits();
// InvalidArgument naming the limit that makes no sense (zero, negative).
absl::Status ValidateServerLimits(const ServerLimits& limits);

struct ServerOptions {
  // host:port; port 0 picks a free port (see RpcServer::port()).
  std::string listen = "127.0.0.1:0";
  ServerLimits limits = DefaultServerLimits();
  TlsFiles tls = DefaultTls();
  int io_threads = 2;
  // Handlers run here; enough threads for the writers a group commit batches.
  int worker_threads = 96;
  // Asked before every call of a registered method (on the connection's
  // I/O thread: it must be quick and not block); an error is the call's
  // answer and the handler does not run. Unset: every call is allowed.
  std::function<absl::Status(const CallContext& ctx, std::string_view method,
                             std::string_view request)>
      authorize;
};

struct ServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t calls = 0;
  uint64_t bad_frames = 0;              // connections closed for a bad frame
  uint64_t oversized_frames = 0;        // ... of which for a frame over the limit
  uint64_t connections_refused = 0;     // over max_connections or the descriptor budget
  uint64_t idle_closed = 0;             // closed after idle_timeout
  uint64_t stalled_closed = 0;          // closed after stall_timeout, or not reading a stream
  uint64_t backpressure_pauses = 0;     // times a connection's reading was paused
  uint64_t tls_handshake_failures = 0;  // connections closed for a failed TLS handshake
  uint64_t calls_refused = 0;           // calls ServerOptions::authorize refused
};

// Prometheus text for RPC servers' counters: one family per counter, one
// sample per server, labelled with its `labels` (`datacenter="A"`, or empty).
std::string ServerStatsMetrics(const std::vector<std::pair<std::string, ServerStats>>& servers);

// Where a server's methods are registered: an RpcServer, or the
// simulator's node (sim/sim_rpc.h).
class MethodRegistry {
 public:
  virtual ~MethodRegistry() = default;
  // Registers `handler` for `method` (before serving starts).
  virtual void Register(std::string method, Handler handler) = 0;
  // A method that tries `inline_handler` first and falls back to `handler`
  // when it declines.
  virtual void RegisterInline(std::string method, InlineHandler inline_handler,
                              Handler handler) = 0;
};

class RpcServer : public MethodRegistry {
 public:
  explicit RpcServer(ServerOptions options);
  ~RpcServer();  // Stop()s
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Registers `handler` for `method`; before Start().
  void Register(std::string method, Handler handler) override;
  // Registers a method that tries `inline_handler` first and falls back to
  // `handler` on a worker when it declines; before Start().
  void RegisterInline(std::string method, InlineHandler inline_handler, Handler handler) override;
  // For a registered `method` whose handler never blocks after it answers:
  // an in-process call's answer given on the worker running the handler
  // (or any in-process answer given there meanwhile) is delivered on that
  // worker once the handler returns, instead of through the completion
  // pool — one thread hand-off less per call. Before Start().
  void AnswerLocalCallsOnWorker(std::string_view method);
  // Binds and starts serving. InvalidArgument for a bad address,
  // Unavailable if it cannot bind.
  absl::Status Start();
  // Closes the listener and every connection, waits for running handlers.
  void Stop();
  int port() const;
  ServerStats stats() const;

  struct Impl;  // opaque (rpc.cc)

 private:
  std::shared_ptr<Impl> impl_;
};

struct ClientOptions {
  std::string server;  // host:port
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  absl::Duration connect_timeout = absl::Seconds(5);  // the TLS handshake included
  TlsFiles tls = DefaultTls();
};

// The blocking client side of RPC, as the storage clients use it: unary
// calls and server streams to one server. RpcClient is the TCP one; the
// simulator has its own (sim/sim_rpc.h).
class Channel {
 public:
  virtual ~Channel() = default;
  // Called for each streamed message; return false to stop the call.
  using OnMessage = std::function<bool(std::string_view message)>;
  virtual absl::StatusOr<std::string> Call(std::string_view method, std::string request,
                                           absl::Duration timeout) = 0;
  virtual absl::Status Stream(std::string_view method, std::string request, absl::Duration timeout,
                              const OnMessage& on_message) = 0;
};

// Makes the channel to a server address ("host:port").
using Connector = std::function<std::shared_ptr<Channel>(const std::string& address)>;
// The TCP connector: an RpcClient with the default options.
std::shared_ptr<Channel> Connect(const std::string& address);

class RpcClient : public Channel {
 public:
  explicit RpcClient(ClientOptions options);
  ~RpcClient();  // fails pending calls with Cancelled
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  using Done = std::function<void(absl::StatusOr<std::string> response)>;

  // Starts a call; `done` runs once, on the client's thread, with the final
  // response or: DeadlineExceeded after `timeout`, Unavailable if the server
  // cannot be reached or the connection breaks, or the handler's status.
  void CallAsync(std::string_view method, std::string request, absl::Duration timeout, Done done,
                 OnMessage on_message = nullptr);

  // Blocking forms. Not to be called from a callback of this client.
  absl::StatusOr<std::string> Call(std::string_view method, std::string request,
                                   absl::Duration timeout) override;
  absl::Status Stream(std::string_view method, std::string request, absl::Duration timeout,
                      const OnMessage& on_message) override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// In-process calls. A call whose destination is an RpcServer of this
// process (its listen host and bound port) skips TCP: the request goes
// straight to the server's workers (authorized as the process's own
// certificate's principal, as a TCP call from this process would be) and
// the answer comes back on a completion thread. Unary calls only; the
// deadline is kept. RpcTransport uses it unless turned off
// (SetInProcessCalls(false): every call over TCP, as between processes).
void SetInProcessCalls(bool enabled);
bool InProcessCalls();
// Starts `method` at the in-process server `to` and returns true, or
// returns false (leaving `request` and `done` untouched) if no running
// server of this process listens there. `done` runs once, never on the
// calling thread's stack.
bool CallInProcess(std::string_view to, std::string_view method, std::string& request,
                   absl::Duration timeout, std::function<void(absl::StatusOr<std::string>)>& done);

// Splits "host:port"; InvalidArgument naming the problem.
absl::Status ParseHostPort(std::string_view address, std::string* host, uint16_t* port);

}  // namespace megastore::rpc
