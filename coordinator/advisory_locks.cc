#include "coordinator/advisory_locks.h"

#include <utility>
#include <vector>

#include "base/strings.h"
#include "coordinator/coordinator.pb.h"

namespace megastore::coordinator {

namespace {

std::string Reply(bool granted, size_t waiting) {
  AdvisoryLockReply r;
  r.set_granted(granted);
  r.set_waiting(static_cast<uint32_t>(waiting));
  return r.SerializeAsString();
}

}  // namespace

AdvisoryLocks::~AdvisoryLocks() {
  // A wait or lease timer already popped off the timer queue (Cancel cannot
  // stop it) finds the locks gone.
  life_->End();
  std::vector<Responder> dropped;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (auto& [key, l] : locks_) {
      if (l.lease_timer != 0) env_->Cancel(l.lease_timer);
      for (Waiter& w : l.waiters) {
        env_->Cancel(w.timer);
        dropped.push_back(std::move(w.respond));
      }
    }
    locks_.clear();
  }
  for (Responder& r : dropped) r(absl::UnavailableError("the coordinator is shutting down"));
}

void AdvisoryLocks::Serve(std::string_view method, std::string request, Responder respond) {
  AdvisoryLockRequest req;
  if (!req.ParseFromString(request) || req.table().empty() || req.root().empty() ||
      req.owner().empty()) {
    return respond(absl::InvalidArgumentError(
        StrCat(method, ": malformed request (needs a table, a root row and an owner)")));
  }
  const std::string key = StrCat(req.table(), "/", req.root());
  std::vector<std::pair<Responder, std::string>> answers;
  if (method == "coord.Lock") {
    const absl::Duration wait = std::min(absl::Milliseconds(req.wait_ms()), kMaxWait);
    const absl::Duration lease = std::min(absl::Milliseconds(req.lease_ms()), kMaxLease);
    if (lease <= absl::ZeroDuration())
      return respond(absl::InvalidArgumentError("coord.Lock: lease_ms must be positive"));
    absl::MutexLock lock(&mu_);
    if (closed_) return respond(absl::UnavailableError("the coordinator is shutting down"));
    Lock& l = locks_[key];
    if (l.holder == req.owner()) {
      // A repeated request (a retried RPC): it holds the lock already.
      answers.emplace_back(std::move(respond), Reply(true, l.waiters.size()));
    } else {
      Waiter w;
      w.owner = req.owner();
      w.lease = lease;
      w.respond = std::move(respond);
      w.id = ++next_id_;
      const uint64_t id = w.id;
      if (!l.holder.empty() || !l.waiters.empty()) {
        if (wait <= absl::ZeroDuration()) {
          answers.emplace_back(std::move(w.respond), Reply(false, l.waiters.size()));
        } else {
          w.timer = env_->Schedule(wait, [life = life_, this, key, id] {
            Lifetime::Run(life, [&] { GiveUp(key, id); });
          });
          l.waiters.push_back(std::move(w));
        }
      } else {
        l.waiters.push_back(std::move(w));
        GrantNextLocked(key, &answers);
      }
    }
  } else if (method == "coord.Unlock") {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(key);
    if (it != locks_.end() && it->second.holder == req.owner()) {
      Lock& l = it->second;
      l.holder.clear();
      if (l.lease_timer != 0) env_->Cancel(l.lease_timer);
      l.lease_timer = 0;
      answers.emplace_back(std::move(respond), Reply(true, l.waiters.size()));
      GrantNextLocked(key, &answers);
    } else {
      // Not held by it: its lease ran out, or a duplicate.
      answers.emplace_back(std::move(respond),
                           Reply(false, it == locks_.end() ? 0 : it->second.waiters.size()));
      // A waiter that gives up by unlocking leaves the queue.
      if (it != locks_.end()) {
        auto& q = it->second.waiters;
        for (auto w = q.begin(); w != q.end(); ++w) {
          if (w->owner != req.owner()) continue;
          env_->Cancel(w->timer);
          answers.emplace_back(std::move(w->respond), Reply(false, q.size() - 1));
          q.erase(w);
          break;
        }
      }
    }
  } else {
    return respond(absl::UnimplementedError(StrCat("coordinator has no method ", method)));
  }
  for (auto& [r, body] : answers) r(std::move(body));
}

void AdvisoryLocks::GrantNextLocked(const std::string& key,
                                    std::vector<std::pair<Responder, std::string>>* out) {
  auto it = locks_.find(key);
  if (it == locks_.end()) return;
  Lock& l = it->second;
  if (!l.holder.empty()) return;
  if (l.waiters.empty()) {
    locks_.erase(it);  // free and unwanted: forget it
    return;
  }
  Waiter w = std::move(l.waiters.front());
  l.waiters.pop_front();
  if (w.timer != 0) env_->Cancel(w.timer);
  l.holder = w.owner;
  l.grant = ++next_id_;  // unique across locks, so a stale lease timer never matches
  const uint64_t grant = l.grant;
  l.lease_timer = env_->Schedule(w.lease, [life = life_, this, key, grant] {
    Lifetime::Run(life, [&] { Expire(key, grant); });
  });
  out->emplace_back(std::move(w.respond), Reply(true, l.waiters.size()));
}

void AdvisoryLocks::GiveUp(const std::string& key, uint64_t waiter_id) {
  Responder respond;
  size_t left = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(key);
    if (it == locks_.end()) return;
    auto& q = it->second.waiters;
    for (auto w = q.begin(); w != q.end(); ++w) {
      if (w->id != waiter_id) continue;
      respond = std::move(w->respond);
      q.erase(w);
      left = q.size();
      break;
    }
  }
  if (respond) respond(Reply(false, left));
}

void AdvisoryLocks::Expire(const std::string& key, uint64_t grant) {
  std::vector<std::pair<Responder, std::string>> answers;
  {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(key);
    if (it == locks_.end() || it->second.grant != grant || it->second.holder.empty()) return;
    it->second.holder.clear();
    it->second.lease_timer = 0;
    GrantNextLocked(key, &answers);
  }
  for (auto& [r, body] : answers) r(std::move(body));
}

size_t AdvisoryLocks::Waiting(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = locks_.find(key);
  return it == locks_.end() ? 0 : it->second.waiters.size();
}

std::string AdvisoryLocks::Holder(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = locks_.find(key);
  return it == locks_.end() ? "" : it->second.holder;
}

}  // namespace megastore::coordinator
