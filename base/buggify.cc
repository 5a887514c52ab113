#include "base/buggify.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>

#include "base/random.h"

namespace megastore::buggify {

std::atomic<bool> FaultPoint::enabled_{false};

struct Registry {
  std::mutex mu;
  std::vector<FaultPoint*> points;  // guarded by mu
  Random rng{1};                    // guarded by mu; reseeded by Enable
  double fire_probability = 0;      // guarded by mu

  static Registry& Get() {
    static auto* r = new Registry;  // outlives every static FaultPoint
    return *r;
  }
};

namespace {

// FNV-1a of the name, mixed with the seed: whether a point is active in a
// run depends only on the run's seed and the point, not on the order in
// which points are reached.
uint64_t ActivationHash(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

}  // namespace

FaultPoint::FaultPoint(const char* name, const char* what) : name_(name), what_(what) {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.points.push_back(this);
}

bool FaultPoint::FireSlow() {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!enabled_.load(std::memory_order_relaxed)) return false;
  ++evaluated_;
  if (!active_ || r.rng.NextDouble() >= r.fire_probability) return false;
  ++fired_;
  return true;
}

void Enable(uint64_t seed, double fire_probability) {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.rng = Random(seed ^ 0x9e3779b97f4a7c15ULL);
  r.fire_probability = std::clamp(fire_probability, 0.0, 1.0);
  for (FaultPoint* p : r.points) p->active_ = ActivationHash(seed, p->name_) % 4 == 0;
  FaultPoint::enabled_.store(true, std::memory_order_relaxed);
}

void Disable() {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  FaultPoint::enabled_.store(false, std::memory_order_relaxed);
  for (FaultPoint* p : r.points) p->active_ = false;
}

bool Enabled() { return FaultPoint::enabled_.load(std::memory_order_relaxed); }

std::vector<PointStats> Stats() {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<PointStats> out;
  for (const FaultPoint* p : r.points)
    out.push_back({p->name_, p->what_, p->evaluated_, p->fired_});
  std::sort(out.begin(), out.end(),
            [](const PointStats& a, const PointStats& b) { return a.name < b.name; });
  return out;
}

void ResetCounts() {
  Registry& r = Registry::Get();
  std::lock_guard<std::mutex> lock(r.mu);
  for (FaultPoint* p : r.points) p->evaluated_ = p->fired_ = 0;
}

}  // namespace megastore::buggify
