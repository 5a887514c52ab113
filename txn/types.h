// The transaction layer's options and results that the public client API
// (api/database.h) shows to applications. Plain types only, so the client
// API's header does not pull in the transaction machinery.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "replication/client_options.h"
#include "schema/entity.h"

namespace megastore {
namespace replication {
class GroupClient;
}
namespace schema {
class Layout;
}
}  // namespace megastore

namespace megastore::txn {

// What a transaction runs on: the replication client and the schema's layout.
struct Context {
  replication::GroupClient* client = nullptr;
  const schema::Layout* layout = nullptr;
};

struct TransactionOptions {
  replication::ReadLevel level = replication::ReadLevel::kCurrent;
  // Run: attempts in all (the first and the retries after conflicts), and
  // the longest pause before a retry (each pause is random up to it).
  int max_attempts = 10;
  absl::Duration max_retry_backoff = absl::Milliseconds(50);
  // How long the transaction may take in all, from Begin to the end of
  // Commit (Run: from its start, across every attempt); past it, calls end
  // with DeadlineExceeded (a Commit's outcome is then unknown). Zero: no
  // limit of its own, each step gets the client's per-operation deadline
  // (GroupClientOptions::deadline, 10 s).
  absl::Duration deadline = absl::ZeroDuration();
  // Advisory lock, for groups many writers share: take the
  // group's lock at its coordinator before reading, hold it until Commit
  // ends, so the group's writers take turns instead of losing Paxos races
  // and retrying. Waits at most `lock_wait`; without the lock (wait over,
  // coordinator unreachable) the transaction goes ahead unlocked — the lock
  // never decides correctness. A lock whose holder died frees itself after
  // `lock_lease`.
  bool advisory_lock = false;
  absl::Duration lock_wait = absl::Seconds(2);
  absl::Duration lock_lease = absl::Seconds(5);
  // Promotion: a commit that loses its log position to a writer that
  // wrote nothing this transaction read goes on to the next position
  // instead of ending Aborted (docs/transactions.md, "Promotion"). Off:
  // every lost position aborts, as in the original Megastore.
  bool promote = true;
  // When the transaction's first attempt began (a time of the Env's
  // MonotonicMicros; Run sets it): an app server's commits to a group wait
  // oldest first, and a retry after a conflict with one of them waits for
  // its turn (GroupClient::AwaitTurn) instead of a random pause. 0: the
  // attempt's own start.
  int64_t first_attempt = 0;
  // The replica to read at (an index into the client's replicas; it must
  // hold data): -1, the client's local one. The commit goes to every
  // replica wherever the reads were served.
  int replica = -1;
};

struct CommitInfo {
  uint64_t position = 0;  // the log position of the commit (or of the read, if nothing was written)
  int64_t timestamp = 0;  // the commit timestamp (micros)
  bool wrote = false;     // false: a read-only transaction, nothing committed
  int attempts = 1;       // Run: how many tries it took
};

// Query paging: at most `limit` entities per call (0: as many as one
// replica answer holds, 1000); `cursor` resumes after the previous page.
struct QueryOptions {
  int64_t limit = 0;
  std::string cursor;
};

struct QueryResult {
  std::vector<schema::Entity> entities;
  // Pass back in QueryOptions to get the next page; empty when done.
  std::string cursor;
};

// A message in an entity group's queue: sent atomically
// with the sending transaction, delivered to the receiving group exactly
// once, read and consumed there by its transactions.
struct QueueMessage {
  std::string id;
  std::string queue;
  std::string body;
  std::string source;  // the sending group's root row
};

}  // namespace megastore::txn
