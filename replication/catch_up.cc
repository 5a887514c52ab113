// Catch-up (docs/replication.md, "Reading"): bringing one replica's log up
// to a target position, copying chosen values other replicas know and
// deciding unknown positions with a no-op entry (the write's steps, which
// adopt any value that may already be chosen).
#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <memory>

#include "base/buggify.h"
#include "base/gather.h"
#include "base/strings.h"
#include "replication/write_steps.h"

namespace megastore::replication {

MS_FAULT_POINT(kDecideKnownPosition,
               "catch-up: decides a position by Paxos although a replica knows its value");

using internal::Callback;
using internal::CallProto;
using internal::CallRetrying;
using internal::Chosen;
using internal::Complete;
using internal::DeadlineFrom;
using internal::DecidePosition;
using internal::Expired;
using internal::FromApplied;
using internal::NoOp;

namespace {

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
  uint64_t cleaned_elsewhere = 0;  // the furthest any replica's log was cleaned up
  int snapshots_taken = 0;
  // Copies one catch-up may start: another catch-up of the same replica
  // beginning its own install makes ours unfinishable, and we start over.
  static constexpr int kMaxSnapshots = 3;
  std::atomic<uint64_t>* snapshots = nullptr;  // GroupClient::Stats::snapshot_catchups
  // The snapshot being copied: the source replica and its applied record.
  int source = -1;
  AppliedRecord snapshot;
  std::string install_id;  // InstallRowsRequest.install_id

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

  // Reads the chunk's positions from every replica's log. Goes on as soon
  // as the replies so far know every position of the chunk (a slow or
  // downed replica is not waited for), else once all have answered.
  void Fetch() {
    // An apply that reported a later applied position may have moved past
    // the target: re-read the applied position instead of asking for an
    // empty range.
    if (next > target) return Begin();
    chunk_end = std::min(target, next + LogReplica::kMaxReadLog - 1);
    ReadLogRequest req;
    *req.mutable_group() = group;
    req.set_from(next);
    req.set_to(chunk_end);
    struct Round {
      absl::Mutex mu;
      size_t answered ABSL_GUARDED_BY(mu) = 0;
      bool over ABSL_GUARDED_BY(mu) = false;
    };
    auto round = std::make_shared<Round>();
    const size_t n = c->options().replicas.size();
    for (size_t i = 0; i < n; ++i) {
      CallProto<ReadLogReply>(
          c, c->options().replicas[i].replication, "repl.ReadLog", req,
          [self = shared_from_this(), round, n](absl::StatusOr<ReadLogReply> r) {
            {
              absl::MutexLock lock(&round->mu);
              if (round->over) return;
              ++round->answered;
              // `known` and `cleaned_elsewhere` are this round's until it is
              // over (nothing else runs until Step).
              if (r.ok()) {
                for (int j = 0; j < r->positions_size(); ++j) {
                  const uint64_t p = r->positions(j);
                  if (p >= self->next && p <= self->chunk_end)
                    self->known.emplace(p, std::move(*r->mutable_values(j)));
                }
                self->cleaned_elsewhere = std::max(self->cleaned_elsewhere, r->cleaned());
              }
              const uint64_t wanted = self->chunk_end - self->next + 1;
              const uint64_t have = static_cast<uint64_t>(std::distance(
                  self->known.lower_bound(self->next), self->known.upper_bound(self->chunk_end)));
              if (have < wanted && round->answered < n) return;
              round->over = true;
            }
            self->Step();
          },
          std::nullopt, deadline);
    }
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
    if (it == known.end() && next <= cleaned_elsewhere) {
      // Nobody's log has this position any more (every replica applied it
      // and cleaned it up): copy another replica's data instead.
      if (snapshots_taken >= kMaxSnapshots)
        return Fail(absl::FailedPreconditionError(
            StrCat("catch-up of ", c->options().replicas[replica].name, " needs position ", next,
                   ", which no replica's log has any more, and ", kMaxSnapshots,
                   " copies of another replica's data did not get it there")));
      return Snapshot();
    }
    if (it != known.end() && !kDecideKnownPosition.Fire()) {
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
    DecidePosition(c, group, next, NoOp(c).SerializeAsString(), std::nullopt, deadline,
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
  }

  // ---- catch-up from a snapshot (docs/replication.md, "Cleaning up the
  // log"): the rows of the data replica that applied the most, as of its
  // applied position, made the target's; then its log from there on.
  const std::string& Node(int i) const { return c->options().replicas[i].replication; }

  void Snapshot() {
    ++snapshots_taken;
    source = -1;
    snapshot.Clear();
    snapshots->fetch_add(1, std::memory_order_relaxed);
    StateRequest req;
    *req.mutable_group() = group;
    const size_t n = c->options().replicas.size();
    auto gather = std::make_shared<Gather<StateReply>>(
        n, n, [self = shared_from_this()](Gather<StateReply>::Results results) {
          const auto& replicas = self->c->options().replicas;
          for (size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            if (static_cast<int>(i) == self->replica || replicas[i].type == ReplicaType::kWitness)
              continue;
            if (!r || !r->ok()) continue;
            if (self->source < 0 || (*r)->applied().position() > self->snapshot.position()) {
              self->source = static_cast<int>(i);
              self->snapshot = (*r)->applied();
            }
          }
          if (self->source < 0 || self->snapshot.position() < self->next)
            return self->Fail(absl::UnavailableError(
                StrCat("catch-up of ", replicas[self->replica].name, " needs position ", self->next,
                       ", cleaned up from the other replicas' logs, and no replica with data that "
                       "applied it answered")));
          self->BeginInstall();
        });
    for (size_t i = 0; i < n; ++i)
      CallProto<StateReply>(c, Node(i), "repl.State", req, gather->Slot(i), std::nullopt, deadline);
  }

  // Records the install at the target (FinishSnapshot checks the record is
  // still there), then copies, or for a witness finishes at once.
  void BeginInstall() {
    install_id = fmt::format("{:016x}{:016x}", c->env()->Random64(), c->env()->Random64());
    InstallRowsRequest req;
    *req.mutable_group() = group;
    req.set_begin(true);
    req.set_install_id(install_id);
    CallRetrying<InstallRowsReply>(
        c, Node(replica), "repl.InstallRows", req, deadline,
        [self = shared_from_this()](absl::StatusOr<InstallRowsReply> r) mutable {
          if (!r.ok()) return self->Fail(r.status());
          if (self->c->options().replicas[self->replica].type == ReplicaType::kWitness)
            return self->FinishCopy();
          self->CopyPage("");
        });
  }

  // Pass one: every row of the source, installed at the target.
  void CopyPage(std::string after) {
    SnapshotRowsRequest req;
    *req.mutable_group() = group;
    req.set_timestamp(snapshot.timestamp());
    // The source must still hold the snapshot's position on every page: one
    // that lost data or took a later snapshot of its own meanwhile refuses
    // (Aborted) rather than hand out rows of another state.
    req.set_position(snapshot.position());
    req.set_after(std::move(after));
    CallRetrying<SnapshotRowsReply>(
        c, Node(source), "repl.SnapshotRows", req, deadline,
        [self = shared_from_this()](absl::StatusOr<SnapshotRowsReply> page) mutable {
          if (!page.ok()) return self->Fail(page.status());
          std::string next_page = page->after();
          self->Install(std::move(*page->mutable_rows()),
                        [self, next_page = std::move(next_page)]() mutable {
                          if (next_page.empty()) return self->ListPage("");
                          self->CopyPage(std::move(next_page));
                        });
        });
  }

  // Pass two: every row the target has, as the source has it (rows the
  // source does not have come back empty: the target deletes them).
  void ListPage(std::string after) {
    SnapshotRowsRequest req;
    *req.mutable_group() = group;
    req.set_latest(true);
    req.set_keys_only(true);
    req.set_after(std::move(after));
    CallRetrying<SnapshotRowsReply>(
        c, Node(replica), "repl.SnapshotRows", req, deadline,
        [self = shared_from_this()](absl::StatusOr<SnapshotRowsReply> listed) mutable {
          if (!listed.ok()) return self->Fail(listed.status());
          std::string next_page = listed->after();
          auto then = [self, next_page]() mutable {
            if (next_page.empty()) return self->FinishCopy();
            self->ListPage(std::move(next_page));
          };
          if (listed->rows_size() == 0) return then();
          SnapshotRowsRequest ask;
          *ask.mutable_group() = self->group;
          ask.set_timestamp(self->snapshot.timestamp());
          ask.set_position(self->snapshot.position());
          for (const SnapshotRow& r : listed->rows()) ask.add_keys(r.key());
          CallRetrying<SnapshotRowsReply>(
              self->c, self->Node(self->source), "repl.SnapshotRows", ask, self->deadline,
              [self, then = std::move(then)](absl::StatusOr<SnapshotRowsReply> rows) mutable {
                if (!rows.ok()) return self->Fail(rows.status());
                self->Install(std::move(*rows->mutable_rows()), std::move(then));
              });
        });
  }

  void Install(google::protobuf::RepeatedPtrField<SnapshotRow> rows,
               absl::AnyInvocable<void()> then) {
    if (rows.empty()) return then();
    InstallRowsRequest req;
    *req.mutable_group() = group;
    req.set_timestamp(snapshot.timestamp());
    *req.mutable_rows() = std::move(rows);
    CallRetrying<InstallRowsReply>(c, Node(replica), "repl.InstallRows", req, deadline,
                                   [self = shared_from_this(), then = std::move(then)](
                                       absl::StatusOr<InstallRowsReply> r) mutable {
                                     if (!r.ok()) return self->Fail(r.status());
                                     then();
                                   });
  }

  void FinishCopy() {
    FinishSnapshotRequest req;
    *req.mutable_group() = group;
    *req.mutable_applied() = snapshot;
    req.set_install_id(install_id);
    CallRetrying<StateReply>(c, Node(replica), "repl.FinishSnapshot", req, deadline,
                             [self = shared_from_this()](absl::StatusOr<StateReply> s) {
                               // Refused: another install began meanwhile (or
                               // the target lost its data); look again.
                               if (!s.ok() && !absl::IsFailedPrecondition(s.status()))
                                 return self->Fail(s.status());
                               self->known.clear();
                               self->Begin();  // the log from the snapshot on
                             });
  }

  void Done(LogPosition p) {
    if (done) std::exchange(done, nullptr)(std::move(p));
  }
  void Fail(absl::Status s) {
    if (done) std::exchange(done, nullptr)(std::move(s));
  }
};

}  // namespace

void GroupClient::CatchUp(GroupRef group, int replica, uint64_t target, Callback<LogPosition> done,
                          int64_t deadline) {
  stats_.catchups.fetch_add(1, std::memory_order_relaxed);
  auto op = std::make_shared<CatchUpOp>();
  op->c = this;
  op->group = std::move(group);
  op->replica = replica;
  op->target = target;
  op->snapshots = &stats_.snapshot_catchups;
  op->deadline = DeadlineFrom(this, deadline);
  op->done = std::move(done);
  op->Begin();
}

}  // namespace megastore::replication
