// A writer's commit (docs/replication.md, "Writing"): the five steps of
// write_steps.h for the writer's entry at the position after its read.
#include <algorithm>
#include <limits>

#include "base/strings.h"
#include "replication/write_steps.h"

namespace megastore::replication {

using internal::Chosen;
using internal::Complete;
using internal::DeadlineFrom;
using internal::DecidePosition;

void GroupClient::Commit(GroupRef group, const LogPosition& at, LogEntry entry,
                         Callback<CommitResult> done, int64_t deadline_in) {
  const uint64_t position = at.position + 1;
  const int local = options_.local;
  const int64_t now = env_->NowMicros();
  const int64_t skew = absl::ToInt64Microseconds(options_.max_clock_skew);
  if (at.timestamp > now && at.timestamp - now > skew) {
    return done(absl::InvalidArgumentError(
        StrCat("the read position's timestamp ", at.timestamp, " us is beyond this clock (", now,
               " us) plus the allowed skew (", skew, " us): refusing to commit after it")));
  }
  if (at.position == std::numeric_limits<uint64_t>::max()) {
    return done(absl::InvalidArgumentError("the read position is the last possible log position"));
  }
  entry.set_timestamp(std::max(now, at.timestamp + 1));
  entry.set_next_leader(Votes(options_.replicas[local].type) ? local : -1);
  std::optional<int> leader;
  for (size_t i = 0; i < voters_.size(); ++i)
    if (voters_[i] == at.next_leader) leader = static_cast<int>(i);
  const int64_t timestamp = entry.timestamp();
  std::string value = entry.SerializeAsString();
  const int64_t deadline = DeadlineFrom(this, deadline_in);
  DecidePosition(
      this, group, position, value, leader, deadline,
      [this, group, position, value, timestamp, deadline, started = env_->MonotonicMicros(),
       done = std::move(done)](absl::StatusOr<Chosen> chosen) mutable {
        if (!chosen.ok()) {
          stats_.unknown.fetch_add(1, std::memory_order_relaxed);
          return done(chosen.status());
        }
        const bool ours = chosen->value == value;
        if (ours) {
          stats_.commits.fetch_add(1, std::memory_order_relaxed);
          if (chosen->fast) stats_.fast_path.fetch_add(1, std::memory_order_relaxed);
        } else {
          stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
        }
        group_counts_.Add(group.root(), ours ? 0 : 1);
        // The write is acknowledged once visible and applied here (so this
        // app server's next read needs no catch-up); the other replicas
        // apply behind.
        const int wait =
            options_.replicas[options_.local].type == ReplicaType::kWitness ? -1 : options_.local;
        Complete(this, group, position, std::move(*chosen), wait, deadline,
                 [this, started, position, timestamp, ours, done = std::move(done)](
                     absl::Status visible, absl::Status) mutable {
                   if (!ours)
                     return done(absl::AbortedError(
                         StrCat("conflict: another writer committed log position ", position)));
                   // A failed local apply is harmless: the next read applies it.
                   // Not visible: the entry *is* in the log, but a current
                   // read may not see it yet, so it cannot be acknowledged;
                   // and it must not look like "nothing written" either (a
                   // client would retry it: a double commit).
                   if (!visible.ok())
                     return done(absl::DeadlineExceededError(StrCat(
                         "outcome unknown: the entry was chosen for log position ", position,
                         " but could not be made visible to current reads in time (",
                         visible.message(), "); do not retry it blindly, read the group first")));
                   commit_latency_.Observe(env_->MonotonicMicros() - started);
                   done(CommitResult{position, timestamp});
                 });
      });
}

}  // namespace megastore::replication
