// megastored: runs megastore's server roles: a standalone Bigtable tablet
// server (--roles=tablet), every role of one datacenter from a cluster
// config (--config --datacenter), or a whole cluster in one process
// (--local=N). `megastored --help` lists every flag.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "base/await.h"
#include "base/cli.h"
#include "base/coding.h"
#include "base/descriptors.h"
#include "base/env.h"
#include "base/file.h"
#include "base/http/http_server.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/rpc/rpc.h"
#include "base/strings.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/cell/membership.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/lock_service_rpc.h"
#include "storage/tablet/schema.h"
#include "storage/tabletserver/status_pages.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/megastored/cluster.h"
#include "tools/megastored/cluster_roles.h"
#include "tools/megastored/signals.h"

namespace {

// CLI11 validator for durations like 500ms, 30s, 5m, 1h.
absl::Duration ParseDurationOrDie(const std::string& text, const char* flag) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    std::fprintf(stderr, "megastored: %s=%s is not a duration (examples: 500ms, 30s, 5m)\n", flag,
                 text.c_str());
    std::exit(2);
  }
  return d;
}

// The lock service's files, for a lock-role process's /status.
std::string LockServiceHtml(megastore::storage::lock::LockService& lock) {
  auto listing = megastore::Await<megastore::storage::lock::Listing>(
      [&](auto cb) { lock.List("/", std::move(cb)); });
  if (!listing.ok())
    return megastore::StrCat(
        "<p>lock service: ", megastore::HtmlEscape(listing.status().ToString()), "</p>");
  std::string html = megastore::StrCat(
      "<h2>Lock service</h2><p>revision ", listing->revision, ", ", listing->files.size(),
      " files</p><table border=1 cellpadding=4><tr><th>path<th>version<th>session"
      "<th>contents</tr>");
  for (const auto& f : listing->files)
    html += megastore::StrCat("<tr><td>", megastore::HtmlEscape(f.path), "<td>", f.version, "<td>",
                              f.session == 0 ? std::string("permanent") : std::to_string(f.session),
                              "<td><code>", megastore::HtmlEscape(f.contents.substr(0, 200)),
                              "</code></tr>");
  return html + "</table>";
}

// The cell as the master sees it, for a master-role process's /status.
std::string MasterHtml(megastore::storage::cell::Master& master) {
  using megastore::HtmlEscape;
  using megastore::StrCat;
  auto state = master.State();
  if (!state.ok())
    return StrCat("<h2>Master</h2><p>", HtmlEscape(std::string(state.status().message())), "</p>");
  std::string html =
      StrCat("<h2>Master</h2><p>", state->reconciles(), " reconciliation passes</p>",
             "<h3>Tablet servers</h3><table border=1 cellpadding=4><tr><th>server<th>log<th>tablets"
             "<th>reachable</tr>");
  for (const auto& s : state->servers())
    html += StrCat("<tr><td>", HtmlEscape(s.address()), "<td>", HtmlEscape(s.log()), "<td>",
                   s.tablets(), "<td>", s.reachable() ? "yes" : "NO", "</tr>");
  html +=
      "</table><h3>Tablets</h3><table border=1 "
      "cellpadding=4><tr><th>table<th>start<th>end<th>id<th>server"
      "<th>serving<th>bytes</tr>";
  for (const auto& t : state->tablets())
    html += StrCat("<tr><td>", HtmlEscape(t.table()), "<td><code>",
                   HtmlEscape(megastore::EscapeBytes(t.start_row())), "</code><td><code>",
                   HtmlEscape(megastore::EscapeBytes(t.end_row())), "</code><td>",
                   HtmlEscape(t.id()), "<td>", HtmlEscape(t.server()), "<td>",
                   t.serving() ? "yes" : "NO", "<td>", t.size_bytes(), "</tr>");
  html += "</table><h3>Recent events</h3><ul>";
  for (const auto& e : state->events()) html += StrCat("<li>", HtmlEscape(e), "</li>");
  return html + "</ul>";
}

std::string CommandLine(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{
      "megastored: runs megastore server roles. Three ways:\n"
      "  megastored --local=3 --data=DIR [--schema=S.schema.pb] [--gateway=HOST:PORT]\n"
      "      a whole cluster in this process: three full datacenters on loopback with\n"
      "      emulated WAN delays (--config=conf/local.textproto to change them)\n"
      "  megastored --config=FILE --datacenter=NAME --data=DIR [--schema=...] [--roles=...]\n"
      "      the roles of one datacenter of a cluster (lock service, tablet server,\n"
      "      coordinator, replication server, on the config's addresses): all of them,\n"
      "      or those --roles names when the config puts them on separate addresses\n"
      "  megastored --roles=tablet --listen=HOST:PORT --data=DIR\n"
      "      a standalone Bigtable tablet server\n"
      "  megastored --roles=lock|master|tablet --cell=C --lock-service=HOST:PORT|etcd:HOST:PORT "
      "--data=ROOT\n"
      "      a process of a Bigtable cell (docs/cell.md): its lock service, a master (one\n"
      "      holds the master lock, others stand by) or a tablet server; ROOT is the cell's\n"
      "      shared data root (every master and tablet server of the cell gives the same)\n"
      "SIGTERM or SIGINT shuts it down cleanly; SIGHUP reloads its TLS certificates."};
  megastore::server::ClusterFlags cluster;
  app.add_option("--local", cluster.local,
                 "run N datacenters in this process (the embedded default: 3)")
      ->check(CLI::Range(1, 26));
  app.add_option("--config", cluster.config,
                 "cluster config in protobuf text format (conf/*.textproto)");
  app.add_option("--datacenter", cluster.datacenter,
                 "with --config: which datacenter this process is");
  app.add_option(
      "--schema", cluster.schemas,
      "a schema descriptor from msc --out (NAME.schema.pb) whose tables to create; repeatable");
  app.add_option("--gateway", cluster.gateway,
                 "with --local: serve the HTTP/JSON gateway (docs/gateway.md) on HOST:PORT for the "
                 "first --schema");
  app.add_option(
         "--gateway-max-json-depth", cluster.gateway_max_json_depth,
         "objects and arrays in a gateway request nest at most this deep (checked before parsing)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--gateway-secret-file", cluster.gateway_secret_file,
                 "the secret (32+ bytes) that seals the gateway's read tokens; gateways sharing it "
                 "accept each "
                 "other's tokens (default: DATA/gateway-token.key, created with a random secret)");
  app.add_option("--gateway-token-key-period", cluster.gateway_token_key_minutes,
                 "minutes between rotations of the key read tokens are sealed under (derived from "
                 "the secret, so "
                 "gateways sharing it rotate in step); a token is good for its period and the next")
      ->check(CLI::Range(int64_t{1}, int64_t{525600}))
      ->capture_default_str();
  app.add_option("--gateway-tokens-file", cluster.gateway_tokens_file,
                 "bearer tokens the gateway accepts, as \"sha256:HEX PRINCIPAL\" lines (msadmin "
                 "acl token writes "
                 "them); a request with one acts as its principal under the access policy");
  app.add_option("--gateway-max-page", cluster.gateway_max_page,
                 "most entities in one gateway query page (a query's limit 0 means this many)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  std::string roles;
  std::string listen = "127.0.0.1:7400";
  std::string data;
  std::string http;
  std::string log_level = "info";
  std::string flush_age = "60s";
  size_t max_frame = megastore::rpc::kDefaultMaxFrameBytes;
  size_t block_cache_mb = 256;
  size_t row_cache_mb = 0;
  bool no_sync = false;
  int workers = 96;
  app.add_option(
      "--roles", roles,
      "with --config/--datacenter: which of the datacenter's roles run here (tablet, lock, "
      "coordinator, "
      "replication; comma-separated; default all); alone: tablet (a standalone tablet server)");
  app.add_option("--listen", listen,
                 "HOST:PORT for RPC (port 0 picks a free port, printed at start)")
      ->capture_default_str();
  app.add_option(
      "--data", data,
      "data directory (tablets, commit log, state); needed wherever the tablet or lock role runs");
  app.add_option(
      "--key-dir", cluster.key_dir,
      "where the replication role keeps the keys of ENCRYPTED schemas (docs/security.md); created "
      "owner-only on first use, never inside --data. --local: default DATA/keys/NAME, one per "
      "datacenter");
  app.add_option("--http", http, "HOST:PORT for /status and /metrics (off if not given)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text, or json: one object per line (time, level, pid, thread, msg) on stderr")
      ->capture_default_str();
  app.add_option("--flush-max-age", flush_age,
                 "flush a tablet whose oldest unflushed write is this old")
      ->capture_default_str();
  app.add_option("--max-frame-bytes", max_frame,
                 "largest RPC frame accepted; a bigger one closes the connection before anything "
                 "is allocated")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 31))
      ->capture_default_str();
  megastore::rpc::ServerLimits rpc_limits;
  std::string rpc_idle_text = "10m", rpc_stall_text = "60s";
  size_t rpc_queued_mb = rpc_limits.max_queued_reply_bytes >> 20;
  uint64_t descriptor_reserve = 0;
  app.add_option("--rpc-max-connections", rpc_limits.max_connections,
                 "connections one RPC listener holds at once; more are closed on accept")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--rpc-max-calls-in-flight", rpc_limits.max_calls_in_flight,
                 "calls of one RPC connection handled at once; beyond it the connection is not "
                 "read until some finish")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--rpc-max-queued-reply-mb", rpc_queued_mb,
                 "reply bytes queued for one RPC connection before its requests stop being read")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--rpc-idle-timeout", rpc_idle_text,
                 "close an RPC connection with no call and no traffic this long")
      ->capture_default_str();
  app.add_option(
         "--rpc-stall-timeout", rpc_stall_text,
         "close an RPC connection that leaves a frame half-sent or a reply unread this long")
      ->capture_default_str();
  megastore::http::HttpLimits http_limits;
  std::string http_header_timeout_text = "10s", http_body_timeout_text = "30s";
  app.add_option("--http-max-connections", http_limits.max_connections,
                 "connections one HTTP listener (gateway, /status) holds at once; more are closed "
                 "on accept")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--http-max-header-bytes", http_limits.max_header_bytes,
                 "request line and headers of an HTTP request; larger gets 431")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--http-max-body-bytes", http_limits.max_body_bytes,
                 "body of an HTTP request; larger gets 413")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-header-timeout", http_header_timeout_text,
                 "close an HTTP connection whose request headers have not arrived this long after "
                 "connecting")
      ->capture_default_str();
  app.add_option(
         "--http-body-timeout", http_body_timeout_text,
         "close an HTTP connection whose request body (or the reading of the answer) takes longer")
      ->capture_default_str();
  megastore::rpc::TlsFiles tls;  // on every RPC listener and connection of this process
  megastore::AddTlsFlags(app, tls, "this process's");
  app.add_flag("--no-tls", cluster.no_tls,
               "with --local: run without TLS (by default --local makes throwaway certificates in "
               "DATA/tls)");
  app.add_option("--descriptor-reserve", descriptor_reserve,
                 "file descriptors kept back from network connections for storage (0: a quarter of "
                 "the limit, at "
                 "least 256)")
      ->capture_default_str();
  app.add_option("--block-cache-mb", block_cache_mb, "shared SSTable block cache")
      ->capture_default_str();
  app.add_option("--row-cache-mb", row_cache_mb, "row cache for point reads; 0 disables it")
      ->capture_default_str();
  app.add_option("--rpc-workers", workers,
                 "threads running RPC handlers (writers waiting on one group commit)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  std::string cell, lock_service, session_ttl_text = "10s";
  app.add_option("--cell", cell,
                 "with the tablet role: join this Bigtable cell (register in its lock service; "
                 "exit with status 3 "
                 "if the registration is lost)");
  app.add_option("--lock-service", lock_service,
                 "the cell's lock service: HOST:PORT of a megastored running the lock role, or "
                 "etcd:HOST:PORT[,HOST:PORT...]");
  app.add_option("--session-ttl", session_ttl_text,
                 "lock-service session lease of a cell's tablet server")
      ->capture_default_str();
  double split_threshold_mb = 128;
  app.add_option("--split-threshold-mb", split_threshold_mb,
                 "a cell's tablet server splits a tablet larger than this (0: never)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  std::string server_timeout_text = "10s", gc_grace_text = "60s", balance_delay_text = "10s",
              merge_after_text = "10m";
  double merge_threshold_mb = 32;
  int balance_margin = 2;
  app.add_option("--server-timeout", server_timeout_text,
                 "master: a tablet server unreachable this long is removed from the cell")
      ->capture_default_str();
  app.add_option("--balance-margin", balance_margin,
                 "master: move a tablet when the busiest server has more than the least busy plus "
                 "this (0: never)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--balance-delay", balance_delay_text,
                 "master: after taking over, watch this long before moving tablets to balance")
      ->capture_default_str();
  app.add_option("--merge-threshold-mb", merge_threshold_mb,
                 "master: merge two neighbouring tablets holding less than this together (0: "
                 "never; keep it well "
                 "below the servers' --split-threshold-mb)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--merge-after", merge_after_text,
                 "master: merge only tablets it has known this long")
      ->capture_default_str();
  app.add_option(
         "--gc-grace", gc_grace_text,
         "master: how old an unreferenced tablet directory, log or log piece must be to be deleted")
      ->capture_default_str();
  app.add_flag("--no-sync", no_sync,
               "do not fdatasync the commit log (unsafe: for benchmarks of everything else)");
  bool accept_log_loss = false;
  app.add_flag(
      "--accept-log-loss", accept_log_loss,
      "start although the commit log is missing or ends before a tablet's redo point (moved aside, "
      "truncated): what it held after the tablets' last flush is lost; LSNs continue past every "
      "redo point");
  if (const int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  if (!megastore::SetLogLevel(log_level)) {
    std::fprintf(stderr,
                 "megastored: --log-level=%s is not one of trace, debug, info, warn, error, off\n",
                 log_level.c_str());
    return 2;
  }
  if (!megastore::SetLogFormat(log_format)) {
    std::fprintf(stderr, "megastored: --log-format=%s is not text or json\n", log_format.c_str());
    return 2;
  }
  rpc_limits.max_frame_bytes = max_frame;
  rpc_limits.max_queued_reply_bytes = rpc_queued_mb << 20;
  rpc_limits.idle_timeout = ParseDurationOrDie(rpc_idle_text, "--rpc-idle-timeout");
  rpc_limits.stall_timeout = ParseDurationOrDie(rpc_stall_text, "--rpc-stall-timeout");
  if (absl::Status s = megastore::rpc::ValidateServerLimits(rpc_limits); !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  megastore::rpc::SetDefaultServerLimits(rpc_limits);
  if (absl::Status s = megastore::rpc::CheckTls(tls); !s.ok()) {
    std::fprintf(stderr, "megastored: --tls-*: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  megastore::rpc::SetDefaultTls(tls);
  http_limits.header_timeout =
      ParseDurationOrDie(http_header_timeout_text, "--http-header-timeout");
  http_limits.body_timeout = ParseDurationOrDie(http_body_timeout_text, "--http-body-timeout");
  if (absl::Status s = megastore::http::ValidateLimits(http_limits); !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  megastore::http::SetDefaultLimits(http_limits);
  if (descriptor_reserve > 0) megastore::SetDescriptorReserve(descriptor_reserve);
  if (cluster.local > 0 || !cluster.config.empty()) {
    cluster.data = data;
    cluster.http = http;
    cluster.sync = !no_sync;
    cluster.accept_log_loss = accept_log_loss;
    cluster.roles = roles;
    if (cluster.no_tls && tls.enabled()) {
      std::fprintf(stderr, "megastored: --no-tls and --tls-* contradict each other\n");
      return 2;
    }
    megastore::server::BlockServerSignals();
    return megastore::server::RunCluster(cluster, CommandLine(argc, argv));
  }
  if (cluster.no_tls) {
    std::fprintf(
        stderr,
        "megastored: --no-tls is for --local (elsewhere TLS is on only when --tls-* gives it)\n");
    return 2;
  }
  if (!cluster.gateway.empty() || !cluster.schemas.empty() || !cluster.datacenter.empty()) {
    std::fprintf(stderr,
                 "megastored: --gateway, --schema and --datacenter need --local or --config\n");
    return 2;
  }
  // Standalone: a tablet server, a lock service, or both.
  bool has_tablet = roles.empty(), has_lock = false, has_master = false;
  if (!roles.empty()) {
    absl::StatusOr<std::vector<megastore::server::Role>> parsed =
        megastore::server::ParseRoles(roles);
    if (!parsed.ok()) {
      std::fprintf(stderr, "megastored: --roles=%s: %s\n", roles.c_str(),
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    for (megastore::server::Role r : *parsed) {
      has_tablet |= r == megastore::server::Role::kTablet;
      has_lock |= r == megastore::server::Role::kLock;
      has_master |= r == megastore::server::Role::kMaster;
      if (r == megastore::server::Role::kCoordinator ||
          r == megastore::server::Role::kReplication) {
        std::fprintf(stderr,
                     "megastored: --roles=%s: alone, only the tablet and lock roles run; the "
                     "coordinator and "
                     "replication server run with --config/--datacenter or --local\n",
                     roles.c_str());
        return 2;
      }
    }
  }
  if (!cell.empty() && !has_tablet && !has_master) {
    std::fprintf(stderr,
                 "megastored: --cell is for a cell's tablet server or master: it needs the tablet "
                 "or master role\n");
    return 2;
  }
  if (has_master && cell.empty()) {
    std::fprintf(stderr,
                 "megastored: --roles=master needs --cell=NAME (and the cell's --lock-service)\n");
    return 2;
  }
  if (!cell.empty()) {
    if (absl::Status s = megastore::storage::ValidateName(cell, "cell"); !s.ok()) {
      std::fprintf(stderr, "megastored: --cell: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (!cell.empty() && lock_service.empty() && !has_lock) {
    std::fprintf(stderr,
                 "megastored: --cell=%s needs --lock-service=HOST:PORT|etcd:HOST:PORT (or the lock "
                 "role here)\n",
                 cell.c_str());
    return 2;
  }
  const absl::Duration flush_max_age = ParseDurationOrDie(flush_age, "--flush-max-age");
  const absl::Duration session_ttl = ParseDurationOrDie(session_ttl_text, "--session-ttl");
  const absl::Duration server_timeout = ParseDurationOrDie(server_timeout_text, "--server-timeout");
  const absl::Duration gc_grace = ParseDurationOrDie(gc_grace_text, "--gc-grace");
  const absl::Duration balance_delay = ParseDurationOrDie(balance_delay_text, "--balance-delay");
  const absl::Duration merge_after = ParseDurationOrDie(merge_after_text, "--merge-after");
  if (session_ttl < absl::Seconds(1)) {
    std::fprintf(stderr, "megastored: --session-ttl=%s is shorter than 1s\n",
                 session_ttl_text.c_str());
    return 2;
  }
  if (data.empty()) {
    std::fprintf(stderr,
                 "megastored: --data=DIR is required (where the tablet server or lock service "
                 "keeps its data)\n");
    return 2;
  }

  megastore::server::BlockServerSignals();

  megastore::Env* env = megastore::Env::Default();
  std::unique_ptr<megastore::storage::lock::EmbeddedLockService> lock;
  if (has_lock) {
    if (absl::Status s = megastore::CreatePrivateDirectories(data + "/lock"); !s.ok()) {
      std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    auto opened = megastore::storage::lock::EmbeddedLockService::Open(env, data + "/lock");
    if (!opened.ok()) {
      std::fprintf(stderr, "megastored: cannot start the lock service: %s\n",
                   opened.status().ToString().c_str());
      return 1;
    }
    lock = std::move(*opened);
  }
  // A process of a cell reaches the cell's lock service (here, or remote).
  std::unique_ptr<megastore::storage::lock::LockService> remote_lock;
  megastore::storage::lock::LockService* service = lock.get();
  if (!cell.empty() && !lock_service.empty()) {
    auto connected = megastore::storage::cell::ConnectLockService(lock_service);
    if (!connected.ok()) {
      std::fprintf(stderr, "megastored: --lock-service: %s\n",
                   std::string(connected.status().message()).c_str());
      return 2;
    }
    remote_lock = std::move(*connected);
    service = remote_lock.get();
  }
  std::unique_ptr<megastore::storage::cell::CellClient> cell_client;
  if (!cell.empty()) {
    megastore::storage::cell::CellClientOptions o;
    o.cell = cell;
    cell_client = std::make_unique<megastore::storage::cell::CellClient>(service, env, o);
  }
  // The address this process serves on, once the RPC server is bound (the
  // split hooks run only after that).
  std::string bound;
  std::unique_ptr<megastore::storage::cell::ServerRegistration> registration;
  std::atomic<megastore::storage::cell::ServerRegistration*> registered{
      nullptr};  // read by RPC threads
  std::unique_ptr<megastore::storage::TabletServer> server;
  if (has_tablet) {
    megastore::storage::TabletServerOptions options;
    options.data_dir = data;
    options.sync_log = !no_sync;
    options.accept_log_loss = accept_log_loss;
    options.flush_max_age = flush_max_age;
    options.resources.block_cache_bytes = block_cache_mb << 20;
    options.resources.row_cache_bytes = row_cache_mb << 20;
    if (!cell.empty()) {
      // A new log per incarnation, named so an operator can tell whose.
      std::string name = listen;
      for (char& c : name) {
        if (c == ':') c = '_';
      }
      char suffix[17];
      std::snprintf(suffix, sizeof(suffix), "%016llx",
                    static_cast<unsigned long long>(env->Random64()));
      options.cell_log_name = megastore::StrCat(name, "-", suffix);
      options.split_threshold_bytes = static_cast<uint64_t>(split_threshold_mb * 1024 * 1024);
      options.may_split = megastore::storage::cell::MaySplit;
      // Until it registers (and after it leaves) it has nothing to serve.
      options.lease_valid = [&registered] {
        megastore::storage::cell::ServerRegistration* r = registered.load();
        return r != nullptr && r->registered();
      };
      const std::string log_name = options.cell_log_name;
      megastore::storage::cell::CellClient* client = cell_client.get();
      options.commit_split = [client, env, &bound, log_name](
                                 const megastore::storage::TabletEntry& parent,
                                 const std::vector<megastore::storage::TabletEntry>& children) {
        return megastore::storage::cell::CommitSplit(client, env, bound, log_name, parent,
                                                     children);
      };
      options.commit_merge = [client, env, &bound, log_name](
                                 const megastore::storage::TabletEntry& left,
                                 const megastore::storage::TabletEntry& right,
                                 const megastore::storage::TabletEntry& merged) {
        return megastore::storage::cell::CommitMerge(client, env, bound, log_name, left, right,
                                                     merged);
      };
      options.after_split = [service, cell, &bound](
                                const megastore::storage::TabletEntry& parent,
                                const std::vector<megastore::storage::TabletEntry>& children) {
        // Best effort: a lost report is found by the master's next scan.
        absl::StatusOr<std::string> master = megastore::storage::cell::FindMaster(service, cell);
        if (!master.ok()) return;
        megastore::storage::cell::ReportSplitRequest report;
        *report.mutable_parent() = parent;
        for (const auto& c : children) *report.add_children() = c;
        report.set_server(bound);
        absl::Status s =
            megastore::storage::cell::MasterClient(*master, absl::Seconds(2)).ReportSplit(report);
        if (!s.ok())
          MS_LOG_WARN("split of {}: telling the master {}: {}", parent.id(), *master, s.ToString());
      };
    }
    auto opened = megastore::storage::TabletServer::Open(options, env);
    if (!opened.ok()) {
      std::fprintf(stderr, "megastored: cannot start the tablet server: %s\n",
                   opened.status().ToString().c_str());
      return 1;
    }
    server = std::move(*opened);
  }
  std::unique_ptr<megastore::storage::cell::Master> master;
  if (has_master) {
    megastore::storage::cell::MasterOptions o;
    o.cell = cell;
    o.data_root = data;
    o.session_ttl = session_ttl;
    o.server_ttl = session_ttl;
    o.server_timeout = server_timeout;
    o.balance_margin = balance_margin;
    o.gc_grace = gc_grace;
    o.balance_delay = balance_delay;
    o.merge_threshold_bytes = static_cast<uint64_t>(merge_threshold_mb * 1024 * 1024);
    o.merge_after = merge_after;
    master = std::make_unique<megastore::storage::cell::Master>(
        service, env, o, [](const absl::Status& why) {
          MS_LOG_ERROR("megastored: the master lost its lock ({}): exiting so a standby takes over",
                       why.message());
          spdlog::default_logger()->flush();
          ::_exit(3);
        });
  }

  megastore::rpc::ServerOptions rpc_options;
  rpc_options.listen = listen;
  rpc_options.worker_threads = workers;
  megastore::rpc::RpcServer rpc(rpc_options);
  megastore::storage::ServiceMetrics metrics;
  if (server) megastore::storage::RegisterTabletService(server.get(), &rpc, &metrics);
  if (master) megastore::storage::cell::RegisterMasterService(master.get(), &rpc);
  std::unique_ptr<megastore::storage::lock::LockServiceRpc> lock_rpc;
  if (lock) {
    lock_rpc = std::make_unique<megastore::storage::lock::LockServiceRpc>(lock.get(), env);
    lock_rpc->Register(&rpc);
  }
  if (absl::Status s = rpc.Start(); !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", s.ToString().c_str());
    return 1;
  }
  std::string host = listen.substr(0, listen.rfind(':'));
  bound = megastore::StrCat(host, ":", rpc.port());

  // A tablet server of a cell: registered in the lock service; it stops
  // serving (exits) the moment it cannot be sure it still is.
  if (!cell.empty() && server) {
    registration = std::make_unique<megastore::storage::cell::ServerRegistration>(
        service, env, cell, bound, session_ttl, [](const absl::Status& why) {
          // Not one more request: another server may get its tablets.
          MS_LOG_ERROR("megastored: lost its lock-service session ({}): stopped serving",
                       why.message());
          spdlog::default_logger()->flush();
          ::_exit(3);
        });
    absl::StatusOr<bool> joined = megastore::Await<bool>([&](auto cb) {
      registration->Start([cb = std::move(cb)](absl::Status s) mutable {
        if (s.ok()) return cb(true);
        cb(s);
      });
    });
    if (!joined.ok()) {
      std::fprintf(stderr, "megastored: cannot join cell %s: %s\n", cell.c_str(),
                   std::string(joined.status().message()).c_str());
      return 1;
    }
  }

  const std::string command_line = CommandLine(argc, argv);
  megastore::storage::StatusContext ctx{bound, command_line, env->NowMicros(), 0};
  std::unique_ptr<megastore::http::HttpServer> http_server;
  std::string http_bound;
  if (!http.empty()) {
    http_server = std::make_unique<megastore::http::HttpServer>(http);
    http_server->Handle("/status", [&] {
      ctx.now_micros = env->NowMicros();
      std::string html =
          server ? megastore::storage::StatusHtml(*server, rpc, ctx)
                 : megastore::StrCat(
                       "<!doctype html><title>megastored</title><h1>megastored</h1><p><code>",
                       megastore::HtmlEscape(command_line), "</code></p>");
      if (lock) html += LockServiceHtml(*lock);
      if (master) html += MasterHtml(*master);
      return megastore::http::Response{200, "text/html; charset=utf-8", html};
    });
    http_server->Handle("/metrics", [&] {
      return megastore::http::Response{
          200, "text/plain; version=0.0.4; charset=utf-8",
          server ? megastore::storage::MetricsText(*server, rpc, metrics) : ""};
    });
    if (absl::Status s = http_server->Start(); !s.ok()) {
      std::fprintf(stderr, "megastored: %s\n", s.ToString().c_str());
      return 1;
    }
    http_bound = megastore::StrCat(http.substr(0, http.rfind(':')), ":", http_server->port());
  }

  if (master) master->Start(bound);
  if (lock)
    std::printf("megastored: lock service listening on %s (data %s/lock)\n", bound.c_str(),
                data.c_str());
  if (master)
    std::printf("megastored: master of cell %s campaigning on %s (data root %s)\n", cell.c_str(),
                bound.c_str(), data.c_str());
  registered = registration.get();
  if (registration)
    std::printf("megastored: registered in cell %s as %s\n", cell.c_str(), bound.c_str());
  if (server)
    std::printf("megastored: tablet server listening on %s (data %s)\n", bound.c_str(),
                data.c_str());
  if (!http_bound.empty())
    std::printf("megastored: status at http://%s/status\n", http_bound.c_str());
  std::fflush(stdout);

  megastore::server::WaitForShutdown();
  registered = nullptr;                    // not one more request once it leaves
  registration.reset();                    // leaves the cell first: its file goes
  if (cell_client) cell_client->Cancel();  // a split or merge committing now gives up
  master.reset();
  if (http_server) http_server->Stop();
  rpc.Stop();
  lock_rpc.reset();
  server.reset();
  MS_LOG_INFO("megastored: stopped cleanly");
  return 0;
}
