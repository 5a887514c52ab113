// The replication client's settings and answers that the public client API
// (api/database.h) shows to applications: the datacenters' replicas, the
// read levels, where a read stands, the protocol's timeouts. Plain types
// only: nothing here pulls in the RPC messages or the Paxos machinery, so
// an application that includes the client API compiles against these alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace megastore::replication {

enum class ReplicaType {
  kFull,      // votes, keeps the log and the data, has a coordinator
  kWitness,   // votes and keeps the log; no data, no coordinator
  kReadOnly,  // keeps the log and the data (for snapshot reads); no vote
};
const char* ToString(ReplicaType type);
bool Votes(ReplicaType type);

// How far ahead of a replica's clock a proposed entry's timestamp may be
// (GroupClientOptions::max_clock_skew): more than any honest clock drifts,
// far less than a timestamp that would drag every later commit of the
// group into the future.
inline constexpr absl::Duration kDefaultMaxClockSkew = absl::Seconds(10);

struct ReplicaInfo {
  std::string name;  // the datacenter
  ReplicaType type = ReplicaType::kFull;
  std::string replication;   // node address of its replication server
  std::string coordinator;   // node address of its coordinator (full replicas)
  std::string lock_service;  // node address of its lock service
};

struct GroupClientOptions {
  std::vector<ReplicaInfo> replicas;
  int local = 0;  // index of this app server's replica
  // How long one request may take before it counts as lost.
  absl::Duration rpc_timeout = absl::Milliseconds(500);
  // How long a writer waits for the leader's fast-path accept before it
  // runs both Paxos phases itself.
  absl::Duration leader_timeout = absl::Milliseconds(100);
  // How long a current read waits for the local coordinator before it
  // treats the group as not known to be up to date here.
  absl::Duration coordinator_timeout = absl::Milliseconds(50);
  // A stalled Paxos round retries after a random pause up to this long.
  absl::Duration max_backoff = absl::Milliseconds(40);
  // How long one ReadPosition / Commit / CatchUp may take in all.
  absl::Duration deadline = absl::Seconds(10);
  // How far beyond the local clock a log entry's timestamp may be: a
  // writer refuses to commit after a read whose timestamp is further ahead
  // (a forged or corrupted position), and a replica refuses to accept such
  // an entry. Must exceed the clock skew between datacenters.
  absl::Duration max_clock_skew = kDefaultMaxClockSkew;
  // Commits of one group from this client that arrive while one of its
  // proposals for the group is in flight wait for it, and then go
  // together in one log entry when none read what another writes
  // (docs/replication.md, "Combined entries"). false: every commit
  // proposes on its own, racing this client's others for the position.
  bool combine = true;
  // At most this many commits, and this many bytes of changes, share one
  // entry (a larger commit goes alone).
  int max_combined = 128;
  int64_t max_combined_bytes = 1 << 20;
  // Hot groups: once another app server's commit took a position this
  // client proposed for, a group's commits go to its home — one full
  // replica's replication server, the same for every app server — which
  // combines and proposes them with everyone else's, until no other app
  // server's commits were seen there for `hot_for` (docs/replication.md,
  // "Hot groups"). false: always proposed here.
  bool forward = true;
  absl::Duration hot_for = absl::Seconds(2);
  // Answer a commit only once it is applied at the local replica too
  // (otherwise one that writes only its group's rows is answered once
  // visible, its local apply finishing behind). A group's home sets it:
  // its answers, and the turns given after them, go to app servers whose
  // next reads then find the entry applied rather than only accepted.
  bool answer_after_local_apply = false;
  // Give a group's next turn (AwaitTurn) as soon as the commit of the turn
  // before it is proposed, not once it is decided and answered: the grant
  // names that proposal's position, and the retry's reads wait until their
  // replica has applied it (GroupClient::AwaitTurn). The retry's round
  // trip to the home then overlaps the Paxos round before it. A group's
  // home sets it.
  bool early_turns = false;
};

enum class ReadLevel { kCurrent, kSnapshot, kInconsistent };
const char* ToString(ReadLevel level);

// Where a read stands: data is read as of `timestamp` at `replica`.
struct LogPosition {
  uint64_t position = 0;
  int64_t timestamp = 0;
  int32_t next_leader = -1;  // leader nominated for position + 1
  int replica = 0;
  bool latest = false;  // inconsistent: ignore timestamp, read the newest data
};

}  // namespace megastore::replication
