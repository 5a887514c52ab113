#include "tools/megastored/flags.h"

#include <cstdio>
#include <cstdlib>

#include "base/cli.h"
#include "base/descriptors.h"
#include "base/logging.h"

namespace megastore::megastored {

const char kUsage[] =
    "megastored: runs megastore server roles. Three ways:\n"
    "  megastored --local=3 --data=DIR [--schema=S.schema.pb] [--gateway=HOST:PORT]\n"
    "      a whole cluster in this process: three full datacenters on loopback with\n"
    "      emulated WAN delays (--config=conf/local.textproto to change them)\n"
    "  megastored --config=FILE --datacenter=NAME --data=DIR [--schema=...] [--roles=...]\n"
    "      the roles of one datacenter of a cluster (lock service, tablet server,\n"
    "      coordinator, replication server, on the config's addresses): all of them,\n"
    "      or those --roles names when the config puts them on separate addresses;\n"
    "      --roles=gateway (alone or with others) runs the datacenter's JSON gateway\n"
    "  megastored --roles=tablet --listen=HOST:PORT --data=DIR\n"
    "      a standalone Bigtable tablet server\n"
    "  megastored --roles=lock|master|tablet --cell=C --lock-service=HOST:PORT|etcd:HOST:PORT "
    "--data=ROOT\n"
    "      a process of a Bigtable cell (docs/cell.md): its lock service, a master (one\n"
    "      holds the master lock, others stand by) or a tablet server; ROOT is the cell's\n"
    "      shared data root (every master and tablet server of the cell gives the same)\n"
    "SIGTERM or SIGINT shuts it down cleanly; SIGHUP reloads its TLS certificates.";

absl::Duration ParseDurationOrDie(const std::string& text, const char* flag) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    std::fprintf(stderr, "megastored: %s=%s is not a duration (examples: 500ms, 30s, 5m)\n", flag,
                 text.c_str());
    std::exit(2);
  }
  return d;
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--local", f.cluster.local,
                 "run N datacenters in this process (the embedded default: 3)")
      ->check(CLI::Range(1, 26));
  app.add_option("--config", f.cluster.config,
                 "cluster config in protobuf text format (conf/*.textproto)");
  app.add_option("--datacenter", f.cluster.datacenter,
                 "with --config: which datacenter this process is");
  app.add_option(
      "--schema", f.cluster.schemas,
      "a schema descriptor from msc --out (NAME.schema.pb) whose tables to create; repeatable");
  app.add_option(
      "--gateway", f.cluster.gateway,
      "serve the HTTP/JSON gateway (docs/gateway.md) on HOST:PORT for the first --schema: "
      "with --local as an app server of the first datacenter with data, with --config "
      "of --datacenter (default: its roles { gateway } address, if --roles names gateway "
      "or runs every role)");
  app.add_option(
         "--gateway-max-json-depth", f.cluster.gateway_max_json_depth,
         "objects and arrays in a gateway request nest at most this deep (checked before parsing)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--gateway-secret-file", f.cluster.gateway_secret_file,
                 "the secret (32+ bytes) that seals the gateway's read tokens; gateways sharing it "
                 "accept each "
                 "other's tokens (default: DATA/gateway-token.key, created with a random secret)");
  app.add_option("--gateway-token-key-period", f.cluster.gateway_token_key_minutes,
                 "minutes between rotations of the key read tokens are sealed under (derived from "
                 "the secret, so "
                 "gateways sharing it rotate in step); a token is good for its period and the next")
      ->check(CLI::Range(int64_t{1}, int64_t{525600}))
      ->capture_default_str();
  app.add_option("--gateway-tokens-file", f.cluster.gateway_tokens_file,
                 "bearer tokens the gateway accepts, as \"sha256:HEX PRINCIPAL\" lines (msadmin "
                 "acl token writes "
                 "them); a request with one acts as its principal under the access policy");
  app.add_option("--gateway-max-page", f.cluster.gateway_max_page,
                 "most entities in one gateway query page (a query's limit 0 means this many)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option(
      "--roles", f.roles,
      "with --config/--datacenter: which of the datacenter's roles run here (tablet, lock, "
      "coordinator, replication, gateway; comma-separated; default all, with the gateway if the "
      "config gives it an address); alone: tablet (a standalone tablet server)");
  app.add_option("--listen", f.listen,
                 "HOST:PORT for RPC (port 0 picks a free port, printed at start)")
      ->capture_default_str();
  app.add_option(
      "--data", f.data,
      "data directory (tablets, commit log, state); needed wherever the tablet or lock role runs");
  app.add_option(
      "--key-dir", f.cluster.key_dir,
      "where the replication role keeps the keys of ENCRYPTED schemas (docs/security.md); created "
      "owner-only on first use, never inside --data. --local: default DATA/keys/NAME, one per "
      "datacenter");
  app.add_option("--http", f.http,
                 "HOST:PORT for /status, /metrics and the console /console (off if not given)");
  app.add_option("--console-sample-seconds", f.cluster.console_sample_seconds,
                 "how often the console samples /metrics for its charts (it keeps an hour)")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--log-format", f.log_format,
                 "text, or json: one object per line (time, level, pid, thread, msg) on stderr")
      ->capture_default_str();
  app.add_option("--flush-max-age", f.flush_age,
                 "flush a tablet whose oldest unflushed write is this old")
      ->capture_default_str();
  app.add_option("--max-frame-bytes", f.max_frame,
                 "largest RPC frame accepted; a bigger one closes the connection before anything "
                 "is allocated")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 31))
      ->capture_default_str();
  app.add_option("--rpc-max-connections", f.rpc_limits.max_connections,
                 "connections one RPC listener holds at once; more are closed on accept")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--rpc-max-calls-in-flight", f.rpc_limits.max_calls_in_flight,
                 "calls of one RPC connection handled at once; beyond it the connection is not "
                 "read until some finish")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--rpc-max-queued-reply-mb", f.rpc_queued_mb,
                 "reply bytes queued for one RPC connection before its requests stop being read")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--rpc-idle-timeout", f.rpc_idle_text,
                 "close an RPC connection with no call and no traffic this long")
      ->capture_default_str();
  app.add_option(
         "--rpc-stall-timeout", f.rpc_stall_text,
         "close an RPC connection that leaves a frame half-sent or a reply unread this long")
      ->capture_default_str();
  app.add_option("--http-max-connections", f.http_limits.max_connections,
                 "connections one HTTP listener (gateway, /status) holds at once; more are closed "
                 "on accept")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--http-max-header-bytes", f.http_limits.max_header_bytes,
                 "request line and headers of an HTTP request; larger gets 431")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--http-max-body-bytes", f.http_limits.max_body_bytes,
                 "body of an HTTP request; larger gets 413")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-header-timeout", f.http_header_timeout_text,
                 "close an HTTP connection whose request headers have not arrived this long after "
                 "connecting")
      ->capture_default_str();
  app.add_option(
         "--http-body-timeout", f.http_body_timeout_text,
         "close an HTTP connection whose request body (or the reading of the answer) takes longer")
      ->capture_default_str();
  AddTlsFlags(app, f.tls, "this process's");
  app.add_flag("--no-tls", f.cluster.no_tls,
               "with --local: run without TLS (by default --local makes throwaway certificates in "
               "DATA/tls)");
  app.add_option("--descriptor-reserve", f.descriptor_reserve,
                 "file descriptors kept back from network connections for storage (0: a quarter of "
                 "the limit, at "
                 "least 256)")
      ->capture_default_str();
  app.add_option("--block-cache-mb", f.block_cache_mb, "shared SSTable block cache")
      ->capture_default_str();
  app.add_option("--row-cache-mb", f.row_cache_mb, "row cache for point reads; 0 disables it")
      ->capture_default_str();
  app.add_option("--rpc-workers", f.workers,
                 "threads running RPC handlers (writers waiting on one group commit)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--cell", f.cell,
                 "with the tablet role: join this Bigtable cell (register in its lock service; "
                 "exit with status 3 "
                 "if the registration is lost)");
  app.add_option("--lock-service", f.lock_service,
                 "the cell's lock service: HOST:PORT of a megastored running the lock role, or "
                 "etcd:HOST:PORT[,HOST:PORT...]");
  app.add_option("--session-ttl", f.session_ttl_text,
                 "lock-service session lease of a cell's tablet server")
      ->capture_default_str();
  app.add_option("--split-threshold-mb", f.split_threshold_mb,
                 "a cell's tablet server splits a tablet larger than this (0: never)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--server-timeout", f.server_timeout_text,
                 "master: a tablet server unreachable this long is removed from the cell")
      ->capture_default_str();
  app.add_option("--balance-margin", f.balance_margin,
                 "master: move a tablet when the busiest server has more than the least busy plus "
                 "this (0: never)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--balance-delay", f.balance_delay_text,
                 "master: after taking over, watch this long before moving tablets to balance")
      ->capture_default_str();
  app.add_option("--merge-threshold-mb", f.merge_threshold_mb,
                 "master: merge two neighbouring tablets holding less than this together (0: "
                 "never; keep it well "
                 "below the servers' --split-threshold-mb)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--merge-after", f.merge_after_text,
                 "master: merge only tablets it has known this long")
      ->capture_default_str();
  app.add_option(
         "--gc-grace", f.gc_grace_text,
         "master: how old an unreferenced tablet directory, log or log piece must be to be deleted")
      ->capture_default_str();
  app.add_flag("--no-sync", f.no_sync,
               "do not fdatasync the commit log (unsafe: for benchmarks of everything else)");
  app.add_flag("--no-log-preallocate", f.no_log_preallocate,
               "write the commit log by appending instead of into zero-filled files made ahead "
               "of need (for copy-on-write filesystems, where writing over zeros saves nothing)");
  app.add_flag(
      "--accept-log-loss", f.accept_log_loss,
      "start although the commit log is missing or ends before a tablet's redo point (moved aside, "
      "truncated): what it held after the tablets' last flush is lost; LSNs continue past every "
      "redo point");
}

int ApplyProcessFlags(Flags& f) {
  if (!SetLogLevel(f.log_level)) {
    std::fprintf(stderr,
                 "megastored: --log-level=%s is not one of trace, debug, info, warn, error, off\n",
                 f.log_level.c_str());
    return 2;
  }
  if (!SetLogFormat(f.log_format)) {
    std::fprintf(stderr, "megastored: --log-format=%s is not text or json\n", f.log_format.c_str());
    return 2;
  }
  f.rpc_limits.max_frame_bytes = f.max_frame;
  f.rpc_limits.max_queued_reply_bytes = f.rpc_queued_mb << 20;
  f.rpc_limits.idle_timeout = ParseDurationOrDie(f.rpc_idle_text, "--rpc-idle-timeout");
  f.rpc_limits.stall_timeout = ParseDurationOrDie(f.rpc_stall_text, "--rpc-stall-timeout");
  if (absl::Status s = rpc::ValidateServerLimits(f.rpc_limits); !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  rpc::SetDefaultServerLimits(f.rpc_limits);
  if (absl::Status s = rpc::CheckTls(f.tls); !s.ok()) {
    std::fprintf(stderr, "megastored: --tls-*: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  rpc::SetDefaultTls(f.tls);
  f.http_limits.header_timeout =
      ParseDurationOrDie(f.http_header_timeout_text, "--http-header-timeout");
  f.http_limits.body_timeout = ParseDurationOrDie(f.http_body_timeout_text, "--http-body-timeout");
  if (absl::Status s = http::ValidateLimits(f.http_limits); !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  http::SetDefaultLimits(f.http_limits);
  if (f.descriptor_reserve > 0) SetDescriptorReserve(f.descriptor_reserve);
  return -1;
}

}  // namespace megastore::megastored
