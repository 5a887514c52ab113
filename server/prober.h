// LatencyProber: measures the round trip from this datacenter to each of
// the others — a dc.Status request every `interval` through the transport
// the datacenter's own servers use (so an emulated WAN is included) — for
// the status pages' inter-datacenter latencies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/env.h"
#include "base/transport.h"

namespace megastore::server {

class LatencyProber {
 public:
  struct Target {
    std::string datacenter;
    std::string address;  // any of its processes: each answers dc.Status
  };
  struct Result {
    std::string datacenter;
    uint64_t probes = 0, failures = 0;
    bool reachable = false;  // the last probe was answered
    double last_ms = 0, min_ms = 0,
           average_ms = 0;  // average: exponentially weighted, over answered probes
    std::string error;      // why the last probe failed
  };

  // `env` and `transport` must outlive the prober's Stop().
  LatencyProber(Env* env, Transport* transport, std::vector<Target> targets,
                absl::Duration interval = absl::Seconds(2));
  ~LatencyProber();
  void Start();
  // No probe starts after Stop returns; answers still on their way are dropped.
  void Stop();
  std::vector<Result> Results() const;
  // The targets whose last probe was answered, nearest first (by average
  // round trip; ties in the targets' order).
  std::vector<std::string> Nearest() const;
  // Whether every target has been probed at least once (answered or not).
  bool ProbedAll() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace megastore::server
