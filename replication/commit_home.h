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
// group's rows, the read set and the budget are bounded, and a sender's
// clock is mapped onto this one's (per sender, so a retry's `since` maps to
// the same instant each time) and clamped.
//
// A request delivered twice must not commit twice: commits are known by
// their entry's id while under way and for kRemember after (a copy gets
// the first one's answer), and a request older than that — by the
// sender's clock as mapped here, against its budget — is refused.
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
  // commits to homes (options().forward false), and must outlive this.
  explicit CommitHome(GroupClient* client) : client_(client) {}

  void ServeCommit(const std::string& request, Responder respond);
  // Whether a sender other than `origin` sent commits of the group (key:
  // GroupKey) here within the client's hot_for: an accept from `origin`
  // is answered that the group is hot.
  bool OthersSend(const std::string& key, uint64_t origin, int64_t now);
  void ServeAwaitTurn(const std::string& request, Responder respond);

  struct Stats {
    uint64_t commits = 0;  // commits sent here (answered with any outcome)
    uint64_t shed = 0;     // ... refused unproposed: kMaxInFlight were under way
  };
  Stats stats() const { return Stats{commits_.load(), shed_.load()}; }

  // Bounds on what a request may ask of the home.
  static constexpr int kMaxInFlight = 10000;    // commits and turns under way here
  static constexpr int kMaxReadRows = 100000;   // rows in a read set
  static constexpr int kMaxReadRanges = 10000;  // ranges in a read set
  static constexpr size_t kMaxSenders = 10000;  // senders whose clock offset is kept
  static constexpr size_t kMaxGroups = 100000;  // groups whose recent senders are kept
  static constexpr int kSendersPerGroup = 4;
  // How far back a sender's `since` may lie (older ones are clamped to it).
  static constexpr absl::Duration kMaxAge = absl::Seconds(60);
  // How long an answered commit's id and answer are kept (longer than any
  // sender waits: budgets are cut to the client's deadline), and at most
  // how many.
  // A request is stale once it was sent more than its budget, and at most
  // kRemember / 2, ago. With kMaxRemembered answered commits younger than
  // kRemember, more are refused unproposed.
  static constexpr absl::Duration kRemember = absl::Seconds(30);
  static constexpr size_t kMaxRemembered = 200000;

 private:
  // This clock minus the sender's: the least (now - sent) seen from it, so
  // a request's send time on this clock is estimated no later than it was.
  int64_t OffsetOf(uint64_t origin, int64_t sent, int64_t now);
  // `since` (on the sender's clock) on this one, given its offset: 0 for 0.
  static int64_t LocalSince(int64_t since, int64_t sent, int64_t offset, int64_t now);
  // Notes `origin` sending a commit of the group; whether another sender
  // did within the client's hot_for.
  bool Contended(const std::string& key, uint64_t origin, int64_t now);
  // The deadline here for a sender that waits `budget` micros from now.
  int64_t DeadlineFor(int64_t budget, int64_t now) const;
  // The commit with id `id` was answered `reply`: the copies waiting for it
  // get it too.
  void Answered(const std::string& id, const std::string& reply);

  GroupClient* const client_;
  std::atomic<int> in_flight_{0};
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
  std::atomic<size_t> senders_size_{0};  // senders_.size(), read without the lock
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
