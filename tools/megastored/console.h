// megastored's status console (/console): charts of the last hour, drawn
// from samples of this process's own /metrics (the source of truth: the
// console only keeps and differentiates what /metrics says), an entity
// group's page, the tablets this process serves, and the event log.
// Everything is served from the status server; no page loads anything
// from elsewhere. docs/operations.md describes the pages.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/http/http_server.h"
#include "tools/megastored/status.h"

namespace megastore::server {

// The samples of a Prometheus text exposition whose metric name starts with
// one of `prefixes`: "name{labels}" -> value. Comments and lines that do
// not parse are skipped; at most `max_series` are kept.
std::map<std::string, double> ParseMetrics(std::string_view text,
                                           const std::vector<std::string>& prefixes,
                                           size_t max_series = 2000);

// /metrics sampled every `interval`, the last `keep` samples kept (a ring).
class MetricsHistory {
 public:
  struct Sample {
    int64_t unix_micros = 0;
    std::map<std::string, double> values;
  };
  MetricsHistory(std::function<std::string()> metrics, absl::Duration interval, size_t keep);
  ~MetricsHistory();  // Stop()s
  void Start();       // samples now, then every interval on its own thread
  void Stop();
  void SampleNow();
  std::vector<Sample> Samples() const;

 private:
  const std::function<std::string()> metrics_;
  const absl::Duration interval_;
  const size_t keep_;
  mutable absl::Mutex mu_;
  std::vector<Sample> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread thread_;
};

// The console's charts from `samples` (oldest first), as JSON:
// {"interval":S,"charts":[{"title","unit","lines":[{"name","points":[[unix_s,y],...]}]}]}.
// Counters become rates between consecutive samples, histograms p50/p99.
std::string ChartsJson(const std::vector<MetricsHistory::Sample>& samples);

// Adds /console (charts, hottest groups, event log), /console/charts.json,
// /console/group?table=T&root=HEX and /console/tablets to `server`, with
// a history sampled every `sample_interval` (one hour of samples kept).
// The history lives as long as the server's handlers.
void AddConsole(http::HttpServer& server, std::shared_ptr<const StatusSources> sources,
                absl::Duration sample_interval);

}  // namespace megastore::server
