// The replication server's log clean-up sweep (docs/replication.md,
// "Cleaning up the log"): which positions of a group's log this replica may
// remove, and removing them.
//
// A full or read-only replica removes positions that every full and
// read-only replica has applied; a witness, positions a majority of full
// replicas applied (it keeps no data, and its votes on applied positions
// are never needed again). With `require_backup`, only positions the
// latest backup covers. Always kept: the last keep_positions positions, and
// those younger than keep_age unless more than max_positions would be.
#include <algorithm>
#include <memory>

#include "base/coding.h"
#include "base/gather.h"
#include "base/logging.h"
#include "base/proto_call.h"
#include "base/strings.h"
#include "replication/replication_server.h"

namespace megastore::replication {

void ReplicationServer::NoteForCleanup(const GroupRef& group) {
  if (!options_.cleanup.enabled) return;
  absl::MutexLock lock(&mu_);
  if (cleanup_due_.size() >= kMaxCleanupGroups) return;  // the next sweeps catch up
  cleanup_due_.try_emplace(GroupKey(group), group);
}

void ReplicationServer::CleanupTick() {
  {
    absl::MutexLock lock(&mu_);
    if (!running_) return;
    cleanup_timer_ = ScheduleTick(options_.cleanup.interval, &ReplicationServer::CleanupTick);
    if (cleaning_) return;
    cleaning_ = true;
  }
  CleanupSweep([this] {
    absl::MutexLock lock(&mu_);
    cleaning_ = false;
  });
}

namespace {

struct CleanupRun {
  std::vector<GroupRef> groups;
  size_t next = 0;
  // The logs this sweep saw (for the gauges).
  uint64_t largest_bytes = 0, largest_positions = 0, kept_bytes = 0;
  bool saw_logs = false;
  absl::AnyInvocable<void()> done;
};

}  // namespace

void ReplicationServer::CleanupSweep(absl::AnyInvocable<void()> done) {
  auto run = std::make_shared<CleanupRun>();
  run->done = std::move(done);
  std::vector<std::pair<std::string, GroupRef>> due;
  {
    absl::MutexLock lock(&mu_);
    due.assign(std::make_move_iterator(cleanup_due_.begin()),
               std::make_move_iterator(cleanup_due_.end()));
    cleanup_due_.clear();
  }
  // In key order, whatever the hash map's (a simulation replays exactly);
  // sorted outside the lock every request takes.
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, group] : due) run->groups.push_back(std::move(group));
  counters_.cleanup_sweeps++;
  // One group at a time: clean-up is background work.
  struct Step {
    ReplicationServer* self;
    std::shared_ptr<CleanupRun> run;
    void operator()() {
      // A stopped server ends the sweep at its next step (Stop waits).
      if (run->next < run->groups.size() && self->Stopped()) run->next = run->groups.size();
      if (run->next >= run->groups.size()) {
        // A sweep with nothing due (an idle server) leaves the gauges as
        // the last sweep that looked at logs set them.
        if (run->saw_logs) {
          self->counters_.largest_log_bytes = run->largest_bytes;
          self->counters_.largest_log_positions = run->largest_positions;
          self->counters_.kept_log_bytes = run->kept_bytes;
        }
        if (run->done) std::exchange(run->done, nullptr)();
        return;
      }
      const GroupRef group = run->groups[run->next++];
      self->CleanGroup(group, [self = self, run = run, group](CleanOutcome outcome) {
        if (outcome.log) {
          run->saw_logs = true;
          run->largest_bytes = std::max(run->largest_bytes, outcome.log->kept_bytes());
          run->largest_positions = std::max(run->largest_positions, outcome.log->kept_positions());
          run->kept_bytes += outcome.log->kept_bytes();
        }
        if (outcome.still_due) {
          absl::MutexLock lock(&self->mu_);
          if (self->cleanup_due_.size() < kMaxCleanupGroups)
            self->cleanup_due_.try_emplace(GroupKey(group), group);
        }
        Step{self, run}();
      });
    }
  };
  Step{this, run}();
}

std::optional<uint64_t> CleanLimit(const std::vector<ReplicaInfo>& replicas, size_t local,
                                   bool require_backup,
                                   const std::vector<std::optional<StateReply>>& states) {
  if (local >= replicas.size() || states.size() != replicas.size()) return std::nullopt;
  const ReplicaType local_type = replicas[local].type;
  uint64_t backed_up = 0;
  for (const auto& s : states)
    if (s) backed_up = std::max(backed_up, s->backed_up());
  std::optional<uint64_t> limit;
  if (local_type == ReplicaType::kWitness) {
    std::vector<uint64_t> full;
    size_t full_count = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replicas[i].type != ReplicaType::kFull) continue;
      ++full_count;
      if (states[i]) full.push_back(states[i]->applied().position());
    }
    const size_t majority = full_count / 2 + 1;
    if (full.size() < majority) return std::nullopt;
    std::sort(full.rbegin(), full.rend());
    limit = full[majority - 1];  // applied at `majority` full replicas
  } else {
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replicas[i].type == ReplicaType::kWitness) continue;
      if (!states[i]) return std::nullopt;  // a data replica did not answer
      const uint64_t applied = states[i]->applied().position();
      limit = limit ? std::min(*limit, applied) : applied;
    }
  }
  if (!limit) return std::nullopt;
  if (require_backup) limit = std::min(*limit, backed_up);
  return limit;
}

void ReplicationServer::AgeLimit(const GroupRef& group, uint64_t cleaned, uint64_t limit,
                                 uint64_t floor, absl::AnyInvocable<void(uint64_t)> done) {
  // The largest p in (cleaned, limit] whose entry is older than keep_age,
  // but at least `floor`. Entry timestamps grow with the position (a no-op
  // has none and counts as young).
  const int64_t old_enough =
      env_->NowMicros() - absl::ToInt64Microseconds(options_.cleanup.keep_age);
  struct Search {
    ReplicationServer* self;
    GroupRef group;
    uint64_t lo, hi;  // the answer is in [lo, hi]; lo is known to qualify
    int64_t old_enough;
    absl::AnyInvocable<void(uint64_t)> done;
    static void Step(std::shared_ptr<Search> s) {
      if (s->lo >= s->hi) return s->done(s->lo);
      const uint64_t mid = s->lo + (s->hi - s->lo + 1) / 2;
      s->self->replica_.EntryTimestamp(s->group, mid, [s, mid](absl::StatusOr<int64_t> ts) {
        if (ts.ok() && *ts > 0 && *ts <= s->old_enough) {
          s->lo = mid;
        } else {
          s->hi = mid - 1;
        }
        Step(s);
      });
    }
  };
  const uint64_t lo = std::max(cleaned, std::min(floor, limit));
  Search::Step(
      std::make_shared<Search>(Search{this, group, lo, limit, old_enough, std::move(done)}));
}

void ReplicationServer::CleanGroup(const GroupRef& group,
                                   absl::AnyInvocable<void(CleanOutcome)> done) {
  const auto& replicas = options_.cluster.replicas;
  const int local = options_.cluster.local;
  const size_t n = replicas.size();
  auto gather = std::make_shared<Gather<StateReply>>(
      n, n,
      [this, group, local, done = std::move(done)](Gather<StateReply>::Results results) mutable {
        std::vector<std::optional<StateReply>> states(results.size());
        for (size_t i = 0; i < results.size(); ++i)
          if (results[i] && results[i]->ok()) states[i] = std::move(**results[i]);
        if (!states[local]) return done(CleanOutcome());
        const StateReply here = *states[local];
        const uint64_t applied = here.applied().position();
        const LogCleanupOptions& o = options_.cleanup;
        std::optional<uint64_t> limit = CleanLimit(
            options_.cluster.replicas, static_cast<size_t>(local), o.require_backup, states);
        if (!limit) {
          counters_.cleanup_blocked++;
          return done(CleanOutcome());
        }
        const uint64_t tail = applied > o.keep_positions ? applied - o.keep_positions : 0;
        uint64_t through = std::min({*limit, applied, tail});
        if (through <= here.cleaned()) {
          // Nothing to do now; still due if something held it back.
          const bool held = *limit < tail;
          if (held) counters_.cleanup_blocked++;
          return Clean(group, here.cleaned(), held, std::move(done));
        }
        const uint64_t floor = applied > o.max_positions ? applied - o.max_positions : 0;
        AgeLimit(group, here.cleaned(), through, floor,
                 [this, group, through, done = std::move(done)](uint64_t aged) mutable {
                   // Still due if the age held positions back.
                   Clean(group, aged, aged < through, std::move(done));
                 });
      });
  // Positions are removed on every replica's word that it applied them: a
  // word that a power cut there could take back (a lazily written applied
  // record) would leave that replica needing positions nobody keeps.
  StateRequest req;
  *req.mutable_group() = group;
  req.set_durable_applied(true);
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) == local) {
      replica_.DurableState(group, gather->Slot(i));
      continue;
    }
    CallProto<StateReply>(client_.transport(), replicas[i].replication, "repl.State", req,
                          options_.cluster.rpc_timeout, gather->Slot(i));
  }
}

void ReplicationServer::Clean(const GroupRef& group, uint64_t through, bool still_due,
                              absl::AnyInvocable<void(CleanOutcome)> done) {
  struct Loop {
    ReplicationServer* self;
    GroupRef group;
    uint64_t through;
    bool still_due;
    int calls = 0;
    bool removed_any = false;
    absl::AnyInvocable<void(CleanOutcome)> done;
    static void Step(std::shared_ptr<Loop> l) {
      l->self->replica_.Clean(l->group, l->through, [l](absl::StatusOr<CleanReply> r) mutable {
        ReplicationServer* self = l->self;
        if (!r.ok()) {
          // Unavailable passes (the next sweep tries again); anything else
          // (an unreadable log) is worth a look.
          if (absl::IsUnavailable(r.status())) {
            MS_LOG_DEBUG("replication: cleaning up the log of entity group {}: {}",
                         EscapeBytes(l->group.root()), r.status().ToString());
          } else {
            MS_LOG_WARN_LIMITED("replication: cleaning up the log of entity group {}: {}",
                                EscapeBytes(l->group.root()), r.status().ToString());
          }
          return l->done(CleanOutcome());
        }
        if (r->removed_positions() > 0) l->removed_any = true;
        self->counters_.positions_removed += r->removed_positions();
        self->counters_.bytes_reclaimed += r->removed_bytes();
        // A bounded amount of work per group per sweep; the rest next time.
        if (r->more() && ++l->calls < kMaxCleanCallsPerSweep) return Step(std::move(l));
        if (l->removed_any) self->counters_.groups_cleaned++;
        CleanOutcome outcome;
        outcome.still_due = l->still_due || r->more();
        if (!r->more()) outcome.log = std::move(*r);
        l->done(std::move(outcome));
      });
    }
  };
  Loop::Step(
      std::make_shared<Loop>(Loop{this, group, through, still_due, 0, false, std::move(done)}));
}

}  // namespace megastore::replication
