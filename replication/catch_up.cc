// Catch-up (docs/replication.md, "Reading"): bringing one replica's log up
// to a target position, copying chosen values other replicas know and
// deciding unknown positions with a no-op entry (the write's steps, which
// adopt any value that may already be chosen).
#include <algorithm>
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
  op->deadline = DeadlineFrom(this, deadline);
  op->done = std::move(done);
  op->Begin();
}

}  // namespace megastore::replication
