// The RPC layer's pieces shared by server and client (base/rpc/rpc.h):
// limits, frames, addresses, listening, and the servers' metrics text.
// clang-format off
#include <utility>  // before Boost 1.74's asio, which needs std::exchange
// clang-format on
#include <boost/asio.hpp>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/process_default.h"
#include "base/rpc/frame.h"
#include "base/rpc/listen.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc_internal.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::rpc {

namespace {

ProcessDefault<ServerLimits>& LimitsDefault() {
  static auto* d = new ProcessDefault<ServerLimits>;
  return *d;
}

}  // namespace

void SetDefaultServerLimits(const ServerLimits& limits) { LimitsDefault().Set(limits); }

ServerLimits DefaultServerLimits() { return LimitsDefault().Get(); }

absl::Status ValidateServerLimits(const ServerLimits& l) {
  auto positive = [](std::string_view name, auto v) -> absl::Status {
    if (v > decltype(v){}) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat("RPC limit ", name, " must be positive"));
  };
  MS_RETURN_IF_ERROR(positive("max_frame_bytes", l.max_frame_bytes));
  if (l.max_frame_bytes > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(StrCat("RPC limit max_frame_bytes ", l.max_frame_bytes,
                                             " is over the 2 GiB a frame can hold"));
  }
  MS_RETURN_IF_ERROR(positive("max_connections", l.max_connections));
  MS_RETURN_IF_ERROR(positive("max_calls_in_flight", l.max_calls_in_flight));
  MS_RETURN_IF_ERROR(positive("max_queued_reply_bytes", l.max_queued_reply_bytes));
  MS_RETURN_IF_ERROR(positive("idle_timeout", l.idle_timeout));
  MS_RETURN_IF_ERROR(positive("stall_timeout", l.stall_timeout));
  return absl::OkStatus();
}

namespace {

// A frame's header: the payload's length and masked CRC32C.
std::string FrameHeader(std::string_view payload) {
  std::string header;
  header.reserve(kFrameHeaderBytes);
  PutFixed32(&header, static_cast<uint32_t>(payload.size()));
  PutFixed32(&header, crc32c::Mask(crc32c::Value(payload)));
  return header;
}

}  // namespace

std::string EncodeFrame(std::string_view payload) {
  std::string frame = FrameHeader(payload);
  frame.reserve(kFrameHeaderBytes + payload.size());
  frame.append(payload);
  return frame;
}

namespace rpc_internal {

std::string EncodeEnvelope(const RpcEnvelope& e) {
  // Serialized in place after the header: one copy of the body, not two.
  const size_t size = e.ByteSizeLong();
  std::string frame(kFrameHeaderBytes + size, '\0');
  char* payload = frame.data() + kFrameHeaderBytes;
  e.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(payload));
  frame.replace(0, kFrameHeaderBytes, FrameHeader(std::string_view(payload, size)));
  return frame;
}

}  // namespace rpc_internal

absl::Status ParseHostPort(std::string_view address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(StrCat("address \"", address, "\" is not HOST:PORT"));
  }
  uint32_t p = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || (p = p * 10 + static_cast<uint32_t>(c - '0')) > 65535) {
      return absl::InvalidArgumentError(StrCat("address \"", address, "\" has a bad port"));
    }
  }
  host->assign(address.substr(0, colon));
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::Status Listen(tcp::acceptor& acceptor, std::string_view listen, std::string_view what) {
  std::string host;
  uint16_t port;
  MS_RETURN_IF_ERROR(ParseHostPort(listen, &host, &port));
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    return absl::InvalidArgumentError(StrCat(what, " address \"", host, "\" is not an IP address"));
  const tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(
        StrCat("cannot serve ", what, " on ", listen, ": ", ec.message()));
  return absl::OkStatus();
}

std::string ServerStatsMetrics(const std::vector<std::pair<std::string, ServerStats>>& servers) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    uint64_t ServerStats::*field;
  };
  static const Family kFamilies[] = {
      {"megastore_rpc_connections_open", "gauge", "Open RPC connections.",
       &ServerStats::connections_open},
      {"megastore_rpc_connections_accepted_total", "counter", "RPC connections accepted.",
       &ServerStats::connections_accepted},
      {"megastore_rpc_calls_total", "counter", "RPC calls received.", &ServerStats::calls},
      {"megastore_rpc_bad_frames_total", "counter",
       "Connections closed for a malformed or oversized frame.", &ServerStats::bad_frames},
      {"megastore_rpc_oversized_frames_total", "counter",
       "Connections closed for a frame over --max-frame-bytes.", &ServerStats::oversized_frames},
      {"megastore_rpc_connections_refused_total", "counter",
       "Connections refused: over --rpc-max-connections or the descriptor budget.",
       &ServerStats::connections_refused},
      {"megastore_rpc_idle_closed_total", "counter", "Connections closed after --rpc-idle-timeout.",
       &ServerStats::idle_closed},
      {"megastore_rpc_stalled_closed_total", "counter",
       "Connections closed for a half-sent frame or unread replies (--rpc-stall-timeout, reply "
       "queue).",
       &ServerStats::stalled_closed},
      {"megastore_rpc_backpressure_pauses_total", "counter",
       "Times a connection stopped being read: calls in flight or queued replies over their limit.",
       &ServerStats::backpressure_pauses},
      {"megastore_rpc_tls_handshake_failures_total", "counter",
       "Connections closed for a failed or missing TLS handshake (no certificate of the CA, "
       "plaintext).",
       &ServerStats::tls_handshake_failures},
      {"megastore_rpc_calls_refused_total", "counter",
       "Calls refused by the access policy (PERMISSION_DENIED; docs/security.md).",
       &ServerStats::calls_refused},
  };
  std::string out;
  for (const Family& f : kFamilies) {
    out += StrCat("# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name, " ", f.type, "\n");
    for (const auto& [labels, stats] : servers) {
      out +=
          StrCat(f.name, labels.empty() ? "" : StrCat("{", labels, "}"), " ", stats.*f.field, "\n");
    }
  }
  return out;
}

}  // namespace megastore::rpc
