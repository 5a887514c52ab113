// The local applies of a client's commits acknowledged before their apply
// at its own replica finished (docs/replication.md, "Writing", step 5):
// the client's reads of a group wait for those under way, so it reads its
// own writes without catching its replica up.
#include <algorithm>
#include <memory>
#include <utility>

#include "replication/client_calls.h"

namespace megastore::replication {

uint64_t GroupClient::BeginLocalApply(const std::string& root) {
  absl::MutexLock lock(&applies_mu_);
  LocalApplies& a = local_applies_[root];
  const uint64_t seq = a.next++;
  a.in_flight.insert(seq);
  ++applies_in_flight_;
  return seq;
}

void GroupClient::EndLocalApply(const std::string& root, uint64_t seq, uint64_t position,
                                const absl::Status& applied) {
  std::vector<absl::AnyInvocable<void(uint64_t)>> ready;
  std::vector<std::shared_ptr<absl::Notification>> drained;
  uint64_t behind = 0;
  {
    absl::MutexLock lock(&applies_mu_);
    auto it = local_applies_.find(root);
    if (it == local_applies_.end() || it->second.in_flight.erase(seq) == 0) return;
    if (--applies_in_flight_ == 0) drained.swap(drained_);
    LocalApplies& a = it->second;
    if (!applied.ok()) {
      a.behind = std::max(a.behind, position);
    } else if (position >= a.behind) {
      a.behind = 0;  // applied at least that far
    }
    behind = a.behind;
    // A waiter for the applies begun before `upto` is done once none of
    // those is in flight.
    const uint64_t oldest = a.in_flight.empty() ? a.next : *a.in_flight.begin();
    auto& ws = a.waiters;
    for (auto w = ws.begin(); w != ws.end();) {
      if (w->upto > oldest) {
        ++w;
        continue;
      }
      ready.push_back(std::move(w->fn));
      w = ws.erase(w);
    }
    if (a.in_flight.empty() && ws.empty() && a.behind == 0) local_applies_.erase(it);
  }
  for (auto& fn : ready) fn(behind);
  for (auto& n : drained) n->Notify();
}

void GroupClient::AfterLocalApplies(const std::string& root, int64_t deadline,
                                    absl::AnyInvocable<void(uint64_t behind)> fn) {
  // Run once, by whichever comes first: the applies ending, or the
  // deadline's timer (cancelled when the applies end first).
  struct Once {
    GroupClient* c;
    absl::Mutex mu;
    absl::AnyInvocable<void(uint64_t)> fn ABSL_GUARDED_BY(mu);
    std::optional<Env::TimerId> timer ABSL_GUARDED_BY(mu);
    void Run(uint64_t behind, bool from_timer) {
      absl::AnyInvocable<void(uint64_t)> f;
      std::optional<Env::TimerId> t;
      {
        absl::MutexLock lock(&mu);
        f = std::exchange(fn, nullptr);
        t = std::exchange(timer, std::nullopt);
      }
      if (t && !from_timer) c->env()->Cancel(*t);
      if (f) f(behind);
    }
  };
  // Usually nothing is in flight: no allocation, no timer.
  std::shared_ptr<Once> once;
  uint64_t behind = 0;
  {
    absl::MutexLock lock(&applies_mu_);
    auto it = local_applies_.find(root);
    if (it != local_applies_.end()) {
      behind = it->second.behind;
      if (!it->second.in_flight.empty()) {
        once = std::make_shared<Once>();
        once->c = this;
        {
          absl::MutexLock l(&once->mu);
          once->fn = std::move(fn);
        }
        it->second.waiters.push_back(
            {it->second.next, [once](uint64_t b) { once->Run(b, /*from_timer=*/false); }});
      }
    }
  }
  if (once == nullptr) return fn(behind);
  const Env::TimerId timer =
      env_->Schedule(absl::Microseconds(std::max<int64_t>(0, deadline - env_->MonotonicMicros())),
                     [this, life = lifetime_, weak = std::weak_ptr<Once>(once), root] {
                       Entry entry(life);
                       std::shared_ptr<Once> once = weak.lock();
                       if (!entry || once == nullptr) return;
                       uint64_t b = 0;
                       {
                         absl::MutexLock lock(&applies_mu_);
                         if (auto it = local_applies_.find(root); it != local_applies_.end())
                           b = it->second.behind;
                       }
                       once->Run(b, /*from_timer=*/true);
                     });
  {
    absl::MutexLock l(&once->mu);
    if (once->fn) {
      once->timer = timer;
      return;
    }
  }
  env_->Cancel(timer);  // it already ran: the timer has nothing to do
}

void GroupClient::LocalBehind(const std::string& root, uint64_t position) {
  absl::MutexLock lock(&applies_mu_);
  LocalApplies& a = local_applies_[root];
  a.behind = std::max(a.behind, position);
}

void GroupClient::LocalCaughtUp(const std::string& root, uint64_t position) {
  absl::MutexLock lock(&applies_mu_);
  auto it = local_applies_.find(root);
  if (it == local_applies_.end() || it->second.behind > position) return;
  it->second.behind = 0;
  if (it->second.in_flight.empty() && it->second.waiters.empty()) local_applies_.erase(it);
}

void GroupClient::AwaitLocalApplies(absl::Duration at_most) {
  auto drained = std::make_shared<absl::Notification>();
  {
    absl::MutexLock lock(&applies_mu_);
    if (applies_in_flight_ == 0) return;
    drained_.push_back(drained);
  }
  env_->WaitFor(*drained, at_most);
}

}  // namespace megastore::replication
