#include "replication/group_client.h"

// GroupClient's own state: its lifetime, statistics and the groups'
// advisory locks. The operations live in files named after them:
// read_position.cc (reads), commit.cc and write_*.cc (a write's steps),
// catch_up.cc; client_calls.h holds what they share.
#include <algorithm>

#include "base/buggify.h"
#include "replication/client_calls.h"

namespace megastore::replication {

MS_FAULT_POINT(kLockMissed, "writer: goes ahead without the group's advisory lock");

const char* ToString(ReadLevel level) {
  switch (level) {
    case ReadLevel::kCurrent:
      return "current";
    case ReadLevel::kSnapshot:
      return "snapshot";
    case ReadLevel::kInconsistent:
      return "inconsistent";
  }
  return "?";
}

GroupClient::~GroupClient() {
  // Callbacks on other threads finish. (One on this thread — destroying
  // the client from its own callback — would wait forever: not allowed.)
  lifetime_->End();
  // Reads still waiting for local applies are dropped here, while the
  // client is whole (what they hold may call into it as it goes).
  std::map<std::string, LocalApplies> waiting;
  {
    absl::MutexLock lock(&applies_mu_);
    waiting.swap(local_applies_);
  }
  // So are commits waiting behind a proposal (never answered).
  absl::flat_hash_map<std::string, std::unique_ptr<Lane>> lanes;
  {
    absl::MutexLock lock(&lanes_mu_);
    lanes.swap(lanes_);
  }
}

GroupClient::GroupClient(Env* env, Transport* transport, GroupClientOptions options)
    : env_(env), transport_(transport), options_(std::move(options)) {
  for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
    if (Votes(options_.replicas[i].type)) voters_.push_back(i);
  for (int i = 0; i < static_cast<int>(options_.replicas.size()); ++i)
    if (options_.replicas[i].type == ReplicaType::kFull &&
        !options_.replicas[i].coordinator.empty())
      lock_homes_.push_back(i);
  origin_ = env_->Random64();
  homes_.resize(options_.replicas.size());
}

GroupClient::Stats GroupClient::stats() const {
  Stats s;
  s.commits = stats_.commits.load();
  s.entries = stats_.entries.load();
  s.combined = stats_.combined.load();
  s.turns = stats_.turns.load();
  s.forwarded = stats_.forwarded.load();
  s.fast_path = stats_.fast_path.load();
  s.conflicts = stats_.conflicts.load();
  s.promotions = stats_.promotions.load();
  s.unknown = stats_.unknown.load();
  s.locks_granted = stats_.locks_granted.load();
  s.locks_missed = stats_.locks_missed.load();
  s.catchups = stats_.catchups.load();
  s.invalidations = stats_.invalidations.load();
  s.snapshot_catchups = stats_.snapshot_catchups.load();
  s.first_reads = stats_.first_reads.load();
  s.first_reads_again = stats_.first_reads_again.load();
  return s;
}

std::vector<std::pair<std::string, uint64_t>> GroupClient::HottestGroups(size_t n,
                                                                         bool by_conflicts) const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [root, counts] : group_counts_.Top(n, by_conflicts ? 1 : 0))
    out.emplace_back(std::move(root), counts[by_conflicts ? 1 : 0]);
  return out;
}

const ReplicaInfo* GroupClient::LockHome(const GroupRef& group) const {
  if (lock_homes_.empty()) return nullptr;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a: the same home in every app server
  for (const std::string* part : {&group.table(), &group.root()}) {
    for (unsigned char ch : *part) {
      h ^= ch;
      h *= 0x100000001b3ULL;
    }
    h ^= 0xff;
    h *= 0x100000001b3ULL;
  }
  return &options_.replicas[static_cast<size_t>(lock_homes_[h % lock_homes_.size()])];
}

void GroupClient::LockGroup(GroupRef group, std::string owner, absl::Duration wait,
                            absl::Duration lease, Callback<bool> done, int64_t deadline) {
  const ReplicaInfo* home = LockHome(group);
  if (home == nullptr) {
    stats_.locks_missed.fetch_add(1, std::memory_order_relaxed);
    return done(
        absl::FailedPreconditionError("no full replica has a coordinator to hold advisory locks"));
  }
  if (kLockMissed.Fire()) {
    stats_.locks_missed.fetch_add(1, std::memory_order_relaxed);
    return done(false);  // go ahead without it
  }
  coordinators_.Lock(home->coordinator, internal::CoordinatorGroup(group), std::move(owner), wait,
                     lease, internal::RequestTimeout(this, wait + options_.rpc_timeout, deadline),
                     internal::Guarded<coordinator::AdvisoryLockReply>(
                         this, [this, done = std::move(done)](
                                   absl::StatusOr<coordinator::AdvisoryLockReply> r) mutable {
                           const bool granted = r.ok() && r->granted();
                           (granted ? stats_.locks_granted : stats_.locks_missed)
                               .fetch_add(1, std::memory_order_relaxed);
                           if (!r.ok()) return done(r.status());
                           done(granted);
                         }));
}

void GroupClient::UnlockGroup(GroupRef group, std::string owner) {
  const ReplicaInfo* home = LockHome(group);
  if (home == nullptr) return;
  coordinators_.Unlock(home->coordinator, internal::CoordinatorGroup(group), std::move(owner),
                       options_.rpc_timeout, [](absl::StatusOr<coordinator::AdvisoryLockReply>) {});
}

}  // namespace megastore::replication
