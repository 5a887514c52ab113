// Steps 1-3 of a write (write_steps.h): deciding one log position with the
// voting replicas. paxos::Proposer decides what to send and reports the
// decision, late accepts and how long a refused round waits; this drives
// it over the transport with round timers and backoff.
#include <algorithm>

#include "base/buggify.h"
#include "base/strings.h"
#include "paxos/paxos.h"
#include "replication/write_steps.h"

namespace megastore::replication::internal {

MS_FAULT_POINT(kSkipFastPath, "writer: skips the leader's fast path and prepares at once");

namespace {

// One position's Paxos, round after round. Step 1: a ballot-0 accept at the
// nominated leader (Start). Step 2: once the leader accepted, the same
// accept at the other voters (the proposer's next messages). Step 3: a
// refused fast path, or a round with no majority before its timer, backs
// off and runs Prepare and Accept at a higher ballot (Retry).
class PositionDriver : public std::enable_shared_from_this<PositionDriver> {
 public:
  PositionDriver(GroupClient* c, GroupRef group, uint64_t position, std::string value,
                 std::optional<int> leader_voter, int64_t deadline, Callback<Chosen> done)
      : c_(c),
        group_(std::move(group)),
        position_(position),
        deadline_(deadline),
        proposer_(Options(c, kSkipFastPath.Fire() ? std::nullopt : leader_voter), std::move(value)),
        done_(std::move(done)) {}

  void Start() {
    std::vector<paxos::Message> out;
    uint64_t round = 0;
    bool fast = false;
    {
      absl::MutexLock lock(&mu_);
      out = proposer_.Start().TakeMessages();  // a proposer persists nothing
      round = ++round_;
      round_started_ = c_->env()->MonotonicMicros();
      if (started_ == 0) started_ = round_started_;
      fast = proposer_.state() == paxos::Proposer::State::kFastAccept;
    }
    // A leader that does not answer soon is given up on sooner than a round.
    ArmRoundTimer(round, fast ? std::optional(c_->options().leader_timeout) : std::nullopt);
    Send(std::move(out), round);
  }

 private:
  static paxos::ProposerOptions Options(GroupClient* c, std::optional<int> leader_voter) {
    paxos::ProposerOptions o;
    o.acceptors = static_cast<int>(c->voters().size());
    o.id = ProposerId(c);
    o.leader = leader_voter;
    // An acceptor learns a value early (PaxosRequest.chosen_if_accepted)
    // only once every full replica holds it: a full replica's coordinator
    // vouches for current reads there, and one that missed the value must
    // be invalidated before anyone reads it — which the writer does only
    // after the decision. A witness serves no reads.
    for (size_t v = 0; v < c->voters().size(); ++v)
      if (c->options().replicas[c->voters()[v]].type == ReplicaType::kFull)
        o.learn_needs.insert(static_cast<int>(v));
    return o;
  }

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
      req.set_origin(c_->origin());
      req.set_chosen_if_accepted(m.completes_majority);
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
    if (r.ok() && r->hot()) c_->NoteHot(group_);  // the group's home asks for its commits
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
      // A replica whose accept failed will not accept late: the commit
      // invalidates its coordinator without waiting for it.
      if (request.type == paxos::Message::Type::kAccept)
        late_->Fail(c_->voters()[request.acceptor]);
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
    paxos::Message m;
    m.type = request.type == paxos::Message::Type::kAccept ? paxos::Message::Type::kAccepted
                                                           : paxos::Message::Type::kPromise;
    m.acceptor = request.acceptor;
    m.proposer = request.proposer;
    m.ballot = request.ballot;
    if (r->learned()) m.learned = r->learned_value();
    m.ok = r->ok();
    m.promised = paxos::Ballot{r->promised().round(), r->promised().proposer()};
    if (r->has_accepted()) {
      m.accepted_ballot = paxos::Ballot{r->accepted().round(), r->accepted().proposer()};
      m.accepted_value = r->accepted_value();
    }
    paxos::Ready ready;
    bool retry = false;
    absl::Duration round_took;
    int64_t started;
    {
      absl::MutexLock lock(&mu_);
      answered_ = true;
      started = started_;
      // After a failure was reported nothing more is sent; after the
      // decision, the proposer still reports late accepts.
      if (finished_ && !proposer_.chosen()) return;
      ready = proposer_.Step(m);
      if (ready.report().stalled && retry_armed_ != round_) {
        retry_armed_ = round_;
        retry = true;
        round_took = absl::Microseconds(c_->env()->MonotonicMicros() - round_started_);
      }
    }
    const paxos::Report& report = ready.report();
    if (report.late_accept) late_->Add(c_->voters()[*report.late_accept]);
    if (report.decided) {
      Chosen chosen;
      chosen.late = late_;
      chosen.value = report.decided->value;
      chosen.learned = report.decided->learned;
      chosen.fast = report.decided->fast;
      chosen.took = absl::Microseconds(c_->env()->MonotonicMicros() - started);
      for (paxos::AcceptorId a : report.decided->accepted_by)
        chosen.accepted_by.insert(c_->voters()[a]);
      return Finish(std::move(chosen));
    }
    if (retry) {
      // The winner of the fast path needs about one more round trip (its
      // accepts at the other voters) after its leader's answer: wait as
      // long as this refused round took, at most the leader's timeout, so
      // a prepare does not preempt those accepts.
      const absl::Duration winner =
          *report.stalled == paxos::Wait::kWinnerFirst
              ? std::min(std::max(round_took, absl::ZeroDuration()), c_->options().leader_timeout)
              : absl::ZeroDuration();
      ScheduleRetry(round, winner + Backoff(round));
    }
    Send(ready.TakeMessages(), round);
  }

  void ArmRoundTimer(uint64_t round, std::optional<absl::Duration> limit = std::nullopt) {
    // A round with no decision after one request timeout (plus a margin
    // for the acceptor's own storage) is lost: retry after a backoff.
    const absl::Duration wait =
        limit.value_or(c_->options().rpc_timeout + c_->options().rpc_timeout / 4);
    // Cancelled once the position is decided: a decided driver (its value,
    // perhaps megabytes) is not kept for the rest of the round's time, nor
    // the timer thread woken for it. (Until then the timer keeps the driver:
    // a round whose answers all came back undecided is retried from here.)
    const Env::TimerId timer =
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
    Env::TimerId earlier = 0;
    bool finished;
    {
      absl::MutexLock lock(&mu_);
      // Finished, or a later round armed its own timer meanwhile (this
      // thread stalled after scheduling): this one is not needed.
      finished = finished_ || round != round_;
      if (!finished) {
        earlier = round_timer_;
        round_timer_ = timer;
      }
    }
    if (finished) c_->env()->Cancel(timer);
    if (earlier != 0) c_->env()->Cancel(earlier);
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
      // Decided meanwhile (its Finish is on the way): not a lost deadline.
      if (finished_ || round != round_ || proposer_.chosen()) return;
      if (Expired(c_, deadline_)) {
        finished_ = true;
      } else {
        out = proposer_.Retry().TakeMessages();
        next = ++round_;
        round_started_ = c_->env()->MonotonicMicros();
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
    Env::TimerId timer = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!done_) return;
      finished_ = true;
      done = std::move(done_);
      done_ = nullptr;
      std::swap(timer, round_timer_);
    }
    if (timer != 0) c_->env()->Cancel(timer);
    done(std::move(result));
  }

  GroupClient* const c_;
  const GroupRef group_;
  const uint64_t position_;
  const int64_t deadline_;
  absl::Mutex mu_;
  paxos::Proposer proposer_ ABSL_GUARDED_BY(mu_);
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_started_ ABSL_GUARDED_BY(mu_) = 0;  // Env monotonic micros
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;        // the first round's start
  uint64_t retry_armed_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Env::TimerId round_timer_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none armed
  std::set<int> beyond_top_ ABSL_GUARDED_BY(mu_);  // acceptors that refused the position as too far
  std::set<int> out_of_space_ ABSL_GUARDED_BY(mu_);  // ... or for a full disk
  std::set<int> denied_ ABSL_GUARDED_BY(mu_);        // ... or by their access policy
  bool answered_ ABSL_GUARDED_BY(mu_) = false;  // some acceptor answered (promise, accept or not)
  const std::shared_ptr<LateAccepts> late_ = std::make_shared<LateAccepts>();
  Callback<Chosen> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void DecidePosition(GroupClient* c, GroupRef group, uint64_t position, std::string value,
                    std::optional<int> leader_voter, int64_t deadline, Callback<Chosen> done) {
  auto driver = std::make_shared<PositionDriver>(c, std::move(group), position, std::move(value),
                                                 leader_voter, deadline, std::move(done));
  driver->Start();
}

}  // namespace megastore::replication::internal
