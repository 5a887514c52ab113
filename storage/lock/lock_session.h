// LockSession: a lock-service session kept alive, and the holder's own
// judgement of whether it still lives. A tablet server's servers file and
// the master's lock are ephemeral files of such a session; the holder must
// stop acting on them (stop serving tablets, stop being the master) as soon
// as it cannot be sure the session lives — before the lock service could
// have ended it and let someone else take over (Bigtable §5.2).
//
// The rule: the session surely lives until `ttl` after the *sending* of the
// last renewal that succeeded (the service renews from when it receives it,
// which is later), shortened by the clock-drift margin (lease.h). So
// `on_lost` runs no later than the service's own expiry, however the
// messages are delayed or lost and however the two clocks drift.
#pragma once

#include <functional>
#include <memory>

#include "base/env.h"
#include "storage/lock/lock_service.h"

namespace megastore::storage::lock {

class LockSession {
 public:
  // `service` and `env` must outlive the session. Renewals go every
  // `ttl / 3`. `on_lost` runs once (on a timer or callback thread) when the
  // session can no longer be relied on: renewals failed for `ttl`, or the
  // service said it has ended.
  LockSession(LockService* service, Env* env, absl::Duration ttl,
              std::function<void(const absl::Status&)> on_lost);
  ~LockSession();  // Close()

  // Opens the session and starts renewing; `done` gets its id.
  void Start(LockService::Callback<absl::StatusOr<SessionId>> done);
  // True while the session surely lives.
  bool alive() const;
  SessionId id() const;
  // Stops renewing and closes it at the service (its ephemeral files go);
  // `on_lost` does not run after this.
  void Close();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace megastore::storage::lock
