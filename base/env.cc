#include "base/env.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/time/clock.h"
#include "base/thread_name.h"

namespace megastore {

Env::TimerId TimerQueue::Add(int64_t when, std::function<void()> fn) {
  const Env::TimerId id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  deadline_of_.emplace(id, when);
  return id;
}

bool TimerQueue::Cancel(Env::TimerId id, std::function<void()>* fn) {
  auto it = deadline_of_.find(id);
  if (it == deadline_of_.end()) return false;
  auto timer = timers_.find({it->second, id});
  if (fn != nullptr) *fn = std::move(timer->second);
  timers_.erase(timer);
  deadline_of_.erase(it);
  return true;
}

bool TimerQueue::PopDue(int64_t now, std::function<void()>* fn) {
  if (timers_.empty() || timers_.begin()->first.first > now) return false;
  auto it = timers_.begin();
  *fn = std::move(it->second);
  deadline_of_.erase(it->first.second);
  timers_.erase(it);
  return true;
}

int64_t TimerQueue::NextDeadline() const {
  return timers_.empty() ? INT64_MAX : timers_.begin()->first.first;
}

namespace {
class StdThread : public Env::Thread {
 public:
  explicit StdThread(std::function<void()> fn) : thread_(std::move(fn)) {}
  ~StdThread() override { Join(); }
  void Join() override {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};
}  // namespace

std::unique_ptr<Env::Thread> Env::StartThread(std::string name, std::function<void()> fn) {
  return std::make_unique<StdThread>([name = std::move(name), fn = std::move(fn)] {
    SetThreadName(name);
    fn();
  });
}

Env* Env::Default() {
  static Env* env = new RealEnv();
  return env;
}

namespace {
uint64_t SeedFromOs() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}
}  // namespace

RealEnv::RealEnv(uint64_t seed) : seed_(seed != 0 ? seed : SeedFromOs()), rng_(seed_) {}

RealEnv::~RealEnv() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Timers that never ran are destroyed outside the lock: what they hold
  // may schedule or cancel as it goes (and finds the Env stopping).
  TimerQueue pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(pending, timers_);
  }
}

int64_t RealEnv::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void RealEnv::SleepFor(absl::Duration d) { absl::SleepFor(d); }

int64_t RealEnv::MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Env::TimerId RealEnv::Schedule(absl::Duration after, std::function<void()> fn) {
  const int64_t when = MonotonicMicros() + absl::ToInt64Microseconds(after);
  TimerId id;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return 0;  // `fn` is destroyed outside the lock
    id = timers_.Add(when, std::move(fn));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] {
        SetThreadName("ms-timer");
        TimerLoop();
      });
    }
    // Waking the thread costs a hand-off: only for a timer due before it
    // would look anyway.
    wake = when < next_wake_;
  }
  if (wake) cv_.notify_one();
  return id;
}

bool RealEnv::Cancel(TimerId id) {
  std::function<void()> fn;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  return timers_.Cancel(id, &fn);
}

uint64_t RealEnv::Random64() {
  std::lock_guard<std::mutex> lock(mu_);
  return rng_.Next();
}

void RealEnv::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    std::function<void()> fn;
    if (timers_.PopDue(MonotonicMicros(), &fn)) {
      lock.unlock();
      fn();
      fn = nullptr;  // what it holds goes outside the lock too
      lock.lock();
      continue;
    }
    const int64_t next = timers_.NextDeadline();
    next_wake_ = next;
    if (next == INT64_MAX) {
      cv_.wait(lock);
    } else {
      cv_.wait_for(lock, std::chrono::microseconds(next - MonotonicMicros()));
    }
    next_wake_ = 0;
  }
}

ManualEnv::ManualEnv(int64_t start_micros, uint64_t seed)
    : seed_(seed), wall_offset_(start_micros), rng_(seed) {}

int64_t ManualEnv::NowMicros() {
  absl::MutexLock lock(&mu_);
  return wall_offset_ + monotonic_;
}

int64_t ManualEnv::MonotonicMicros() {
  absl::MutexLock lock(&mu_);
  return monotonic_;
}

Env::TimerId ManualEnv::Schedule(absl::Duration after, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  return timers_.Add(monotonic_ + absl::ToInt64Microseconds(after), std::move(fn));
}

bool ManualEnv::Cancel(TimerId id) {
  std::function<void()> fn;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  return timers_.Cancel(id, &fn);
}

uint64_t ManualEnv::Random64() {
  absl::MutexLock lock(&mu_);
  return rng_.Next();
}

void ManualEnv::SleepFor(absl::Duration d) { Advance(std::max(d, absl::ZeroDuration())); }

void ManualEnv::Advance(absl::Duration d) {
  int64_t target;
  {
    absl::MutexLock lock(&mu_);
    target = monotonic_ + absl::ToInt64Microseconds(d);
  }
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      const int64_t next = timers_.NextDeadline();
      if (next > target) {
        // Never backwards: another thread's Advance may have gone further.
        monotonic_ = std::max(monotonic_, target);
        return;
      }
      if (next > monotonic_) monotonic_ = next;
      timers_.PopDue(monotonic_, &fn);
    }
    fn();  // outside the lock: timers may schedule more timers
  }
}

void ManualEnv::SetNowMicros(int64_t now) {
  absl::MutexLock lock(&mu_);
  wall_offset_ = now - monotonic_;
}

}  // namespace megastore
