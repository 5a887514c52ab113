// Env: the only door to time, timers and randomness (docs/architecture.md).
//
// Components never call std::chrono::*::now(), sleep or std::random_device
// themselves; they take an Env. RealEnv is the production adapter; ManualEnv
// is a clock that moves only when a test says so, with timers that fire as it
// moves. The simulator (sim/) provides its own Env on virtual time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/random.h"

namespace megastore {

class Env {
 public:
  using TimerId = uint64_t;

  virtual ~Env() = default;

  // Wall-clock microseconds since the Unix epoch. May jump (NTP, operator).
  virtual int64_t NowMicros() = 0;
  // Microseconds on a clock that never goes backwards; for deadlines and
  // measuring durations. Its origin is unspecified.
  virtual int64_t MonotonicMicros() = 0;

  // Runs `fn` once, no earlier than `after` from now (monotonic), on the
  // Env's timer thread (RealEnv) or inside ManualEnv::Advance. `fn` must not
  // block for long: it delays every later timer. Thread-safe. While a
  // RealEnv is destroyed, nothing more is scheduled (the id is 0).
  virtual TimerId Schedule(absl::Duration after, std::function<void()> fn) = 0;
  // Cancels a timer that has not started running. Returns true if it was
  // cancelled, false if it already ran, is running, or is unknown.
  virtual bool Cancel(TimerId id) = 0;

  // Blocks the caller for `d` of this Env's time: RealEnv sleeps; ManualEnv
  // moves its clocks forward by `d` (running the timers that fall due); the
  // simulator runs its other events until then. For blocking callers only
  // (a timer callback schedules instead).
  virtual void SleepFor(absl::Duration d) = 0;
  // Blocks the caller until `done` is notified. The simulator runs its
  // other events meanwhile (the notifier is one of them), so a blocking API
  // works on its one thread; real and manual Envs just wait.
  virtual void Wait(absl::Notification& done) { done.WaitForNotification(); }
  // Wait for at most `timeout` (virtual time in the simulator, real time
  // otherwise — ManualEnv's clock does not move while a caller waits);
  // whether `done` was notified.
  virtual bool WaitFor(absl::Notification& done, absl::Duration timeout) {
    return done.WaitForNotificationWithTimeout(timeout);
  }

  // A thread of this Env's. Real and manual Envs start a std::thread; the
  // simulator runs `fn` as one of its tasks, taking turns with everything
  // else on its one timeline (sim/world.h). Join() waits for `fn` to end
  // (the simulator runs meanwhile); the destructor joins.
  class Thread {
   public:
    virtual ~Thread() = default;
    virtual void Join() = 0;
  };
  virtual std::unique_ptr<Thread> StartThread(std::string name, std::function<void()> fn);

  // Locks `mu` for a caller that may hold it across waits of this Env's
  // (Wait, SleepFor): in the simulator a task holding it may be parked, so
  // another task waiting for it must park too rather than block its thread.
  // Real and manual Envs just lock. Use EnvMutexLock.
  virtual void LockBlocking(absl::Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) { mu.Lock(); }

  // A uniformly random 64-bit number from the Env's seeded source.
  // Thread-safe. Deterministic for a given seed and call order.
  virtual uint64_t Random64() = 0;
  virtual uint64_t seed() const = 0;
  // The simulator's: one thread, virtual time, and nothing runs unless its
  // loop does — so code must never wait there for a callback to come.
  virtual bool simulated() const { return false; }

  // The process-wide real Env (never destroyed).
  static Env* Default();
};

// A scoped Env::LockBlocking.
class ABSL_SCOPED_LOCKABLE EnvMutexLock {
 public:
  EnvMutexLock(Env* env, absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    env->LockBlocking(*mu);
  }
  ~EnvMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  EnvMutexLock(const EnvMutexLock&) = delete;
  EnvMutexLock& operator=(const EnvMutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

// Shared timer bookkeeping for RealEnv and ManualEnv.
class TimerQueue {
 public:
  Env::TimerId Add(int64_t when, std::function<void()> fn);
  // Removes a timer; its function is moved to `*fn` (when given) so the
  // caller can destroy it outside its lock (it may hold the last reference
  // to an object whose destructor schedules).
  bool Cancel(Env::TimerId id, std::function<void()>* fn = nullptr);
  // Removes and returns the earliest timer due at or before `now`, if any.
  bool PopDue(int64_t now, std::function<void()>* fn);
  // The time of the earliest pending timer, or INT64_MAX if none.
  int64_t NextDeadline() const;

 private:
  Env::TimerId next_id_ = 1;
  std::map<std::pair<int64_t, Env::TimerId>, std::function<void()>> timers_;
  std::map<Env::TimerId, int64_t> deadline_of_;
};

// The production Env: system clocks and a dedicated timer thread.
class RealEnv : public Env {
 public:
  // `seed` seeds Random64(); 0 draws a seed from the OS.
  explicit RealEnv(uint64_t seed = 0);
  ~RealEnv() override;

  int64_t NowMicros() override;
  int64_t MonotonicMicros() override;
  TimerId Schedule(absl::Duration after, std::function<void()> fn) override;
  bool Cancel(TimerId id) override;
  void SleepFor(absl::Duration d) override;
  uint64_t Random64() override;
  uint64_t seed() const override { return seed_; }

 private:
  void TimerLoop();

  const uint64_t seed_;
  std::mutex mu_;
  std::condition_variable cv_;
  TimerQueue timers_;      // guarded by mu_
  Random rng_;             // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  // When the timer thread wakes next (INT64_MAX: only when notified; 0:
  // awake). A timer due no earlier needs no notification.
  int64_t next_wake_ = INT64_MAX;  // guarded by mu_
  std::thread thread_;             // started by the first Schedule()
};

// A test Env: time stands still until Advance()/SetNowMicros(); due timers
// run on the thread that moves the clock, in deadline order.
class ManualEnv : public Env {
 public:
  explicit ManualEnv(int64_t start_micros = 1'000'000'000'000'000, uint64_t seed = 1);

  int64_t NowMicros() override;
  int64_t MonotonicMicros() override;
  TimerId Schedule(absl::Duration after, std::function<void()> fn) override;
  bool Cancel(TimerId id) override;
  // Advance(d).
  void SleepFor(absl::Duration d) override;
  uint64_t Random64() override;
  uint64_t seed() const override { return seed_; }

  // Moves both clocks forward by `d` (>= 0), running every timer that
  // becomes due, each with the clock set to its deadline.
  void Advance(absl::Duration d);
  // Sets the wall clock only (it may go backwards, like a real clock jump).
  void SetNowMicros(int64_t now);

 private:
  const uint64_t seed_;
  absl::Mutex mu_;
  int64_t wall_offset_ ABSL_GUARDED_BY(mu_);
  int64_t monotonic_ ABSL_GUARDED_BY(mu_) = 0;
  TimerQueue timers_ ABSL_GUARDED_BY(mu_);
  Random rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace megastore
