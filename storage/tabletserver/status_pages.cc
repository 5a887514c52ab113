#include "storage/tabletserver/status_pages.h"

#include "base/http/http_server.h"
#include "base/strings.h"
#include "base/tls/context.h"

namespace megastore::storage {
namespace {

// Table names and rows may hold any bytes: unprintable ones as \xNN.
std::string Html(std::string_view s) {
  std::string printable;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      printable += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      printable.push_back(c);
    }
  }
  return HtmlEscape(printable);
}

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return StrCat(b, " B");
}

}  // namespace

std::string StatusHtml(TabletServer& server, const rpc::RpcServer& rpc, const StatusContext& ctx) {
  const TabletServerStats stats = server.Stats();
  const auto errors = server.load_errors();
  std::string h =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>megastored: tablet server</title>"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:4px "
      "8px;text-align:left}.err{color:#b00}</style></head><body>";
  h += "<h1>megastored &mdash; tablet server</h1>";
  h += StrCat("<p>Role: <b>tablet</b> &middot; RPC: ", Html(ctx.listen),
              " &middot; data: ", Html(server.options().data_dir), " &middot; up ",
              (ctx.now_micros - ctx.started_micros) / 1000000, " s</p>");
  h += StrCat("<p>Command line: <code>", Html(ctx.command_line), "</code></p>");
  if (const std::string tls = tls::TlsStatusText(); !tls.empty())
    h += StrCat("<h2>TLS</h2><pre>", HtmlEscape(tls), "</pre>");
  h += "<h2>Tables and "
       "tablets</h2><table><tr><th>table</th><th>tablet</th><th>rows</th><th>size</th><th>state</"
       "th></tr>";
  for (const TabletEntry& e : server.ListTablets()) {
    uint64_t size = 0;
    for (const auto& t : stats.per_tablet) {
      if (t.entry.id() == e.id()) size = t.size_bytes;
    }
    auto err = errors.find(e.id());
    const std::string state =
        err != errors.end()
            ? StrCat("<span class=\"err\">not loaded: ", Html(err->second), "</span>")
            : (e.loaded() ? "serving" : "unloaded");
    h += StrCat("<tr><td>", Html(e.table()), "</td><td>", Html(e.id()), "</td><td>[",
                Html(e.start_row()), ", ", e.end_row().empty() ? "end" : Html(e.end_row()),
                ")</td><td>", Bytes(size), "</td><td>", state, "</td></tr>");
  }
  h += "</table>";
  const auto rs = rpc.stats();
  h += "<h2>Commit log</h2><table>";
  h += StrCat("<tr><td>records</td><td>", stats.log.records, "</td></tr>");
  h += StrCat("<tr><td>bytes</td><td>", Bytes(stats.log.bytes), "</td></tr>");
  h += StrCat("<tr><td>group commits (syncs)</td><td>", stats.log.syncs, "</td></tr>");
  h += StrCat("<tr><td>records per sync (mean / max)</td><td>",
              stats.log.syncs
                  ? fmt::format("{:.2f}", static_cast<double>(stats.log.records) / stats.log.syncs)
                  : "-",
              " / ", stats.log.max_batch_records, "</td></tr>");
  h += StrCat("<tr><td>groups written by a waiting appender</td><td>", stats.log.appender_groups,
              "</td></tr>");
  h += StrCat("<tr><td>segments</td><td>", stats.log.segments, "</td></tr></table>");
  h += "<h2>Reads, writes and caches</h2><table>";
  const TabletStats& t = stats.tablets;
  h += StrCat("<tr><td>rows read / cells read</td><td>", t.rows_read, " / ", t.cells_read,
              "</td></tr>");
  h += StrCat("<tr><td>rows mutated / bytes written</td><td>", t.rows_mutated, " / ",
              Bytes(t.bytes_written), "</td></tr>");
  h += StrCat("<tr><td>block cache hits / misses</td><td>", t.block_cache_hits, " / ",
              t.block_cache_misses, "</td></tr>");
  h += StrCat("<tr><td>row cache hits / misses</td><td>", t.row_cache_hits, " / ",
              t.row_cache_misses, "</td></tr>");
  h += StrCat("<tr><td>bloom filter saves</td><td>", t.bloom_useful, "</td></tr>");
  h += StrCat("<tr><td>RPC connections open / accepted</td><td>", rs.connections_open, " / ",
              rs.connections_accepted, "</td></tr>");
  h += StrCat("<tr><td>RPC calls / bad frames</td><td>", rs.calls, " / ", rs.bad_frames,
              "</td></tr></table>");
  h += "<p><a href=\"/metrics\">/metrics</a></p></body></html>";
  return h;
}

std::string MetricsText(TabletServer& server, const rpc::RpcServer& rpc,
                        const ServiceMetrics& metrics) {
  const TabletServerStats s = server.Stats();
  std::string m = metrics.PrometheusText();
  auto counter = [&](std::string_view name, std::string_view help, uint64_t v) {
    m += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v, "\n");
  };
  auto gauge = [&](std::string_view name, std::string_view help, uint64_t v) {
    m += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ", v, "\n");
  };
  counter("megastore_commitlog_records_total", "Records appended to the commit log.",
          s.log.records);
  counter("megastore_commitlog_bytes_total", "Bytes appended to the commit log.", s.log.bytes);
  counter("megastore_commitlog_syncs_total", "Group commits (write + fdatasync rounds).",
          s.log.syncs);
  counter("megastore_commitlog_appender_groups_total",
          "Group commits written by the appending thread itself (the log writer was idle).",
          s.log.appender_groups);
  gauge("megastore_commitlog_segments", "Commit log segment files.", s.log.segments);
  m += "# HELP megastore_commitlog_batch_records Records per group commit.\n"
       "# TYPE megastore_commitlog_batch_records histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < s.log.batch_histogram.size(); ++i) {
    cumulative += s.log.batch_histogram[i];
    const uint64_t le = (uint64_t{2} << i) - 1;
    if (i + 1 < s.log.batch_histogram.size()) {
      m += StrCat("megastore_commitlog_batch_records_bucket{le=\"", le, "\"} ", cumulative, "\n");
    }
  }
  m += StrCat("megastore_commitlog_batch_records_bucket{le=\"+Inf\"} ", cumulative, "\n");
  m += StrCat("megastore_commitlog_batch_records_sum ", s.log.records, "\n");
  m += StrCat("megastore_commitlog_batch_records_count ", s.log.syncs, "\n");
  counter("megastore_rows_read_total", "Rows returned by reads.", s.tablets.rows_read);
  counter("megastore_cells_read_total", "Cells returned by reads.", s.tablets.cells_read);
  counter("megastore_rows_mutated_total", "Row mutations applied.", s.tablets.rows_mutated);
  counter("megastore_bytes_written_total", "Key and value bytes written to tablets.",
          s.tablets.bytes_written);
  counter("megastore_block_cache_hits_total", "Block cache hits.", s.tablets.block_cache_hits);
  counter("megastore_block_cache_misses_total", "Block cache misses.",
          s.tablets.block_cache_misses);
  counter("megastore_row_cache_hits_total", "Row cache hits.", s.tablets.row_cache_hits);
  counter("megastore_row_cache_misses_total", "Row cache misses.", s.tablets.row_cache_misses);
  counter("megastore_bloom_filter_useful_total", "SSTable reads avoided by bloom filters.",
          s.tablets.bloom_useful);
  counter("megastore_major_compactions_total", "Major compactions.", s.tablets.major_compactions);
  counter("megastore_tablet_splits_total", "Tablet splits.", s.tablets.splits);
  m += "# HELP megastore_tablet_size_bytes Approximate size of each tablet.\n"
       "# TYPE megastore_tablet_size_bytes gauge\n";
  for (const auto& t : s.per_tablet) {
    m += StrCat("megastore_tablet_size_bytes{table=\"", t.entry.table(), "\",tablet=\"",
                t.entry.id(), "\"} ", t.size_bytes, "\n");
  }
  m += rpc::ServerStatsMetrics({{"", rpc.stats()}});
  m += http::ProcessStatsMetrics();
  m += tls::TlsMetrics();
  return m;
}

}  // namespace megastore::storage
