// A writer's commit (docs/replication.md, "Writing"): the five steps of
// write_steps.h for the writer's entry at the position after its read.
#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "base/strings.h"
#include "replication/commit_home.h"
#include "replication/log_replica_internal.h"
#include "replication/write_steps.h"

namespace megastore::replication {

using internal::Chosen;
using internal::Complete;
using internal::DeadlineFrom;
using internal::DecidePosition;

void GroupClient::Commit(GroupRef group, const LogPosition& at, LogEntry entry,
                         Callback<CommitResult> done, int64_t deadline_in, Reads reads,
                         int64_t since) {
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
  // An entry that writes only its group's rows is acknowledged once
  // visible; its local apply finishes behind (this client's reads of the
  // group wait for it; anyone else's current read applies it). One that
  // writes outside the group (global index entries, the outbox list), which
  // reads outside the group's log would miss, waits for the local apply.
  bool group_rows_only = entry.payload().empty();
  for (const RowChange& rc : entry.changes())
    group_rows_only = group_rows_only && rc.table().empty();
  const int64_t deadline = DeadlineFrom(this, deadline_in);
  const int64_t started = env_->MonotonicMicros();
  // A commit with no read set to judge (conditional on reads made elsewhere,
  // or one that could follow nobody) would only ever wait behind this
  // client's other commits and then lose: it races for its position as
  // without combining. So does one a replica would refuse, so as not to
  // spoil an entry it shares.
  if (reads == nullptr || !CheckEntry(group, entry, "commit", at.position + 1).ok()) {
    return ProposeAfter(std::move(group), at, std::move(entry), group_rows_only, deadline, 0,
                        std::move(reads), started, std::move(done));
  }
  // A hot group's commit goes to the group's home (replication/forward.cc),
  // unless it writes outside the group: its caller's reads of those rows
  // go to this datacenter, which the home would not wait for.
  if (const ReplicaInfo* home =
          group_rows_only && CommitHome::Bounded(*reads) ? HomeFor(group) : nullptr;
      home != nullptr) {
    LeaveLane(group, since);
    return Forward(*home, std::move(group), at, std::move(entry), std::move(reads), deadline, since,
                   started, std::move(done));
  }
  if (!options_.combine) {
    return ProposeAfter(std::move(group), at, std::move(entry), group_rows_only, deadline, 0,
                        std::move(reads), started, std::move(done));
  }
  auto m = std::make_unique<Member>();
  m->at = at;
  m->reads = std::move(reads);
  m->group_rows_only = group_rows_only;
  m->deadline = deadline;
  m->started = started;
  m->since = since > 0 ? since : started;
  m->turns = since > 0;
  m->bytes = entry.ByteSizeLong();
  for (const RowChange& rc : entry.changes()) {
    std::string row = rc.table();
    row.push_back('\0');
    row += rc.row();
    m->rows.push_back(std::move(row));
  }
  m->entry = std::move(entry);
  m->done = std::move(done);
  Enqueue(std::move(group), std::move(m));
}

void GroupClient::ProposeAfter(GroupRef group, const LogPosition& at, LogEntry entry,
                               bool group_rows_only, int64_t deadline, int promotions, Reads reads,
                               int64_t started, Callback<CommitResult> done) {
  const uint64_t position = at.position + 1;
  const int local = options_.local;
  entry.set_timestamp(std::max(env_->NowMicros(), at.timestamp + 1));
  entry.set_next_leader(Votes(options_.replicas[local].type) ? local : -1);
  entry.set_origin(origin_);
  std::optional<int> leader;
  for (size_t i = 0; i < voters_.size(); ++i)
    if (voters_[i] == at.next_leader) leader = static_cast<int>(i);
  int64_t timestamp = entry.timestamp();
  std::string id = entry.id();
  std::string value = entry.SerializeAsString();
  DecidePosition(
      this, group, position, value, leader, deadline,
      [this, group, at, position, id = std::move(id), value, timestamp, deadline, group_rows_only,
       started, promotions, reads = std::move(reads),
       done = std::move(done)](absl::StatusOr<Chosen> chosen) mutable {
        if (!chosen.ok()) {
          stats_.unknown.fetch_add(1, std::memory_order_relaxed);
          return done(chosen.status());
        }
        bool ours = chosen->value == value;
        LogEntry winner;
        const bool judged = !ours && winner.ParseFromString(chosen->value);
        LogEntry mine;
        if (judged && Holds(winner, id) && mine.ParseFromString(value) && Carries(winner, mine)) {
          // A copy of this commit took the position: it is committed there.
          ours = true;
          timestamp = winner.timestamp();
        } else if (judged && !winner.noop() && winner.origin() != origin_) {
          NoteHot(group);  // another app server's entry: the group is contended
        }
        if (!ours && judged && reads && promotions < kMaxPromotions &&
            position < std::numeric_limits<uint64_t>::max() && !internal::Expired(this, deadline)) {
          // Promotion: the winner wrote nothing this transaction read, so
          // its reads still hold after the winner's position, and the same
          // entry goes to the next one (the winner's nominee leading it).
          // (Our entry is parsed back from the value sent rather than kept
          // twice in memory while the position is decided.)
          LogEntry entry;
          if (Unaffected(*reads, winner) && entry.ParseFromString(value)) {
            stats_.promotions.fetch_add(1, std::memory_order_relaxed);
            group_counts_.Add(group.root(), 1);  // a lost position, as a conflict is
            LogPosition next = at;
            next.position = position;
            next.timestamp = std::max(at.timestamp, winner.timestamp());
            next.next_leader = winner.next_leader();
            return ProposeAfter(std::move(group), next, std::move(entry), group_rows_only, deadline,
                                promotions + 1, std::move(reads), started, std::move(done));
          }
        }
        if (ours) {
          stats_.commits.fetch_add(1, std::memory_order_relaxed);
          stats_.entries.fetch_add(1, std::memory_order_relaxed);
          if (chosen->fast) stats_.fast_path.fetch_add(1, std::memory_order_relaxed);
        } else {
          stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
        }
        group_counts_.Add(group.root(), ours ? 0 : 1);
        std::vector<Answer> answers;
        answers.push_back(Answer{started, std::move(done)});
        FinishPosition(std::move(group), position, std::move(*chosen), ours, timestamp,
                       group_rows_only, deadline, std::move(answers));
      });
}

void GroupClient::FinishPosition(GroupRef group, uint64_t position, Chosen chosen, bool ours,
                                 int64_t timestamp, bool group_rows_only, int64_t deadline,
                                 std::vector<Answer> answers, absl::AnyInvocable<void()> answered) {
  // The answers, once the value is visible (and, unless acknowledged
  // early, applied here).
  auto answer = [this, position, timestamp, ours, answers = std::move(answers),
                 answered = std::move(answered)](absl::Status visible) mutable {
    for (Answer& a : answers) {
      if (!ours) {
        a.done(a.turn ? TurnConflict(position)
                      : absl::AbortedError(
                            StrCat("conflict: another writer committed log position ", position)));
        continue;
      }
      // A failed local apply is harmless: the next read applies it.
      // Not visible: the entry *is* in the log, but a current read may
      // not see it yet, so it cannot be acknowledged; and it must not
      // look like "nothing written" either (a client would retry it: a
      // double commit).
      if (!visible.ok()) {
        a.done(absl::DeadlineExceededError(
            StrCat("outcome unknown: the entry was chosen for log position ", position,
                   " but could not be made visible to current reads in time (", visible.message(),
                   "); do not retry it blindly, read the group first")));
        continue;
      }
      commit_latency_.Observe(env_->MonotonicMicros() - a.started);
      a.done(CommitResult{position, timestamp});
    }
    if (answered) answered();
  };
  const bool local_data = options_.replicas[options_.local].type != ReplicaType::kWitness;
  if (!local_data || !ours || !group_rows_only || options_.answer_after_local_apply) {
    // Acknowledged once visible and applied here (at once if this is a
    // witness); a lost race too, so the retry's read finds the winner
    // applied. The other replicas apply behind.
    return Complete(this, group, position, std::move(chosen), local_data ? options_.local : -1,
                    deadline,
                    [this, group, position, deadline, answer = std::move(answer)](
                        absl::Status visible, absl::Status applied) mutable {
                      if (!visible.ok() || applied.ok()) return answer(visible);
                      // Not applied here (the apply failed, or found a hole before
                      // it): catch the local replica up first, so what the entry
                      // wrote outside its group is there when answered (an unfinished
                      // catch-up leaves it to later reads).
                      CatchUp(
                          group, options_.local, position,
                          [this, root = group.root(), position,
                           answer = std::move(answer)](absl::StatusOr<LogPosition> p) mutable {
                            // Not caught up: this client's next reads of the group
                            // try again.
                            if (!p.ok() || p->position < position) LocalBehind(root, position);
                            answer(absl::OkStatus());
                          },
                          deadline);
                    });
  }
  // Our entry, writing only its group's rows: acknowledged once visible,
  // its local apply tracked so this client's reads of the group wait for
  // it rather than catch the replica up.
  std::string chosen_value = std::move(chosen.value);  // step 4 needs only who accepted it
  internal::MakeVisible(this, group, position, chosen, deadline,
                        [this, group, position, value = std::move(chosen_value),
                         answer = std::move(answer)](absl::Status visible) mutable {
                          if (!visible.ok()) return answer(visible);
                          const uint64_t seq = BeginLocalApply(group.root());
                          internal::ApplyEverywhere(
                              this, group, position, value, options_.local,
                              [this, root = group.root(), seq, position](absl::Status applied) {
                                EndLocalApply(root, seq, position, applied);
                              });
                          answer(absl::OkStatus());
                        });
}

}  // namespace megastore::replication
