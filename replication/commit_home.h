// The home of hot entity groups (docs/replication.md, "Hot groups"): a
// replication server's side of repl.Commit and repl.AwaitTurn. App servers
// that found a group contended send its commits here — the same full
// replica for every app server — and the server's own GroupClient proposes
// them: its lane combines those that read nothing another writes into one
// log entry, promotes losers whose reads still hold, and gives retries of
// conflicting writers their turns oldest first, for every app server at
// once rather than each one racing the others.
//
// A request is hostile until checked: the entry must write only its
// group's rows, ids, keys, the read set and the budget are bounded, and a
// sender's monotonic clock is mapped onto this one's (per sender, so a
// retry's `since` maps to the same instant each time) and clamped.
//
// A request delivered twice must not commit twice. A copy that arrives
// while the first is under way, or up to remember() after it was answered,
// gets the first one's answer (its entry id is known here). A request sent
// longer ago than its budget (at most kMaxWindow), by its sender's wall
// clock, which is within max_clock_skew of this one, is refused: so no copy
// outlives the memory of the first. And should a copy be proposed after
// all, it finds the first in the log and answers that it is committed
// there instead of being promoted past it (GroupClient::Holds).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/transport.h"
#include "replication/group_client.h"

namespace megastore::replication {

class CommitHome {
 public:
  // `client` proposes the commits sent here; it must not itself send
  // commits to homes (options().forward false), and must outlive this
  // server's requests (it need not be constructed yet). `hot_for` and
  // `max_clock_skew`: the cluster's GroupClientOptions.
  CommitHome(GroupClient* client, absl::Duration hot_for, absl::Duration max_clock_skew)
      : client_(client),
        hot_for_(absl::ToInt64Microseconds(hot_for)),
        remember_(absl::ToInt64Microseconds(kMaxWindow + 2 * max_clock_skew + absl::Seconds(5))) {}

  void ServeCommit(const std::string& request, Responder respond);
  void ServeAwaitTurn(const std::string& request, Responder respond);
  // Whether a sender other than `origin` sent commits of the group (key:
  // GroupKey) here within hot_for: an accept from `origin` is answered that
  // the group is hot.
  bool OthersSend(const std::string& key, uint64_t origin, int64_t now);

  struct Stats {
    uint64_t commits = 0;  // commits sent here (answered with any outcome)
    uint64_t shed = 0;     // ... refused unproposed: kMaxInFlight were under way
  };
  Stats stats() const { return Stats{commits_.load(), shed_.load()}; }

  // Bounds on what a request may ask of the home.
  static constexpr int kMaxInFlight = 10000;       // commits under way here
  static constexpr int kMaxTurns = 10000;          // retries waiting for their turn here
  static constexpr int kMaxReadRows = 100000;      // rows in a read set
  static constexpr int kMaxReadRanges = 1000;      // ranges in a read set
  static constexpr size_t kMaxIdBytes = 256;       // an entry id
  static constexpr size_t kMaxTableBytes = 256;    // a group's table name
  static constexpr size_t kMaxRootBytes = 4096;    // a group's root row key
  static constexpr size_t kMaxCopiesWaiting = 16;  // copies of one request waiting for it
  static constexpr size_t kMaxSenders = 10000;     // senders whose clock offset is kept
  static constexpr size_t kMaxSinces = 100000;     // senders' `since` values kept (StableSince)
  static constexpr size_t kMaxGroups = 100000;     // groups whose recent senders are kept
  static constexpr int kSendersPerGroup = 4;
  static constexpr size_t kMaxRemembered = 1000000;  // ids kept; beyond, new ones are shed
  // How far back a sender's `since` may lie (older ones are clamped to it).
  static constexpr absl::Duration kMaxAge = absl::Seconds(60);
  // The longest a request is taken after it was sent (its budget, if less).
  static constexpr absl::Duration kMaxWindow = absl::Seconds(15);
  // Whether `reads` is within the bounds above (a sender checks before
  // sending: a larger read set is proposed where it was made).
  static bool Bounded(const ReadSet& reads) {
    return reads.rows_size() <= kMaxReadRows && reads.ranges_size() <= kMaxReadRanges;
  }

 private:
  // This clock minus the sender's: the least (now - sent) seen from it.
  int64_t OffsetOf(uint64_t origin, int64_t sent, int64_t now);
  // `since` (on the sender's clock) on this one, given its offset: 0 for 0.
  static int64_t LocalSince(int64_t since, int64_t sent, int64_t offset, int64_t now);
  // The same, the same for every request naming this sender's `since`: a
  // retry's turn and its commit must agree on it (the turn is known by it),
  // though the sender's offset may be learned better in between.
  int64_t StableSince(uint64_t origin, int64_t since, int64_t sent, int64_t offset, int64_t now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records a sender's (origin, since) as `local`: a commit refused with a
  // turn, or a retry asking for its turn, whose commit comes by it. Kept while
  // requests name it within kMaxWindow; at most kMaxSinces (beyond, a turn
  // may be missed, never given wrongly).
  void KeepSince(std::pair<uint64_t, int64_t> sender, int64_t local) ABSL_LOCKS_EXCLUDED(mu_);
  // Notes `origin` sending a commit of the group; whether another sender
  // did within hot_for.
  bool Contended(const std::string& key, uint64_t origin, int64_t now);
  // The deadline here for a sender that waits `budget` micros from now.
  int64_t DeadlineFor(int64_t budget, int64_t now) const;
  // The commit with id `id` was answered `reply` (serialized): copies that
  // wait for it get it too, and later ones for remember_.
  void Answered(const std::string& id, std::string reply) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets answers older than remember_.
  void Forget(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  GroupClient* const client_;
  const int64_t hot_for_;
  const int64_t remember_;
  std::atomic<int> in_flight_{0}, turns_{0};
  std::atomic<uint64_t> commits_{0}, shed_{0};

  absl::Mutex mu_;
  struct Offset {
    int64_t offset = 0;  // this clock minus the sender's
    int64_t seen = 0;
  };
  absl::flat_hash_map<uint64_t, Offset> offsets_ ABSL_GUARDED_BY(mu_);
  struct Senders {
    uint64_t origin[kSendersPerGroup] = {};
    int64_t seen[kSendersPerGroup] = {};
  };
  absl::flat_hash_map<std::string, Senders> senders_ ABSL_GUARDED_BY(mu_);
  struct Since {
    int64_t local = 0;  // on this clock
    int64_t seen = 0;
  };
  absl::flat_hash_map<std::pair<uint64_t, int64_t>, Since> sinces_ ABSL_GUARDED_BY(mu_);
  int64_t sinces_pruned_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> senders_size_{0};  // senders_.size(), read without the lock
  // When the full maps above were last pruned (at most once a second).
  int64_t offsets_pruned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t senders_pruned_ ABSL_GUARDED_BY(mu_) = 0;
  // Commits by entry id: under way (copies wait in `waiting`) or answered.
  struct Known {
    bool answered = false;
    std::string reply;  // serialized CommitReply, once answered
    std::vector<Responder> waiting;
  };
  absl::flat_hash_map<std::string, Known> known_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<int64_t, std::string>> answered_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace megastore::replication
