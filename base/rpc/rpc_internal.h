// Internal to the RPC layer (rpc.cc, rpc_client.cc): Asio and TLS names and
// the helpers the server and the client share. Includes Asio: never
// include it from a public header.
#pragma once

// clang-format off
#include <utility>  // before Boost 1.74's asio, which needs std::exchange
// clang-format on
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "base/rpc/frame.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc.pb.h"
#include "base/strings.h"

namespace megastore::rpc {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using asio::ip::tcp;
using boost::system::error_code;
// A server connection's TLS over the socket it owns (both die with the
// connection, after its last handler).
using TlsStream = ssl::stream<tcp::socket&>;
// A client connection's TLS owns its socket: handlers of a connection
// that broke hold it until they have run, while the client connects anew.
using ClientTlsStream = ssl::stream<tcp::socket>;

namespace rpc_internal {

// Whether `bytes` begin like a TLS handshake record (a TLS client talking
// to a plaintext port).
inline bool LooksLikeTls(std::string_view bytes) {
  return bytes.size() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 &&
         static_cast<unsigned char>(bytes[2]) <= 0x04;
}

// EncodeFrame(e.SerializeAsString()), without the intermediate copy.
std::string EncodeEnvelope(const RpcEnvelope& e);

inline absl::Status ToStatus(const RpcEnvelope& e) {
  if (e.status_code() == 0) return absl::OkStatus();
  if (e.status_code() < 0 || e.status_code() > 16) {
    return absl::InternalError(
        StrCat("peer sent unknown status code ", e.status_code(), ": ", e.status_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(e.status_code()), e.status_message());
}

inline asio::mutable_buffer ReadBuffer(FrameReader& frames) {
  const auto [data, size] = frames.Prepare();
  return asio::buffer(data, size);
}

inline std::vector<asio::const_buffer> Buffers(const std::vector<std::string>& frames) {
  std::vector<asio::const_buffer> out;
  out.reserve(frames.size());
  for (const std::string& f : frames) out.push_back(asio::buffer(f));
  return out;
}

using SteadyClock = std::chrono::steady_clock;

inline SteadyClock::duration ToSteady(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

// A call's timeout that arms a timer: not infinite, and short enough that
// now + it fits the steady clock (longer ones never expire in practice).
inline bool HasDeadline(absl::Duration timeout) {
  return timeout != absl::InfiniteDuration() && timeout < absl::Hours(24 * 365);
}

// In-process calls (in_process.cc): the servers of this process by the
// addresses they listen on, and a call handed straight to one. DispatchLocal
// returns false, without calling `make_responder`, if the server has
// stopped; otherwise the call is answered through the responder it makes.
void RegisterLocalServer(const std::vector<std::string>& addresses,
                         const std::shared_ptr<RpcServer::Impl>& server);
void UnregisterLocalServer(const std::vector<std::string>& addresses,
                           const RpcServer::Impl* server);
bool DispatchLocal(RpcServer::Impl& server, std::string_view method, std::string& request,
                   CallContext ctx,
                   const std::function<std::shared_ptr<Responder>()>& make_responder);
// Whether Stop() has begun: answers from then on are dropped, as a
// stopping server's connections drop them.
bool ServerStopped(const RpcServer::Impl& server);

// In-process answers held on a server's worker until its handler returns
// (RpcServer::AnswerLocalCallsOnWorker): the caller's callbacks then run
// there, without a hand-off to the completion pool. Never used while a
// call is being dispatched (an inline handler's answer, a refusal) — the
// caller may block waiting for it.
class HeldAnswers {
 public:
  HeldAnswers() = default;
  HeldAnswers(const HeldAnswers&) = delete;
  HeldAnswers& operator=(const HeldAnswers&) = delete;
  ~HeldAnswers() { RunAll(); }
  void Hold(std::function<void()> answer) { answers_.push_back(std::move(answer)); }
  // Runs what was held, in order (answers held meanwhile too).
  void RunAll() {
    for (size_t i = 0; i < answers_.size(); ++i) std::exchange(answers_[i], nullptr)();
    answers_.clear();
  }

 private:
  std::vector<std::function<void()>> answers_;
};
// The current thread's held answers (nullptr: answers go to the completion
// pool); returns the previous one.
HeldAnswers* SetHeldAnswers(HeldAnswers* held);

}  // namespace rpc_internal

}  // namespace megastore::rpc
