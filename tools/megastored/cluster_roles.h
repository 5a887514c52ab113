// megastored's cluster modes: every role of one datacenter from a cluster
// config, or a whole cluster in one process (--local).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megastore::server {

struct ClusterFlags {
  int local = 0;           // --local=N: N datacenters in this process
  std::string config;      // --config=FILE
  std::string datacenter;  // --datacenter=NAME (with --config, not --local)
  std::string roles;       // --roles=...: which of its roles (default: all)
  std::string data;        // --data=DIR
  std::string key_dir;     // --key-dir=DIR: keys of encrypted schemas (--local: DATA/keys)
  std::vector<std::string> schemas;  // --schema=FILE.schema.pb: create its tables
  std::string gateway;               // --gateway=HOST:PORT: the JSON gateway (local mode)
  int gateway_max_json_depth = 32;   // --gateway-max-json-depth
  int64_t gateway_max_page = 1000;   // --gateway-max-page
  std::string
      gateway_secret_file;  // --gateway-secret-file (default: DATA/gateway-token.key, created)
  int64_t gateway_token_key_minutes =
      60;  // --gateway-token-key-period: the read-token key rotates this often
  std::string gateway_tokens_file;     // --gateway-tokens-file: bearer tokens and their principals
  std::string http;                    // --http=HOST:PORT: /status, /metrics and /console
  double console_sample_seconds = 10;  // how often /console samples /metrics
  bool sync = true;
  bool log_preallocate = true;   // --no-log-preallocate turns it off
  bool accept_log_loss = false;  // --accept-log-loss
  bool no_tls = false;           // --no-tls: --local without its throwaway certificates
};

// Runs until SIGINT/SIGTERM (blocked by the caller). Prints its endpoints.
// Returns the exit code: 0 after a clean shutdown, 1 if it could not start,
// 2 for bad flags or config (one line on stderr naming what is wrong).
int RunCluster(const ClusterFlags& flags, const std::string& command_line);

}  // namespace megastore::server
