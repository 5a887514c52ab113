// Step 4 of a write (write_steps.h): invalidate the coordinators of the full
// replicas that missed the chosen value, the write's visibility point.
#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "base/gather.h"
#include "base/strings.h"
#include "replication/write_steps.h"

namespace megastore::replication::internal {

namespace {

// Invalidates replica `r`'s coordinator for `position`, or establishes that
// it cannot be serving: it lacks its lock at enough of the other lock
// services that it cannot hold a majority. Both questions go out at once;
// either answer suffices. Retries until `deadline`.
void InvalidateOne(GroupClient* c, GroupRef group, uint64_t position, int r, int64_t deadline,
                   absl::AnyInvocable<void(absl::Status)> done) {
  struct Attempt {
    absl::Mutex mu;
    absl::AnyInvocable<void(absl::Status)> done ABSL_GUARDED_BY(mu);
    int outstanding ABSL_GUARDED_BY(mu) = 2;  // the invalidation, and the lock survey
  };
  auto attempt = std::make_shared<Attempt>();
  {
    absl::MutexLock lock(&attempt->mu);
    attempt->done = std::move(done);
  }
  // `proved`: this answer settles it. Otherwise, once both failed, retry.
  auto answer = [c, group, position, r, deadline, attempt](bool proved) {
    absl::AnyInvocable<void(absl::Status)> done;
    {
      absl::MutexLock lock(&attempt->mu);
      if (!attempt->done) return;
      if (!proved && --attempt->outstanding > 0) return;
      done = std::move(attempt->done);
      attempt->done = nullptr;
    }
    if (proved) return done(absl::OkStatus());
    if (Expired(c, deadline))
      return done(absl::DeadlineExceededError(StrCat("could not invalidate the coordinator of ",
                                                     c->options().replicas[r].name,
                                                     ", and it still holds its locks")));
    // Env timers take copyable functions: park the callback.
    auto parked = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
    Later(c, Capped(c, deadline, Jitter(c, c->options().rpc_timeout / 2)),
          [c, group, position, r, deadline, parked] {
            InvalidateOne(c, group, position, r, deadline, std::move(*parked));
          });
  };
  const absl::Duration timeout = RequestTimeout(c, std::nullopt, 0);
  c->coordinators()->Invalidate(
      c->options().replicas[r].coordinator, CoordinatorGroup(group), position, timeout,
      Guarded<coordinator::CoordinatorReply>(
          c,
          [answer](absl::StatusOr<coordinator::CoordinatorReply> reply) { answer(reply.ok()); }));

  std::vector<std::string> others;
  for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i)
    if (i != r) others.push_back(c->options().replicas[i].lock_service);
  c->coordinators()->SurveyLocks(others, c->options().replicas[r].name, timeout,
                                 [life = c->lifetime(), answer](bool cannot_serve) {
                                   GroupClient::Entry entry(life);
                                   if (entry) answer(cannot_serve);
                                 });
}

}  // namespace

void MakeVisible(GroupClient* c, const GroupRef& group, uint64_t position, const Chosen& chosen,
                 int64_t deadline, absl::AnyInvocable<void(absl::Status)> done) {
  std::vector<int> to_invalidate;
  if (!chosen.learned) {
    for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i)
      if (c->options().replicas[i].type == ReplicaType::kFull && !chosen.accepted_by.count(i))
        to_invalidate.push_back(i);
  }
  auto settled = [done = std::move(done)](Gather<bool>::Results results) mutable {
    for (auto& r : results)
      if (r && !r->ok()) return done(r->status());
    done(absl::OkStatus());
  };
  auto gather = std::make_shared<Gather<bool>>(to_invalidate.size(), to_invalidate.size(),
                                               std::move(settled));
  for (size_t i = 0; i < to_invalidate.size(); ++i) {
    // Whichever comes first: the invalidation, or the replica's own accept.
    struct Once {
      absl::Mutex mu;
      Callback<bool> slot ABSL_GUARDED_BY(mu);
    };
    auto once = std::make_shared<Once>();
    {
      absl::MutexLock lock(&once->mu);
      once->slot = gather->Slot(i);
    }
    auto settle = [once](absl::StatusOr<bool> r) {
      Callback<bool> slot;
      {
        absl::MutexLock lock(&once->mu);
        if (!once->slot) return;
        slot = std::move(once->slot);
        once->slot = nullptr;
      }
      slot(std::move(r));
    };
    chosen.late->OnAccept(to_invalidate[i], [settle]() mutable { settle(true); });
    const int r = to_invalidate[i];
    // Started once: by the grace's end, or at once if the replica's accept
    // failed (it will not come late).
    auto started = std::make_shared<std::atomic<bool>>(false);
    auto invalidate = [c, group, position, r, deadline, once, settle, started]() mutable {
      {
        absl::MutexLock lock(&once->mu);
        if (!once->slot) return;  // its accept came first
      }
      if (started->exchange(true)) return;
      c->NoteInvalidation();
      InvalidateOne(c, group, position, r, deadline, [settle](absl::Status s) mutable {
        if (s.ok()) return settle(true);
        settle(s);
      });
    };
    // The grace never eats into the time the invalidation itself needs
    // before the deadline (one request timeout).
    const absl::Duration left =
        absl::Microseconds(deadline - c->env()->MonotonicMicros()) - c->options().rpc_timeout;
    const absl::Duration grace =
        std::min({std::max(2 * chosen.took, absl::Milliseconds(1)), c->options().rpc_timeout,
                  std::max(left, absl::ZeroDuration())});
    chosen.late->OnFail(r, invalidate);
    Later(c, grace, std::move(invalidate));
  }
  gather->FinishIfEmpty();
}

}  // namespace megastore::replication::internal
