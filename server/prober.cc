#include "server/prober.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "server/datacenter.pb.h"

namespace megastore::server {

struct LatencyProber::State {
  Env* env;
  Transport* transport;
  std::vector<Target> targets;
  absl::Duration interval;

  // Starting probes and stopping exclude each other; results have their own
  // lock because an answer may arrive inside Transport::Call.
  absl::Mutex run_mu;
  bool running ABSL_GUARDED_BY(run_mu) = false;
  Env::TimerId timer ABSL_GUARDED_BY(run_mu) = 0;
  mutable absl::Mutex results_mu;
  std::vector<Result> results ABSL_GUARDED_BY(results_mu);

  static void Tick(const std::shared_ptr<State>& self) {
    absl::MutexLock lock(&self->run_mu);
    if (!self->running) return;
    for (size_t i = 0; i < self->targets.size(); ++i) {
      const int64_t start = self->env->MonotonicMicros();
      self->transport->Call(
          self->targets[i].address, "dc.Status", DatacenterStatusRequest().SerializeAsString(),
          absl::Seconds(2), [self, i, start](absl::StatusOr<std::string> reply) {
            self->Record(i, reply.status(),
                         static_cast<double>(self->env->MonotonicMicros() - start) / 1000.0);
          });
    }
    std::weak_ptr<State> weak = self;
    self->timer = self->env->Schedule(self->interval, [weak] {
      if (auto s = weak.lock()) Tick(s);
    });
  }

  void Record(size_t i, const absl::Status& status, double ms) {
    absl::MutexLock lock(&results_mu);
    Result& r = results[i];
    r.probes++;
    r.reachable = status.ok();
    if (!status.ok()) {
      r.failures++;
      r.error = std::string(status.message());
      return;
    }
    r.error.clear();
    r.last_ms = ms;
    const bool first = r.probes - r.failures == 1;
    r.min_ms = first ? ms : std::min(r.min_ms, ms);
    r.average_ms = first ? ms : 0.8 * r.average_ms + 0.2 * ms;
  }
};

LatencyProber::LatencyProber(Env* env, Transport* transport, std::vector<Target> targets,
                             absl::Duration interval)
    : state_(std::make_shared<State>()) {
  state_->env = env;
  state_->transport = transport;
  state_->interval = interval;
  for (const Target& t : targets) {
    Result r;
    r.datacenter = t.datacenter;
    state_->results.push_back(r);
  }
  state_->targets = std::move(targets);
}

LatencyProber::~LatencyProber() { Stop(); }

void LatencyProber::Start() {
  {
    absl::MutexLock lock(&state_->run_mu);
    if (state_->running) return;
    state_->running = true;
  }
  State::Tick(state_);
}

void LatencyProber::Stop() {
  absl::MutexLock lock(&state_->run_mu);
  state_->running = false;
  if (state_->timer != 0) state_->env->Cancel(state_->timer);
  state_->timer = 0;
}

std::vector<LatencyProber::Result> LatencyProber::Results() const {
  absl::MutexLock lock(&state_->results_mu);
  return state_->results;
}

std::vector<std::string> LatencyProber::Nearest() const {
  std::vector<Result> results = Results();
  std::stable_sort(results.begin(), results.end(),
                   [](const Result& a, const Result& b) { return a.average_ms < b.average_ms; });
  std::vector<std::string> out;
  for (const Result& r : results)
    if (r.reachable) out.push_back(r.datacenter);
  return out;
}

bool LatencyProber::ProbedAll() const {
  absl::MutexLock lock(&state_->results_mu);
  for (const Result& r : state_->results)
    if (r.probes == 0) return false;
  return true;
}

}  // namespace megastore::server
