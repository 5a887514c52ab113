// megastored's flags: every option of every mode, and what each applies to
// the whole process (logging, RPC and HTTP limits, TLS).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/http/http_server.h"
#include "base/rpc/rpc.h"
#include "tools/megastored/cluster_roles.h"

namespace megastore::megastored {

// What `megastored --help` says first.
extern const char kUsage[];

struct Flags {
  server::ClusterFlags cluster;  // --local and --config modes
  std::string roles;
  std::string listen = "127.0.0.1:7400";
  std::string data;
  std::string http;
  std::string log_level = "info";
  std::string log_format = "text";
  std::string flush_age = "60s";
  size_t max_frame = rpc::kDefaultMaxFrameBytes;
  size_t block_cache_mb = 256;
  size_t row_cache_mb = 0;
  bool no_sync = false;
  bool no_log_preallocate = false;
  bool accept_log_loss = false;
  int workers = 96;
  rpc::ServerLimits rpc_limits;
  std::string rpc_idle_text = "10m", rpc_stall_text = "60s";
  size_t rpc_queued_mb = rpc::ServerLimits{}.max_queued_reply_bytes >> 20;
  uint64_t descriptor_reserve = 0;
  http::HttpLimits http_limits;
  std::string http_header_timeout_text = "10s", http_body_timeout_text = "30s";
  rpc::TlsFiles tls;  // on every RPC listener and connection of this process
  // A process of a Bigtable cell.
  std::string cell, lock_service, session_ttl_text = "10s";
  double split_threshold_mb = 128;
  // A cell's master.
  std::string server_timeout_text = "10s", gc_grace_text = "60s", balance_delay_text = "10s",
              merge_after_text = "10m";
  double merge_threshold_mb = 32;
  int balance_margin = 2;
};

void AddFlags(CLI::App& app, Flags& f);

// Applies the process-wide flags (log level and format, RPC and HTTP
// limits, TLS, the descriptor reserve). Returns -1 if all are good, else
// the exit code after printing what is wrong.
int ApplyProcessFlags(Flags& f);

// A duration flag like 500ms, 30s, 5m or 1h; exits with status 2 naming
// the flag if `text` is not one.
absl::Duration ParseDurationOrDie(const std::string& text, const char* flag);

}  // namespace megastore::megastored
