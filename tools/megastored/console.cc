#include "tools/megastored/console.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/coding.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/strings.h"
#include "coordinator/coordinator.pb.h"
#include "replication/replication.pb.h"
#include "replication/replication_server.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::server {

namespace {

// What the charts read from /metrics.
const std::vector<std::string>& ChartedMetrics() {
  static const auto* names = new std::vector<std::string>{
      "megastore_log_entries_total",
      "megastore_client_commits_total",
      "megastore_replication_conflicts_total",
      "megastore_client_retries_total",
      "megastore_replication_paxos_seconds_bucket",
      "megastore_client_commit_seconds_bucket",
      "megastore_coordinator_checks_total",
      "megastore_datacenter_rtt_seconds",
      "megastore_replication_groups_behind",
      "megastore_replication_reads_total",
  };
  return *names;
}

// "name{a="x",b="y"}" -> ("name", {"a": "x", "b": "y"}).
std::pair<std::string, std::map<std::string, std::string>> SplitKey(const std::string& key) {
  const size_t brace = key.find('{');
  std::map<std::string, std::string> labels;
  if (brace == std::string::npos) return {key, labels};
  size_t at = brace + 1;
  while (at < key.size()) {
    const size_t eq = key.find("=\"", at);
    if (eq == std::string::npos) break;
    const size_t end = key.find('"', eq + 2);
    if (end == std::string::npos) break;
    labels[key.substr(at, eq - at)] = key.substr(eq + 2, end - eq - 2);
    at = end + 1;
    if (at < key.size() && key[at] == ',') ++at;
  }
  return {key.substr(0, brace), labels};
}

// A line's name from its labels: "A", "A→B" (from/to), plus `suffix`.
std::string LineName(const std::map<std::string, std::string>& labels, std::string_view suffix) {
  std::string name;
  if (auto f = labels.find("from"); f != labels.end()) {
    name = StrCat(f->second, "→", labels.count("to") ? labels.at("to") : "?");
  } else if (auto d = labels.find("datacenter"); d != labels.end()) {
    name = d->second;
  } else {
    name = "gateway client";
    if (auto o = labels.find("outcome"); o != labels.end()) name += " " + o->second;
  }
  return suffix.empty() ? name : StrCat(name, " ", suffix);
}

struct Line {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (unix seconds, y)
  // Indexes of points that are only a lower bound (a quantile beyond a
  // histogram's last finite bucket: "at least y").
  std::vector<size_t> at_least;
};
struct Chart {
  std::string title, unit;
  std::vector<Line> lines;
};

double Seconds(const MetricsHistory::Sample& s) { return static_cast<double>(s.unix_micros) / 1e6; }

// Per-second rates of the counters named `metric` (one line per series).
std::vector<Line> Rates(const std::vector<MetricsHistory::Sample>& samples,
                        const std::string& metric, std::string_view suffix = "") {
  std::map<std::string, Line> lines;
  for (size_t i = 1; i < samples.size(); ++i) {
    const double dt = Seconds(samples[i]) - Seconds(samples[i - 1]);
    if (dt <= 0) continue;
    for (const auto& [key, v] : samples[i].values) {
      auto [name, labels] = SplitKey(key);
      if (name != metric) continue;
      auto before = samples[i - 1].values.find(key);
      if (before == samples[i - 1].values.end() || v < before->second) continue;  // new or reset
      Line& l = lines[key];
      l.name = LineName(labels, suffix);
      l.points.emplace_back(Seconds(samples[i]), (v - before->second) / dt);
    }
  }
  std::vector<Line> out;
  for (auto& [key, l] : lines) out.push_back(std::move(l));
  return out;
}

// The values of gauge `metric`, times `scale`.
std::vector<Line> Gauges(const std::vector<MetricsHistory::Sample>& samples,
                         const std::string& metric, double scale) {
  std::map<std::string, Line> lines;
  for (const MetricsHistory::Sample& s : samples)
    for (const auto& [key, v] : s.values) {
      auto [name, labels] = SplitKey(key);
      if (name != metric) continue;
      Line& l = lines[key];
      l.name = LineName(labels, "");
      l.points.emplace_back(Seconds(s), v * scale);
    }
  std::vector<Line> out;
  for (auto& [key, l] : lines) out.push_back(std::move(l));
  return out;
}

// p50 and p99 (milliseconds) of histogram `metric`_bucket between
// consecutive samples, one pair of lines per labelled series; a bucket's
// upper bound stands for the values in it, and a quantile in the last
// (+Inf) bucket is drawn as the last finite bound, marked "at least".
std::vector<Line> Quantiles(const std::vector<MetricsHistory::Sample>& samples,
                            const std::string& metric) {
  std::map<std::string, Line> lines;  // by series and quantile
  const std::string bucket = metric + "_bucket";
  for (size_t i = 1; i < samples.size(); ++i) {
    // series (labels without le) -> le -> count added since the last sample
    std::map<std::string, std::map<double, double>> added;
    std::map<std::string, std::map<std::string, std::string>> labels_of;
    for (const auto& [key, v] : samples[i].values) {
      auto [name, labels] = SplitKey(key);
      if (name != bucket || !labels.count("le")) continue;
      auto before = samples[i - 1].values.find(key);
      if (before == samples[i - 1].values.end() || v < before->second) continue;
      double le = INFINITY;
      if (labels["le"] != "+Inf" && !absl::SimpleAtod(labels["le"], &le)) continue;
      labels.erase("le");
      std::string series;
      for (const auto& [k, lv] : labels) series += StrCat(k, "=", lv, ",");
      added[series][le] = v - before->second;
      labels_of[series] = labels;
    }
    for (const auto& [series, buckets] : added) {
      const double total = buckets.rbegin()->second;  // +Inf: every observation
      if (total <= 0) continue;
      for (const auto& [q, suffix] : {std::pair{0.5, "p50"}, std::pair{0.99, "p99"}}) {
        double bound = 0, last_finite = 0;
        bool beyond = false;  // in the +Inf bucket: more than last_finite
        for (const auto& [le, cumulative] : buckets) {
          if (std::isfinite(le)) last_finite = le;
          if (cumulative >= q * total) {
            beyond = !std::isfinite(le);
            bound = beyond ? last_finite : le;
            break;
          }
        }
        Line& l = lines[StrCat(series, suffix)];
        l.name = LineName(labels_of[series], suffix);
        if (beyond) l.at_least.push_back(l.points.size());
        l.points.emplace_back(Seconds(samples[i]), bound * 1000);
      }
    }
  }
  std::vector<Line> out;
  for (auto& [key, l] : lines) out.push_back(std::move(l));
  return out;
}

// The share of current-read checks each coordinator answered "valid"
// (served at its replica without a majority read), in percent.
std::vector<Line> LocalReads(const std::vector<MetricsHistory::Sample>& samples) {
  std::map<std::string, Line> lines;
  for (size_t i = 1; i < samples.size(); ++i) {
    std::map<std::string, std::pair<double, double>> by_dc;  // valid, all
    for (const auto& [key, v] : samples[i].values) {
      auto [name, labels] = SplitKey(key);
      if (name != "megastore_coordinator_checks_total") continue;
      auto before = samples[i - 1].values.find(key);
      if (before == samples[i - 1].values.end() || v < before->second) continue;
      auto& [valid, all] = by_dc[labels["datacenter"]];
      all += v - before->second;
      if (labels["answer"] == "valid") valid += v - before->second;
    }
    for (const auto& [dc, counts] : by_dc) {
      if (counts.second <= 0) continue;
      Line& l = lines[dc];
      l.name = dc;
      l.points.emplace_back(Seconds(samples[i]), 100.0 * counts.first / counts.second);
    }
  }
  std::vector<Line> out;
  for (auto& [key, l] : lines) out.push_back(std::move(l));
  return out;
}

std::string ChartJson(const Chart& c) {
  std::string lines;
  for (const Line& l : c.lines) {
    std::string points;
    for (const auto& [t, y] : l.points)
      points += fmt::format("{}[{:.3f},{:.6g}]", points.empty() ? "" : ",", t,
                            std::isfinite(y) ? y : 0.0);
    std::string at_least;
    for (size_t i : l.at_least) at_least += StrCat(at_least.empty() ? "" : ",", i);
    lines += StrCat(lines.empty() ? "" : ",", "{\"name\":\"", JsonEscape(l.name), "\",\"points\":[",
                    points, "],\"atLeast\":[", at_least, "]}");
  }
  return StrCat("{\"title\":\"", JsonEscape(c.title), "\",\"unit\":\"", JsonEscape(c.unit),
                "\",\"lines\":[", lines, "]}");
}

// A query string's value of `key` ("" if absent), %XX and '+' decoded.
std::string QueryValue(std::string_view query, std::string_view key) {
  for (size_t at = 0; at <= query.size();) {
    size_t amp = query.find('&', at);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view pair = query.substr(at, amp - at);
    at = amp + 1;
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key || eq == std::string_view::npos) continue;
    std::string out;
    const std::string_view v = pair.substr(eq + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      int hex = 0;
      if (v[i] == '%' && i + 2 < v.size() && std::isxdigit(static_cast<unsigned char>(v[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(v[i + 2])) &&
          absl::SimpleHexAtoi(ToAbsl(v.substr(i + 1, 2)), &hex)) {
        out += static_cast<char>(hex);
        i += 2;
      } else {
        out += v[i] == '+' ? ' ' : v[i];
      }
    }
    return out;
  }
  return "";
}

// `text` as bytes, if it is hex (an even number of hex digits).
std::optional<std::string> FromHex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int byte = 0;
    if (!std::isxdigit(static_cast<unsigned char>(text[i])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !absl::SimpleHexAtoi(ToAbsl(text.substr(i, 2)), &byte))
      return std::nullopt;
    out += static_cast<char>(byte);
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

// One RPC through `t`, waited for (at most `timeout`).
absl::StatusOr<std::string> CallAndWait(Transport* t, const std::string& to,
                                        std::string_view method, std::string request,
                                        absl::Duration timeout) {
  auto done = std::make_shared<absl::Notification>();
  auto reply = std::make_shared<absl::StatusOr<std::string>>(absl::DeadlineExceededError(""));
  t->Call(to, method, std::move(request), timeout, [done, reply](absl::StatusOr<std::string> r) {
    *reply = std::move(r);
    done->Notify();
  });
  if (!done->WaitForNotificationWithTimeout(timeout + absl::Seconds(1)))
    return absl::DeadlineExceededError(StrCat(method, " to ", to, ": no answer"));
  return *reply;
}

std::string Time(int64_t unix_micros) {
  if (unix_micros <= 0) return "—";
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", absl::FromUnixMicros(unix_micros),
                          absl::UTCTimeZone());
}

constexpr char kStyle[] =
    "<style>body{font:14px system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}"
    "header{background:#1d2330;color:#fff;padding:10px 20px}header a{color:#9cc3ff;margin-right:"
    "16px}main{padding:16px 20px}h2{font-size:16px;margin:20px 0 8px}.grid{display:grid;grid-"
    "template-columns:repeat(auto-fill,minmax(420px,1fr));gap:14px}.card{background:#fff;border:"
    "1px solid #dde1e7;border-radius:6px;padding:10px 12px}.card h3{margin:0 0 6px;font-size:14px}"
    "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #dde1e7;padding:4px "
    "8px;text-align:left;font-variant-numeric:tabular-nums}.warning,.error,.critical{color:"
    "#b3261e}.legend span{margin-right:12px}.empty{color:#888}</style>";

std::string Page(const std::string& title, const std::string& body) {
  return StrCat(
      "<!DOCTYPE html><html><head><meta charset=utf-8><title>", HtmlEscape(title), "</title>",
      kStyle,
      "</head><body><header><b>megastored</b> &nbsp; <a href=/console>console</a><a "
      "href=/console/tablets>tablets</a><a href=/status>status</a><a href=/metrics>metrics</a>"
      "</header><main>",
      body, "</main></body></html>");
}

// Draws each chart of /console/charts.json as an SVG, every interval.
constexpr char kChartsScript[] = R"JS(
<script>
const esc = t => String(t).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'})[c]);
const lowest = a => a.reduce((m, v) => Math.min(m, v), Infinity);
const highest = a => a.reduce((m, v) => Math.max(m, v), -Infinity);
const colors = ['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf'];
function draw(chart) {
  const W = 400, H = 150, L = 48, B = 18;
  let xs = [], ys = [];
  chart.lines.forEach(l => l.points.forEach(p => { xs.push(p[0]); ys.push(p[1]); }));
  const card = document.createElement('div');
  card.className = 'card chart';
  card.dataset.points = xs.length;
  let html = '<h3>' + esc(chart.title) + ' <small>(' + esc(chart.unit) + ')</small></h3>';
  if (xs.length === 0) {
    card.innerHTML = html + '<div class=empty>no data yet</div>';
    return card;
  }
  const x0 = lowest(xs), x1 = Math.max(highest(xs), x0 + 1);
  const y1 = Math.max(highest(ys), 1) * 1.1;
  const X = t => L + (W - L - 4) * (t - x0) / (x1 - x0);
  const Y = v => 4 + (H - B - 4) * (1 - v / y1);
  let svg = '<svg width=' + W + ' height=' + H + ' role=img>';
  for (let i = 0; i <= 2; i++) {
    const v = y1 * i / 2;
    svg += '<line x1=' + L + ' x2=' + W + ' y1=' + Y(v) + ' y2=' + Y(v) + ' stroke=#eee />';
    svg += '<text x=' + (L - 4) + ' y=' + (Y(v) + 4) + ' font-size=10 text-anchor=end>' +
           (v >= 100 ? v.toFixed(0) : v.toPrecision(2)) + '</text>';
  }
  const span = x1 - x0;
  const ago = span < 120 ? Math.round(span) + ' s' : Math.round(span / 60) + ' min';
  svg += '<text x=' + L + ' y=' + (H - 4) + ' font-size=10>' + ago + ' ago</text>';
  svg += '<text x=' + W + ' y=' + (H - 4) + ' font-size=10 text-anchor=end>now</text>';
  let legend = '<div class=legend>', beyond = false;
  chart.lines.forEach((l, i) => {
    const c = colors[i % colors.length];
    const pts = l.points.map(p => X(p[0]).toFixed(1) + ',' + Y(p[1]).toFixed(1)).join(' ');
    svg += '<polyline class=series fill=none stroke-width=1.5 stroke=' + c + ' points="' + pts + '"/>';
    (l.atLeast || []).forEach(k => {
      const p = l.points[k];
      if (!p) return;
      const x = X(p[0]), y = Y(p[1]);
      svg += '<path class=atleast fill=' + c + ' d="M' + x.toFixed(1) + ',' + (y - 6).toFixed(1) +
             ' l4,6 h-8 z"><title>at least ' + p[1] + ' ' + esc(chart.unit) + '</title></path>';
      beyond = true;
    });
    legend += '<span style="color:' + c + '">■ ' + esc(l.name) + '</span>';
  });
  if (beyond) legend += '<span>▲ at least: beyond the histogram\'s last bucket</span>';
  card.innerHTML = html + svg + '</svg>' + legend + '</div>';
  return card;
}
async function refresh() {
  try {
    const r = await fetch('/console/charts.json');
    const data = await r.json();
    const grid = document.getElementById('charts');
    grid.replaceChildren(...data.charts.map(draw));
    grid.dataset.loaded = 'yes';
    setTimeout(refresh, Math.max(1, data.interval) * 1000);
  } catch (e) {
    document.getElementById('charts').textContent = 'cannot load the charts: ' + e;
    setTimeout(refresh, 5000);
  }
}
refresh();
</script>)JS";

std::string ConsoleHtml(const StatusSources& s) {
  std::string body = StrCat("<p>", HtmlEscape(s.command_line),
                            "</p><h2>The last hour</h2><div id=charts class=grid>loading…</div>");
  // The hottest groups, each linking to its page.
  for (Datacenter* dc : s.datacenters) {
    if (dc->replication() == nullptr) continue;
    std::string rows;
    for (const auto& g : dc->replication()->HottestGroups(10, /*by_conflicts=*/false))
      rows +=
          StrCat("<tr><td>", HtmlEscape(g.group.table()),
                 "<td><a href=\"/console/group?table=", HtmlEscape(g.group.table()),
                 "&root=", ToHex(g.group.root()), "\">", HtmlEscape(EscapeBytes(g.group.root())),
                 "</a><td>", g.writes, "<td>", g.conflicts, "<td>", g.position);
    body += StrCat("<h2>Busiest entity groups at ", HtmlEscape(dc->options().name), "</h2>",
                   rows.empty() ? "<p class=empty>no Paxos traffic yet</p>"
                                : StrCat("<table><tr><th>table<th>root row<th>writes<th>conflicts"
                                         "<th>log position",
                                         rows, "</table>"));
  }
  // The event log, newest first.
  std::vector<std::string> events = RecentEvents();
  std::string rows;
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    // "YYYY-MM-DD HH:MM:SS.mmm level text"
    const std::string& line = *it;
    const size_t level_at = line.find(' ', 11) + 1;
    const size_t text_at = line.find(' ', level_at);
    if (level_at == 0 || text_at == std::string::npos) continue;
    std::string level = line.substr(level_at, text_at - level_at);
    rows += StrCat("<tr class=", HtmlEscape(level), "><td>", HtmlEscape(line.substr(0, 23)),
                   " UTC<td>", level == "info" ? "event" : HtmlEscape(level), "<td>",
                   HtmlEscape(line.substr(text_at + 1)));
  }
  body += StrCat("<h2>Event log</h2>",
                 rows.empty()
                     ? "<p class=empty>no operator actions, warnings or errors yet</p>"
                     : StrCat("<table id=events><tr><th>time<th>kind<th>what", rows, "</table>"));
  return Page("megastored console", body + kChartsScript);
}

std::string GroupHtml(const StatusSources& s, const std::string& table, const std::string& root) {
  std::string body = StrCat("<h2>Entity group</h2><table><tr><th>table<td>", HtmlEscape(table),
                            "<tr><th>root row<td>", HtmlEscape(EscapeBytes(root)),
                            "<tr><th>root row (hex)<td>", ToHex(root), "</table>");
  Datacenter* via = s.datacenters.empty() ? nullptr : s.datacenters.front();
  if (via == nullptr) return Page("entity group", body + "<p>no datacenter runs here</p>");
  replication::StateRequest req;
  req.mutable_group()->set_table(table);
  req.mutable_group()->set_root(root);
  std::string rows;
  for (const replication::ReplicaInfo& r : ReplicasOf(s.config)) {
    absl::StatusOr<std::string> raw = CallAndWait(via->outbound(), r.replication, "repl.State",
                                                  req.SerializeAsString(), absl::Seconds(2));
    replication::StateReply st;
    if (raw.ok() && !st.ParseFromString(*raw)) raw = absl::DataLossError("unreadable reply");
    if (!raw.ok()) {
      rows += StrCat("<tr><td>", HtmlEscape(r.name), "<td colspan=5 class=error>",
                     HtmlEscape(raw.status().ToString()));
      continue;
    }
    rows += StrCat("<tr><td>", HtmlEscape(r.name), "<td>", TypeName(r.type), "<td>",
                   st.applied().position(), "<td>", st.top(), "<td>",
                   Time(st.applied().timestamp()), "<td>", st.cleaned());
  }
  body += StrCat(
      "<h2>Log positions at each replica</h2><table><tr><th>datacenter<th>type<th>applied<th>"
      "highest seen<th>last commit applied<th>cleaned up to",
      rows, "</table>");
  // Coordinators and activity of the datacenters running here.
  coordinator::CoordinatorRequest check;
  check.set_table(table);
  check.set_root(root);
  std::string coordinators, activity;
  std::set<std::string> shown;  // datacenters whose activity is in `activity`
  for (Datacenter* dc : s.datacenters) {
    if (dc->coordinator() != nullptr) {
      absl::StatusOr<std::string> raw = CallAndWait(dc->outbound(), dc->address(), "coord.Check",
                                                    check.SerializeAsString(), absl::Seconds(2));
      coordinator::CoordinatorReply c;
      if (raw.ok() && c.ParseFromString(*raw))
        coordinators += StrCat("<tr><td>", HtmlEscape(dc->options().name), "<td>",
                               c.valid() ? "valid: current reads are local"
                                         : "not valid: the next current read asks a majority",
                               "<td>", c.epoch());
      else
        coordinators += StrCat("<tr><td>", HtmlEscape(dc->options().name), "<td colspan=2>",
                               HtmlEscape(raw.ok() ? "unreadable" : raw.status().ToString()));
    }
    if (dc->replication() != nullptr) {
      for (bool by_conflicts : {false, true})
        for (const auto& g : dc->replication()->HottestGroups(100, by_conflicts))
          if (g.group.table() == table && g.group.root() == root) {
            if (!shown.insert(dc->options().name).second) break;  // in both lists
            activity += StrCat("<tr><td>", HtmlEscape(dc->options().name), "<td>", g.writes, "<td>",
                               g.conflicts, "<td>", g.position);
            break;
          }
    }
  }
  if (!coordinators.empty())
    body += StrCat("<h2>Coordinator</h2><table><tr><th>datacenter<th>state<th>epoch", coordinators,
                   "</table>");
  body += StrCat("<h2>Writers and conflicts here</h2>",
                 activity.empty()
                     ? "<p class=empty>not among the 100 busiest groups of this process</p>"
                     : StrCat("<table><tr><th>datacenter<th>values accepted<th>requests refused "
                              "(conflicts)<th>highest position asked about",
                              activity, "</table>"));
  return Page("entity group", body);
}

std::string TabletsHtml(const StatusSources& s) {
  std::string body;
  for (Datacenter* dc : s.datacenters) {
    body += StrCat("<h2>Bigtable of ", HtmlEscape(dc->options().name), "</h2>");
    if (dc->tablets() == nullptr) {
      body += dc->cell_client() != nullptr
                  ? StrCat("<p>a cell (", HtmlEscape(dc->options().cell),
                           "): its master and tablet servers are processes of their own; "
                           "<code>msadmin cell status</code> and <code>msadmin cell ls</code> "
                           "show them</p>")
                  : "<p>its tablet server runs in another process</p>";
      continue;
    }
    std::string rows;
    for (const auto& t : dc->tablets()->ListTablets())
      rows += StrCat("<tr><td>", HtmlEscape(t.table()), "<td>", HtmlEscape(t.id()), "<td>",
                     HtmlEscape(EscapeBytes(t.start_row())), "<td>",
                     t.end_row().empty() ? "(end)" : HtmlEscape(EscapeBytes(t.end_row())), "<td>",
                     t.loaded() ? "serving" : "unloaded");
    body += StrCat("<p>tablet server at ", HtmlEscape(dc->address()),
                   "</p><table><tr><th>table<th>tablet<th>start row<th>end row<th>state", rows,
                   "</table>");
  }
  return Page("tablets", body.empty() ? "<p>no datacenter runs here</p>" : body);
}

}  // namespace

std::map<std::string, double> ParseMetrics(std::string_view text,
                                           const std::vector<std::string>& prefixes,
                                           size_t max_series) {
  std::map<std::string, double> out;
  for (size_t at = 0; at < text.size() && out.size() < max_series;) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos || space == 0) continue;
    const std::string_view key = line.substr(0, space);
    bool wanted = false;
    for (const std::string& p : prefixes)
      if (key.substr(0, key.find('{')) == p) wanted = true;
    double v = 0;
    if (!wanted || !absl::SimpleAtod(ToAbsl(line.substr(space + 1)), &v)) continue;
    out[std::string(key)] = v;
  }
  return out;
}

MetricsHistory::MetricsHistory(std::function<std::string()> metrics, absl::Duration interval,
                               size_t keep)
    : metrics_(std::move(metrics)), interval_(interval), keep_(std::max<size_t>(keep, 2)) {}

MetricsHistory::~MetricsHistory() { Stop(); }

void MetricsHistory::Start() {
  thread_ = std::thread([this] {
    do SampleNow();
    while (!stop_.WaitForNotificationWithTimeout(interval_));
  });
}

void MetricsHistory::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

void MetricsHistory::SampleNow() {
  Sample s;
  s.unix_micros = absl::ToUnixMicros(absl::Now());
  s.values = ParseMetrics(metrics_(), ChartedMetrics());
  absl::MutexLock lock(&mu_);
  if (ring_.size() < keep_) {
    ring_.push_back(std::move(s));
  } else {
    ring_[next_] = std::move(s);
    next_ = (next_ + 1) % keep_;
  }
}

std::vector<MetricsHistory::Sample> MetricsHistory::Samples() const {
  absl::MutexLock lock(&mu_);
  std::vector<Sample> out(ring_.begin() + static_cast<ptrdiff_t>(next_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<ptrdiff_t>(next_));
  return out;
}

std::string ChartsJson(const std::vector<MetricsHistory::Sample>& all) {
  // At most kMaxPoints samples (every k-th, the newest kept): a chart
  // needs no more points than it has pixels.
  constexpr size_t kMaxPoints = 360;
  std::vector<MetricsHistory::Sample> thinned;
  const std::vector<MetricsHistory::Sample>* chosen = &all;
  if (all.size() > kMaxPoints) {
    const size_t step = (all.size() + kMaxPoints - 1) / kMaxPoints;
    for (size_t i = (all.size() - 1) % step; i < all.size(); i += step) thinned.push_back(all[i]);
    chosen = &thinned;
  }
  const std::vector<MetricsHistory::Sample>& samples = *chosen;
  std::vector<Chart> charts;
  {
    Chart c{"Commits", "per second", Rates(samples, "megastore_log_entries_total", "accepted")};
    for (Line& l : Rates(samples, "megastore_client_commits_total")) c.lines.push_back(l);
    charts.push_back(std::move(c));
  }
  {
    Chart c{"Conflicts", "per second",
            Rates(samples, "megastore_replication_conflicts_total", "refused")};
    for (Line& l : Rates(samples, "megastore_client_retries_total", "retried"))
      c.lines.push_back(l);
    charts.push_back(std::move(c));
  }
  {
    Chart c{"Latency", "ms", Quantiles(samples, "megastore_replication_paxos_seconds")};
    for (Line& l : Quantiles(samples, "megastore_client_commit_seconds")) {
      l.name = StrCat("commit ", l.name);
      c.lines.push_back(l);
    }
    charts.push_back(std::move(c));
  }
  charts.push_back({"Current reads answered locally", "%", LocalReads(samples)});
  charts.push_back({"Round trips between datacenters", "ms",
                    Gauges(samples, "megastore_datacenter_rtt_seconds", 1000)});
  charts.push_back({"Replication lag: groups behind", "groups",
                    Gauges(samples, "megastore_replication_groups_behind", 1)});
  charts.push_back(
      {"Reads served", "per second", Rates(samples, "megastore_replication_reads_total")});
  double interval = 10;
  if (samples.size() >= 2)
    interval = Seconds(samples.back()) - Seconds(samples[samples.size() - 2]);
  std::string out;
  for (const Chart& c : charts) out += StrCat(out.empty() ? "" : ",", ChartJson(c));
  return fmt::format("{{\"interval\":{:.3f},\"charts\":[{}]}}\n", interval, out);
}

void AddConsole(http::HttpServer& server, std::shared_ptr<const StatusSources> sources,
                absl::Duration sample_interval) {
  const size_t keep = static_cast<size_t>(
      std::clamp<int64_t>(absl::ToInt64Seconds(absl::Hours(1)) /
                              std::max<int64_t>(1, absl::ToInt64Seconds(sample_interval)),
                          2, 3600));
  auto history = std::shared_ptr<MetricsHistory>(
      new MetricsHistory([sources] { return MetricsText(*sources); }, sample_interval, keep));
  history->Start();
  server.Handle("/console", [sources] {
    return http::Response{200, "text/html; charset=utf-8", ConsoleHtml(*sources), {}};
  });
  // Computed on a worker, not on the I/O thread /metrics is served from.
  server.HandleRequests("/console/charts.json", [history](const http::Request& req) {
    if (req.method != "GET" && req.method != "HEAD")
      return http::MethodNotAllowed(req.path, "GET, HEAD");
    return http::Response{200, "application/json", ChartsJson(history->Samples()), {}};
  });
  server.Handle("/console/tablets", [sources] {
    return http::Response{200, "text/html; charset=utf-8", TabletsHtml(*sources), {}};
  });
  // Asks replicas and coordinators: on a worker thread.
  server.HandleRequests("/console/group", [sources](const http::Request& req) {
    if (req.method != "GET" && req.method != "HEAD")
      return http::MethodNotAllowed(req.path, "GET, HEAD");
    const std::string table = QueryValue(req.query, "table");
    const std::optional<std::string> root = FromHex(QueryValue(req.query, "root"));
    if (table.empty() || table.size() > 256 || !root.has_value() || root->size() > 4096)
      return http::JsonErrorResponse(
          400, "INVALID_ARGUMENT",
          "/console/group?table=TABLE&root=HEX: a table name (up to 256 bytes) and the group's "
          "root row in hex (up to 4096 bytes)");
    return http::Response{200, "text/html; charset=utf-8", GroupHtml(*sources, table, *root), {}};
  });
}

}  // namespace megastore::server
