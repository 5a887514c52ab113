// Reading (docs/replication.md, "Reading"): the position a read stands at,
// and the reads themselves.
#include <algorithm>
#include <memory>
#include <optional>

#include "base/gather.h"
#include "base/strings.h"
#include "replication/client_calls.h"

namespace megastore::replication {

using internal::Callback;
using internal::CallProto;
using internal::CallRetrying;
using internal::CoordinatorGroup;
using internal::DeadlineFrom;
using internal::FromApplied;

namespace {

// A current read's position. It asks the local coordinator (Check) and reads
// the local log state at once. If the group is valid here and applied up to
// its top, it reads here: no message leaves the datacenter. Valid with a
// position accepted but not applied (a commit being applied, or a writer
// that died first), it catches the local replica up (which asks every
// replica's log). Otherwise it asks a majority of voters for the highest
// position they know, catches the local replica up to it, and tells the
// local coordinator so (Validate with the epoch Check reported).
class ReadPositionOp : public std::enable_shared_from_this<ReadPositionOp> {
 public:
  ReadPositionOp(GroupClient* c, GroupRef group, int replica, int64_t deadline,
                 Callback<LogPosition> done)
      : c_(c),
        group_(std::move(group)),
        local_(replica),
        deadline_(deadline),
        done_(std::move(done)) {}

  // Decides from a coordinator's answer and the local state already read
  // (by a first read that brought the state along), instead of Start.
  void Resume(absl::StatusOr<coordinator::CoordinatorReply> check, StateReply state) {
    Decide(std::move(check), std::move(state));
  }

  void Start() {
    const ReplicaInfo& info = c_->options().replicas[local_];
    if (info.type == ReplicaType::kFull) {
      // The local coordinator answers at once or is treated as not
      // vouching; another datacenter's gets a WAN round trip.
      const absl::Duration wait = local_ == c_->options().local ? c_->options().coordinator_timeout
                                                                : c_->options().rpc_timeout;
      c_->coordinators()->Check(
          info.coordinator, CoordinatorGroup(group_), internal::RequestTimeout(c_, wait, deadline_),
          internal::Guarded<coordinator::CoordinatorReply>(
              c_, [self = shared_from_this()](absl::StatusOr<coordinator::CoordinatorReply> r) {
                self->OnLocal(std::move(r), std::nullopt);
              }));
    } else {
      OnLocal(absl::FailedPreconditionError("no coordinator at this replica"), std::nullopt);
    }
    StateRequest req;
    *req.mutable_group() = group_;
    CallProto<StateReply>(
        c_, info.replication, "repl.State", req,
        [self = shared_from_this()](absl::StatusOr<StateReply> r) {
          self->OnLocal(std::nullopt, std::move(r));
        },
        std::nullopt, deadline_);
  }

 private:
  // Records the coordinator's answer or the local state; decides once both
  // are in.
  void OnLocal(std::optional<absl::StatusOr<coordinator::CoordinatorReply>> check,
               std::optional<absl::StatusOr<StateReply>> state) {
    {
      absl::MutexLock lock(&mu_);
      if (check) check_ = std::move(check);
      if (state) state_ = std::move(state);
      if (!check_ || !state_) return;
      check = std::move(check_);
      state = std::move(state_);
      check_.reset();
      state_.reset();
    }
    Decide(std::move(*check), std::move(*state));
  }

  void Decide(absl::StatusOr<coordinator::CoordinatorReply> check,
              absl::StatusOr<StateReply> state) {
    if (check.ok() && check->valid() && state.ok()) {
      // Up to date here: settle any position accepted locally but not yet
      // applied, then read locally.
      const uint64_t top = std::max(state->top(), state->applied().position());
      if (top <= state->applied().position()) return Finish(FromApplied(state->applied(), local_));
      return c_->CatchUp(
          group_, local_, top,
          [self = shared_from_this()](absl::StatusOr<LogPosition> p) {
            self->Finish(std::move(p));
          },
          deadline_);
    }
    // Not known to be up to date: the highest position a majority knows.
    if (check.ok()) epoch_ = check->epoch();
    const std::vector<int>& voters = c_->voters();
    const size_t n = voters.size();
    auto gather = std::make_shared<Gather<StateReply>>(
        n, n / 2 + 1, [self = shared_from_this()](Gather<StateReply>::Results results) {
          self->OnMajority(std::move(results));
        });
    StateRequest req;
    *req.mutable_group() = group_;
    for (size_t i = 0; i < n; ++i)
      CallProto<StateReply>(c_, c_->options().replicas[voters[i]].replication, "repl.State", req,
                            gather->Slot(i), std::nullopt, deadline_);
  }

  void OnMajority(Gather<StateReply>::Results results) {
    const size_t voters = c_->voters().size();
    const size_t majority = voters / 2 + 1;
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
    if (ok < majority && denials >= majority) return Finish(*denied);
    if (ok < majority)
      return Finish(absl::UnavailableError(
          StrCat("current read: only ", ok, " of ", voters,
                 " voting replicas answered; a majority is needed to find the latest position")));
    c_->CatchUp(
        group_, local_, target,
        [self = shared_from_this()](absl::StatusOr<LogPosition> p) {
          self->OnCaughtUp(std::move(p));
        },
        deadline_);
  }

  void OnCaughtUp(absl::StatusOr<LogPosition> p) {
    const ReplicaInfo& info = c_->options().replicas[local_];
    if (p.ok() && epoch_ && info.type == ReplicaType::kFull) {
      // Fire and forget: a lost Validate only costs the next read a majority.
      c_->coordinators()->Validate(info.coordinator, CoordinatorGroup(group_), p->position, *epoch_,
                                   internal::RequestTimeout(c_, std::nullopt, 0),
                                   [](absl::StatusOr<coordinator::CoordinatorReply>) {});
    }
    Finish(std::move(p));
  }

  void Finish(absl::StatusOr<LogPosition> p) {
    if (done_) std::exchange(done_, nullptr)(std::move(p));
  }

  GroupClient* const c_;
  const GroupRef group_;
  const int local_;
  const int64_t deadline_;
  absl::Mutex mu_;
  std::optional<absl::StatusOr<coordinator::CoordinatorReply>> check_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<StateReply>> state_ ABSL_GUARDED_BY(mu_);
  // Set once, by Decide, before the majority read starts.
  std::optional<uint64_t> epoch_;
  Callback<LogPosition> done_;  // used by the one path that finishes
};

// Reads `read`'s row (and range) at the position `done` is called with.
Callback<LogPosition> ReadAtPosition(GroupClient* c, GroupRef group, ReadRequest read,
                                     int64_t deadline, Callback<FirstRead> done) {
  return [c, group = std::move(group), read = std::move(read), deadline,
          done = std::move(done)](absl::StatusOr<LogPosition> at) mutable {
    if (!at.ok()) return done(at.status());
    std::optional<ScanRange> also_scan;
    if (read.has_also_scan()) also_scan = std::move(*read.mutable_also_scan());
    c->Read(
        std::move(group), *at, std::move(*read.mutable_row()), std::move(*read.mutable_family()),
        [at = *at, done = std::move(done)](absl::StatusOr<ReadReply> r) mutable {
          if (!r.ok()) return done(r.status());
          done(FirstRead{at, std::move(*r)});
        },
        deadline, std::move(also_scan));
  };
}

// A transaction's first read together with its position: the local
// coordinator's Check alongside one repl.Read of the row at the local
// replica's applied position, which brings that log state along. If the
// coordinator vouches for the replica and nothing there is accepted beyond
// the applied position (a current read; a snapshot read needs neither),
// that is the position ReadPosition would have found, and the rows were
// read at it: one request less than the position and then the read.
// Otherwise the position is found as ReadPosition does (from the answers
// already in), and the row read again at it.
class FirstReadOp : public std::enable_shared_from_this<FirstReadOp> {
 public:
  FirstReadOp(GroupClient* c, GroupRef group, ReadLevel level, ReadRequest read, int64_t deadline,
              Callback<FirstRead> done)
      : c_(c),
        group_(std::move(group)),
        level_(level),
        read_(std::move(read)),
        deadline_(deadline),
        done_(std::move(done)) {}

  void Start() {
    const ReplicaInfo& info = c_->options().replicas[c_->options().local];
    if (level_ == ReadLevel::kCurrent && info.type == ReplicaType::kFull) {
      c_->coordinators()->Check(
          info.coordinator, CoordinatorGroup(group_),
          internal::RequestTimeout(c_, c_->options().coordinator_timeout, deadline_),
          internal::Guarded<coordinator::CoordinatorReply>(
              c_, [self = shared_from_this()](absl::StatusOr<coordinator::CoordinatorReply> r) {
                self->Join(std::move(r), std::nullopt);
              }));
    } else {
      Join(absl::FailedPreconditionError("no coordinator at this replica"), std::nullopt);
    }
    ReadRequest req = read_;
    req.set_at_applied(true);
    CallProto<ReadReply>(
        c_, info.replication, "repl.Read", req,
        [self = shared_from_this()](absl::StatusOr<ReadReply> r) {
          self->Join(std::nullopt, std::move(r));
        },
        std::nullopt, deadline_);
  }

 private:
  void Join(std::optional<absl::StatusOr<coordinator::CoordinatorReply>> check,
            std::optional<absl::StatusOr<ReadReply>> read) {
    {
      absl::MutexLock lock(&mu_);
      if (check) check_ = std::move(check);
      if (read) reply_ = std::move(read);
      if (!check_ || !reply_) return;
      check = std::move(check_);
      read = std::move(reply_);
      check_.reset();
      reply_.reset();
    }
    Decide(std::move(*check), std::move(*read));
  }

  void Decide(absl::StatusOr<coordinator::CoordinatorReply> check, absl::StatusOr<ReadReply> read) {
    const int local = c_->options().local;
    const bool has_state = read.ok() && read->has_state();
    if (has_state) {
      const StateReply& state = read->state();
      const bool vouched =
          check.ok() && check->valid() && state.top() <= state.applied().position();
      if (level_ == ReadLevel::kSnapshot || vouched) {
        FirstRead first;
        first.at = FromApplied(state.applied(), local);
        read->clear_state();
        first.reply = std::move(*read);
        c_->NoteFirstRead(false);
        return done_(std::move(first));
      }
    }
    c_->NoteFirstRead(true);
    Callback<LogPosition> then = ReadAtPosition(c_, group_, read_, deadline_, std::move(done_));
    if (level_ != ReadLevel::kCurrent)
      return c_->ReadPosition(group_, level_, std::move(then), deadline_);
    auto op = std::make_shared<ReadPositionOp>(c_, group_, local, deadline_, std::move(then));
    if (has_state) return op->Resume(std::move(check), std::move(*read->mutable_state()));
    op->Start();  // the read failed: ask again, as ReadPosition would
  }

  GroupClient* const c_;
  const GroupRef group_;
  const ReadLevel level_;
  const ReadRequest read_;  // the row (and range) to read, without a position
  const int64_t deadline_;
  Callback<FirstRead> done_;
  absl::Mutex mu_;
  std::optional<absl::StatusOr<coordinator::CoordinatorReply>> check_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<ReadReply>> reply_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void GroupClient::ReadFirst(GroupRef group, ReadLevel level, std::string row, std::string family,
                            Callback<FirstRead> done, int64_t deadline_in, int replica,
                            std::optional<ScanRange> also_scan) {
  const int64_t deadline = DeadlineFrom(this, deadline_in);
  // A turn given while the commit before it is being decided: first the
  // local replica applies that commit.
  if (level == ReadLevel::kCurrent && (replica < 0 || replica == options_.local) &&
      HasReadFloor(group)) {
    GroupRef g = group;
    return AwaitReadFloor(
        g, deadline,
        [this, group = std::move(group), level, row = std::move(row), family = std::move(family),
         done = std::move(done), deadline, replica, also_scan = std::move(also_scan)]() mutable {
          ReadFirstPastFloor(std::move(group), level, std::move(row), std::move(family),
                             std::move(done), deadline, replica, std::move(also_scan));
        });
  }
  ReadFirstPastFloor(std::move(group), level, std::move(row), std::move(family), std::move(done),
                     deadline, replica, std::move(also_scan));
}

void GroupClient::ReadFirstPastFloor(GroupRef group, ReadLevel level, std::string row,
                                     std::string family, Callback<FirstRead> done, int64_t deadline,
                                     int replica, std::optional<ScanRange> also_scan) {
  ReadRequest read;
  *read.mutable_group() = group;
  read.set_row(std::move(row));
  read.set_family(std::move(family));
  if (also_scan) *read.mutable_also_scan() = std::move(*also_scan);
  // Elsewhere than locally, or inconsistent (no position to stand at): the
  // position, then the read.
  if ((replica >= 0 && replica != options_.local) || level == ReadLevel::kInconsistent ||
      options_.replicas[options_.local].type == ReplicaType::kWitness) {
    return ReadPosition(group, level,
                        ReadAtPosition(this, group, std::move(read), deadline, std::move(done)),
                        deadline, replica);
  }
  // As ReadPosition: this client's own commits still being applied here
  // are waited for; after one that failed, ReadPosition catches up first.
  const int64_t started = env_->MonotonicMicros();
  const std::string root = group.root();
  AfterLocalApplies(
      root, started + std::max<int64_t>(0, deadline - started) / 2,
      [this, group = std::move(group), level, read = std::move(read), deadline, started,
       done = std::move(done)](uint64_t behind) mutable {
        // Behind (an apply of this client's failed): as ReadPosition goes
        // on after its wait, then the row.
        if (behind != 0)
          return ReadPositionAfterApplies(
              group, level, ReadAtPosition(this, group, std::move(read), deadline, std::move(done)),
              deadline, started, behind);
        // Timed as ReadPosition times current reads' positions.
        if (level == ReadLevel::kCurrent) {
          done = [this, started, done = std::move(done)](absl::StatusOr<FirstRead> r) mutable {
            if (r.ok()) read_latency_.Observe(env_->MonotonicMicros() - started);
            done(std::move(r));
          };
        }
        std::make_shared<FirstReadOp>(this, std::move(group), level, std::move(read), deadline,
                                      std::move(done))
            ->Start();
      });
}

void GroupClient::ReadPosition(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                               int64_t deadline_in, int replica) {
  const int64_t deadline = DeadlineFrom(this, deadline_in);
  const int local = replica < 0 ? options_.local : replica;
  if (local >= static_cast<int>(options_.replicas.size()))
    return done(absl::InvalidArgumentError(
        StrCat("read at replica ", local, ": the cluster has ", options_.replicas.size())));
  if (options_.replicas[local].type == ReplicaType::kWitness)
    return done(absl::InvalidArgumentError(StrCat("read at replica ", options_.replicas[local].name,
                                                  ": a witness holds no data to read")));
  // A turn given while the commit before it is being decided: first the
  // local replica applies that commit.
  if (level == ReadLevel::kCurrent && local == options_.local && HasReadFloor(group)) {
    GroupRef g = group;
    return AwaitReadFloor(
        g, deadline,
        [this, group = std::move(group), level, done = std::move(done), deadline, local]() mutable {
          ReadPositionPastFloor(std::move(group), level, std::move(done), deadline, local);
        });
  }
  ReadPositionPastFloor(std::move(group), level, std::move(done), deadline, local);
}

void GroupClient::ReadPositionPastFloor(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                                        int64_t deadline, int local) {
  const int64_t started = env_->MonotonicMicros();
  if (local != options_.local)
    return ReadPositionAt(std::move(group), level, std::move(done), deadline, local, started);
  // This client's own commits acknowledged before their local apply
  // finished: the read waits for those applies (already under way), so it
  // sees its own writes and needs no catch-up. One that has not ended
  // within half the time left, or failed, is caught up to instead (a
  // current read does that anyway).
  const std::string root = group.root();
  AfterLocalApplies(root, started + std::max<int64_t>(0, deadline - started) / 2,
                    [this, group = std::move(group), level, done = std::move(done), deadline,
                     started](uint64_t behind) mutable {
                      ReadPositionAfterApplies(std::move(group), level, std::move(done), deadline,
                                               started, behind);
                    });
}

void GroupClient::ReadPositionAfterApplies(GroupRef group, ReadLevel level,
                                           Callback<LogPosition> done, int64_t deadline,
                                           int64_t started, uint64_t behind) {
  const int local = options_.local;
  if (behind == 0)
    return ReadPositionAt(std::move(group), level, std::move(done), deadline, local, started);
  if (level == ReadLevel::kCurrent) {
    return ReadPositionAt(
        group, level,
        [this, root = group.root(), done = std::move(done)](absl::StatusOr<LogPosition> p) mutable {
          if (p.ok()) LocalCaughtUp(root, p->position);
          done(std::move(p));
        },
        deadline, local, started);
  }
  // A snapshot or inconsistent read: only a catch-up brings the local
  // replica to this client's commit; failing that (within half the time
  // left), it reads what is applied.
  const int64_t now = env_->MonotonicMicros();
  CatchUp(
      group, local, behind,
      [this, group, level, done = std::move(done), deadline, local,
       started](absl::StatusOr<LogPosition> p) mutable {
        if (p.ok()) LocalCaughtUp(group.root(), p->position);
        ReadPositionAt(std::move(group), level, std::move(done), deadline, local, started);
      },
      now + std::max<int64_t>(1, (deadline - now) / 2));
}

void GroupClient::ReadPositionAt(GroupRef group, ReadLevel level, Callback<LogPosition> done,
                                 int64_t deadline, int local, int64_t started) {
  if (level != ReadLevel::kCurrent) {
    StateRequest req;
    *req.mutable_group() = std::move(group);
    CallRetrying<StateReply>(
        this, options_.replicas[local].replication, "repl.State", req, deadline,
        [local, level, done = std::move(done)](absl::StatusOr<StateReply> s) mutable {
          if (!s.ok()) return done(s.status());
          LogPosition p = FromApplied(s->applied(), local);
          p.latest = level == ReadLevel::kInconsistent;
          done(p);
        });
    return;
  }
  auto timed = [this, started, done = std::move(done)](absl::StatusOr<LogPosition> p) mutable {
    if (p.ok()) read_latency_.Observe(env_->MonotonicMicros() - started);
    done(std::move(p));
  };
  std::make_shared<ReadPositionOp>(this, std::move(group), local, deadline, std::move(timed))
      ->Start();
}

void GroupClient::Read(GroupRef group, const LogPosition& at, std::string row, std::string family,
                       Callback<ReadReply> done, int64_t deadline,
                       std::optional<ScanRange> also_scan) {
  ReadRequest req;
  *req.mutable_group() = std::move(group);
  if (also_scan) *req.mutable_also_scan() = std::move(*also_scan);
  req.set_row(std::move(row));
  req.set_family(std::move(family));
  req.set_timestamp(at.timestamp);
  req.set_latest(at.latest);
  req.set_position(at.position);
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
  req.set_position(at.position);
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

}  // namespace megastore::replication
