// Binding a TCP listener from "HOST:PORT" — shared by the RPC and HTTP
// servers. Includes Asio: only for their .cc files.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string_view>

#include "absl/status/status.h"

namespace megastore::rpc {

// Opens, binds and listens `acceptor` on `address`. InvalidArgument for a
// malformed address, Unavailable if it cannot bind. `what` names the
// listener in errors ("RPC", "HTTP").
absl::Status Listen(boost::asio::ip::tcp::acceptor& acceptor, std::string_view address,
                    std::string_view what);

}  // namespace megastore::rpc
