#include "tools/megastored/status.h"

#include <cstdio>
#include <functional>

#include "api/database.h"
#include "api/gateway.h"
#include "backup/schedule.h"
#include "base/coding.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/strings.h"
#include "base/tls/context.h"
#include "replication/at_rest.h"
#include "tools/megastored/console.h"

namespace megastore::server {

namespace {

std::string Ms(double ms) { return fmt::format("{:.1f} ms", ms); }

std::string Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? std::string("—")
                    : fmt::format("{:.1f}%",
                                  100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string RolesOf(const Datacenter& dc) {
  std::string out;
  for (Role r : dc.options().roles) out += StrCat(out.empty() ? "" : ", ", RoleName(r));
  return out;
}

// Prometheus text: one metric family's header.
std::string Family(std::string_view name, std::string_view type, std::string_view help) {
  return StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

std::string StatusHtml(const StatusSources& s, int64_t started_micros) {
  std::string html = StrCat("<!doctype html><title>megastored</title><h1>megastored</h1><p><code>",
                            HtmlEscape(s.command_line), "</code><br>up ",
                            (Env::Default()->NowMicros() - started_micros) / 1'000'000, " s</p>");
  if (const std::string tls = tls::TlsStatusText(); !tls.empty())
    html += StrCat("<h2>TLS</h2><pre>", HtmlEscape(tls), "</pre>");
  for (Datacenter* dc : s.datacenters) {
    std::shared_ptr<const AccessPolicy> p = dc->access().policy();
    uint64_t refused = 0;
    for (const auto& [method, n] : dc->access().Refusals()) refused += n;
    html += StrCat("<p>Access policy of ", dc->options().name, ": ",
                   p == nullptr
                       ? std::string("none (every caller with a certificate may call everything)")
                       : StrCat("version ", p->version(), ", ", p->members_size(), " principals"),
                   "; ", refused, " calls refused</p>");
  }
  html +=
      "<h2>Datacenters in this process</h2><table border=1 "
      "cellpadding=4><tr><th>name<th>type<th>roles"
      "<th>address<th>coordinator<th>epoch<th>tables</tr>";
  for (Datacenter* dc : s.datacenters) {
    coordinator::Coordinator* c = dc->coordinator();
    html +=
        StrCat("<tr><td>", dc->options().name, "<td>", TypeName(dc->options().type), "<td>",
               RolesOf(*dc), "<td>", dc->address(), "<td>",
               c == nullptr ? "—" : (c->serving() ? "serving" : "NOT serving (no lock majority)"),
               "<td>", c == nullptr ? std::string("—") : std::to_string(c->epoch()), "<td>",
               dc->tablets() == nullptr ? std::string("—")
                                        : std::to_string(dc->tablets()->ListTables().size()),
               "</tr>");
  }
  html += "</table>";

  html +=
      "<h2>Inter-datacenter round trips</h2><p>dc.Status every 2 s through the servers' own "
      "transport "
      "(an emulated WAN included)</p><table border=1 "
      "cellpadding=4><tr><th>from<th>to<th>last<th>average"
      "<th>min<th>probes<th>failed<th>state</tr>";
  for (Datacenter* dc : s.datacenters)
    for (const LatencyProber::Result& r : dc->Latencies())
      html += StrCat("<tr><td>", dc->options().name, "<td>", r.datacenter, "<td>", Ms(r.last_ms),
                     "<td>", Ms(r.average_ms), "<td>", Ms(r.min_ms), "<td>", r.probes, "<td>",
                     r.failures, "<td>",
                     r.probes == 0 ? "not probed yet"
                     : r.reachable ? "reachable"
                                   : HtmlEscape(StrCat("DOWN: ", r.error)),
                     "</tr>");
  html += "</table>";

  for (Datacenter* dc : s.datacenters) {
    if (replication::ReplicationServer* r = dc->replication()) {
      const auto st = r->stats();
      html += StrCat("<h2>Replication server of ", dc->options().name, "</h2><p>Paxos requests ",
                     st.paxos, ", log entries accepted ", st.accepted, " (", st.log_bytes,
                     " bytes; on the fast path ", Percent(st.fast_path, st.accepted),
                     "), refused for a higher ballot (conflicts) ", st.rejected, ", reads ",
                     st.reads, ", applies ", st.applies, ", sweeps ", st.sweeps, " finishing ",
                     st.sweep_catchups, " incomplete writes</p>");
      html += StrCat("<p>Log clean-up: ", st.cleanup_sweeps, " sweeps, ", st.groups_cleaned,
                     " group clean-ups removing ", st.positions_removed, " positions (",
                     st.bytes_reclaimed, " bytes), ", st.cleanup_blocked,
                     " held back (a replica silent or no backup covering them), ",
                     st.cleanup_pending, " groups due. Last sweep: largest log ",
                     st.largest_log_bytes, " bytes, most positions kept ", st.largest_log_positions,
                     ", all logs it saw ", st.kept_log_bytes, " bytes</p>");
      for (bool by_conflicts : {false, true}) {
        const auto hot = r->HottestGroups(10, by_conflicts);
        if (hot.empty()) continue;
        html += StrCat(
            "<h3>Hottest entity groups by ", by_conflicts ? "conflicts" : "writes",
            "</h3><table border=1 cellpadding=4><tr><th>table<th>root row<th>writes<th>conflicts"
            "<th>log position</tr>");
        for (const auto& g : hot)
          html += StrCat("<tr><td>", HtmlEscape(g.group.table()), "<td><code>",
                         HtmlEscape(EscapeBytes(g.group.root())), "</code><td>", g.writes, "<td>",
                         g.conflicts, "<td>", g.position, "</tr>");
        html += "</table>";
      }
    }
    if (coordinator::Coordinator* c = dc->coordinator()) {
      const auto st = c->stats();
      html += StrCat("<h2>Coordinator of ", dc->options().name, "</h2><p>current-read checks ",
                     st.checks, ", answered locally ", Percent(st.checks_valid, st.checks),
                     "; invalidations from writers ", st.invalidations,
                     ", validations after catch-up ", st.validations, "; groups up to date here ",
                     st.valid_groups, " of ", st.groups, " known</p>");
    }
  }

  if (s.gateway != nullptr) {
    const auto st = s.gateway->context().client->stats();
    html += StrCat(
        "<h2>Gateway client</h2><p>commits ", st.commits, ", on the fast path ", st.fast_path,
        " (in ", st.entries, " log entries, ", st.combined, " sharing theirs; ", st.forwarded,
        " sent to their hot group's home), conflicts ", st.conflicts, ", promotions ",
        st.promotions, ", unknown outcomes ", st.unknown, ", retries ", s.gateway->retries(),
        ", catch-ups ", st.catchups, ", coordinator invalidations ", st.invalidations, "</p>");
    for (bool by_conflicts : {false, true}) {
      const auto hot = s.gateway->context().client->HottestGroups(10, by_conflicts);
      if (hot.empty()) continue;
      html += StrCat("<h3>Its hottest entity groups by ", by_conflicts ? "conflicts" : "commits",
                     "</h3><table border=1 cellpadding=4><tr><th>root row<th>",
                     by_conflicts ? "conflicts" : "commits", "</tr>");
      for (const auto& [root, n] : hot)
        html += StrCat("<tr><td><code>", HtmlEscape(EscapeBytes(root)), "</code><td>", n, "</tr>");
      html += "</table>";
    }
  }

  html += StrCat("<h2>Cluster config</h2><pre>", HtmlEscape(ToText(s.config)), "</pre>");
  const std::vector<std::string> errors = RecentErrors();
  if (s.backups != nullptr) {
    const backup::BackupScheduler::Status b = s.backups->status();
    auto when = [](int64_t micros) {
      return micros == 0 ? std::string("never")
                         : absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMicros(micros),
                                            absl::UTCTimeZone());
    };
    html +=
        StrCat("<h2>Scheduled backups</h2><p>into ", HtmlEscape(s.config.backup().dir()),
               ": last full ", when(b.last_full_micros), ", last log ", when(b.last_log_micros),
               ", next ", when(b.next_micros), "; ", b.jobs_ok, " jobs done, ", b.jobs_failed,
               " failed, ", b.bytes, " bytes written, ", b.pruned_files, " old files pruned</p>");
    if (b.running) {
      const backup::Progress& p = b.progress;
      const std::optional<absl::Duration> eta = p.Eta();
      html += StrCat("<p>running: ", p.kind == backup::FULL ? "full" : "log", " job ", p.job, ", ",
                     p.groups_done, " of ", p.groups_total, " groups, ", p.bytes, " bytes, ",
                     fmt::format("{:.1f}", p.Rate() / 1e6), " MB/s, ETA ",
                     eta ? fmt::format("{:.0f} s", absl::ToDoubleSeconds(*eta)) : "?", "</p>");
    }
    if (!b.last_error.empty())
      html += StrCat("<p>last failure: ", HtmlEscape(b.last_error), "</p>");
  }
  html += "<h2>Recent warnings and errors</h2>";
  if (errors.empty()) {
    html += "<p>none</p>";
  } else {
    html += "<pre>";
    for (const std::string& e : errors) html += HtmlEscape(e) + "\n";
    html += "</pre>";
  }
  return html;
}

std::string MetricsText(const StatusSources& s) {
  std::string out = Family("megastore_coordinator_serving", "gauge",
                           "1 if the datacenter's coordinator holds its lock majority.");
  for (Datacenter* dc : s.datacenters)
    if (dc->coordinator() != nullptr)
      out += StrCat("megastore_coordinator_serving{datacenter=\"", dc->options().name, "\"} ",
                    dc->coordinator()->serving() ? 1 : 0, "\n");

  out +=
      Family("megastore_datacenter_rtt_seconds", "gauge",
             "Last measured round trip to another datacenter (dc.Status); absent until answered.");
  for (Datacenter* dc : s.datacenters)
    for (const LatencyProber::Result& r : dc->Latencies())
      if (r.probes > r.failures)
        out += fmt::format("megastore_datacenter_rtt_seconds{{from=\"{}\",to=\"{}\"}} {:.6f}\n",
                           dc->options().name, r.datacenter, r.last_ms / 1000.0);
  out += Family("megastore_datacenter_probe_failures_total", "counter",
                "Round-trip probes not answered.");
  for (Datacenter* dc : s.datacenters)
    for (const LatencyProber::Result& r : dc->Latencies())
      out += StrCat("megastore_datacenter_probe_failures_total{from=\"", dc->options().name,
                    "\",to=\"", r.datacenter, "\"} ", r.failures, "\n");

  // The replication servers' counters, one family each.
  struct Counter {
    const char* name;
    const char* help;
    uint64_t replication::ReplicationServer::Stats::*field;
  };
  static const Counter kReplication[] = {
      {"megastore_replication_paxos_requests_total", "Paxos prepare and accept requests served.",
       &replication::ReplicationServer::Stats::paxos},
      {"megastore_log_entries_total", "Log entries (values) accepted by this replica.",
       &replication::ReplicationServer::Stats::accepted},
      {"megastore_log_bytes_total", "Bytes of the log entries accepted by this replica.",
       &replication::ReplicationServer::Stats::log_bytes},
      {"megastore_replication_fast_path_accepts_total",
       "Entries accepted at ballot 0 (the leader's fast path).",
       &replication::ReplicationServer::Stats::fast_path},
      {"megastore_replication_conflicts_total",
       "Paxos requests refused for a higher ballot (competing writers).",
       &replication::ReplicationServer::Stats::rejected},
      {"megastore_replication_reads_total", "Reads and scans served.",
       &replication::ReplicationServer::Stats::reads},
      {"megastore_replication_applies_total", "Apply requests served.",
       &replication::ReplicationServer::Stats::applies},
      {"megastore_replication_learned_on_accept_total",
       "Positions learned and applied when this replica's accept completed a majority.",
       &replication::ReplicationServer::Stats::learned_on_accept},
      {"megastore_replication_sweep_catchups_total",
       "Incomplete writes the background sweep finished.",
       &replication::ReplicationServer::Stats::sweep_catchups},
      {"megastore_replication_gap_votes_total",
       "Votes on a position past this replica's top that another replica vouched for (it had "
       "missed some).",
       &replication::ReplicationServer::Stats::gap_votes},
      {"megastore_replication_vouches_shed_total",
       "Requests past this replica's top refused without asking the other replicas: too many such "
       "questions were "
       "in flight.",
       &replication::ReplicationServer::Stats::vouches_shed},
      {"megastore_replication_home_commits_total",
       "Commits of hot groups that app servers sent this replica, as the groups' home.",
       &replication::ReplicationServer::Stats::home_commits},
      {"megastore_replication_home_shed_total",
       "... of those, refused unproposed (too many under way here): their senders proposed "
       "them.",
       &replication::ReplicationServer::Stats::home_shed},
      {"megastore_replication_home_log_entries_total",
       "Log entries this replica's server proposed those commits in (fewer when they combine).",
       &replication::ReplicationServer::Stats::home_entries},
  };
  static const Counter kCleanup[] = {
      {"megastore_log_cleanup_sweeps_total", "Log clean-up sweeps run.",
       &replication::ReplicationServer::Stats::cleanup_sweeps},
      {"megastore_log_cleanup_groups_total", "Group logs that a clean-up shortened.",
       &replication::ReplicationServer::Stats::groups_cleaned},
      {"megastore_log_cleanup_positions_total", "Log positions removed by clean-up.",
       &replication::ReplicationServer::Stats::positions_removed},
      {"megastore_log_cleanup_reclaimed_bytes_total",
       "Bytes of root-row log cells removed by clean-up.",
       &replication::ReplicationServer::Stats::bytes_reclaimed},
      {"megastore_log_cleanup_blocked_total",
       "Group clean-ups held back: a replica did not answer, or no backup covers the positions.",
       &replication::ReplicationServer::Stats::cleanup_blocked},
  };
  static const Counter kGauges[] = {
      {"megastore_replication_sweep_pending_groups",
       "Groups with Paxos traffic here not known to be applied through it: the incomplete-write "
       "sweep reads their log state once they are quiet.",
       &replication::ReplicationServer::Stats::sweep_pending},
      {"megastore_log_cleanup_pending_groups", "Groups waiting for a clean-up sweep.",
       &replication::ReplicationServer::Stats::cleanup_pending},
      {"megastore_log_root_row_max_bytes",
       "The largest group log (root-row log cells) the last clean-up sweep saw.",
       &replication::ReplicationServer::Stats::largest_log_bytes},
      {"megastore_log_root_row_max_positions",
       "The most log positions a group kept, as the last clean-up sweep saw.",
       &replication::ReplicationServer::Stats::largest_log_positions},
      {"megastore_log_kept_bytes", "Log bytes of the groups the last clean-up sweep looked at.",
       &replication::ReplicationServer::Stats::kept_log_bytes},
  };
  auto emit = [&](const Counter& c, const char* type) {
    out += Family(c.name, type, c.help);
    for (Datacenter* dc : s.datacenters)
      if (dc->replication() != nullptr)
        out += StrCat(c.name, "{datacenter=\"", dc->options().name, "\"} ",
                      dc->replication()->stats().*c.field, "\n");
  };
  for (const Counter& c : kReplication) emit(c, "counter");
  for (const Counter& c : kCleanup) emit(c, "counter");
  for (const Counter& c : kGauges) emit(c, "gauge");
  out += Family("megastore_log_groups", "gauge",
                "Entity groups with Paxos traffic at this replica since it started.");
  for (Datacenter* dc : s.datacenters)
    if (dc->replication() != nullptr)
      out += StrCat("megastore_log_groups{datacenter=\"", dc->options().name, "\"} ",
                    dc->replication()->groups_seen(), "\n");
  out +=
      Family("megastore_replication_groups_behind", "gauge",
             "Entity groups this replica knows it is behind in (another replica applied a "
             "position it missed), until its sweep catches them up or a later apply covers them.");
  for (Datacenter* dc : s.datacenters)
    if (dc->replication() != nullptr)
      out += StrCat("megastore_replication_groups_behind{datacenter=\"", dc->options().name, "\"} ",
                    dc->replication()->groups_behind(), "\n");
  // Encryption at rest: the key store's counts, once it is open.
  for (const bool destroyed : {false, true}) {
    const char* name =
        destroyed ? "megastore_encryption_destroyed_group_keys" : "megastore_encryption_group_keys";
    out += Family(
        name, "gauge",
        destroyed
            ? "Entity groups whose key this datacenter destroyed (crypto-shredded)."
            : "Entity groups of encrypted schemas with a key in this datacenter's key directory.");
    for (Datacenter* dc : s.datacenters) {
      if (dc->encryption() == nullptr) continue;
      const std::optional<replication::GroupKeyStore::Stats> keys = dc->encryption()->StoreStats();
      if (keys)
        out += StrCat(name, "{datacenter=\"", dc->options().name, "\"} ",
                      destroyed ? keys->destroyed : keys->groups, "\n");
    }
  }
  for (bool paxos : {true, false}) {
    const char* name =
        paxos ? "megastore_replication_paxos_seconds" : "megastore_replication_read_seconds";
    out += Family(name, "histogram",
                  paxos ? "Serving one Paxos request, Bigtable writes included."
                        : "Serving one read or scan.");
    for (Datacenter* dc : s.datacenters) {
      if (dc->replication() == nullptr) continue;
      const LatencyHistogram& h =
          paxos ? dc->replication()->paxos_latency() : dc->replication()->read_latency();
      out += h.PrometheusSamples(name, StrCat("datacenter=\"", dc->options().name, "\""));
    }
  }

  // The coordinators' counters, one family each.
  using CoordinatorStats = coordinator::Coordinator::Stats;
  struct CoordinatorCounter {
    const char* name;
    const char* type;
    const char* help;
    std::function<std::string(const CoordinatorStats&, const std::string& labels)> samples;
  };
  auto one = [](const char* name, uint64_t CoordinatorStats::*field) {
    return [name, field](const CoordinatorStats& st, const std::string& labels) {
      return StrCat(name, "{", labels, "} ", st.*field, "\n");
    };
  };
  const CoordinatorCounter kCoordinator[] = {
      {"megastore_coordinator_checks_total", "counter",
       "Current-read checks, by answer (valid: served without a majority read).",
       [](const CoordinatorStats& st, const std::string& labels) {
         return StrCat("megastore_coordinator_checks_total{", labels, ",answer=\"valid\"} ",
                       st.checks_valid, "\n", "megastore_coordinator_checks_total{", labels,
                       ",answer=\"not_valid\"} ", st.checks - st.checks_valid, "\n");
       }},
      {"megastore_coordinator_invalidations_total", "counter",
       "Invalidations received from writers.",
       one("megastore_coordinator_invalidations_total", &CoordinatorStats::invalidations)},
      {"megastore_coordinator_validations_total", "counter",
       "Groups validated after a reader's catch-up.",
       one("megastore_coordinator_validations_total", &CoordinatorStats::validations)},
      {"megastore_coordinator_valid_groups", "gauge",
       "Groups known to be up to date at this replica.",
       one("megastore_coordinator_valid_groups", &CoordinatorStats::valid_groups)},
  };
  std::vector<std::pair<std::string, CoordinatorStats>> coordinators;
  for (Datacenter* dc : s.datacenters)
    if (dc->coordinator() != nullptr)
      coordinators.emplace_back(StrCat("datacenter=\"", dc->options().name, "\""),
                                dc->coordinator()->stats());
  for (const CoordinatorCounter& c : kCoordinator) {
    out += Family(c.name, c.type, c.help);
    for (const auto& [labels, st] : coordinators) out += c.samples(st, labels);
  }

  std::vector<std::pair<std::string, rpc::ServerStats>> rpc_servers;
  for (Datacenter* dc : s.datacenters) {
    rpc_servers.emplace_back(StrCat("datacenter=\"", dc->options().name, "\""), dc->rpc_stats());
  }
  out += rpc::ServerStatsMetrics(rpc_servers);
  out +=
      Family("megastore_access_refusals_total", "counter",
             "Calls refused PERMISSION_DENIED by the access policy, by method (docs/security.md).");
  out += Family("megastore_access_policy_version", "gauge",
                "The access policy in force (0: none, everything allowed).");
  for (Datacenter* dc : s.datacenters) {
    for (const auto& [method, n] : dc->access().Refusals())
      out += StrCat("megastore_access_refusals_total{datacenter=\"", dc->options().name,
                    "\",method=\"", method, "\"} ", n, "\n");
    std::shared_ptr<const AccessPolicy> p = dc->access().policy();
    out += StrCat("megastore_access_policy_version{datacenter=\"", dc->options().name, "\"} ",
                  p == nullptr ? 0 : p->version(), "\n");
  }
  out += http::ProcessStatsMetrics();
  out += tls::TlsMetrics();

  if (s.gateway != nullptr) {
    const auto st = s.gateway->context().client->stats();
    out += Family("megastore_client_commits_total", "counter",
                  "Commits by the gateway's client, by outcome.");
    out += StrCat("megastore_client_commits_total{outcome=\"committed\"} ", st.commits, "\n",
                  "megastore_client_commits_total{outcome=\"conflict\"} ", st.conflicts, "\n",
                  "megastore_client_commits_total{outcome=\"unknown\"} ", st.unknown, "\n");
    out += StrCat(
        Family("megastore_client_fast_path_commits_total", "counter",
               "Commits chosen by the leader's accept, one round trip."),
        "megastore_client_fast_path_commits_total ", st.fast_path, "\n",
        Family("megastore_client_promotions_total", "counter",
               "Log positions a commit lost to a writer of nothing it read and went on past."),
        "megastore_client_promotions_total ", st.promotions, "\n",
        Family("megastore_client_log_entries_total", "counter",
               "Log entries this client's commits were chosen in (fewer than the commits when "
               "they combine)."),
        "megastore_client_log_entries_total ", st.entries, "\n",
        Family("megastore_client_combined_commits_total", "counter",
               "Commits that shared their log entry with other commits of this client."),
        "megastore_client_combined_commits_total ", st.combined, "\n",
        Family("megastore_client_sent_home_commits_total", "counter",
               "Commits of hot groups sent to the group's home replica, which proposed them."),
        "megastore_client_sent_home_commits_total ", st.forwarded, "\n",
        Family("megastore_client_retries_total", "counter",
               "Transactions retried after a conflict."),
        "megastore_client_retries_total ", s.gateway->retries(), "\n",
        Family("megastore_client_catchups_total", "counter", "Catch-ups before a current read."),
        "megastore_client_catchups_total ", st.catchups, "\n",
        Family("megastore_client_invalidations_total", "counter",
               "Coordinators invalidated by this client's commits."),
        "megastore_client_invalidations_total ", st.invalidations, "\n");
    out += s.gateway->context().client->commit_latency().Prometheus(
        "megastore_client_commit_seconds", "Successful commits, from proposing to acknowledged.");
    out += s.gateway->context().client->read_latency().Prometheus(
        "megastore_client_current_read_position_seconds",
        "Finding a group's position for a current read (found with a transaction's first "
        "read, the position and that read together).");
  }
  if (s.gateway_server != nullptr) out += GatewayStatsMetrics(s.gateway_server->stats());
  if (s.backups != nullptr) {
    const backup::BackupScheduler::Status b = s.backups->status();
    out += StrCat(
        Family("megastore_backup_jobs_total", "counter", "Scheduled backup jobs, by result."),
        "megastore_backup_jobs_total{result=\"ok\"} ", b.jobs_ok, "\n",
        "megastore_backup_jobs_total{result=\"failed\"} ", b.jobs_failed, "\n",
        Family("megastore_backup_bytes_total", "counter",
               "Bytes written by finished scheduled backup jobs."),
        "megastore_backup_bytes_total ", b.bytes, "\n",
        Family("megastore_backup_pruned_files_total", "counter",
               "Backup files deleted by retention."),
        "megastore_backup_pruned_files_total ", b.pruned_files, "\n",
        Family("megastore_backup_last_success_timestamp_seconds", "gauge",
               "When the last scheduled job of each kind finished well (0: never)."),
        "megastore_backup_last_success_timestamp_seconds{kind=\"full\"} ",
        b.last_full_micros / 1000000, "\n",
        "megastore_backup_last_success_timestamp_seconds{kind=\"log\"} ",
        b.last_log_micros / 1000000, "\n",
        Family("megastore_backup_running", "gauge", "1 while a scheduled backup job runs."),
        "megastore_backup_running ", b.running ? 1 : 0, "\n",
        Family("megastore_backup_running_groups", "gauge",
               "The running job's groups: done and in all."),
        "megastore_backup_running_groups{of=\"done\"} ", b.running ? b.progress.groups_done : 0,
        "\n", "megastore_backup_running_groups{of=\"total\"} ",
        b.running ? b.progress.groups_total : 0, "\n");
  }
  return out;
}

std::unique_ptr<http::HttpServer> ServeStatus(const std::string& listen, StatusSources sources,
                                              std::string* bound) {
  auto server = std::make_unique<http::HttpServer>(listen);
  auto shared = std::make_shared<const StatusSources>(std::move(sources));
  const int64_t started = Env::Default()->NowMicros();
  server->Handle("/status", [shared, started] {
    return http::Response{200, "text/html; charset=utf-8", StatusHtml(*shared, started)};
  });
  server->Handle("/metrics", [shared] {
    return http::Response{200, "text/plain; version=0.0.4; charset=utf-8", MetricsText(*shared)};
  });
  AddConsole(*server, shared, shared->console_sample_interval);
  if (absl::Status st = server->Start(); !st.ok()) {
    std::fprintf(stderr, "megastored: %s\n", st.ToString().c_str());
    return nullptr;
  }
  *bound = StrCat(listen.substr(0, listen.rfind(':')), ":", server->port());
  return server;
}

}  // namespace megastore::server
