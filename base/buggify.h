// Fault points in production code ("buggify", after FoundationDB): rare
// delays, spurious errors and unusual-but-legal choices, compiled into every
// binary and active only when a simulation enables them with its seed.
//
// A fault point is declared once at namespace scope and tested where the
// fault would happen:
//
//   MS_FAULT_POINT(kApplyFails, "log_replica: an apply fails before writing");
//   ...
//   if (kApplyFails.Fire()) return done(absl::UnavailableError("injected fault"));
//
// Outside a simulation Fire() is one relaxed atomic load that returns false.
// In a simulation (buggify::Enable with the run's seed) each point is
// *active* in a run with probability 1/4, decided by the seed and its name,
// and an active point fires with the run's fire probability. Draws come
// from buggify's own generator seeded by the run, so a seed replays exactly
// (the simulator runs on one thread) and runs without fault points draw the
// same numbers from the Env as before.
//
// Only faults a correct system must survive belong here: a request that
// fails before it did anything, a reply that is slow, a cache that misses,
// a fast path not taken. Never a fault that breaks a stated guarantee (an
// fsync that lies, a write acknowledged and lost).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace megastore::buggify {

struct PointStats {
  std::string name, what;
  uint64_t evaluated = 0;  // times Fire() was asked while enabled
  uint64_t fired = 0;      // times it said yes
};

class FaultPoint {
 public:
  // `name` and `what` must outlive the program (string literals).
  FaultPoint(const char* name, const char* what);
  FaultPoint(const FaultPoint&) = delete;
  FaultPoint& operator=(const FaultPoint&) = delete;

  // Whether the fault happens now: never outside a simulation.
  bool Fire() {
    if (!enabled_.load(std::memory_order_relaxed)) return false;
    return FireSlow();
  }

  const char* name() const { return name_; }
  const char* what() const { return what_; }

 private:
  friend void Enable(uint64_t, double);
  friend void Disable();
  friend bool Enabled();
  friend std::vector<PointStats> Stats();
  friend class Suspend;
  friend void ResetCounts();
  friend struct Registry;
  bool FireSlow();

  static std::atomic<bool> enabled_;
  const char* const name_;
  const char* const what_;
  // Guarded by the registry's mutex.
  bool active_ = false;
  uint64_t evaluated_ = 0, fired_ = 0;
};

// Turns fault points on for one simulation run: each point is active with
// probability 1/4 (by `seed` and its name), an active one fires with
// probability `fire_probability`. Counts accumulate across runs until
// ResetCounts.
void Enable(uint64_t seed, double fire_probability = 0.05);
// Turns them off (the end of a run).
void Disable();
bool Enabled();

// Enables the fault points for a run while it lives (if `on`), and turns
// them off again however the run ends.
class ScopedEnable {
 public:
  ScopedEnable(bool on, uint64_t seed) {
    if (on) Enable(seed);
  }
  ~ScopedEnable() { Disable(); }
  ScopedEnable(const ScopedEnable&) = delete;
  ScopedEnable& operator=(const ScopedEnable&) = delete;
};

// Keeps every fault point quiet while it lives (and its Fire() calls
// uncounted): for a simulator's checkers, which read storage through the
// same code but are not the system under test. Single-threaded use only
// (the simulator's thread).
class Suspend {
 public:
  Suspend() : was_(FaultPoint::enabled_.exchange(false, std::memory_order_relaxed)) {}
  ~Suspend() { FaultPoint::enabled_.store(was_, std::memory_order_relaxed); }
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  const bool was_;
};

// Every fault point linked into this program, in name order.
std::vector<PointStats> Stats();
void ResetCounts();

}  // namespace megastore::buggify

// Declares a fault point named after the variable.
#define MS_FAULT_POINT(var, what) static ::megastore::buggify::FaultPoint var(#var, what)
