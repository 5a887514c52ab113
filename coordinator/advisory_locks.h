// Advisory locks on entity groups, served by a coordinator (see docs/transactions.md:
// when many writers share one group, serializing them up front is cheaper
// than letting all but one lose the Paxos race and retry).
//
// One lock per group, granted in request order. A grant lasts at most its
// lease, so a writer that died does not stall the group for longer; a
// request queues at most its wait and is then answered "not granted" — the
// writer goes ahead without the lock. Nothing depends on the lock for
// correctness: it only spares the group's writers conflicts.
//
// Lives in one process (the coordinator's); a restart forgets every lock,
// which is safe for the same reason.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/lifetime.h"
#include "base/transport.h"

namespace megastore::coordinator {

class AdvisoryLocks {
 public:
  // Longest wait and lease a request may ask for.
  static constexpr absl::Duration kMaxWait = absl::Seconds(30);
  static constexpr absl::Duration kMaxLease = absl::Seconds(60);

  explicit AdvisoryLocks(Env* env) : env_(env) {}
  ~AdvisoryLocks();

  // Serves coord.Lock and coord.Unlock (AdvisoryLockRequest).
  void Serve(std::string_view method, std::string request, Responder respond);

  // Writers holding or waiting for `key`'s lock (for tests and status).
  size_t Waiting(const std::string& key);
  std::string Holder(const std::string& key);

 private:
  struct Waiter {
    std::string owner;
    absl::Duration lease;
    Responder respond;
    Env::TimerId timer = 0;
    uint64_t id = 0;
  };
  struct Lock {
    std::string holder;  // empty: free
    uint64_t grant = 0;  // which grant the lease timer belongs to
    Env::TimerId lease_timer = 0;
    std::deque<Waiter> waiters;
  };
  // Hands `key`'s free lock to the first waiter; returns the responder to
  // answer (outside the mutex) and the reply.
  void GrantNextLocked(const std::string& key, std::vector<std::pair<Responder, std::string>>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GiveUp(const std::string& key, uint64_t waiter_id);
  void Expire(const std::string& key, uint64_t grant);

  Env* const env_;
  absl::Mutex mu_;
  std::map<std::string, Lock> locks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();  // entered by the timers
};

}  // namespace megastore::coordinator
