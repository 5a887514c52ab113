#include "base/descriptors.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>

namespace megastore {

namespace {

std::atomic<uint64_t> in_use{0};
std::atomic<uint64_t> reserve_override{0};  // 0: the default

uint64_t SoftLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return rl.rlim_cur;
}

}  // namespace

uint64_t RaiseDescriptorLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE,
              &rl);  // best effort: the old limit stays if refused
  }
  return SoftLimit();
}

void SetDescriptorReserve(uint64_t reserve) { reserve_override = reserve; }

uint64_t DescriptorReserve() {
  const uint64_t limit = SoftLimit();
  if (const uint64_t r = reserve_override.load(); r != 0) return std::min(r, limit);
  return std::min(std::max<uint64_t>(256, limit / 4), limit / 2);
}

uint64_t ConnectionDescriptorLimit() { return SoftLimit() - DescriptorReserve(); }

uint64_t ConnectionDescriptorsInUse() { return in_use.load(); }

bool AcquireConnectionDescriptor() {
  const uint64_t limit = ConnectionDescriptorLimit();
  uint64_t n = in_use.load();
  do {
    if (n >= limit) return false;
  } while (!in_use.compare_exchange_weak(n, n + 1));
  return true;
}

void ReleaseConnectionDescriptor() { in_use.fetch_sub(1); }

}  // namespace megastore
