// Internal to the replication client library: the steps of a write
// (docs/replication.md, "Writing"), each in the file named after it:
//
//   1. accept at the leader      write_accept.cc   DecidePosition
//   2. accept at the others      write_accept.cc   DecidePosition
//   3. fallback (prepare, accept) write_accept.cc  DecidePosition
//   4. invalidate                write_invalidate.cc  MakeVisible
//   5. apply                     write_apply.cc    ApplyEverywhere
//
// GroupClient::Commit (commit.cc) runs them for a writer's entry, and
// catch-up (catch_up.cc) for a position nobody knows the value of.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "replication/client_calls.h"

namespace megastore::replication::internal {

// Something that happens to a replica once and for all (an accept, a
// failed request): callbacks wait for it, or run at once if it happened.
class ReplicaEvent {
 public:
  void Fire(int replica) {
    std::vector<std::function<void()>> fire;
    {
      absl::MutexLock lock(&mu_);
      happened_.insert(replica);
      auto it = waiters_.find(replica);
      if (it == waiters_.end()) return;
      fire = std::move(it->second);
      waiters_.erase(it);
    }
    for (auto& f : fire) f();
  }
  // Runs `fn` once it has happened to `replica` (at once if it has).
  void On(int replica, std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      if (!happened_.count(replica)) {
        waiters_[replica].push_back(std::move(fn));
        return;
      }
    }
    fn();
  }

 private:
  absl::Mutex mu_;
  std::set<int> happened_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<std::function<void()>>> waiters_ ABSL_GUARDED_BY(mu_);
};

// Replicas that accept the chosen value after it was chosen (their replies
// were still on the way): each such accept spares that replica's
// coordinator the invalidation. And replicas whose accept request failed:
// no accept will come from them, so they are invalidated at once.
class LateAccepts {
 public:
  void Add(int replica) { accepted_.Fire(replica); }
  // Runs `fn` once `replica` has accepted (at once if it has).
  void OnAccept(int replica, std::function<void()> fn) { accepted_.On(replica, std::move(fn)); }
  // An accept request to `replica` failed (it will not accept late).
  void Fail(int replica) { failed_.Fire(replica); }
  // Runs `fn` once an accept request to `replica` has failed (at once if one has).
  void OnFail(int replica, std::function<void()> fn) { failed_.On(replica, std::move(fn)); }

 private:
  ReplicaEvent accepted_, failed_;
};

struct Chosen {
  std::string value;
  std::set<int> accepted_by;  // replica indices; empty if `learned`
  bool learned = false;       // a replica already knew the value
  bool fast = false;          // chosen by the leader's ballot-0 accept (no prepare)
  absl::Duration took = absl::ZeroDuration();  // from the first proposal to the choice
  std::shared_ptr<LateAccepts> late = std::make_shared<LateAccepts>();
};

// Steps 1-3: decides log `position` of the group. Proposes `value` with a
// ballot-0 accept at the leader nominated by the previous entry
// (`leader_voter`, an acceptor id; none: no fast path) and at the other
// voters, falling back to Prepare and Accept at higher ballots until some
// value is chosen or `deadline` passes. The chosen value may be another
// writer's (or one a replica already learned).
void DecidePosition(GroupClient* c, GroupRef group, uint64_t position, std::string value,
                    std::optional<int> leader_voter, int64_t deadline, Callback<Chosen> done);

// Step 4: makes the value chosen at `position` safe to read: invalidates
// the coordinator of every full replica that did not accept it (unless it
// was learned from a replica, whose copy is only ever written after this
// step). Each such replica's own late accept settles it as well: the
// invalidation is sent only if that accept has not come within twice the
// time the choice took (at least 1 ms, at most the RPC timeout, and never
// closer to `deadline` than one RPC timeout; at once if the replica's
// accept request failed) — the write
// waits for one or the other anyway, and an accept that comes spares the
// coordinator an invalidation and its next reader a majority read. OK once
// every such replica is settled; an error if one could not be by
// `deadline`.
void MakeVisible(GroupClient* c, const GroupRef& group, uint64_t position, const Chosen& chosen,
                 int64_t deadline, absl::AnyInvocable<void(absl::Status)> done);

// Step 5: sends the chosen `value` of `position` to every replica to apply,
// and reports how the apply at `wait_replica` went (at once if it is -1):
// an error also if that replica's applied position stayed below `position`.
// The other replicas apply behind; any later read applies what is missing.
void ApplyEverywhere(GroupClient* c, const GroupRef& group, uint64_t position,
                     const std::string& value, int wait_replica,
                     absl::AnyInvocable<void(absl::Status)> done);

// Steps 4 and 5 for a chosen value. `done(visible, applied)`: whether step 4
// succeeded (if not, nothing was applied), and how the apply at
// `wait_replica` went.
using CompleteCallback = absl::AnyInvocable<void(absl::Status visible, absl::Status applied)>;
void Complete(GroupClient* c, GroupRef group, uint64_t position, Chosen chosen, int wait_replica,
              int64_t deadline, CompleteCallback done);

}  // namespace megastore::replication::internal
