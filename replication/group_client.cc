#include "replication/group_client.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/synchronization/mutex.h"
#include "base/strings.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator.pb.h"
#include "paxos/paxos.h"
#include "storage/lock/lock.pb.h"

namespace megastore::replication {

namespace {

template <typename T>
using Callback = GroupClient::Callback<T>;

// The caller's deadline, or the client's default from now.
int64_t DeadlineFrom(GroupClient* c, int64_t deadline) {
  if (deadline != 0) return deadline;
  return c->env()->MonotonicMicros() + absl::ToInt64Microseconds(c->options().deadline);
}

bool Expired(GroupClient* c, int64_t deadline) { return c->env()->MonotonicMicros() >= deadline; }

// A pause of `d`, cut short at `deadline` (when the waiter then gives up).
absl::Duration Capped(GroupClient* c, int64_t deadline, absl::Duration d) {
  return std::min(d,
                  absl::Microseconds(std::max<int64_t>(0, deadline - c->env()->MonotonicMicros())));
}

// Runs `fn` after `d` on the Env's timer, unless the client is gone by then.
void Later(GroupClient* c, absl::Duration d, std::function<void()> fn) {
  c->env()->Schedule(d, [life = c->lifetime(), fn = std::move(fn)] {
    GroupClient::Entry entry(life);
    if (entry) fn();
  });
}

absl::Duration Jitter(GroupClient* c, absl::Duration max) {
  const int64_t us = std::max<int64_t>(1, absl::ToInt64Microseconds(max));
  return absl::Microseconds(static_cast<int64_t>(c->env()->Random64() % us) + 1);
}

// Calls `method` at `node` with a protobuf request and parses the reply.
// No request waits past `deadline` (0: no limit beyond its timeout).
template <typename Reply, typename Request>
void CallProto(GroupClient* c, const std::string& node, std::string_view method,
               const Request& request, Callback<Reply> done,
               std::optional<absl::Duration> timeout = std::nullopt, int64_t deadline = 0) {
  const std::string m(method);
  absl::Duration wait = timeout.value_or(c->options().rpc_timeout);
  if (deadline != 0)
    wait = std::clamp(absl::Microseconds(deadline - c->env()->MonotonicMicros()),
                      absl::Milliseconds(1), wait);
  c->transport()->Call(
      node, method, request.SerializeAsString(), wait,
      [life = c->lifetime(), m, done = std::move(done)](absl::StatusOr<std::string> r) mutable {
        GroupClient::Entry entry(life);
        if (!entry) return;  // the client is gone
        if (!r.ok()) return done(r.status());
        Reply reply;
        if (!reply.ParseFromString(*r))
          return done(absl::DataLossError(StrCat("unparsable reply to ", m)));
        done(std::move(reply));
      });
}

// CallProto for requests that are safe to repeat: a lost request or reply
// (or a replica briefly unavailable) is retried after a short random pause
// until `deadline`.
template <typename Reply, typename Request>
void CallRetrying(GroupClient* c, std::string node, std::string method, Request request,
                  int64_t deadline, Callback<Reply> done) {
  auto parked = std::make_shared<Callback<Reply>>(std::move(done));
  CallProto<Reply>(
      c, node, method, request,
      [c, node, method, request, deadline, parked](absl::StatusOr<Reply> r) {
        const bool transient =
            absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status());
        if (r.ok() || !transient || Expired(c, deadline)) return (*parked)(std::move(r));
        Later(c, Capped(c, deadline, Jitter(c, c->options().max_backoff)),
              [c, node, method, request, deadline, parked] {
                CallRetrying<Reply>(c, node, method, request, deadline, std::move(*parked));
              });
      },
      std::nullopt, deadline);
}

// Runs `n` calls and reports their results once `enough` succeeded or all
// answered, whichever is first.
template <typename T>
class Gather : public std::enable_shared_from_this<Gather<T>> {
 public:
  using Results = std::vector<std::optional<absl::StatusOr<T>>>;
  Gather(size_t n, size_t enough, absl::AnyInvocable<void(Results)> done)
      : results_(n), enough_(enough), done_(std::move(done)) {}

  Callback<T> Slot(size_t i) {
    return
        [self = this->shared_from_this(), i](absl::StatusOr<T> r) { self->Set(i, std::move(r)); };
  }
  // For an empty set of calls.
  void FinishIfEmpty() {
    if (results_.empty()) Set(0, std::nullopt);
  }

 private:
  void Set(size_t i, std::optional<absl::StatusOr<T>> r) {
    absl::AnyInvocable<void(Results)> done;
    Results copy;
    {
      absl::MutexLock lock(&mu_);
      if (!done_) return;
      if (r) {
        ok_ += r->ok() ? 1 : 0;
        ++answered_;
        results_[i] = std::move(r);
      }
      if (ok_ < enough_ && answered_ < results_.size()) return;
      done = std::move(done_);
      done_ = nullptr;
      copy = results_;
    }
    done(std::move(copy));
  }

  absl::Mutex mu_;
  Results results_;
  const size_t enough_;
  size_t ok_ = 0, answered_ = 0;
  absl::AnyInvocable<void(Results)> done_;
};

LogPosition FromApplied(const AppliedRecord& a, int replica) {
  LogPosition p;
  p.position = a.position();
  p.timestamp = a.timestamp();
  p.next_leader = a.next_leader();
  p.replica = replica;
  return p;
}

// ---- Paxos for one position across the voting replicas ---------------------------

// Replicas that accept the chosen value after it was chosen (their replies
// were still on the way): each such accept spares that replica's
// coordinator the invalidation.
class LateAccepts {
 public:
  void Add(int replica) {
    std::vector<std::function<void()>> fire;
    {
      absl::MutexLock lock(&mu_);
      accepted_.insert(replica);
      auto it = waiters_.find(replica);
      if (it == waiters_.end()) return;
      fire = std::move(it->second);
      waiters_.erase(it);
    }
    for (auto& f : fire) f();
  }
  // Runs `fn` once `replica` has accepted (at once if it has).
  void OnAccept(int replica, std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      if (!accepted_.count(replica)) {
        waiters_[replica].push_back(std::move(fn));
        return;
      }
    }
    fn();
  }

 private:
  absl::Mutex mu_;
  std::set<int> accepted_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<std::function<void()>>> waiters_ ABSL_GUARDED_BY(mu_);
};

struct Chosen {
  std::string value;
  std::set<int> accepted_by;  // replica indices; empty if `learned`
  bool learned = false;       // a replica already knew the value
  bool fast = false;          // chosen by the leader's ballot-0 accept (no prepare)
  std::shared_ptr<LateAccepts> late = std::make_shared<LateAccepts>();
};

class PositionDriver : public std::enable_shared_from_this<PositionDriver> {
 public:
  PositionDriver(GroupClient* c, GroupRef group, uint64_t position, std::string value,
                 std::optional<int> leader_voter, int64_t deadline, Callback<Chosen> done)
      : c_(c),
        group_(std::move(group)),
        position_(position),
        deadline_(deadline),
        proposer_(paxos::ProposerOptions{static_cast<int>(c->voters().size()), ProposerId(c),
                                         leader_voter},
                  std::move(value)),
        done_(std::move(done)) {}

  void Start() {
    std::vector<paxos::Message> out;
    uint64_t round = 0;
    bool fast = false;
    {
      absl::MutexLock lock(&mu_);
      out = proposer_.Start();
      round = ++round_;
      fast = proposer_.state() == paxos::Proposer::State::kFastAccept;
    }
    // A leader that does not answer soon is given up on sooner than a round.
    ArmRoundTimer(round, fast ? std::optional(c_->options().leader_timeout) : std::nullopt);
    Send(std::move(out), round);
  }

 private:
  static uint64_t ProposerId(GroupClient* c) {
    uint64_t id = 0;
    while (id == 0) id = c->env()->Random64();
    return id;
  }

  void Send(std::vector<paxos::Message> out, uint64_t round) {
    for (paxos::Message& m : out) {
      PaxosRequest req;
      *req.mutable_group() = group_;
      req.set_position(position_);
      req.set_accept(m.type == paxos::Message::Type::kAccept);
      req.mutable_ballot()->set_round(m.ballot.round);
      req.mutable_ballot()->set_proposer(m.ballot.proposer);
      req.set_value(m.value);
      const int replica = c_->voters()[m.acceptor];
      CallProto<PaxosReply>(
          c_, c_->options().replicas[replica].replication, "repl.Paxos", req,
          [self = shared_from_this(), m, round](absl::StatusOr<PaxosReply> r) {
            self->OnReply(m, round, std::move(r));
          },
          std::nullopt, deadline_);
    }
  }

  void OnReply(const paxos::Message& request, uint64_t round, absl::StatusOr<PaxosReply> r) {
    if (!r.ok()) {
      // A position no replica knows the group to have reached (a forged
      // read position): once a majority says so, stop retrying. Nothing of
      // ours can be chosen without them, but a minority may hold it, so the
      // outcome is still reported as unknown.
      // Likewise when a majority is out of disk space: waiting for the
      // deadline would only hide why.
      // And when every voter's access policy refuses the writer in one round
      // and no acceptor ever answered it otherwise: no retry helps, and
      // nothing was accepted anywhere, so the commit failed. (Any other
      // mix, while a policy change spreads, leaves the outcome to the round
      // timer: an acceptor that took the entry may see it chosen later.)
      const bool beyond = IsBeyondTop(r.status());
      const bool denied = absl::IsPermissionDenied(r.status());
      if (!beyond && !denied && !absl::IsResourceExhausted(r.status()))
        return;  // lost: the round timer takes care of it
      bool give_up;
      {
        absl::MutexLock lock(&mu_);
        if (denied && (round != round_ || answered_)) return;
        std::set<int>& refused = beyond ? beyond_top_ : denied ? denied_ : out_of_space_;
        refused.insert(request.acceptor);
        give_up = !finished_ &&
                  refused.size() >= (denied ? c_->voters().size() : c_->voters().size() / 2 + 1);
      }
      if (give_up && denied) {
        return Finish(
            absl::PermissionDeniedError(StrCat("every replica refused to write log position ",
                                               position_, ": ", r.status().message())));
      }
      if (give_up) {
        Finish(absl::DeadlineExceededError(
            StrCat("outcome unknown: a majority of replicas refused log position ", position_,
                   beyond ? " as beyond the group's log (" : " for lack of storage (",
                   r.status().message(), ")")));
      }
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      answered_ = true;
    }
    if (r->learned()) {
      Chosen chosen;
      chosen.value = r->learned_value();
      chosen.learned = true;
      return Finish(std::move(chosen));
    }
    paxos::Message m;
    m.type = request.type == paxos::Message::Type::kAccept ? paxos::Message::Type::kAccepted
                                                           : paxos::Message::Type::kPromise;
    m.acceptor = request.acceptor;
    m.proposer = request.proposer;
    m.ballot = request.ballot;
    m.ok = r->ok();
    m.promised = paxos::Ballot{r->promised().round(), r->promised().proposer()};
    if (r->has_accepted()) {
      m.accepted_ballot = paxos::Ballot{r->accepted().round(), r->accepted().proposer()};
      m.accepted_value = r->accepted_value();
    }
    std::vector<paxos::Message> out;
    std::optional<Chosen> chosen;
    bool stalled = false, late = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) {
        // An accept of the chosen value that arrived after the majority.
        late = chosen_ballot_ && m.type == paxos::Message::Type::kAccepted && m.ok &&
               m.ballot == *chosen_ballot_;
      } else {
        out = proposer_.Step(m);
        if (proposer_.chosen()) {
          chosen_ballot_ = proposer_.ballot();
          chosen.emplace();
          chosen->late = late_;
          chosen->value = proposer_.chosen_value();
          chosen->fast = proposer_.ballot().round == 0;
          for (paxos::AcceptorId a : proposer_.accepted_by())
            chosen->accepted_by.insert(c_->voters()[a]);
        } else if (proposer_.state() == paxos::Proposer::State::kStalled && round == round_ &&
                   retry_armed_ != round_) {
          retry_armed_ = round_;
          stalled = true;
        }
      }
    }
    if (late) return late_->Add(c_->voters()[request.acceptor]);
    if (chosen) return Finish(std::move(*chosen));
    if (stalled) {
      // Refused on the fast path because the leader took another writer's
      // value at ballot 0: that writer is most likely finishing the
      // position. Preparing at once would preempt its accepts (with many
      // writers on one group, everyone's, round after round); wait long
      // enough for it to finish, and the next round mostly just learns the
      // outcome from the replicas.
      const bool lost_fast_path = request.type == paxos::Message::Type::kAccept &&
                                  request.ballot == paxos::Ballot{} && m.accepted_ballot &&
                                  *m.accepted_ballot == paxos::Ballot{} &&
                                  m.accepted_value != request.value;
      ScheduleRetry(
          round, lost_fast_path ? c_->options().leader_timeout + Backoff(round) : Backoff(round));
    }
    Send(std::move(out), round);
  }

  void ArmRoundTimer(uint64_t round, std::optional<absl::Duration> limit = std::nullopt) {
    // A round with no decision after one request timeout (plus a margin
    // for the acceptor's own storage) is lost: retry after a backoff.
    const absl::Duration wait =
        limit.value_or(c_->options().rpc_timeout + c_->options().rpc_timeout / 4);
    Later(c_, Capped(c_, deadline_, wait), [self = shared_from_this(), round] {
      bool retry = false;
      {
        absl::MutexLock lock(&self->mu_);
        if (!self->finished_ && self->round_ == round && self->retry_armed_ != round) {
          self->retry_armed_ = round;
          retry = true;
        }
      }
      if (retry) self->ScheduleRetry(round, self->Backoff(round));
    });
  }

  // The pause after failed round `round`: random, up to max_backoff, doubling
  // with each further round up to 8 times it, so many writers dueling over
  // one position spread out instead of preempting each other forever.
  absl::Duration Backoff(uint64_t round) const {
    const uint64_t factor = uint64_t{1} << std::min<uint64_t>(round > 0 ? round - 1 : 0, 3);
    return Jitter(c_, c_->options().max_backoff * static_cast<int64_t>(factor));
  }

  void ScheduleRetry(uint64_t round, absl::Duration after) {
    Later(c_, Capped(c_, deadline_, after),
          [self = shared_from_this(), round] { self->Retry(round); });
  }

  void Retry(uint64_t round) {
    std::vector<paxos::Message> out;
    uint64_t next = 0;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || round != round_) return;
      if (Expired(c_, deadline_)) {
        finished_ = true;
      } else {
        out = proposer_.Retry();
        next = ++round_;
        beyond_top_.clear();  // refusals count within one round
        out_of_space_.clear();
        denied_.clear();
      }
    }
    if (out.empty()) {
      return Finish(absl::DeadlineExceededError(
          StrCat("no value chosen at log position ", position_, " before the deadline")));
    }
    ArmRoundTimer(next);
    Send(std::move(out), next);
  }

  void Finish(absl::StatusOr<Chosen> result) {
    Callback<Chosen> done;
    {
      absl::MutexLock lock(&mu_);
      if (!done_) return;
      finished_ = true;
      done = std::move(done_);
      done_ = nullptr;
    }
    done(std::move(result));
  }

  GroupClient* const c_;
  const GroupRef group_;
  const uint64_t position_;
  const int64_t deadline_;
  absl::Mutex mu_;
  paxos::Proposer proposer_ ABSL_GUARDED_BY(mu_);
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t retry_armed_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<paxos::Ballot> chosen_ballot_ ABSL_GUARDED_BY(mu_);
  std::set<int> beyond_top_ ABSL_GUARDED_BY(mu_);  // acceptors that refused the position as too far
  std::set<int> out_of_space_ ABSL_GUARDED_BY(mu_);  // ... or for a full disk
  std::set<int> denied_ ABSL_GUARDED_BY(mu_);        // ... or by their access policy
  bool answered_ ABSL_GUARDED_BY(mu_) = false;  // some acceptor answered (promise, accept or not)
  const std::shared_ptr<LateAccepts> late_ = std::make_shared<LateAccepts>();
  Callback<Chosen> done_ ABSL_GUARDED_BY(mu_);
};

// ---- after a value is chosen: invalidate, then apply --------------------------------

coordinator::CoordinatorRequest CoordRequest(const GroupRef& group, uint64_t position,
                                             uint64_t epoch = 0) {
  coordinator::CoordinatorRequest r;
  r.set_table(group.table());
  r.set_root(group.root());
  r.set_position(position);
  r.set_epoch(epoch);
  return r;
}

// Invalidates replica `r`'s coordinator for `position`, or establishes that
// it cannot be serving: it lacks its lock at enough of the other lock
// services that it cannot hold a majority. Both questions go out at once;
// either answer suffices. Retries until `deadline`.
void InvalidateOne(GroupClient* c, GroupRef group, uint64_t position, int r, int64_t deadline,
                   absl::AnyInvocable<void(absl::Status)> done) {
  struct Attempt {
    absl::Mutex mu;
    absl::AnyInvocable<void(absl::Status)> done;
    int outstanding = 2;  // the invalidation, and the lock survey
  };
  auto attempt = std::make_shared<Attempt>();
  attempt->done = std::move(done);
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
  CallProto<coordinator::CoordinatorReply>(
      c, c->options().replicas[r].coordinator, "coord.Invalidate", CoordRequest(group, position),
      [answer](absl::StatusOr<coordinator::CoordinatorReply> reply) { answer(reply.ok()); });

  std::vector<int> others;
  for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i)
    if (i != r) others.push_back(i);
  const size_t majority = others.size() / 2 + 1;
  const size_t n = others.size();
  auto on_locks = [answer, majority, n](Gather<storage::lock::LockReply>::Results results) {
    size_t free = 0;
    for (auto& res : results)
      if (res && res->ok() && !(*res)->held()) ++free;
    answer(free > n - majority);
  };
  // Done as soon as enough lock services report the lock free.
  auto gather = std::make_shared<Gather<storage::lock::LockReply>>(n, n, std::move(on_locks));
  storage::lock::LockRequest q;
  q.set_name(coordinator::LockName(c->options().replicas[r].name));
  for (size_t i = 0; i < n; ++i)
    CallProto<storage::lock::LockReply>(c, c->options().replicas[others[i]].lock_service,
                                        "lock.Query", q, gather->Slot(i));
  gather->FinishIfEmpty();
}

// Makes a chosen value visible safely and applies it: invalidates the
// coordinator of every full replica that did not accept it (unless it was
// learned from a replica, whose copy is only ever written after that
// step), then applies it everywhere, waiting for `wait_replica`'s apply.
// `done(visible, applied)`: whether the invalidations succeeded, and how the
// apply at `wait_replica` went.
using CompleteCallback = absl::AnyInvocable<void(absl::Status visible, absl::Status applied)>;
void Complete(GroupClient* c, GroupRef group, uint64_t position, Chosen chosen, int wait_replica,
              int64_t deadline, CompleteCallback done) {
  std::vector<int> to_invalidate;
  if (!chosen.learned) {
    for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i)
      if (c->options().replicas[i].type == ReplicaType::kFull && !chosen.accepted_by.count(i))
        to_invalidate.push_back(i);
  }
  auto apply = [c, group, position, value = std::move(chosen.value), wait_replica,
                done = std::move(done)](Gather<bool>::Results results) mutable {
    for (auto& r : results)
      if (r && !r->ok()) return done(r->status(), absl::AbortedError("not applied"));
    ApplyRequest req;
    *req.mutable_group() = group;
    req.set_position(position);
    req.set_value(value);
    auto waited = std::make_shared<CompleteCallback>(std::move(done));
    for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i) {
      CallProto<ApplyReply>(c, c->options().replicas[i].replication, "repl.Apply", req,
                            [i, wait_replica, waited](absl::StatusOr<ApplyReply> r) {
                              if (i != wait_replica) return;
                              (*waited)(absl::OkStatus(), r.ok() ? absl::OkStatus() : r.status());
                            });
    }
    if (wait_replica < 0) (*waited)(absl::OkStatus(), absl::OkStatus());
  };
  auto gather =
      std::make_shared<Gather<bool>>(to_invalidate.size(), to_invalidate.size(), std::move(apply));
  for (size_t i = 0; i < to_invalidate.size(); ++i) {
    // Whichever comes first: the invalidation, or the replica's own accept.
    struct Once {
      absl::Mutex mu;
      Callback<bool> slot;
    };
    auto once = std::make_shared<Once>();
    once->slot = gather->Slot(i);
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
    InvalidateOne(c, group, position, to_invalidate[i], deadline, [settle](absl::Status s) mutable {
      if (s.ok()) return settle(true);
      settle(s);
    });
  }
  gather->FinishIfEmpty();
}

LogEntry NoOp(GroupClient* c) {
  LogEntry e;
  e.set_id(StrCat("noop-", c->env()->Random64()));
  e.set_noop(true);
  e.set_next_leader(-1);
  return e;
}

// ---- catch-up ----------------------------------------------------------------------

struct CatchUpOp : std::enable_shared_from_this<CatchUpOp> {
  GroupClient* c;
  GroupRef group;
  int replica;
  uint64_t target;
  int64_t deadline;
  Callback<LogPosition> done;
  std::map<uint64_t, std::string> known;  // chosen values found in some replica's log
  uint64_t next = 0;                      // the next position to apply
  uint64_t chunk_end = 0;

  void Begin() {
    StateRequest req;
    *req.mutable_group() = group;
    CallRetrying<StateReply>(c, c->options().replicas[replica].replication, "repl.State", req,
                             deadline, [self = shared_from_this()](absl::StatusOr<StateReply> s) {
                               if (!s.ok()) return self->Fail(s.status());
                               const AppliedRecord& a = s->applied();
                               if (a.position() >= self->target)
                                 return self->Done(FromApplied(a, self->replica));
                               self->next = a.position() + 1;
                               self->Fetch();
                             });
  }

  void Fetch() {
    chunk_end = std::min(target, next + LogReplica::kMaxReadLog - 1);
    ReadLogRequest req;
    *req.mutable_group() = group;
    req.set_from(next);
    req.set_to(chunk_end);
    const size_t n = c->options().replicas.size();
    auto gather = std::make_shared<Gather<ReadLogReply>>(
        n, n, [self = shared_from_this()](Gather<ReadLogReply>::Results results) {
          for (auto& r : results) {
            if (!r || !r->ok()) continue;
            for (int i = 0; i < (*r)->positions_size(); ++i)
              self->known.emplace((*r)->positions(i), (*r)->values(i));
          }
          self->Step();
        });
    for (size_t i = 0; i < n; ++i)
      CallProto<ReadLogReply>(c, c->options().replicas[i].replication, "repl.ReadLog", req,
                              gather->Slot(i), std::nullopt, deadline);
  }

  void Step() {
    if (Expired(c, deadline))
      return Fail(absl::DeadlineExceededError(
          StrCat("catch-up of ", c->options().replicas[replica].name, " stopped at position ", next,
                 " of ", target, ": out of time")));
    if (next > chunk_end) {
      if (chunk_end >= target) return Begin();  // re-reads the applied position
      return Fetch();
    }
    auto it = known.find(next);
    if (it != known.end()) {
      ApplyRequest req;
      *req.mutable_group() = group;
      req.set_position(next);
      req.set_value(it->second);
      CallRetrying<ApplyReply>(c, c->options().replicas[replica].replication, "repl.Apply", req,
                               deadline, [self = shared_from_this()](absl::StatusOr<ApplyReply> r) {
                                 if (!r.ok()) return self->Fail(r.status());
                                 self->next = std::max(self->next + 1, r->applied().position() + 1);
                                 self->Step();
                               });
      return;
    }
    // Nobody knows the value: decide the position (a no-op, unless some
    // replica accepted a value that must win).
    auto driver = std::make_shared<PositionDriver>(
        c, group, next, NoOp(c).SerializeAsString(), std::nullopt, deadline,
        [self = shared_from_this()](absl::StatusOr<Chosen> chosen) {
          if (!chosen.ok()) return self->Fail(chosen.status());
          Complete(self->c, self->group, self->next, std::move(*chosen), self->replica,
                   self->deadline, [self](absl::Status visible, absl::Status applied) {
                     if (!visible.ok()) return self->Fail(visible);
                     if (!applied.ok()) return self->Fail(applied);
                     ++self->next;
                     self->Step();
                   });
        });
    driver->Start();
  }

  void Done(LogPosition p) {
    if (done) std::exchange(done, nullptr)(std::move(p));
  }
  void Fail(absl::Status s) {
    if (done) std::exchange(done, nullptr)(std::move(s));
  }
};

}  // namespace

const char* ToString(ReadLevel level) {
  switch (level) {
    case ReadLevel::kCurrent:
      return "current";
    case ReadLevel::kSnapshot:
      return "snapshot";
    case ReadLevel::kInconsistent:
      return "inconsistent";
  }
  return "?";
}

GroupClient::Entry::Entry(std::shared_ptr<Lifetime> life) : life_(std::move(life)) {
  absl::MutexLock lock(&life_->mu);
  if (life_->dead) return;
  ++life_->active;
  entered_ = true;
}

GroupClient::Entry::~Entry() {
  if (!entered_) return;
  absl::MutexLock lock(&life_->mu);
  --life_->active;
}

GroupClient::~GroupClient() {
  absl::MutexLock lock(&lifetime_->mu);
  lifetime_->dead = true;
  // Callbacks on other threads finish. (One on this thread — destroying the
  // client from its own callback — would wait forever: not allowed.)
  lifetime_->mu.Await(absl::Condition(
      +[](Lifetime* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu) { return l->active == 0; },
      lifetime_.get()));
}

GroupClient::GroupClient(Env* env, Transport* transport, GroupClientOptions options)
    : env_(env), transport_(transport), options_(std::move(options)) {
  for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
    if (Votes(options_.replicas[i].type)) voters_.push_back(i);
  for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
    if (options_.replicas[i].type == ReplicaType::kFull &&
        !options_.replicas[i].coordinator.empty())
      lock_homes_.push_back(i);
}

void GroupClient::CatchUp(GroupRef group, int replica, uint64_t target, Callback<LogPosition> done,
                          int64_t deadline) {
  stats_.catchups.fetch_add(1, std::memory_order_relaxed);
  auto op = std::make_shared<CatchUpOp>();
  op->c = this;
  op->group = std::move(group);
  op->replica = replica;
  op->target = target;
  op->deadline = DeadlineFrom(this, deadline);
  op->done = std::move(done);
  op->Begin();
}

void GroupClient::ReadPosition(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                               int64_t deadline_in) {
  const int64_t deadline = DeadlineFrom(this, deadline_in);
  const int local = options_.local;
  const ReplicaInfo& info = options_.replicas[local];
  StateRequest state_req;
  *state_req.mutable_group() = group;
  if (level != ReadLevel::kCurrent) {
    CallRetrying<StateReply>(
        this, info.replication, "repl.State", state_req, deadline,
        [local, level, done = std::move(done)](absl::StatusOr<StateReply> s) mutable {
          if (!s.ok()) return done(s.status());
          LogPosition p = FromApplied(s->applied(), local);
          p.latest = level == ReadLevel::kInconsistent;
          done(p);
        });
    return;
  }
  // Current: ask the coordinator and read the local log state at once.
  done = [this, started = env_->MonotonicMicros(),
          done = std::move(done)](absl::StatusOr<LogPosition> p) mutable {
    if (p.ok()) read_latency_.Observe(env_->MonotonicMicros() - started);
    done(std::move(p));
  };
  struct Local {
    std::optional<absl::StatusOr<coordinator::CoordinatorReply>> check;
    std::optional<absl::StatusOr<StateReply>> state;
  };
  auto local_view = std::make_shared<Local>();
  auto mu = std::make_shared<absl::Mutex>();
  const bool has_coordinator = info.type == ReplicaType::kFull;
  auto decide = [this, group, local, local_view, deadline, done = std::move(done)]() mutable {
    auto& check = *local_view->check;
    auto& state = *local_view->state;
    if (check.ok() && check->valid() && state.ok()) {
      // Up to date here: settle any position accepted locally but not yet
      // applied, then read locally.
      const uint64_t top = std::max(state->top(), state->applied().position());
      if (top <= state->applied().position()) return done(FromApplied(state->applied(), local));
      return CatchUp(group, local, top, std::move(done), deadline);
    }
    // Not known to be up to date: the highest position a majority knows.
    const size_t n = voters_.size();
    std::optional<uint64_t> epoch;
    if (check.ok()) epoch = check->epoch();
    auto on_states = [this, group, local, epoch, deadline,
                      done = std::move(done)](Gather<StateReply>::Results results) mutable {
      size_t ok = 0;
      uint64_t target = 0;
      std::optional<absl::Status> denied;
      size_t denials = 0;
      for (auto& r : results) {
        if (r && absl::IsPermissionDenied(r->status())) {
          denied = r->status();
          ++denials;
        }
        if (!r || !r->ok()) continue;
        ++ok;
        target = std::max({target, (*r)->top(), (*r)->applied().position()});
      }
      // Refused by a majority's access policy: no retry helps. (One stale
      // policy while another replica is down is only unavailability.)
      if (ok < voters_.size() / 2 + 1 && denials >= voters_.size() / 2 + 1) return done(*denied);
      if (ok < voters_.size() / 2 + 1)
        return done(absl::UnavailableError(
            StrCat("current read: only ", ok, " of ", voters_.size(),
                   " voting replicas answered; a majority is needed to find the latest position")));
      CatchUp(
          group, local, target,
          [this, group, local, epoch,
           done = std::move(done)](absl::StatusOr<LogPosition> p) mutable {
            if (p.ok() && epoch && options_.replicas[local].type == ReplicaType::kFull) {
              CallProto<coordinator::CoordinatorReply>(
                  this, options_.replicas[local].coordinator, "coord.Validate",
                  CoordRequest(group, p->position, *epoch),
                  [](absl::StatusOr<coordinator::CoordinatorReply>) {});
            }
            done(std::move(p));
          },
          deadline);
    };
    auto gather = std::make_shared<Gather<StateReply>>(n, n / 2 + 1, std::move(on_states));
    StateRequest req;
    *req.mutable_group() = group;
    for (size_t i = 0; i < n; ++i)
      CallProto<StateReply>(this, options_.replicas[voters_[i]].replication, "repl.State", req,
                            gather->Slot(i), std::nullopt, deadline);
  };
  auto shared_decide = std::make_shared<decltype(decide)>(std::move(decide));
  auto decided = std::make_shared<bool>(false);
  auto maybe_decide = [local_view, mu, shared_decide, decided] {
    {
      absl::MutexLock lock(mu.get());
      if (!local_view->check || !local_view->state || *decided) return;
      *decided = true;
    }
    (*shared_decide)();
  };
  if (has_coordinator) {
    CallProto<coordinator::CoordinatorReply>(
        this, info.coordinator, "coord.Check", CoordRequest(group, 0),
        [local_view, mu, maybe_decide](absl::StatusOr<coordinator::CoordinatorReply> r) {
          {
            absl::MutexLock lock(mu.get());
            local_view->check = std::move(r);
          }
          maybe_decide();
        },
        options_.coordinator_timeout, deadline);
  } else {
    local_view->check = absl::StatusOr<coordinator::CoordinatorReply>(
        absl::FailedPreconditionError("no coordinator at this replica"));
  }
  CallProto<StateReply>(
      this, info.replication, "repl.State", state_req,
      [local_view, mu, maybe_decide](absl::StatusOr<StateReply> r) {
        {
          absl::MutexLock lock(mu.get());
          local_view->state = std::move(r);
        }
        maybe_decide();
      },
      std::nullopt, deadline);
}

void GroupClient::Read(GroupRef group, const LogPosition& at, std::string row, std::string family,
                       Callback<ReadReply> done, int64_t deadline) {
  ReadRequest req;
  *req.mutable_group() = std::move(group);
  req.set_row(std::move(row));
  req.set_family(std::move(family));
  req.set_timestamp(at.timestamp);
  req.set_latest(at.latest);
  CallRetrying<ReadReply>(this, options_.replicas[at.replica].replication, "repl.Read", req,
                          DeadlineFrom(this, deadline), std::move(done));
}

void GroupClient::Scan(GroupRef group, const LogPosition& at, std::string start, std::string end,
                       std::string family, int64_t limit, Callback<ScanReply> done,
                       int64_t deadline) {
  ScanRequest req;
  *req.mutable_group() = std::move(group);
  req.set_start(std::move(start));
  req.set_end(std::move(end));
  req.set_family(std::move(family));
  req.set_timestamp(at.timestamp);
  req.set_latest(at.latest);
  req.set_limit(limit);
  CallRetrying<ScanReply>(this, options_.replicas[at.replica].replication, "repl.Scan", req,
                          DeadlineFrom(this, deadline), std::move(done));
}

void GroupClient::ScanIndex(std::string table, std::string start, std::string end, int64_t limit,
                            Callback<ScanReply> done, int64_t deadline) {
  ScanIndexRequest req;
  req.set_table(std::move(table));
  req.set_start(std::move(start));
  req.set_end(std::move(end));
  req.set_limit(limit);
  CallRetrying<ScanReply>(this, options_.replicas[options_.local].replication, "repl.ScanIndex",
                          req, DeadlineFrom(this, deadline), std::move(done));
}

void GroupClient::SomeReplicaReached(GroupRef group, uint64_t position, Callback<bool> done,
                                     int64_t deadline) {
  struct Poll {
    absl::Mutex mu;
    size_t outstanding ABSL_GUARDED_BY(mu) = 0;
    Callback<bool> done ABSL_GUARDED_BY(mu);
  };
  auto poll = std::make_shared<Poll>();
  std::vector<int> others;
  for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
    if (i != options_.local) others.push_back(i);
  {
    absl::MutexLock lock(&poll->mu);
    poll->outstanding = others.size();
    poll->done = std::move(done);
  }
  if (others.empty()) {
    Callback<bool> d;
    {
      absl::MutexLock lock(&poll->mu);
      d = std::move(poll->done);
    }
    return d(false);
  }
  StateRequest req;
  *req.mutable_group() = std::move(group);
  deadline = DeadlineFrom(this, deadline);
  for (int i : others) {
    CallProto<StateReply>(
        this, options_.replicas[i].replication, "repl.State", req,
        [poll, position](absl::StatusOr<StateReply> r) {
          const bool reached = r.ok() && std::max(r->top(), r->applied().position()) >= position;
          Callback<bool> d;
          {
            absl::MutexLock lock(&poll->mu);
            --poll->outstanding;
            if (!poll->done || (!reached && poll->outstanding > 0)) return;
            d = std::move(poll->done);
            poll->done = nullptr;
          }
          d(reached);
        },
        std::nullopt, deadline);
  }
}

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
  auto driver = std::make_shared<PositionDriver>(
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
        if (!chosen->learned) {
          // Complete invalidates the coordinator of each full replica that missed it.
          for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
            if (options_.replicas[i].type == ReplicaType::kFull && !chosen->accepted_by.count(i))
              stats_.invalidations.fetch_add(1, std::memory_order_relaxed);
        }
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
  driver->Start();
}

GroupClient::Stats GroupClient::stats() const {
  Stats s;
  s.commits = stats_.commits.load();
  s.fast_path = stats_.fast_path.load();
  s.conflicts = stats_.conflicts.load();
  s.unknown = stats_.unknown.load();
  s.locks_granted = stats_.locks_granted.load();
  s.locks_missed = stats_.locks_missed.load();
  s.catchups = stats_.catchups.load();
  s.invalidations = stats_.invalidations.load();
  return s;
}

std::vector<std::pair<std::string, uint64_t>> GroupClient::HottestGroups(size_t n,
                                                                         bool by_conflicts) const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [root, counts] : group_counts_.Top(n, by_conflicts ? 1 : 0))
    out.emplace_back(std::move(root), counts[by_conflicts ? 1 : 0]);
  return out;
}

const ReplicaInfo* GroupClient::LockHome(const GroupRef& group) const {
  if (lock_homes_.empty()) return nullptr;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a: the same home in every app server
  for (const std::string* part : {&group.table(), &group.root()}) {
    for (unsigned char ch : *part) {
      h ^= ch;
      h *= 0x100000001b3ULL;
    }
    h ^= 0xff;
    h *= 0x100000001b3ULL;
  }
  return &options_.replicas[static_cast<size_t>(lock_homes_[h % lock_homes_.size()])];
}

void GroupClient::LockGroup(GroupRef group, std::string owner, absl::Duration wait,
                            absl::Duration lease, Callback<bool> done, int64_t deadline) {
  const ReplicaInfo* home = LockHome(group);
  if (home == nullptr) {
    stats_.locks_missed.fetch_add(1, std::memory_order_relaxed);
    return done(
        absl::FailedPreconditionError("no full replica has a coordinator to hold advisory locks"));
  }
  coordinator::AdvisoryLockRequest req;
  req.set_table(group.table());
  req.set_root(group.root());
  req.set_owner(std::move(owner));
  req.set_wait_ms(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait))));
  req.set_lease_ms(static_cast<uint64_t>(std::max<int64_t>(1, absl::ToInt64Milliseconds(lease))));
  CallProto<coordinator::AdvisoryLockReply>(
      this, home->coordinator, "coord.Lock", req,
      [this, done = std::move(done)](absl::StatusOr<coordinator::AdvisoryLockReply> r) mutable {
        const bool granted = r.ok() && r->granted();
        (granted ? stats_.locks_granted : stats_.locks_missed)
            .fetch_add(1, std::memory_order_relaxed);
        if (!r.ok()) return done(r.status());
        done(granted);
      },
      wait + options_.rpc_timeout, deadline);
}

void GroupClient::UnlockGroup(GroupRef group, std::string owner) {
  const ReplicaInfo* home = LockHome(group);
  if (home == nullptr) return;
  coordinator::AdvisoryLockRequest req;
  req.set_table(group.table());
  req.set_root(group.root());
  req.set_owner(std::move(owner));
  CallProto<coordinator::AdvisoryLockReply>(this, home->coordinator, "coord.Unlock", req,
                                            [](absl::StatusOr<coordinator::AdvisoryLockReply>) {});
}

}  // namespace megastore::replication
