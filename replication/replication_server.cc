#include "replication/replication_server.h"

#include <algorithm>
#include <tuple>

#include "base/logging.h"
#include "base/strings.h"

namespace megastore::replication {

namespace {

template <typename Request>
bool Parse(std::string_view method, const std::string& bytes, Request* out, Responder& respond) {
  if (out->ParseFromString(bytes)) return true;
  respond(absl::InvalidArgumentError(StrCat(method, ": malformed request")));
  return false;
}

template <typename Reply>
auto Answer(Responder respond) {
  return [respond = std::move(respond)](absl::StatusOr<Reply> r) mutable {
    if (!r.ok()) return respond(r.status());
    respond(r->SerializeAsString());
  };
}

}  // namespace

ReplicationServer::ReplicationServer(Env* env, Transport* transport,
                                     storage::BigtableClient* bigtable,
                                     ReplicationServerOptions options)
    : env_(env),
      options_(std::move(options)),
      bigtable_(bigtable),
      replica_(&bigtable_, options_.cluster.replicas[options_.cluster.local].type, env,
               options_.cluster.max_clock_skew, options_.encryption),
      client_(env, transport, [this] {
        // It is the home its groups' commits are sent to: it never sends
        // them on, and answers them once applied here.
        GroupClientOptions o = options_.cluster;
        o.forward = false;
        o.answer_after_local_apply = true;
        o.early_turns = true;
        return o;
      }()) {}

ReplicationServer::~ReplicationServer() {
  Stop();
  // A tick popped off the timer queue (Cancel cannot stop it) finds the
  // server gone.
  life_->End();
  // A sweep or clean-up under way calls back into this server when its
  // requests are answered: wait for it (it ends at its next step, now that
  // the server is stopped). Not in the simulator, whose loop delivers
  // nothing while this waits (it keeps stopped servers until its end).
  if (env_->simulated()) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Duration bound = 2 * options_.cluster.rpc_timeout + absl::Seconds(10);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](ReplicationServer* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                    return !s->sweeping_ && !s->cleaning_;
                                  },
                                  this),
                              bound)) {
      MS_LOG_ERROR("replication server: a sweep did not end within {} of the server stopping",
                   absl::FormatDuration(bound));
    }
  }
  // Nothing waits for the replica's other chains (an apply learned on
  // accept, a request whose caller gave up): from here their Bigtable
  // answers are dropped, before the members they would run in go. Not
  // under mu_: an answer running now may take it.
  bigtable_.End();
}

// A read's answer, counted and timed.
template <typename Reply>
absl::AnyInvocable<void(absl::StatusOr<Reply>)> ReplicationServer::Timed(Responder respond) {
  counters_.reads++;
  return [this, started = env_->MonotonicMicros(),
          respond = std::move(respond)](absl::StatusOr<Reply> r) mutable {
    read_latency_.Observe(env_->MonotonicMicros() - started);
    if (!r.ok()) return respond(r.status());
    respond(r->SerializeAsString());
  };
}

void ReplicationServer::CountPaxos(const PaxosCount& request,
                                   const absl::StatusOr<PaxosReply>& reply) {
  paxos_latency_.Observe(env_->MonotonicMicros() - request.started);
  counters_.paxos++;
  groups_.Raise(request.group_key, 2, request.position);
  if (!reply.ok()) return;
  if (!reply->ok()) {
    counters_.rejected++;
    groups_.Add(request.group_key, 1);
  } else if (request.accept) {
    counters_.accepted++;
    if (request.fast) counters_.fast_path++;
    counters_.log_bytes += request.value_bytes;
    groups_.Add(request.group_key, 0);
  }
}

ReplicationServer::Stats ReplicationServer::stats() const {
  Stats s;
  s.paxos = counters_.paxos.load();
  s.accepted = counters_.accepted.load();
  s.fast_path = counters_.fast_path.load();
  s.log_bytes = counters_.log_bytes.load();
  s.rejected = counters_.rejected.load();
  s.reads = counters_.reads.load();
  s.applies = counters_.applies.load();
  s.sweeps = counters_.sweeps.load();
  s.sweep_catchups = counters_.sweep_catchups.load();
  s.gap_votes = counters_.gap_votes.load();
  s.learned_on_accept = counters_.learned_on_accept.load();
  s.vouches_shed = counters_.vouches_shed.load();
  s.cleanup_sweeps = counters_.cleanup_sweeps.load();
  s.groups_cleaned = counters_.groups_cleaned.load();
  s.positions_removed = counters_.positions_removed.load();
  s.bytes_reclaimed = counters_.bytes_reclaimed.load();
  s.cleanup_blocked = counters_.cleanup_blocked.load();
  s.largest_log_bytes = counters_.largest_log_bytes.load();
  s.largest_log_positions = counters_.largest_log_positions.load();
  s.kept_log_bytes = counters_.kept_log_bytes.load();
  const CommitHome::Stats home = home_.stats();
  s.home_commits = home.commits;
  s.home_shed = home.shed;
  const GroupClient::Stats own = client_.stats();
  s.home_entries = own.entries;
  s.home_combined = own.combined;
  s.home_promotions = own.promotions;
  {
    absl::MutexLock lock(&mu_);
    s.cleanup_pending = cleanup_due_.size();
    s.sweep_pending = seen_.size();
  }
  return s;
}

std::vector<ReplicationServer::GroupActivity> ReplicationServer::HottestGroups(
    size_t n, bool by_conflicts) const {
  std::vector<GroupActivity> out;
  for (const auto& [key, c] : groups_.Top(n, by_conflicts ? 1 : 0)) {
    GroupActivity a;
    const size_t nul = key.find('\0');
    a.group.set_table(key.substr(0, nul));
    a.group.set_root(key.substr(nul + 1));
    a.writes = c[0];
    a.conflicts = c[1];
    a.position = c[2];
    out.push_back(std::move(a));
  }
  return out;
}

void ReplicationServer::AskVouch(const GroupRef& group, uint64_t position,
                                 absl::AnyInvocable<void(bool)> done) {
  if (vouches_in_flight_.fetch_add(1) >= kMaxVouchesInFlight) {
    vouches_in_flight_--;
    counters_.vouches_shed++;
    MS_LOG_WARN_LIMITED(
        "replication: {} questions to other replicas already in flight; refusing position {} "
        "of a group without asking",
        kMaxVouchesInFlight, position + 1);
    return done(false);
  }
  client_.SomeReplicaReached(
      group, position,
      [this, done = std::move(done)](absl::StatusOr<bool> reached) mutable {
        vouches_in_flight_--;
        done(reached.ok() && *reached);
      },
      env_->MonotonicMicros() + absl::ToInt64Microseconds(options_.cluster.rpc_timeout));
}

void ReplicationServer::ApplyChosen(ApplyRequest req,
                                    absl::AnyInvocable<void(absl::StatusOr<ApplyReply>)> answer) {
  NoteForCleanup(req.group());
  const ApplyRequest copy = req;
  replica_.Apply(std::move(req), [this, copy, answer = std::move(answer)](
                                     absl::StatusOr<ApplyReply> r) mutable {
    if (r.ok()) {
      NoteApplied(copy.group(), r->applied().position());
    } else if (!IsBeyondTop(r.status())) {
      // Failed part way (a later position learned, not applied): the
      // sweep looks at the group again, whatever an earlier apply cleared.
      Note(copy.group(), 0, copy.position());
    }
    if (r.ok() || !IsBeyondTop(r.status())) return answer(std::move(r));
    // This replica missed earlier positions (or the applies of two
    // positions crossed on the way): it records this one if another
    // replica knows the group got to the previous one, as it would be
    // for any chosen position; the sweep then fills what it missed.
    AskVouch(copy.group(), copy.position() - 1,
             [this, copy, answer = std::move(answer), r = std::move(r)](bool reached) mutable {
               if (!reached) return answer(std::move(r));
               Note(copy.group(), copy.position());
               replica_.Apply(copy, copy.position() - 1,
                              [this, group = copy.group(),
                               answer = std::move(answer)](absl::StatusOr<ApplyReply> r) mutable {
                                if (r.ok()) NoteApplied(group, r->applied().position());
                                answer(std::move(r));
                              });
             });
  });
}

void ReplicationServer::Serve(std::string_view method, std::string request, Responder respond) {
  if (method == "repl.Paxos") {
    PaxosRequest req;
    if (!Parse(method, request, &req, respond)) return;
    Note(req.group(), 0, req.position());
    if (req.accept()) NoteForCleanup(req.group());
    PaxosCount count{GroupKey(req.group()), req.accept(),       req.ballot().round() == 0,
                     req.position(),        req.value().size(), env_->MonotonicMicros()};
    const uint64_t origin = req.origin();
    // An accept that completes a majority: once accepted here, the value is
    // chosen, and this replica applies it now rather than a round trip
    // later, when the writer's apply comes (which then finds it done).
    std::optional<ApplyRequest> learn;
    if (req.accept() && req.chosen_if_accepted()) {
      learn.emplace();
      *learn->mutable_group() = req.group();
      learn->set_position(req.position());
      learn->set_value(req.value());
    }
    auto answer = [this, count = std::move(count), origin, learn = std::move(learn),
                   respond = std::move(respond)](absl::StatusOr<PaxosReply> r) mutable {
      CountPaxos(count, r);
      const bool chosen = learn && r.ok() && r->ok() && !r->learned();
      // As a hot group's home: the proposer should send its commits here.
      if (r.ok() && count.accept && origin != 0 &&
          home_.OthersSend(count.group_key, origin, env_->MonotonicMicros()))
        r->set_hot(true);
      if (!r.ok()) return respond(r.status());
      respond(r->SerializeAsString());
      if (chosen) {
        counters_.learned_on_accept++;
        ApplyChosen(std::move(*learn), [](absl::StatusOr<ApplyReply>) {});
      }
    };
    const PaxosRequest copy = req;
    replica_.Paxos(std::move(req), [this, copy, answer = std::move(answer)](
                                       absl::StatusOr<PaxosReply> r) mutable {
      if (r.ok() || !IsBeyondTop(r.status())) return answer(std::move(r));
      // This replica missed earlier positions: it still votes on the next
      // one if another replica knows the group got that far.
      AskVouch(copy.group(), copy.position() - 1,
               [this, copy, answer = std::move(answer), r = std::move(r)](bool reached) mutable {
                 if (!reached) return answer(std::move(r));
                 counters_.gap_votes++;
                 replica_.Paxos(copy, copy.position() - 1, std::move(answer));
               });
    });
  } else if (method == "repl.State") {
    StateRequest req;
    if (!Parse(method, request, &req, respond)) return;
    if (req.durable_applied()) {
      replica_.DurableState(req.group(), Answer<StateReply>(std::move(respond)));
    } else {
      replica_.State(req.group(), Answer<StateReply>(std::move(respond)));
    }
  } else if (method == "repl.ReadLog") {
    ReadLogRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.ReadLog(std::move(req), Answer<ReadLogReply>(std::move(respond)));
  } else if (method == "repl.Apply") {
    ApplyRequest req;
    if (!Parse(method, request, &req, respond)) return;
    counters_.applies++;
    ApplyChosen(std::move(req), Answer<ApplyReply>(std::move(respond)));
  } else if (method == "repl.SnapshotRows") {
    SnapshotRowsRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.SnapshotRows(std::move(req), Timed<SnapshotRowsReply>(std::move(respond)));
  } else if (method == "repl.InstallRows") {
    InstallRowsRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.InstallRows(std::move(req), Answer<InstallRowsReply>(std::move(respond)));
  } else if (method == "repl.FinishSnapshot") {
    FinishSnapshotRequest req;
    if (!Parse(method, request, &req, respond)) return;
    // Only to a position another replica applied: a forged one would make
    // this replica skip entries it never saw.
    const uint64_t pos = req.applied().position();
    const GroupRef group = req.group();  // `req` moves into the callback
    AskVouch(group, pos,
             [this, req = std::move(req), pos,
              answer = Answer<StateReply>(std::move(respond))](bool reached) mutable {
               if (!reached)
                 return answer(absl::FailedPreconditionError(
                     StrCat("repl.FinishSnapshot: no other replica says the group reached "
                            "position ",
                            pos)));
               replica_.FinishSnapshot(std::move(req), std::move(answer));
             });
  } else if (method == "repl.MarkBackup") {
    MarkBackupRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.MarkBackup(req.group(), req.position(), Answer<StateReply>(std::move(respond)));
  } else if (method == "repl.SealBackup") {
    BackupSealRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.SealBackup(std::move(req), Answer<BackupSealReply>(std::move(respond)));
  } else if (method == "repl.ListGroups") {
    ListGroupsRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.ListGroups(std::move(req), Answer<ListGroupsReply>(std::move(respond)));
  } else if (method == "repl.Truncate") {
    TruncateRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Truncate(std::move(req), Answer<TruncateReply>(std::move(respond)));
  } else if (method == "repl.Read") {
    ReadRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Read(std::move(req), Timed<ReadReply>(std::move(respond)));
  } else if (method == "repl.ScanIndex") {
    ScanIndexRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.ScanIndex(std::move(req), Timed<ScanReply>(std::move(respond)));
  } else if (method == "repl.Commit") {
    home_.ServeCommit(request, std::move(respond));
  } else if (method == "repl.AwaitTurn") {
    home_.ServeAwaitTurn(request, std::move(respond));
  } else if (method == "repl.Scan") {
    ScanRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Scan(std::move(req), Timed<ScanReply>(std::move(respond)));
  } else {
    respond(absl::UnimplementedError(StrCat("replication server has no method ", method)));
  }
}

size_t ReplicationServer::groups_behind() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, seen] : seen_) n += seen.behind > 0 ? 1 : 0;
  return n;
}

void ReplicationServer::Note(const GroupRef& group, uint64_t behind, uint64_t asked) {
  absl::MutexLock lock(&mu_);
  Seen& s = seen_[GroupKey(group)];
  s.group = group;
  s.last = env_->MonotonicMicros();
  s.behind = std::max(s.behind, behind);
  s.asked = std::max(s.asked, asked);
}

void ReplicationServer::NoteApplied(const GroupRef& group, uint64_t applied) {
  absl::MutexLock lock(&mu_);
  auto it = seen_.find(GroupKey(group));
  if (it != seen_.end() && it->second.asked <= applied && it->second.behind <= applied)
    seen_.erase(it);
}

void ReplicationServer::Start() {
  absl::MutexLock lock(&mu_);
  if (running_) return;
  running_ = true;
  stopped_ = false;
  timer_ = ScheduleTick(options_.sweep_interval, &ReplicationServer::Tick);
  if (options_.cleanup.enabled)
    cleanup_timer_ = ScheduleTick(options_.cleanup.interval, &ReplicationServer::CleanupTick);
}

Env::TimerId ReplicationServer::ScheduleTick(absl::Duration after,
                                             void (ReplicationServer::*tick)()) {
  return env_->Schedule(
      after, [life = life_, this, tick] { Lifetime::Run(life, [&] { (this->*tick)(); }); });
}

void ReplicationServer::Stop() {
  absl::MutexLock lock(&mu_);
  running_ = false;
  stopped_ = true;
  if (timer_ != 0) env_->Cancel(timer_);
  timer_ = 0;
  if (cleanup_timer_ != 0) env_->Cancel(cleanup_timer_);
  cleanup_timer_ = 0;
}

bool ReplicationServer::Stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void ReplicationServer::Tick() {
  {
    absl::MutexLock lock(&mu_);
    if (!running_) return;
    timer_ = ScheduleTick(options_.sweep_interval, &ReplicationServer::Tick);
    if (sweeping_) return;
    sweeping_ = true;
  }
  Sweep([this] {
    absl::MutexLock lock(&mu_);
    sweeping_ = false;
  });
}

void ReplicationServer::Sweep(absl::AnyInvocable<void()> done) {
  std::vector<std::pair<GroupRef, uint64_t>> due;  // group, position applied elsewhere
  {
    absl::MutexLock lock(&mu_);
    const int64_t cutoff = env_->MonotonicMicros() - absl::ToInt64Microseconds(options_.sweep_age);
    for (const auto& [key, seen] : seen_)
      if (seen.last <= cutoff) due.emplace_back(seen.group, seen.behind);
  }
  // In key order, whatever the hash map's (a simulation replays exactly);
  // sorted outside the lock every request takes.
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.table(), a.first.root()) < std::tie(b.first.table(), b.first.root());
  });
  struct Pending {
    absl::Mutex mu;
    size_t left;
    absl::AnyInvocable<void()> done;
  };
  counters_.sweeps++;
  auto pending = std::make_shared<Pending>();
  pending->left = due.size() + 1;
  pending->done = std::move(done);
  auto finish_one = [pending] {
    absl::AnyInvocable<void()> done;
    {
      absl::MutexLock lock(&pending->mu);
      if (--pending->left > 0) return;
      done = std::move(pending->done);
    }
    if (done) done();
  };
  const int local = options_.cluster.local;
  for (const auto& [group, behind] : due) {
    replica_.State(
        group, [this, group, behind, local, finish_one](absl::StatusOr<StateReply> s) mutable {
          if (!s.ok() || Stopped()) return finish_one();
          const uint64_t target = std::max(s->top(), behind);
          if (target <= s->applied().position()) {
            // Complete here: forget it until new traffic arrives.
            {
              absl::MutexLock lock(&mu_);
              auto it = seen_.find(GroupKey(group));
              const int64_t cutoff =
                  env_->MonotonicMicros() - absl::ToInt64Microseconds(options_.sweep_age);
              if (it != seen_.end() && it->second.last <= cutoff) seen_.erase(it);
            }
            return finish_one();
          }
          counters_.sweep_catchups++;
          auto catch_up = [this, group, local, finish_one](uint64_t to) mutable {
            client_.CatchUp(group, local, to,
                            [finish_one](absl::StatusOr<LogPosition>) mutable { finish_one(); });
          };
          if (behind <= s->top()) return catch_up(target);
          // Only as far as another replica vouches for: an apply for a position
          // nobody reached (a forged one) must not make this sweep decide every
          // position up to it.
          client_.SomeReplicaReached(group, behind,
                                     [this, group, behind, catch_up,
                                      top = s->top()](absl::StatusOr<bool> reached) mutable {
                                       if (reached.ok() && *reached) return catch_up(behind);
                                       {
                                         absl::MutexLock lock(&mu_);
                                         if (auto it = seen_.find(GroupKey(group));
                                             it != seen_.end() && it->second.behind == behind) {
                                           it->second.behind = 0;  // unvouched: forgotten
                                         }
                                       }
                                       catch_up(top);
                                     });
        });
  }
  finish_one();
}

}  // namespace megastore::replication
