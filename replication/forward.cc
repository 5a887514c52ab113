// Hot groups (docs/replication.md, "Hot groups"): an app server that lost a
// position of a group to another app server's entry sends the group's
// commits to the group's home — the replication server of one full replica,
// picked by a hash of the group so every app server picks the same — which
// combines them with everyone else's (replication/commit_home.h). Its
// answer says whether others still send commits there; the group stays hot
// while they do.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/strings.h"
#include "replication/client_calls.h"

namespace megastore::replication {

const ReplicaInfo* GroupClient::HomeFor(const GroupRef& group) {
  // (Most commits are of groups nobody else writes: no lock, no hash.)
  if (!options_.forward || hot_size_.load(std::memory_order_relaxed) == 0) return nullptr;
  const ReplicaInfo* home = LockHome(group);
  if (home == nullptr || home->replication.empty()) return nullptr;
  const size_t index = static_cast<size_t>(home - options_.replicas.data());
  const int64_t now = env_->MonotonicMicros();
  absl::MutexLock lock(&hot_mu_);
  auto it = hot_.find(GroupKey(group));
  if (it == hot_.end()) return nullptr;
  if (now >= it->second) {
    hot_.erase(it);  // cooled down
    hot_size_.store(hot_.size(), std::memory_order_relaxed);
    return nullptr;
  }
  return now >= homes_[index].until ? home : nullptr;
}

void GroupClient::NoteHot(const GroupRef& group) {
  if (!options_.forward) return;
  const int64_t now = env_->MonotonicMicros();
  absl::MutexLock lock(&hot_mu_);
  if (hot_.size() >= kMaxHotGroups) {
    // Forget the groups that cooled down; with none, this one is not noted.
    absl::erase_if(hot_, [now](const auto& kv) { return now >= kv.second; });
    if (hot_.size() >= kMaxHotGroups) return;
  }
  int64_t& until = hot_[GroupKey(group)];
  until = std::max(until, now + absl::ToInt64Microseconds(options_.hot_for));
  hot_size_.store(hot_.size(), std::memory_order_relaxed);
}

void GroupClient::HomeAnswered(size_t home, bool ok) {
  const int64_t now = env_->MonotonicMicros();
  absl::MutexLock lock(&hot_mu_);
  HomeHealth& h = homes_[home];
  if (ok) {
    h.pause = 0;
    return;
  }
  h.pause = std::clamp(2 * h.pause, absl::ToInt64Microseconds(kHomeFailedFor),
                       absl::ToInt64Microseconds(kHomeFailedMax));
  h.until = now + h.pause;
}

void GroupClient::Forward(const ReplicaInfo& home, GroupRef group, const LogPosition& at,
                          LogEntry entry, Reads reads, int64_t deadline, int64_t since,
                          int64_t started, Callback<CommitResult> done) {
  const int64_t now = env_->MonotonicMicros();
  // Kept until answered: a home that refuses it unproposed (Unavailable)
  // leaves it to be proposed here.
  auto request = std::make_shared<CommitRequest>();
  *request->mutable_group() = group;
  request->set_position(at.position);
  request->set_timestamp(at.timestamp);
  request->set_next_leader(at.next_leader);
  *request->mutable_entry() = std::move(entry);
  *request->mutable_reads() = *reads;
  request->set_budget_micros(std::max<int64_t>(1, deadline - now));
  request->set_origin(origin_);
  request->set_since(since);
  request->set_sent(now);
  request->set_sent_wall(env_->NowMicros());
  stats_.forwarded.fetch_add(1, std::memory_order_relaxed);
  const size_t index = static_cast<size_t>(&home - options_.replicas.data());
  internal::CallProto<CommitReply>(
      this, home.replication, "repl.Commit", *request,
      [this, group = std::move(group), at, request, reads = std::move(reads), deadline, since,
       started, index, home = home.name,
       done = std::move(done)](absl::StatusOr<CommitReply> r) mutable {
        if (!r.ok()) {
          // The home may have proposed it, or even committed it: the
          // outcome is unknown. Its groups' commits are proposed here for
          // a while.
          HomeAnswered(index, false);
          stats_.unknown.fetch_add(1, std::memory_order_relaxed);
          return done(absl::DeadlineExceededError(
              StrCat("outcome unknown: the commit was sent to its entity group's home at ", home,
                     ", which did not answer (", r.status().ToString(),
                     "); do not retry it blindly, read the group first")));
        }
        if (r->code() == static_cast<int>(absl::StatusCode::kUnavailable)) {
          // Refused unproposed (the home is overloaded, or no home; it
          // will refuse copies of this request too): propose it here.
          HomeAnswered(index, false);
          return Commit(std::move(group), at, std::move(*request->mutable_entry()), std::move(done),
                        deadline, std::move(reads), since);
        }
        HomeAnswered(index, true);
        // Others still send the group's commits there: it stays hot. (Not
        // told so, it cools down after hot_for: cooling at once would
        // make a group flap while its writers wait for their turns.)
        if (r->contended()) NoteHot(group);
        const auto code = static_cast<absl::StatusCode>(r->code());
        if (code == absl::StatusCode::kOk) {
          stats_.commits.fetch_add(1, std::memory_order_relaxed);
          commit_latency_.Observe(env_->MonotonicMicros() - started);
          group_counts_.Add(group.root(), 0);
          return done(CommitResult{r->position(), r->timestamp()});
        }
        switch (code) {
          case absl::StatusCode::kAborted:
            stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
            group_counts_.Add(group.root(), 1);
            [[fallthrough]];
          case absl::StatusCode::kInvalidArgument:
          case absl::StatusCode::kFailedPrecondition:
          case absl::StatusCode::kResourceExhausted:
          case absl::StatusCode::kDeadlineExceeded: {
            absl::Status status(code, StrCat(r->message(), " (at the group's home, ", home, ")"));
            return done(r->turn() && code == absl::StatusCode::kAborted ? WithTurn(status)
                                                                        : status);
          }
          default:
            // Not an outcome the home gives: the commit may be anywhere.
            HomeAnswered(index, false);
            stats_.unknown.fetch_add(1, std::memory_order_relaxed);
            return done(absl::DeadlineExceededError(StrCat(
                "outcome unknown: the entity group's home at ", home, " answered code ", r->code(),
                " (", r->message(), "); do not retry it blindly, read the group first")));
        }
      },
      absl::Microseconds(std::max<int64_t>(1, deadline - now)), deadline);
}

void GroupClient::AwaitTurnAt(const ReplicaInfo& home, GroupRef group, int64_t since,
                              Callback<bool> done, int64_t deadline) {
  const int64_t now = env_->MonotonicMicros();
  TurnRequest request;
  *request.mutable_group() = std::move(group);
  request.set_origin(origin_);
  request.set_since(since);
  request.set_sent(now);
  request.set_budget_micros(std::max<int64_t>(1, deadline - now));
  GroupRef copy = request.group();
  internal::CallProto<TurnReply>(
      this, home.replication, "repl.AwaitTurn", request,
      [this, group = std::move(copy), done = std::move(done)](absl::StatusOr<TurnReply> r) mutable {
        if (r.ok() && r->after() != 0) SetReadFloor(group, r->after());
        // Turns only order retries: without an answer the retry goes ahead.
        if (r.ok() || !absl::IsDeadlineExceeded(r.status())) return done(true);
        done(r.status());
      },
      absl::Microseconds(std::max<int64_t>(1, deadline - now)), deadline);
}

void GroupClient::SetReadFloor(const GroupRef& group, uint64_t position) {
  const int64_t now = env_->MonotonicMicros();
  absl::MutexLock lock(&floors_mu_);
  if (floors_.size() >= kMaxReadFloors) {
    absl::erase_if(floors_, [now](const auto& kv) {
      return now >= kv.second.until && kv.second.waiting.empty() && !kv.second.polling;
    });
    if (floors_.size() >= kMaxReadFloors) return;  // the retry reads without waiting
  }
  ReadFloor& f = floors_[GroupKey(group)];
  if (position > f.position) {
    // (Only a higher floor is waited for anew: a home that keeps naming
    // one position the replica never reaches holds no read up for long.)
    f.group = group;
    f.position = position;
    f.until = now + absl::ToInt64Microseconds(kReadFloorWait);
  }
  floors_size_.store(floors_.size(), std::memory_order_relaxed);
}

bool GroupClient::HasReadFloor(const GroupRef& group) {
  if (floors_size_.load(std::memory_order_relaxed) == 0) return false;
  const int64_t now = env_->MonotonicMicros();
  absl::MutexLock lock(&floors_mu_);
  auto it = floors_.find(GroupKey(group));
  return it != floors_.end() && now < it->second.until;
}

void GroupClient::AwaitReadFloor(const GroupRef& group, int64_t deadline,
                                 absl::AnyInvocable<void()> then) {
  const std::string key = GroupKey(group);
  const int64_t now = env_->MonotonicMicros();
  bool poll = false;
  {
    absl::MutexLock lock(&floors_mu_);
    auto it = floors_.find(key);
    const int64_t give_up = std::min(deadline, now + absl::ToInt64Microseconds(kReadFloorWait));
    if (it != floors_.end() && now < it->second.until && now < give_up) {
      it->second.waiting.emplace_back(give_up, std::move(then));
      poll = !std::exchange(it->second.polling, true);
    }
  }
  if (then) return then();  // no floor (any more), or no time to wait
  if (poll) PollReadFloor(key);
}

void GroupClient::PollReadFloor(const std::string& key) {
  GroupRef group;
  {
    absl::MutexLock lock(&floors_mu_);
    auto it = floors_.find(key);
    if (it == floors_.end()) return;
    group = it->second.group;
  }
  StateRequest req;
  *req.mutable_group() = std::move(group);
  internal::CallProto<StateReply>(
      this, options_.replicas[options_.local].replication, "repl.State", req,
      [this, key](absl::StatusOr<StateReply> state) {
        std::vector<absl::AnyInvocable<void()>> go;
        bool again = false;
        {
          const int64_t now = env_->MonotonicMicros();
          absl::MutexLock lock(&floors_mu_);
          auto it = floors_.find(key);
          if (it == floors_.end()) return;
          ReadFloor& f = it->second;
          // Reached (or unknown: the read finds out itself): every read goes.
          const bool reached = !state.ok() || state->applied().position() >= f.position;
          std::vector<std::pair<int64_t, absl::AnyInvocable<void()>>> still;
          for (auto& [give_up, then] : f.waiting) {
            if (reached || now >= give_up) {
              go.push_back(std::move(then));
            } else {
              still.emplace_back(give_up, std::move(then));
            }
          }
          f.waiting = std::move(still);
          again = !f.waiting.empty();
          f.polling = again;
          if (!again && (reached || now >= f.until)) {
            floors_.erase(it);
            floors_size_.store(floors_.size(), std::memory_order_relaxed);
          }
        }
        for (auto& then : go) then();
        if (!again) return;
        env_->Schedule(kReadFloorPoll, [this, life = lifetime_, key] {
          Entry in(life);
          if (in) PollReadFloor(key);
        });
      },
      kReadFloorWait);
}

}  // namespace megastore::replication
