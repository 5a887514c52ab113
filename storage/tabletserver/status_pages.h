// The tablet server's /status (HTML) and /metrics (Prometheus text) pages.
#pragma once

#include <string>

#include "base/rpc/rpc.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::storage {

struct StatusContext {
  std::string listen;          // RPC address
  std::string command_line;    // how the process was started
  int64_t started_micros = 0;  // wall clock at start
  int64_t now_micros = 0;
};

std::string StatusHtml(TabletServer& server, const rpc::RpcServer& rpc, const StatusContext& ctx);
std::string MetricsText(TabletServer& server, const rpc::RpcServer& rpc,
                        const ServiceMetrics& metrics);

}  // namespace megastore::storage
