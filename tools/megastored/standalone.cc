// megastored's standalone mode: one process of a Bigtable, without the
// Megastore roles: a tablet server, a lock service, or a process of a cell
// (its lock service, a master, or a tablet server) (docs/cell.md).
#include "tools/megastored/standalone.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "base/await.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/http/http_server.h"
#include "base/logging.h"
#include "base/rpc/rpc.h"
#include "base/status.h"
#include "base/strings.h"
#include "server/cluster.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/cell/membership.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/lock_service_rpc.h"
#include "storage/model/schema.h"
#include "storage/tabletserver/status_pages.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/megastored/signals.h"

namespace megastore::megastored {

namespace {

// What a standalone process runs, from its flags.
struct Plan {
  bool tablet = false, lock = false, master = false;
  absl::Duration flush_max_age, session_ttl, server_timeout, gc_grace, balance_delay, merge_after;
};

// Checks the flags of a standalone process. Returns -1 if they are good,
// else the exit code after printing what is wrong.
int MakePlan(const Flags& f, Plan* p) {
  const std::string& roles = f.roles;
  const std::string& cell = f.cell;
  const std::string& lock_service = f.lock_service;
  const std::string& data = f.data;
  const std::string& flush_age = f.flush_age;
  const std::string& session_ttl_text = f.session_ttl_text;
  const std::string& server_timeout_text = f.server_timeout_text;
  const std::string& gc_grace_text = f.gc_grace_text;
  const std::string& balance_delay_text = f.balance_delay_text;
  const std::string& merge_after_text = f.merge_after_text;
  bool& has_tablet = p->tablet;
  bool& has_lock = p->lock;
  bool& has_master = p->master;
  has_tablet = roles.empty();
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
  p->flush_max_age = ParseDurationOrDie(flush_age, "--flush-max-age");
  p->session_ttl = ParseDurationOrDie(session_ttl_text, "--session-ttl");
  p->server_timeout = ParseDurationOrDie(server_timeout_text, "--server-timeout");
  p->gc_grace = ParseDurationOrDie(gc_grace_text, "--gc-grace");
  p->balance_delay = ParseDurationOrDie(balance_delay_text, "--balance-delay");
  p->merge_after = ParseDurationOrDie(merge_after_text, "--merge-after");
  if (p->session_ttl < absl::Seconds(1)) {
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

  return -1;
}

// The lock role's service, its data in DATA/lock.
absl::StatusOr<std::unique_ptr<megastore::storage::lock::EmbeddedLockService>> OpenLockRole(
    Env* env, const std::string& data) {
  MS_RETURN_IF_ERROR(megastore::CreatePrivateDirectories(data + "/lock"));
  auto opened = megastore::storage::lock::EmbeddedLockService::Open(env, data + "/lock");
  if (!opened.ok())
    return absl::Status(opened.status().code(),
                        StrCat("cannot start the lock service: ", opened.status().ToString()));
  return opened;
}

// The tablet role's options. In a cell, the tablet server commits its
// splits and merges through `cell_client`, reports them to the master, and
// serves only while `registered` holds a live registration; `bound` is the
// address it serves on, set once the RPC server is bound (the split hooks
// run only after that).
megastore::storage::TabletServerOptions TabletOptions(
    const Flags& f, const Plan& p, Env* env, megastore::storage::lock::LockService* service,
    megastore::storage::cell::CellClient* client, const std::string* bound,
    std::atomic<megastore::storage::cell::ServerRegistration*>* registered) {
  megastore::storage::TabletServerOptions options;
  options.data_dir = f.data;
  options.sync_log = !f.no_sync;
  options.preallocate_log = !f.no_log_preallocate;
  options.accept_log_loss = f.accept_log_loss;
  options.flush_max_age = p.flush_max_age;
  options.resources.block_cache_bytes = f.block_cache_mb << 20;
  options.resources.row_cache_bytes = f.row_cache_mb << 20;
  if (!f.cell.empty()) {
    // A new log per incarnation, named so an operator can tell whose.
    std::string name = f.listen;
    for (char& c : name) {
      if (c == ':') c = '_';
    }
    char suffix[17];
    std::snprintf(suffix, sizeof(suffix), "%016llx",
                  static_cast<unsigned long long>(env->Random64()));
    options.cell_log_name = megastore::StrCat(name, "-", suffix);
    options.split_threshold_bytes = static_cast<uint64_t>(f.split_threshold_mb * 1024 * 1024);
    options.may_split = megastore::storage::cell::MaySplit;
    // Until it registers (and after it leaves) it has nothing to serve.
    options.lease_valid = [registered] {
      megastore::storage::cell::ServerRegistration* r = registered->load();
      return r != nullptr && r->registered();
    };
    const std::string log_name = options.cell_log_name;
    options.commit_split = [client, env, bound, log_name](
                               const megastore::storage::TabletEntry& parent,
                               const std::vector<megastore::storage::TabletEntry>& children) {
      return megastore::storage::cell::CommitSplit(client, env, *bound, log_name, parent, children);
    };
    options.commit_merge = [client, env, bound, log_name](
                               const megastore::storage::TabletEntry& left,
                               const megastore::storage::TabletEntry& right,
                               const megastore::storage::TabletEntry& merged) {
      return megastore::storage::cell::CommitMerge(client, env, *bound, log_name, left, right,
                                                   merged);
    };
    options.after_split = [service, cell = f.cell, bound](
                              const megastore::storage::TabletEntry& parent,
                              const std::vector<megastore::storage::TabletEntry>& children) {
      // Best effort: a lost report is found by the master's next scan.
      absl::StatusOr<std::string> master = megastore::storage::cell::FindMaster(service, cell);
      if (!master.ok()) return;
      megastore::storage::cell::ReportSplitRequest report;
      *report.mutable_parent() = parent;
      for (const auto& c : children) *report.add_children() = c;
      report.set_server(*bound);
      absl::Status s =
          megastore::storage::cell::MasterClient(*master, absl::Seconds(2)).ReportSplit(report);
      if (!s.ok())
        MS_LOG_WARN("split of {}: telling the master {}: {}", parent.id(), *master, s.ToString());
    };
  }
  return options;
}

// A cell's master; it exits the process (status 3) when it loses the
// master lock, so a standby takes over.
std::unique_ptr<megastore::storage::cell::Master> MakeMaster(
    const Flags& f, const Plan& p, Env* env, megastore::storage::lock::LockService* service) {
  megastore::storage::cell::MasterOptions o;
  o.cell = f.cell;
  o.data_root = f.data;
  o.session_ttl = p.session_ttl;
  o.server_ttl = p.session_ttl;
  o.server_timeout = p.server_timeout;
  o.balance_margin = f.balance_margin;
  o.gc_grace = p.gc_grace;
  o.balance_delay = p.balance_delay;
  o.merge_threshold_bytes = static_cast<uint64_t>(f.merge_threshold_mb * 1024 * 1024);
  o.merge_after = p.merge_after;
  return std::make_unique<megastore::storage::cell::Master>(
      service, env, o, [](const absl::Status& why) {
        MS_LOG_ERROR("megastored: the master lost its lock ({}): exiting so a standby takes over",
                     why.message());
        spdlog::default_logger()->flush();
        ::_exit(3);
      });
}

// Registers this tablet server in its cell's lock service. It stops serving
// (exits with status 3) the moment it cannot be sure it still is.
absl::StatusOr<std::unique_ptr<megastore::storage::cell::ServerRegistration>> JoinCell(
    Env* env, megastore::storage::lock::LockService* service, const std::string& cell,
    const std::string& bound, absl::Duration session_ttl) {
  std::unique_ptr<megastore::storage::cell::ServerRegistration> registration;
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
  if (!joined.ok())
    return absl::Status(joined.status().code(),
                        StrCat("cannot join cell ", cell, ": ", joined.status().message()));
  return registration;
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

// What a standalone process's /status and /metrics show.
struct StatusPage {
  Env* env;
  std::string command_line;
  std::string bound;
  megastore::storage::TabletServer* server;  // each may be null
  megastore::rpc::RpcServer* rpc;
  megastore::storage::ServiceMetrics* metrics;
  megastore::storage::lock::EmbeddedLockService* lock;
  megastore::storage::cell::Master* master;
};

// Serves `page` on `address` until the server is stopped (before any of
// the page's parts goes away).
absl::StatusOr<std::unique_ptr<megastore::http::HttpServer>> ServeStatusPages(
    const std::string& address, const StatusPage* page) {
  auto http_server = std::make_unique<megastore::http::HttpServer>(address);
  const int64_t started = page->env->NowMicros();
  http_server->Handle("/status", [page, started] {
    megastore::storage::StatusContext ctx{page->bound, page->command_line, started,
                                          page->env->NowMicros()};
    std::string html =
        page->server ? megastore::storage::StatusHtml(*page->server, *page->rpc, ctx)
                     : megastore::StrCat(
                           "<!doctype html><title>megastored</title><h1>megastored</h1><p><code>",
                           megastore::HtmlEscape(page->command_line), "</code></p>");
    if (page->lock) html += LockServiceHtml(*page->lock);
    if (page->master) html += MasterHtml(*page->master);
    return megastore::http::Response{200, "text/html; charset=utf-8", html};
  });
  http_server->Handle("/metrics", [page] {
    return megastore::http::Response{
        200, "text/plain; version=0.0.4; charset=utf-8",
        page->server ? megastore::storage::MetricsText(*page->server, *page->rpc, *page->metrics)
                     : ""};
  });
  MS_RETURN_IF_ERROR(http_server->Start());
  return http_server;
}

}  // namespace

int RunStandalone(const Flags& f, const std::string& command_line) {
  Plan plan;
  if (const int rc = MakePlan(f, &plan); rc >= 0) return rc;
  server::BlockServerSignals();
  Env* env = Env::Default();
  const std::string& cell = f.cell;
  const std::string& data = f.data;

  std::unique_ptr<megastore::storage::lock::EmbeddedLockService> lock;
  if (plan.lock) {
    auto opened = OpenLockRole(env, data);
    if (!opened.ok()) {
      std::fprintf(stderr, "megastored: %s\n", std::string(opened.status().message()).c_str());
      return 1;
    }
    lock = std::move(*opened);
  }
  // A process of a cell reaches the cell's lock service (here, or remote).
  std::unique_ptr<megastore::storage::lock::LockService> remote_lock;
  megastore::storage::lock::LockService* service = lock.get();
  if (!cell.empty() && !f.lock_service.empty()) {
    auto connected = megastore::storage::cell::ConnectLockService(f.lock_service);
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
  // The address this process serves on, once the RPC server is bound.
  std::string bound;
  std::unique_ptr<megastore::storage::cell::ServerRegistration> registration;
  std::atomic<megastore::storage::cell::ServerRegistration*> registered{
      nullptr};  // read by RPC threads
  std::unique_ptr<megastore::storage::TabletServer> server;
  if (plan.tablet) {
    auto opened = megastore::storage::TabletServer::Open(
        TabletOptions(f, plan, env, service, cell_client.get(), &bound, &registered), env);
    if (!opened.ok()) {
      std::fprintf(stderr, "megastored: cannot start the tablet server: %s\n",
                   opened.status().ToString().c_str());
      return 1;
    }
    server = std::move(*opened);
  }
  std::unique_ptr<megastore::storage::cell::Master> master;
  if (plan.master) master = MakeMaster(f, plan, env, service);

  megastore::rpc::ServerOptions rpc_options;
  rpc_options.listen = f.listen;
  rpc_options.worker_threads = f.workers;
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
  bound = megastore::StrCat(f.listen.substr(0, f.listen.rfind(':')), ":", rpc.port());

  if (!cell.empty() && server) {
    auto joined = JoinCell(env, service, cell, bound, plan.session_ttl);
    if (!joined.ok()) {
      std::fprintf(stderr, "megastored: %s\n", std::string(joined.status().message()).c_str());
      return 1;
    }
    registration = std::move(*joined);
  }

  StatusPage page{env, command_line, bound, server.get(), &rpc, &metrics, lock.get(), master.get()};
  std::unique_ptr<megastore::http::HttpServer> http_server;
  std::string http_bound;
  if (!f.http.empty()) {
    auto started = ServeStatusPages(f.http, &page);
    if (!started.ok()) {
      std::fprintf(stderr, "megastored: %s\n", started.status().ToString().c_str());
      return 1;
    }
    http_server = std::move(*started);
    http_bound = megastore::StrCat(f.http.substr(0, f.http.rfind(':')), ":", http_server->port());
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

  server::WaitForShutdown();
  registered = nullptr;                    // not one more request once it leaves
  registration.reset();                    // leaves the cell first: its file goes
  if (cell_client) cell_client->Cancel();  // a split or merge committing now gives up
  if (http_server) http_server->Stop();    // before the parts its pages show
  master.reset();
  rpc.Stop();
  lock_rpc.reset();
  server.reset();
  MS_LOG_INFO("megastored: stopped cleanly");
  return 0;
}

}  // namespace megastore::megastored
