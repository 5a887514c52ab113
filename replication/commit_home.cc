#include "replication/commit_home.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "base/status.h"
#include "base/strings.h"
#include "replication/log_replica.h"

namespace megastore::replication {

namespace {

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b)
    return std::numeric_limits<int64_t>::max();
  if (b < 0 && a < std::numeric_limits<int64_t>::min() - b)
    return std::numeric_limits<int64_t>::min();
  return a + b;
}

int64_t SaturatingSub(int64_t a, int64_t b) {
  if (b == std::numeric_limits<int64_t>::min()) return SaturatingAdd(SaturatingAdd(a, 1), -(b + 1));
  return SaturatingAdd(a, -b);
}

// Why a request cannot be committed through a home, or OK.
absl::Status CheckForwarded(const CommitRequest& r) {
  MS_RETURN_IF_ERROR(CheckGroup(r.group()));
  if (r.group().table().size() > CommitHome::kMaxTableBytes ||
      r.group().root().size() > CommitHome::kMaxRootBytes)
    return absl::InvalidArgumentError(StrCat("the group's table or root key is longer than ",
                                             CommitHome::kMaxTableBytes, " / ",
                                             CommitHome::kMaxRootBytes, " bytes"));
  const LogEntry& entry = r.entry();
  if (entry.id().empty() || entry.id().size() > CommitHome::kMaxIdBytes)
    return absl::InvalidArgumentError(
        StrCat("the entry's id must have 1 to ", CommitHome::kMaxIdBytes, " bytes"));
  if (entry.noop() || !entry.payload().empty() || entry.members_size() > 0)
    return absl::InvalidArgumentError(
        "only a transaction's own changes are committed through a group's home (no no-op, "
        "payload or members)");
  if (entry.changes_size() == 0) return absl::InvalidArgumentError("the entry changes nothing");
  for (const RowChange& rc : entry.changes())
    if (!rc.table().empty())
      return absl::InvalidArgumentError(
          StrCat("the entry writes table ", rc.table(),
                 ": only entries that write their group's rows alone go through its home"));
  if (!CommitHome::Bounded(r.reads()))
    return absl::InvalidArgumentError(StrCat("the read set has more than ",
                                             CommitHome::kMaxReadRows, " rows or ",
                                             CommitHome::kMaxReadRanges, " ranges"));
  if (r.budget_micros() <= 0) return absl::InvalidArgumentError("the budget must be positive");
  return absl::OkStatus();
}

}  // namespace

int64_t CommitHome::DeadlineFor(int64_t budget, int64_t now) const {
  budget = std::min(budget, absl::ToInt64Microseconds(client_->options().deadline));
  // Answer before the sender stops waiting: keep back a quarter of its
  // time (at most half a second) for the reply's way back.
  return now + budget - std::min<int64_t>(budget / 4, 500'000);
}

int64_t CommitHome::OffsetOf(uint64_t origin, int64_t sent, int64_t now) {
  int64_t offset = SaturatingSub(now, sent);
  absl::MutexLock lock(&mu_);
  auto it = offsets_.find(origin);
  if (it == offsets_.end() && offsets_.size() >= kMaxSenders && now - offsets_pruned_ > 1'000'000) {
    offsets_pruned_ = now;
    absl::erase_if(offsets_, [now](const auto& kv) {
      return now - kv.second.seen > absl::ToInt64Microseconds(kMaxAge);
    });
  }
  if (it != offsets_.end()) {
    it->second.offset = std::min(it->second.offset, offset);
    it->second.seen = now;
    offset = it->second.offset;
  } else if (offsets_.size() < kMaxSenders) {
    offsets_[origin] = Offset{offset, now};
  }
  return offset;
}

int64_t CommitHome::LocalSince(int64_t since, int64_t sent, int64_t offset, int64_t now) {
  if (since <= 0) return 0;
  const int64_t local = SaturatingAdd(std::min(since, sent), offset);
  const int64_t lo = std::max<int64_t>(1, now - absl::ToInt64Microseconds(kMaxAge));
  return std::clamp(local, lo, std::max(lo, now));
}

int64_t CommitHome::StableSince(uint64_t origin, int64_t since, int64_t sent, int64_t offset,
                                int64_t now) {
  const int64_t local = LocalSince(since, sent, offset, now);
  if (local == 0) return 0;
  absl::MutexLock lock(&mu_);
  auto it = sinces_.find(std::make_pair(origin, since));
  if (it == sinces_.end()) return local;
  it->second.seen = now;
  return it->second.local;
}

void CommitHome::KeepSince(std::pair<uint64_t, int64_t> sender, int64_t local) {
  if (local == 0) return;
  const int64_t now = client_->env()->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  if (auto it = sinces_.find(sender); it != sinces_.end()) {
    it->second.seen = now;
    return;
  }
  if (sinces_.size() >= kMaxSinces) {
    // Forget those no request named for as long as a request is taken; if
    // none, this one is not kept (its turn may then be missed, not wrong).
    if (now - sinces_pruned_ <= 1'000'000) return;
    sinces_pruned_ = now;
    absl::erase_if(sinces_, [now](const auto& kv) {
      return now - kv.second.seen > absl::ToInt64Microseconds(kMaxWindow);
    });
    if (sinces_.size() >= kMaxSinces) return;
  }
  sinces_.emplace(sender, Since{local, now});
}

bool CommitHome::OthersSend(const std::string& key, uint64_t origin, int64_t now) {
  if (senders_size_.load(std::memory_order_relaxed) == 0) return false;  // the common case
  absl::ReaderMutexLock lock(&mu_);
  auto it = senders_.find(key);
  if (it == senders_.end()) return false;
  for (int i = 0; i < kSendersPerGroup; ++i)
    if (it->second.origin[i] != origin && it->second.seen[i] != 0 &&
        now - it->second.seen[i] < hot_for_)
      return true;
  return false;
}

bool CommitHome::Contended(const std::string& key, uint64_t origin, int64_t now) {
  absl::MutexLock lock(&mu_);
  auto it = senders_.find(key);
  if (it == senders_.end()) {
    if (senders_.size() >= kMaxGroups) {
      if (now - senders_pruned_ <= 1'000'000) return false;
      senders_pruned_ = now;
      absl::erase_if(senders_, [this, now](const auto& kv) {
        for (int64_t seen : kv.second.seen)
          if (now - seen < hot_for_) return false;
        return true;
      });
      if (senders_.size() >= kMaxGroups) return false;
    }
    it = senders_.emplace(key, Senders{}).first;
    senders_size_.store(senders_.size(), std::memory_order_relaxed);
  }
  Senders& s = it->second;
  bool others = false;
  int slot = -1, oldest = 0;
  for (int i = 0; i < kSendersPerGroup; ++i) {
    if (s.origin[i] == origin) {
      slot = i;
    } else if (s.seen[i] != 0 && now - s.seen[i] < hot_for_) {
      others = true;
    }
    if (s.seen[i] < s.seen[oldest]) oldest = i;
  }
  if (slot < 0) slot = oldest;
  s.origin[slot] = origin;
  s.seen[slot] = now;
  return others;
}

void CommitHome::Forget(int64_t now) {
  while (!answered_.empty() && now - answered_.front().first > remember_) {
    known_.erase(answered_.front().second);
    answered_.pop_front();
  }
}

void CommitHome::ServeCommit(const std::string& bytes, Responder respond) {
  CommitRequest request;
  if (!request.ParseFromString(bytes))
    return respond(absl::InvalidArgumentError("repl.Commit: malformed request"));
  const int64_t now = client_->env()->MonotonicMicros();
  CommitReply reply;
  auto refuse = [&](const absl::Status& s) {
    reply.set_code(static_cast<int>(s.code()));
    reply.set_message(StrCat("repl.Commit: ", s.message()));
    respond(reply.SerializeAsString());
  };
  if (absl::Status bad = CheckForwarded(request); !bad.ok()) return refuse(bad);
  const GroupClientOptions& o = client_->options();
  if (o.replicas[o.local].type != ReplicaType::kFull)
    return refuse(absl::UnavailableError(
        StrCat(o.replicas[o.local].name, " is not a full replica: no group's home")));
  const int64_t offset = OffsetOf(request.origin(), request.sent(), now);
  const std::string id = request.entry().id();
  // Sent longer ago than its sender waits (by its wall clock, within the
  // allowed skew of this one): given up on, and maybe proposed by a copy
  // already forgotten here. (A copy of one remembered gets its answer.)
  const int64_t window = std::min(request.budget_micros(), absl::ToInt64Microseconds(kMaxWindow)) +
                         absl::ToInt64Microseconds(o.max_clock_skew);
  const bool stale = request.sent_wall() <= 0 ||
                     SaturatingAdd(request.sent_wall(), window) < client_->env()->NowMicros();
  std::optional<std::string> copy;  // a copy's answer, given already
  absl::Status refused;             // refused unproposed, and not remembered
  bool shed = false;
  {
    absl::MutexLock lock(&mu_);
    Forget(now);
    auto it = known_.find(id);
    if (it != known_.end()) {
      // A copy of a commit under way or answered: it gets the same answer.
      if (it->second.answered) {
        copy = it->second.reply;
      } else if (it->second.waiting.size() < kMaxCopiesWaiting) {
        return it->second.waiting.push_back(std::move(respond));
      } else {
        // (The first is under way: this copy's sender learns nothing.)
        refused = absl::ResourceExhaustedError(
            StrCat("repl.Commit: ", kMaxCopiesWaiting, " copies of this request wait already"));
      }
    } else if (stale) {
      refused = absl::DeadlineExceededError(
          "the request arrived after its sender stopped waiting for it: not proposed");
    } else if (known_.size() >= kMaxRemembered) {
      refused = absl::UnavailableError(StrCat("the group's home remembers ", kMaxRemembered,
                                              " commits answered lately: propose it yourself"));
    } else {
      known_.emplace(id, Known{});
      shed = in_flight_.load(std::memory_order_relaxed) >= kMaxInFlight;
      if (!shed) in_flight_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (copy) return respond(std::move(*copy));
  if (absl::IsResourceExhausted(refused)) return respond(refused);  // as if lost: unknown
  if (!refused.ok()) return refuse(refused);
  if (shed) {
    // Refused unproposed, and so are its copies (its id is answered).
    shed_.fetch_add(1, std::memory_order_relaxed);
    reply.set_code(static_cast<int>(absl::StatusCode::kUnavailable));
    reply.set_message(StrCat("repl.Commit: the group's home has ", kMaxInFlight,
                             " commits under way: propose it yourself"));
    std::string answer = reply.SerializeAsString();
    Answered(id, answer);
    return respond(std::move(answer));
  }
  commits_.fetch_add(1, std::memory_order_relaxed);
  reply.set_contended(Contended(GroupKey(request.group()), request.origin(), now));
  auto reads = std::make_shared<ReadSet>(std::move(*request.mutable_reads()));
  // The promotion test finds rows by binary search.
  if (!std::is_sorted(reads->rows().begin(), reads->rows().end()))
    std::sort(reads->mutable_rows()->begin(), reads->mutable_rows()->end());
  LogPosition at;
  at.position = request.position();
  at.timestamp = request.timestamp();
  at.next_leader = request.next_leader();
  at.replica = o.local;
  const int64_t since = StableSince(request.origin(), request.since(), request.sent(), offset, now);
  client_->Commit(
      std::move(*request.mutable_group()), at, std::move(*request.mutable_entry()),
      [this, id, reply = std::move(reply), respond = std::move(respond),
       sender = std::make_pair(request.origin(), request.since()),
       since](absl::StatusOr<CommitResult> r) mutable {
        in_flight_.fetch_sub(1, std::memory_order_relaxed);
        if (r.ok()) {
          reply.set_position(r->position);
          reply.set_timestamp(r->timestamp);
        } else if (absl::IsUnavailable(r.status())) {
          // (Commit never answers it; were it to, it must not read as
          // "refused unproposed" to the sender.)
          reply.set_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
          reply.set_message(StrCat("outcome unknown: ", r.status().message()));
        } else {
          reply.set_code(static_cast<int>(r.status().code()));
          reply.set_message(std::string(r.status().message()));
          reply.set_turn(GroupClient::HasTurn(r.status()));
          // Its retry's turn, and the retry, are known by this `since`.
          if (reply.turn()) KeepSince(sender, since);
        }
        std::string answer = reply.SerializeAsString();
        Answered(id, answer);
        respond(std::move(answer));
      },
      DeadlineFor(request.budget_micros(), now), std::move(reads), since);
}

void CommitHome::Answered(const std::string& id, std::string reply) {
  std::vector<Responder> copies;
  {
    absl::MutexLock lock(&mu_);
    Known& k = known_[id];
    k.answered = true;
    copies = std::move(k.waiting);
    k.waiting.clear();
    k.reply = reply;
    answered_.emplace_back(client_->env()->MonotonicMicros(), id);
  }
  for (Responder& r : copies) r(reply);
}

void CommitHome::ServeAwaitTurn(const std::string& bytes, Responder respond) {
  TurnRequest request;
  if (!request.ParseFromString(bytes))
    return respond(absl::InvalidArgumentError("repl.AwaitTurn: malformed request"));
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return respond(s);
  if (request.group().table().size() > kMaxTableBytes ||
      request.group().root().size() > kMaxRootBytes)
    return respond(absl::InvalidArgumentError("repl.AwaitTurn: the group's key is too long"));
  if (request.budget_micros() <= 0)
    return respond(absl::InvalidArgumentError("repl.AwaitTurn: the budget must be positive"));
  const int64_t now = client_->env()->MonotonicMicros();
  const int64_t since = StableSince(request.origin(), request.since(), request.sent(),
                                    OffsetOf(request.origin(), request.sent(), now), now);
  if (since == 0) return respond(TurnReply().SerializeAsString());  // no turn to wait for
  if (turns_.fetch_add(1) >= kMaxTurns) {
    turns_.fetch_sub(1);
    return respond(TurnReply().SerializeAsString());  // go ahead without one
  }
  // (A retry of a commit refused elsewhere, as its app server's lane: its
  // commit comes by this `since` too.)
  KeepSince({request.origin(), request.since()}, since);
  client_->AwaitTurnAfter(
      std::move(*request.mutable_group()), since,
      [this, respond = std::move(respond)](absl::StatusOr<uint64_t> after) mutable {
        turns_.fetch_sub(1);
        if (!after.ok()) return respond(after.status());
        TurnReply reply;
        reply.set_granted(true);
        reply.set_after(*after);
        respond(reply.SerializeAsString());
      },
      DeadlineFor(request.budget_micros(), now));
}

}  // namespace megastore::replication
