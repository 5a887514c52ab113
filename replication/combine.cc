// Combined entries (docs/replication.md, "Combined entries"): a group's
// commits from this client wait behind the client's proposal for the group
// in flight, and the next proposal carries every waiting commit that can go
// with those before it — one Paxos round for all of them.
//
// A lane (one per group with commits waiting or in flight) keeps the
// entries of the last positions it saw decided. A commit that read before
// some of them passes each as a promotion would (Unaffected by it), here
// and without a round trip; one that fails the test for a position ends
// Aborted at once: the writer of that position changed what it read.
#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "base/strings.h"
#include "fmt/format.h"
#include "replication/write_steps.h"

namespace megastore::replication {

using internal::Chosen;

namespace {

// What a lane remembers of decided positions: the last this many entries,
// and no more than this many bytes of them (their cells' values dropped).
constexpr size_t kLaneEntries = 64;
constexpr size_t kLaneBytes = 4 << 20;

// The payload that marks a conflict with a turn kept for its retry.
constexpr char kTurnPayload[] = "megastore.replication/turn";

// A waiting commit's answer at its deadline: certainly not written.
absl::Status ExpiredWaiting() {
  return absl::AbortedError(
      "the deadline passed while the commit waited behind this client's proposal for its "
      "entity group: nothing was proposed");
}

}  // namespace

struct GroupClient::Plan {
  GroupRef group;
  uint64_t position = 0;
  LogPosition base;                // position - 1: its timestamp and nominee
  std::vector<MemberPtr> members;  // the next proposal (empty: none now)
  std::vector<std::pair<MemberPtr, absl::Status>> refused;  // answered at once
  // Commits that read before positions the lane does not remember: each
  // is proposed on its own, as without combining.
  std::vector<MemberPtr> alone;
  // Commits left waiting whose deadline comes before the proposal's: a
  // timer answers each then, unless it is on its way by that time.
  std::string key;
  std::vector<std::pair<Member*, int64_t>> watch;
};

GroupClient::Lane* GroupClient::LaneOf(const std::string& key, GroupRef group) {
  std::unique_ptr<Lane>& lane = lanes_[key];
  if (lane == nullptr) {
    lane = std::make_unique<Lane>();
    lane->group = std::move(group);
  }
  return lane.get();
}

void GroupClient::Enqueue(GroupRef group, MemberPtr m) {
  std::string key = GroupKey(group);
  Plan plan;
  Turns turns;
  {
    absl::MutexLock lock(&lanes_mu_);
    Lane* lane = LaneOf(key, std::move(group));
    // Waiting behind a proposal that may outlive this commit's deadline:
    // a timer answers it then (nothing proposed: Aborted). (A lane that is
    // not busy plans at once, below, and watches what it leaves waiting.)
    if (lane->busy && m->deadline < lane->busy_until) plan.watch.emplace_back(m.get(), m->deadline);
    if (lane->granted >= 0 && m->since == lane->granted) {
      // The retry whose turn it is: its turn lasts until it is decided.
      lane->granted_arrived = true;
      lane->granted_until = m->deadline;
    }
    lane->waiting.push_back(std::move(m));
    if (!lane->busy) plan = PlanNext(*lane);
    turns = NextTurn(*lane);
    if (lane->idle()) lanes_.erase(key);
  }
  RunTurns(key, std::move(turns));
  plan.key = std::move(key);
  RunPlan(std::move(plan));
}

bool GroupClient::Unaffected(const ReadSet& reads, const LogEntry& winner) {
  if (winner.noop()) return true;
  // An opaque payload (the transaction layer writes none: its queue
  // messages and two-phase records are rows, judged below) cannot be judged.
  if (!winner.payload().empty()) return false;
  for (const RowChange& rc : winner.changes()) {
    if (!rc.table().empty()) continue;  // another table: not read at the group's position
    if (std::binary_search(reads.rows().begin(), reads.rows().end(), rc.row())) return false;
    for (const ReadSet::Range& r : reads.ranges())
      if (rc.row() >= r.start() && (r.end().empty() || rc.row() < r.end())) return false;
  }
  return true;
}

bool GroupClient::Holds(const LogEntry& entry, const std::string& id) {
  if (id.empty()) return false;  // (a no-op has no id either)
  if (entry.id() == id) return true;
  for (const LogEntry::Member& m : entry.members())
    if (m.id() == id) return true;
  return false;
}

bool GroupClient::Carries(const LogEntry& entry, const LogEntry& mine) {
  if (!Holds(entry, mine.id())) return false;
  // (Counts are 64-bit: a member list is only trusted as far as it goes.)
  auto same = [&](int64_t from, int64_t count) {
    if (count != mine.changes_size() || from + count > entry.changes_size()) return false;
    for (int i = 0; i < mine.changes_size(); ++i)
      if (entry.changes(static_cast<int>(from) + i).SerializeAsString() !=
          mine.changes(i).SerializeAsString())
        return false;
    return true;
  };
  if (entry.members_size() == 0) return same(0, entry.changes_size());
  int64_t from = 0;
  for (const LogEntry::Member& m : entry.members()) {
    if (m.id() == mine.id()) return same(from, m.changes());
    from += m.changes();
  }
  return false;
}

bool GroupClient::HasTurn(const absl::Status& status) {
  return absl::IsAborted(status) && status.GetPayload(kTurnPayload).has_value();
}

absl::Status GroupClient::WithTurn(absl::Status status) {
  status.SetPayload(kTurnPayload, absl::Cord("1"));
  return status;
}

absl::Status GroupClient::TurnConflict(uint64_t position) {
  return WithTurn(
      absl::AbortedError(StrCat("conflict: another writer committed log position ", position)));
}

void GroupClient::KeepTurn(Lane& lane, int64_t since) {
  for (const Lane::Turn& t : lane.turns)
    if (t.since == since) return;
  Lane::Turn t;
  t.since = since;
  t.created = env_->MonotonicMicros();
  t.expires = t.created + absl::ToInt64Microseconds(kTurnHold);
  lane.turns.push_back(std::move(t));
}

void GroupClient::AwaitTurn(GroupRef group, int64_t since, Callback<bool> done,
                            int64_t deadline_in) {
  const int64_t deadline = internal::DeadlineFrom(this, deadline_in);
  // A hot group's turns are kept at its home, with its commits.
  if (const ReplicaInfo* home = HomeFor(group); home != nullptr) {
    LeaveLane(group, since);
    return AwaitTurnAt(*home, std::move(group), since, std::move(done), deadline);
  }
  GroupRef copy = group;
  AwaitTurnAfter(
      std::move(group), since,
      [this, group = std::move(copy),
       done = std::move(done)](absl::StatusOr<uint64_t> after) mutable {
        if (!after.ok()) return done(after.status());
        if (*after != 0) SetReadFloor(group, *after);
        done(true);
      },
      deadline);
}

void GroupClient::AwaitTurnAfter(GroupRef group, int64_t since, Callback<uint64_t> done,
                                 int64_t deadline_in) {
  const int64_t deadline = internal::DeadlineFrom(this, deadline_in);
  std::string key = GroupKey(group);
  Turns turns;
  {
    absl::MutexLock lock(&lanes_mu_);
    Lane* lane = LaneOf(key, std::move(group));
    Lane::Turn* turn = nullptr;
    for (Lane::Turn& t : lane->turns)
      if (t.since == since) turn = &t;
    if (turn != nullptr && turn->done != nullptr) {
      // A second ask for one retry's turn (a request delivered twice): one
      // turn, both told.
      turn->done = [first = std::move(turn->done),
                    second = std::move(done)](absl::StatusOr<uint64_t> r) mutable {
        first(r);
        second(std::move(r));
      };
    } else {
      if (turn == nullptr) {
        lane->turns.emplace_back();
        turn = &lane->turns.back();
        turn->since = since;
        turn->created = env_->MonotonicMicros();
      }
      turn->deadline = deadline;
      turn->expires = deadline;
      turn->done = std::move(done);
    }
    turns = NextTurn(*lane);
    if (lane->idle()) lanes_.erase(key);
  }
  RunTurns(key, std::move(turns));
}

void GroupClient::LeaveLane(const GroupRef& group, int64_t since) {
  if (since <= 0) return;
  const std::string key = GroupKey(group);
  Turns turns;
  {
    absl::MutexLock lock(&lanes_mu_);
    auto it = lanes_.find(key);
    if (it == lanes_.end()) return;
    Lane& lane = *it->second;
    // Its place, kept since it lost here, and its turn, if given here: the
    // others need not wait for a retry that went to the group's home.
    std::erase_if(lane.turns,
                  [since](const Lane::Turn& t) { return t.since == since && t.done == nullptr; });
    if (lane.granted == since) lane.granted = -1;
    turns = NextTurn(lane);
    if (lane.idle()) lanes_.erase(it);
  }
  RunTurns(key, std::move(turns));
}

GroupClient::Turns GroupClient::NextTurn(Lane& lane) {
  Turns out;
  const int64_t now = env_->MonotonicMicros();
  // Turns past their deadline are answered; places kept for retries that
  // never asked are given up.
  std::vector<Lane::Turn> live;
  for (Lane::Turn& t : lane.turns) {
    if (t.done != nullptr && now >= t.deadline) {
      out.run.emplace_back(
          std::move(t.done),
          absl::DeadlineExceededError("the deadline passed while the retry waited for its turn"));
    } else if (t.done != nullptr || now < t.expires) {
      live.push_back(std::move(t));
    }
  }
  lane.turns = std::move(live);
  if (lane.granted >= 0 && now >= lane.granted_until) lane.granted = -1;
  // (With early turns the next retry's reads wait for the position
  // instead: see turn_after.)
  if (lane.granted < 0 && (options_.early_turns || lane.answering == 0) && !lane.turns.empty()) {
    auto oldest = std::min_element(
        lane.turns.begin(), lane.turns.end(),
        [](const Lane::Turn& x, const Lane::Turn& y) { return x.since < y.since; });
    // The oldest goes next; if its retry has not asked yet, it is waited for.
    if (oldest->done != nullptr) {
      stats_.turns.fetch_add(1, std::memory_order_relaxed);
      lane.granted = oldest->since;
      lane.granted_until = now + absl::ToInt64Microseconds(kTurnHold);
      lane.granted_arrived = false;
      out.run.emplace_back(std::move(oldest->done), lane.turn_after);
      lane.turns.erase(oldest);
    }
  }
  int64_t again = 0;
  for (const Lane::Turn& t : lane.turns) {
    int64_t at = t.done != nullptr ? t.deadline : t.expires;
    const int64_t hold_ends = t.created + absl::ToInt64Microseconds(kTurnHold);
    if (hold_ends > now) at = std::min(at, hold_ends);
    if (again == 0 || at < again) again = at;
  }
  if (lane.granted >= 0 && (again == 0 || lane.granted_until < again)) again = lane.granted_until;
  // One timer at a time: a new one only if sooner than the one set.
  if (again != 0 && (lane.timer_at == 0 || again < lane.timer_at)) {
    lane.timer_at = again;
    out.again = again;
  }
  return out;
}

void GroupClient::RunTurns(const std::string& key, Turns turns) {
  for (auto& [done, after] : turns.run) done(std::move(after));
  if (turns.again == 0) return;
  const int64_t wait = std::max<int64_t>(0, turns.again - env_->MonotonicMicros());
  env_->Schedule(absl::Microseconds(wait), [this, life = lifetime_, key, at = turns.again] {
    Entry in(life);
    if (in) LaneTimer(key, at);
  });
}

void GroupClient::LaneTimer(const std::string& key, int64_t at) {
  Plan plan;
  Turns turns;
  {
    absl::MutexLock lock(&lanes_mu_);
    auto it = lanes_.find(key);
    if (it == lanes_.end()) return;
    Lane& lane = *it->second;
    if (at != 0 && lane.timer_at == at) lane.timer_at = 0;  // the lane's timer, not a stale one
    if (!lane.busy) plan = PlanNext(lane);
    turns = NextTurn(lane);  // (after the plan, which may end a turn or keep one)
    if (lane.idle()) lanes_.erase(it);
  }
  RunTurns(key, std::move(turns));
  plan.key = key;
  RunPlan(std::move(plan));
}

void GroupClient::WaitingExpired(std::string key, Member* member) {
  MemberPtr expired;
  {
    absl::MutexLock lock(&lanes_mu_);
    auto it = lanes_.find(key);
    if (it == lanes_.end()) return;
    std::vector<MemberPtr>& waiting = it->second->waiting;
    for (auto w = waiting.begin(); w != waiting.end(); ++w) {
      // (The pointer may name a later commit at the same address: only
      // one whose deadline has passed is answered.)
      if (w->get() != member || !internal::Expired(this, (*w)->deadline)) continue;
      expired = std::move(*w);
      waiting.erase(w);
      break;
    }
  }
  if (expired != nullptr) expired->done(ExpiredWaiting());
}

GroupClient::Plan GroupClient::PlanNext(Lane& lane) {
  Plan plan;
  plan.group = lane.group;
  const int64_t now = env_->MonotonicMicros();
  uint64_t q = lane.next;
  if (q != 0) {
    auto it = lane.decided.find(q - 1);
    if (it != lane.decided.end()) {
      plan.base.position = q - 1;
      plan.base.timestamp = it->second.timestamp();
      plan.base.next_leader = it->second.next_leader();
    }
  }
  int64_t deadline = std::numeric_limits<int64_t>::max();
  size_t bytes = 0;
  bool closed = false;                     // an entry with a payload goes alone
  absl::flat_hash_set<std::string> taken;  // rows the members so far write
  std::vector<MemberPtr> keep;
  // Oldest first; while a retry waits for its turn, or has it and its
  // commit has not come, commits begun after it wait.
  std::stable_sort(lane.waiting.begin(), lane.waiting.end(),
                   [](const MemberPtr& x, const MemberPtr& y) { return x->since < y->since; });
  int64_t hold = std::numeric_limits<int64_t>::max();
  if (lane.granted >= 0 && !lane.granted_arrived && now < lane.granted_until) hold = lane.granted;
  for (const Lane::Turn& t : lane.turns)
    if (now < t.created + absl::ToInt64Microseconds(kTurnHold)) hold = std::min(hold, t.since);
  // A commit leaving the lane other than by a proposal ends its turn.
  auto leaves = [&lane](const Member& m) {
    if (m.since == lane.granted) lane.granted = -1;
  };
  for (MemberPtr& m : lane.waiting) {
    if (internal::Expired(this, m->deadline)) {
      leaves(*m);
      plan.refused.emplace_back(std::move(m), ExpiredWaiting());
      continue;
    }
    // (The turn's own commit is not held: with early turns a place for an
    // older retry may be kept after its turn was given.)
    if (closed || plan.members.size() >= static_cast<size_t>(std::max(1, options_.max_combined)) ||
        (m->since > hold && m->since != lane.granted)) {
      keep.push_back(std::move(m));
      continue;
    }
    const uint64_t a = m->at.position;
    if (q == 0 || (plan.members.empty() && a >= q)) {
      // The first commit of the proposal, at or beyond what the lane knows:
      // the proposal goes after its read.
      q = a + 1;
      plan.base = m->at;
    }
    if (a + 1 == q && plan.base.position + 1 != q) plan.base = m->at;
    if (a >= q) {  // read past the positions the lane saw: next time
      keep.push_back(std::move(m));
      continue;
    }
    if (a + 1 < q) {
      // Read before positions decided since: pass each as a promotion would.
      if (m->reads == nullptr) {
        stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
        group_counts_.Add(lane.group.root(), 1);
        leaves(*m);
        absl::Status conflict =
            absl::AbortedError(StrCat("conflict: another writer committed log position ", a + 1));
        if (m->turns) {
          KeepTurn(lane, m->since);
          conflict = TurnConflict(a + 1);
        }
        plan.refused.emplace_back(std::move(m), std::move(conflict));
        continue;
      }
      uint64_t failed = 0;
      bool known = true;
      for (uint64_t pos = a + 1; pos < q && failed == 0 && known; ++pos) {
        auto it = lane.decided.find(pos);
        if (it == lane.decided.end()) {
          known = false;
        } else if (Holds(it->second, m->entry.id())) {
          // A copy of this commit took the position: it goes alone to
          // that position (chosen already: Paxos gives back the copy) and
          // finds itself committed there.
          known = false;
          m->at.position = pos - 1;
        } else if (!Unaffected(*m->reads, it->second)) {
          failed = pos;
        }
      }
      if (!known) {
        leaves(*m);
        plan.alone.push_back(std::move(m));
        continue;
      }
      const uint64_t passed = q - 1 - a;
      if (failed != 0 || m->promotions + passed > static_cast<uint64_t>(kMaxPromotions)) {
        stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
        group_counts_.Add(lane.group.root(), 1);
        leaves(*m);
        const uint64_t lost = failed != 0 ? failed : q - 1;
        absl::Status conflict =
            absl::AbortedError(StrCat("conflict: another writer committed log position ", lost));
        if (m->turns) {
          KeepTurn(lane, m->since);
          conflict = TurnConflict(lost);
        }
        plan.refused.emplace_back(std::move(m), std::move(conflict));
        continue;
      }
      stats_.promotions.fetch_add(passed, std::memory_order_relaxed);
      group_counts_.Add(lane.group.root(), 1, passed);
      m->promotions += static_cast<int>(passed);
      const LogEntry& last = lane.decided.at(q - 1);
      m->at.position = q - 1;
      m->at.timestamp = std::max(m->at.timestamp, last.timestamp());
      m->at.next_leader = last.next_leader();
    }
    if (!plan.members.empty()) {
      // It joins if it is unaffected by every member before it (their
      // writes are serialized before its reads), writes none of their rows,
      // fits, and neither it nor the members before it would give up more
      // than half their time to an earlier deadline of the other's.
      bool joins = m->reads != nullptr && m->entry.payload().empty() &&
                   bytes + m->bytes <= static_cast<size_t>(options_.max_combined_bytes) &&
                   2 * (deadline - now) >= m->deadline - now &&
                   2 * (m->deadline - now) >= deadline - now;
      for (const std::string& row : m->rows) joins = joins && !taken.contains(row);
      for (size_t i = 0; joins && i < plan.members.size(); ++i)
        joins = Unaffected(*m->reads, plan.members[i]->entry);
      if (!joins) {
        keep.push_back(std::move(m));
        continue;
      }
    }
    if (options_.early_turns) {
      // The next turn's reads wait for every proposal so far; once the
      // turn's own commit is on its way, the next turn may go.
      lane.turn_after = q;
      if (m->since == lane.granted) lane.granted = -1;
    }
    closed = !m->entry.payload().empty();
    bytes += m->bytes;
    deadline = std::min(deadline, m->deadline);
    taken.insert(m->rows.begin(), m->rows.end());
    plan.members.push_back(std::move(m));
  }
  lane.waiting = std::move(keep);
  plan.position = q;
  lane.busy = !plan.members.empty();
  lane.busy_until = lane.busy ? deadline : 0;
  if (lane.busy)
    for (const MemberPtr& m : lane.waiting)
      if (m->deadline < deadline) plan.watch.emplace_back(m.get(), m->deadline);
  return plan;
}

void GroupClient::RunPlan(Plan plan) {
  for (const auto& [member, at] : plan.watch) {
    const int64_t wait = std::max<int64_t>(0, at - env_->MonotonicMicros());
    env_->Schedule(absl::Microseconds(wait),
                   [this, life = lifetime_, key = plan.key, member = member] {
                     Entry in(life);
                     if (in) WaitingExpired(key, member);
                   });
  }
  for (auto& [m, status] : plan.refused) m->done(status);
  for (MemberPtr& m : plan.alone)
    ProposeAfter(plan.group, m->at, std::move(m->entry), m->group_rows_only, m->deadline,
                 m->promotions, std::move(m->reads), m->started, std::move(m->done));
  if (!plan.members.empty())
    ProposeMembers(std::move(plan.group), plan.position, plan.base, std::move(plan.members));
}

void GroupClient::ProposeMembers(GroupRef group, uint64_t position, LogPosition base,
                                 std::vector<MemberPtr> members) {
  int64_t timestamp = std::max(env_->NowMicros(), base.timestamp + 1);
  int64_t deadline = std::numeric_limits<int64_t>::max();
  for (const MemberPtr& m : members) {
    timestamp = std::max(timestamp, m->at.timestamp + 1);
    deadline = std::min(deadline, m->deadline);
  }
  LogEntry entry;
  if (members.size() == 1) {
    entry = std::move(members[0]->entry);
  } else {
    // The members' changes move into the entry while it is decided (and
    // back if it loses).
    entry.set_id(fmt::format("combined-{:016x}", env_->Random64()));
    for (MemberPtr& m : members) {
      LogEntry::Member* named = entry.add_members();
      named->set_id(m->entry.id());
      named->set_changes(static_cast<uint32_t>(m->entry.changes_size()));
      for (RowChange& rc : *m->entry.mutable_changes()) *entry.add_changes() = std::move(rc);
      m->entry.clear_changes();
    }
  }
  entry.set_timestamp(timestamp);
  entry.set_next_leader(Votes(options_.replicas[options_.local].type) ? options_.local : -1);
  entry.set_origin(origin_);
  std::optional<int> leader;
  for (size_t i = 0; i < voters_.size(); ++i)
    if (voters_[i] == base.next_leader) leader = static_cast<int>(i);
  std::string value = entry.SerializeAsString();
  entry.Clear();
  internal::DecidePosition(this, group, position, value, leader, deadline,
                           [this, group, position, value,
                            members = std::move(members)](absl::StatusOr<Chosen> chosen) mutable {
                             MembersDecided(std::move(group), position, std::move(value),
                                            std::move(members), std::move(chosen));
                           });
}

void GroupClient::MembersDecided(GroupRef group, uint64_t position, std::string value,
                                 std::vector<MemberPtr> members, absl::StatusOr<Chosen> chosen) {
  const bool ours = chosen.ok() && chosen->value == value;
  LogEntry decided;
  const bool judged = chosen.ok() && decided.ParseFromString(chosen->value);
  const int64_t timestamp = judged ? decided.timestamp() : 0;
  if (judged && !ours && !decided.noop() && decided.origin() != origin_)
    NoteHot(group);  // another app server's entry: the group is contended
  if (chosen.ok() && !ours) {
    // Lost: the members take their changes back.
    LogEntry mine;
    if (!mine.ParseFromString(value)) mine.Clear();  // (it was serialized here)
    if (members.size() == 1) {
      members[0]->entry = std::move(mine);
    } else {
      int next = 0;
      for (int i = 0; i < mine.members_size() && i < static_cast<int>(members.size()); ++i)
        for (uint32_t j = 0; j < mine.members(i).changes() && next < mine.changes_size(); ++j)
          *members[static_cast<size_t>(i)]->entry.add_changes() =
              std::move(*mine.mutable_changes(next++));
    }
  }
  std::vector<Answer> answers;
  bool group_rows_only = true;
  int64_t deadline = std::numeric_limits<int64_t>::max();  // the proposal's
  Plan plan;
  Turns turns;
  const std::string key = GroupKey(group);
  {
    absl::MutexLock lock(&lanes_mu_);
    Lane& lane = *lanes_[key];  // busy: not erased while this was decided
    std::vector<MemberPtr> promoted, itself;
    // A turn ends when its commit is answered.
    auto answered = [&lane](const Member& m) {
      if (m.since == lane.granted) lane.granted = -1;
    };
    if (!chosen.ok()) {
      lane.next = 0;                                         // who knows what was chosen
      if (lane.turn_after == position) lane.turn_after = 0;  // maybe never: not waited for
      stats_.unknown.fetch_add(members.size(), std::memory_order_relaxed);
      for (const MemberPtr& m : members) answered(*m);
    } else {
      if (ours) {
        stats_.commits.fetch_add(members.size(), std::memory_order_relaxed);
        stats_.entries.fetch_add(1, std::memory_order_relaxed);
        if (members.size() > 1)
          stats_.combined.fetch_add(members.size(), std::memory_order_relaxed);
        if (chosen->fast) stats_.fast_path.fetch_add(members.size(), std::memory_order_relaxed);
        group_counts_.Add(group.root(), 0, members.size());
      }
      for (MemberPtr& m : members) {
        deadline = std::min(deadline, m->deadline);
        if (ours) {
          group_rows_only = group_rows_only && m->group_rows_only;
          answered(*m);
          answers.push_back(Answer{m->started, std::move(m->done)});
          continue;
        }
        if (judged && Holds(decided, m->entry.id())) {
          // A copy of it took the position: it goes alone to that position
          // and finds itself committed there (ProposeAfter).
          answered(*m);
          m->at.position = position - 1;
          itself.push_back(std::move(m));
          continue;
        }
        group_counts_.Add(group.root(), 1);  // a lost position, promoted or not
        if (judged && m->reads && m->promotions < kMaxPromotions &&
            position < std::numeric_limits<uint64_t>::max() &&
            !internal::Expired(this, m->deadline) && Unaffected(*m->reads, decided)) {
          stats_.promotions.fetch_add(1, std::memory_order_relaxed);
          ++m->promotions;
          m->at.position = position;
          m->at.timestamp = std::max(m->at.timestamp, decided.timestamp());
          m->at.next_leader = decided.next_leader();
          promoted.push_back(std::move(m));
        } else {
          stats_.conflicts.fetch_add(1, std::memory_order_relaxed);
          answered(*m);
          if (m->turns) KeepTurn(lane, m->since);
          answers.push_back(Answer{m->started, std::move(m->done), m->turns});
        }
      }
      // Promoted commits keep their place, ahead of those that came since.
      lane.waiting.insert(lane.waiting.begin(), std::make_move_iterator(promoted.begin()),
                          std::make_move_iterator(promoted.end()));
      lane.next = position + 1;
      if (judged) {
        // Remembered for commits that read before it: which rows and
        // columns it changed, not the values.
        for (RowChange& rc : *decided.mutable_changes())
          for (CellChange& cc : *rc.mutable_cells()) cc.clear_value();
        LogEntry& slot = lane.decided[position];  // (again after an unknown outcome)
        lane.decided_bytes -= std::min(lane.decided_bytes, slot.ByteSizeLong());
        lane.decided_bytes += decided.ByteSizeLong();
        slot = std::move(decided);
        while (!lane.decided.empty() &&
               (lane.decided.size() > kLaneEntries || lane.decided_bytes > kLaneBytes)) {
          lane.decided_bytes -=
              std::min(lane.decided_bytes, lane.decided.begin()->second.ByteSizeLong());
          lane.decided.erase(lane.decided.begin());
        }
      }
    }
    // (A lost race needs no wait: the retry's current read finds the
    // winner wherever it is applied.)
    if (ours && !answers.empty()) ++lane.answering;
    // A turn given early: its retry reads once this position is applied,
    // so the time its commit may take to come counts from now.
    if (options_.early_turns && lane.granted >= 0 && !lane.granted_arrived &&
        position == lane.turn_after)
      lane.granted_until = std::max(lane.granted_until,
                                    env_->MonotonicMicros() + absl::ToInt64Microseconds(kTurnHold));
    lane.busy = false;
    plan = PlanNext(lane);
    for (MemberPtr& m : itself) plan.alone.push_back(std::move(m));
    turns = NextTurn(lane);
    if (lane.idle()) lanes_.erase(key);
  }
  RunTurns(key, std::move(turns));
  plan.key = key;
  RunPlan(std::move(plan));
  if (!chosen.ok()) {
    for (MemberPtr& m : members) m->done(chosen.status());
    return;
  }
  if (answers.empty()) return;  // every member promoted
  absl::AnyInvocable<void()> answered;
  if (ours) {
    // The next turn may go once these commits are answered: their local
    // apply is then under way, and the retry's read waits for it.
    answered = [this, key] {
      {
        absl::MutexLock lock(&lanes_mu_);
        auto it = lanes_.find(key);
        if (it != lanes_.end() && it->second->answering > 0) --it->second->answering;
      }
      LaneTimer(key, 0);
    };
  }
  FinishPosition(std::move(group), position, std::move(*chosen), ours, timestamp, group_rows_only,
                 deadline, std::move(answers), std::move(answered));
}

}  // namespace megastore::replication
