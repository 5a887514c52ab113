#include "storage/lock/lock_session.h"

#include "absl/synchronization/mutex.h"
#include "base/strings.h"
#include "storage/lock/lease.h"

namespace megastore::storage::lock {

struct LockSession::State : std::enable_shared_from_this<State> {
  LockService* service;
  Env* env;
  absl::Duration ttl;
  std::function<void(const absl::Status&)> on_lost;

  mutable absl::Mutex mu;
  SessionId id ABSL_GUARDED_BY(mu) = 0;
  int64_t valid_until ABSL_GUARDED_BY(mu) = 0;  // Env monotonic micros
  bool over ABSL_GUARDED_BY(mu) = false;        // lost or closed: no more renewals or callbacks

  // Ends the session as lost (once) and tells the holder.
  void Lose(const absl::Status& why) {
    {
      absl::MutexLock lock(&mu);
      if (over) return;
      over = true;
    }
    on_lost(why);
  }

  void Renew() {
    SessionId session;
    bool expired;
    {
      absl::MutexLock lock(&mu);
      if (over) return;
      session = id;
      expired = env->MonotonicMicros() >= valid_until;
    }
    if (expired) return Check();
    std::weak_ptr<State> weak = shared_from_this();
    const int64_t sent = env->MonotonicMicros();
    service->KeepAlive(session, [weak, sent](absl::Status s) {
      auto self = weak.lock();
      if (self == nullptr) return;
      if (absl::IsNotFound(s)) return self->Lose(s);
      if (!s.ok()) return;  // the next tick retries, or finds the time up
      absl::MutexLock lock(&self->mu);
      self->valid_until =
          std::max(self->valid_until, sent + absl::ToInt64Microseconds(HolderLease(self->ttl)));
    });
    // Renew again in a third of the ttl; and look at the time exactly when it
    // would run out, in case every renewal until then fails.
    int64_t until;
    {
      absl::MutexLock lock(&mu);
      until = valid_until;
    }
    env->Schedule(ttl / 3, [weak] {
      if (auto self = weak.lock()) self->Renew();
    });
    const absl::Duration left = absl::Microseconds(until - env->MonotonicMicros());
    if (left > absl::ZeroDuration() && left < ttl / 3)
      env->Schedule(left, [weak] {
        if (auto self = weak.lock()) self->Check();
      });
  }

  void Check() {
    SessionId session;
    {
      absl::MutexLock lock(&mu);
      if (over || env->MonotonicMicros() < valid_until) return;
      session = id;
    }
    Lose(absl::UnavailableError(StrCat("lock service session ", session, " not renewed within its ",
                                       absl::FormatDuration(ttl))));
  }
};

LockSession::LockSession(LockService* service, Env* env, absl::Duration ttl,
                         std::function<void(const absl::Status&)> on_lost)
    : state_(std::make_shared<State>()) {
  state_->service = service;
  state_->env = env;
  state_->ttl = ttl;
  state_->on_lost = std::move(on_lost);
}

LockSession::~LockSession() { Close(); }

void LockSession::Start(LockService::Callback<absl::StatusOr<SessionId>> done) {
  std::weak_ptr<State> weak = state_;
  const int64_t sent = state_->env->MonotonicMicros();
  auto parked = std::make_shared<LockService::Callback<absl::StatusOr<SessionId>>>(std::move(done));
  state_->service->OpenSession(state_->ttl, [weak, sent, parked](absl::StatusOr<SessionId> id) {
    auto self = weak.lock();
    if (self == nullptr) return (*parked)(absl::CancelledError("the session was destroyed"));
    if (!id.ok()) return (*parked)(id.status());
    {
      absl::MutexLock lock(&self->mu);
      self->id = *id;
      self->valid_until = sent + absl::ToInt64Microseconds(HolderLease(self->ttl));
    }
    std::weak_ptr<State> w = self;
    self->env->Schedule(self->ttl / 3, [w] {
      if (auto s = w.lock()) s->Renew();
    });
    (*parked)(*id);
  });
}

bool LockSession::alive() const {
  absl::MutexLock lock(&state_->mu);
  return !state_->over && state_->id != 0 && state_->env->MonotonicMicros() < state_->valid_until;
}

SessionId LockSession::id() const {
  absl::MutexLock lock(&state_->mu);
  return state_->id;
}

void LockSession::Close() {
  SessionId id;
  {
    absl::MutexLock lock(&state_->mu);
    state_->over = true;
    id = state_->id;
    state_->id = 0;
  }
  if (id != 0) state_->service->CloseSession(id, [](absl::Status) {});
}

}  // namespace megastore::storage::lock
