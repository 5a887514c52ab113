// The clock-drift margin every lease holder applies (docs/replication.md,
// "Coordinator"; docs/cell.md): a holder counts a lease from when it *sent*
// the request that got it, shortened by the drift its clock may have
// against the service's, so it never counts on a lease the service may
// already have ended; a service that forgot its leases waits out the
// longest one, lengthened by the same drift, before it grants again.
#pragma once

#include "absl/time/time.h"

namespace megastore::storage::lock {

// How far two processes' clocks may drift apart while a lease runs, as a
// fraction of its length (1e-3: 1 ms per second, far beyond what a working
// quartz clock or NTP allows).
inline constexpr double kDefaultMaxClockDrift = 1e-3;
// A fixed extra margin on top of the drift, for scheduling delays.
inline constexpr absl::Duration kLeaseMargin = absl::Milliseconds(5);

// How long a lease of `lease` may be counted on by its holder, measured on
// the holder's clock from when it sent the request that got it.
inline absl::Duration HolderLease(absl::Duration lease,
                                  double max_clock_drift = kDefaultMaxClockDrift) {
  return lease * (1.0 - max_clock_drift) - kLeaseMargin;
}

// How long after a restart a lock service must stay quiet when its previous
// incarnation granted leases of at most `longest`.
inline absl::Duration QuietPeriod(absl::Duration longest,
                                  double max_clock_drift = kDefaultMaxClockDrift) {
  if (longest <= absl::ZeroDuration()) return absl::ZeroDuration();
  return longest * (1.0 + max_clock_drift) + kLeaseMargin;
}

}  // namespace megastore::storage::lock
