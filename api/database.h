// The client library application servers link (docs/architecture.md): open a
// Database, then run transactions on entity groups with typed entities
// (the classes msc generates) or untyped ones (schema::Entity).
//
//   auto db = megastore::Database::Open(options);
//   auto info = (*db)->Run<photoapp::User>(photoapp::User::Key{7}, [&](megastore::Transaction& t) {
//     auto user = t.Get<photoapp::User>(photoapp::User::Key{7});
//     ...
//     return t.Put(photo);
//   });
//
// Calls block the calling thread; a Database is thread-safe and meant to be
// shared. Errors are absl::Status codes: Aborted is
// a conflict (Run retries it), Unavailable means too few replicas answered
// (nothing was written), DeadlineExceeded means out of time — for a commit,
// an unknown outcome — and InvalidArgument names the field that does not fit
// the schema.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/client_options.h"
#include "schema/entity.h"
#include "schema/key_codec.h"
#include "txn/types.h"

// The library's internals, which this header names but never opens.
namespace megastore {
class Env;
class Retry;
class Transport;
namespace replication {
class GroupClient;
}
namespace schema {
class Layout;
}
namespace txn {
class Transaction;
}
}  // namespace megastore

namespace megastore {

using txn::CommitInfo;
using txn::QueryOptions;
using txn::TransactionOptions;

struct DatabaseOptions {
  // Every datacenter's replica, and which one is this app server's.
  std::vector<replication::ReplicaInfo> replicas;
  std::string local;
  // The schema, as msc compiled it (SchemaName.schema.pb).
  schema::SchemaDescriptor schema;
  // Timeouts and backoff of the replication protocol (`replicas` and
  // `local` above take precedence over the ones in here).
  replication::GroupClientOptions replication;
  // Where requests go; nullptr: TCP (RPC) to the replicas' addresses.
  Transport* transport = nullptr;
  // Clock, timers, randomness, and how blocking calls wait and pause
  // (Env::Wait, Env::SleepFor); nullptr: the real ones. A simulator's Env
  // runs the simulation while a call waits (set queue_sweep_interval to 0
  // there: the sweeper is a thread on real time).
  Env* env = nullptr;
  // How often a background thread sweeps the queues (SweepQueues), so
  // messages whose sender died before delivering them still arrive. Zero:
  // no background sweeping (call SweepQueues yourself).
  absl::Duration queue_sweep_interval = absl::Seconds(10);
};

class Transaction;
class MultiTransaction;

// One page of a typed query: the entities, and the cursor to pass back
// (QueryOptions::cursor) for the next page; empty when there is none.
template <typename T>
struct TypedPage {
  std::vector<T> entities;
  std::string cursor;
};

// A query's entities as msc's class T.
template <typename T>
absl::StatusOr<TypedPage<T>> TypedResult(absl::StatusOr<txn::QueryResult> r) {
  if (!r.ok()) return r.status();
  TypedPage<T> out;
  for (const schema::Entity& e : r->entities) {
    absl::StatusOr<T> typed = T::FromEntity(e);
    if (!typed.ok()) return typed.status();
    out.entities.push_back(std::move(*typed));
  }
  out.cursor = std::move(r->cursor);
  return out;
}
template <typename T>
absl::StatusOr<std::vector<T>> TypedEntities(absl::StatusOr<txn::QueryResult> r) {
  absl::StatusOr<TypedPage<T>> page = TypedResult<T>(std::move(r));
  if (!page.ok()) return page.status();
  return std::move(page->entities);
}

class Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(DatabaseOptions options);
  ~Database();

  // Begins a transaction on the entity group of `root_table`'s entity with
  // key `root_key`.
  absl::StatusOr<std::unique_ptr<Transaction>> Begin(std::string_view root_table,
                                                     std::vector<schema::KeyValue> root_key,
                                                     TransactionOptions options = {});
  template <typename Root>
  absl::StatusOr<std::unique_ptr<Transaction>> Begin(const typename Root::Key& key,
                                                     TransactionOptions options = {}) {
    return Begin(Root::kTable, key.Values(), options);
  }

  // Runs `fn` in a transaction and commits it; on a conflict (Aborted from
  // Commit, or from the body), runs it again after a random pause, up to
  // options.max_attempts. A body error is returned as is.
  using Body = std::function<absl::Status(Transaction&)>;
  absl::StatusOr<CommitInfo> Run(std::string_view root_table,
                                 std::vector<schema::KeyValue> root_key, const Body& fn,
                                 TransactionOptions options = {});
  template <typename Root>
  absl::StatusOr<CommitInfo> Run(const typename Root::Key& key, const Body& fn,
                                 TransactionOptions options = {}) {
    return Run(Root::kTable, key.Values(), fn, options);
  }

  // Entities across entity groups through global index `index` (values
  // prefix), in index order. May lag recent commits; never returns an
  // entity that no longer matches (see txn::GlobalIndexQuery).
  absl::StatusOr<txn::QueryResult> GlobalIndexQuery(
      std::string_view index, std::vector<schema::KeyValue> values, QueryOptions options = {},
      replication::ReadLevel level = replication::ReadLevel::kSnapshot);
  template <typename T>
  absl::StatusOr<std::vector<T>> GlobalIndexQuery(std::string_view index,
                                                  std::vector<schema::KeyValue> values,
                                                  QueryOptions options = {}) {
    return TypedEntities<T>(GlobalIndexQuery(index, std::move(values), options));
  }
  template <typename T>
  absl::StatusOr<TypedPage<T>> GlobalIndexQueryPage(std::string_view index,
                                                    std::vector<schema::KeyValue> values,
                                                    QueryOptions options) {
    return TypedResult<T>(GlobalIndexQuery(index, std::move(values), options));
  }

  // Runs `fn` in one transaction across several entity groups (each part
  // begun with MultiTransaction::In) and commits it atomically with
  // two-phase commit; conflicts are retried like Run. A transaction that
  // writes only one group commits without two-phase commit.
  using MultiBody = std::function<absl::Status(MultiTransaction&)>;
  absl::StatusOr<CommitInfo> RunAcross(const MultiBody& fn, TransactionOptions options = {});

  // The asynchronous layer underneath (txn/), for tools and tests.
  txn::Context context() const;

  // Delivers the messages the group of `root_table`/`root_key` sent that
  // are still in its outbox (Run delivers a transaction's messages right
  // after it commits; this finishes the job if that was interrupted).
  // Exactly once however often it runs. Returns how many it delivered.
  absl::StatusOr<int> DeliverQueues(std::string_view root_table,
                                    std::vector<schema::KeyValue> root_key);
  // Delivers every group's undelivered messages (txn::SweepQueues): what
  // the background sweeper runs every options.queue_sweep_interval.
  absl::StatusOr<int> SweepQueues();

  // The index consistency checker: for each listed entity group (a root
  // table's name and key), every entity has exactly its local and global
  // index entries, and every entry points to a live entity that has it.
  // Reads the groups at the current level and the global index tables at
  // the local replica, so run it when no commit is still being applied.
  // Inline indexes are not checked yet.
  struct IndexReport {
    int64_t entities = 0;
    int64_t entries = 0;
    std::vector<std::string> problems;  // empty: consistent
    int64_t repaired = 0;               // RepairIndexes: entries written or removed
  };
  absl::StatusOr<IndexReport> CheckIndexes(
      const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups);
  // The repair scan: checks like CheckIndexes, then fixes what it found in
  // each group with one commit at the position it checked (missing entries
  // written, entries that point to nothing removed, at every replica);
  // a group that changed meanwhile is checked again. Returns what is still
  // wrong afterwards (damaged global entries, which belong to no group, stay).
  absl::StatusOr<IndexReport> RepairIndexes(
      const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups);

  const schema::Layout& layout() const { return *layout_; }
  // Where its time, pauses and blocking waits come from (DatabaseOptions::env).
  Env* env() const { return env_; }
  // Conflicts retried by Run so far.
  uint64_t retries() const { return retries_.load(); }

 private:
  Database() = default;
  struct IndexExamination;
  absl::StatusOr<IndexExamination> ExamineIndexes(
      const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups);
  // A random pause before a retried transaction (counted in retries()).
  // After an attempt failed with `failure` (retryable): sleeps on the Env
  // before the next attempt and returns OK, or returns what to report: the
  // deadline passing, or `failure` if the attempts are used up.
  absl::Status PauseBeforeRetry(Retry& retry, absl::Duration total, absl::Status failure);
  // Run's wait before retrying a commit that lost to one of this app
  // server's own and was kept a turn (GroupClient::AwaitTurn), for the
  // transaction `t` that failed with `failure`.
  absl::Status AwaitTurn(Retry& retry, absl::Duration total, const txn::Transaction& t,
                         int64_t since, absl::Status failure);
  // Begin; `deferred`: the position is read with the first read (Run).
  absl::StatusOr<std::unique_ptr<Transaction>> BeginTransaction(
      std::string_view root_table, std::vector<schema::KeyValue> root_key,
      TransactionOptions options, bool deferred);

  std::unique_ptr<Env> owned_env_;
  std::unique_ptr<Transport> owned_transport_;
  Env* env_ = nullptr;
  std::unique_ptr<schema::Layout> layout_;
  std::unique_ptr<replication::GroupClient> client_;
  std::atomic<uint64_t> retries_{0};
  // The background queue sweeper.
  absl::Mutex sweeper_mu_;
  bool stopping_ ABSL_GUARDED_BY(sweeper_mu_) = false;
  std::thread sweeper_;
};

// A transaction in progress (blocking calls over txn::Transaction).
class Transaction {
 public:
  absl::StatusOr<std::optional<schema::Entity>> Get(std::string_view table,
                                                    std::vector<schema::KeyValue> key);
  absl::Status Put(std::string_view table, schema::Entity entity);
  absl::Status Delete(std::string_view table, std::vector<schema::KeyValue> key);
  absl::StatusOr<txn::QueryResult> Query(std::string_view table,
                                         std::vector<schema::KeyValue> key_prefix,
                                         QueryOptions options = {});
  absl::StatusOr<txn::QueryResult> IndexQuery(std::string_view index,
                                              std::vector<schema::KeyValue> values,
                                              QueryOptions options = {});
  // Entities matching every (local index, values prefix) condition, in key order.
  absl::StatusOr<std::vector<schema::Entity>> IndexIntersect(
      std::vector<std::pair<std::string, std::vector<schema::KeyValue>>> conditions);
  absl::StatusOr<CommitInfo> Commit();

  // Queues: send to another group's queue atomically with
  // this transaction; read and consume this group's queue.
  absl::Status Send(std::string_view root_table, std::vector<schema::KeyValue> root_key,
                    std::string queue, std::string body);
  absl::StatusOr<std::vector<txn::QueueMessage>> ReadQueue(std::string_view queue,
                                                           int64_t limit = 0);
  absl::Status Consume(const txn::QueueMessage& m);

  // Typed forms, with the classes msc generates.
  template <typename T>
  absl::StatusOr<std::optional<T>> Get(const typename T::Key& key) {
    absl::StatusOr<std::optional<schema::Entity>> e = Get(T::kTable, key.Values());
    if (!e.ok()) return e.status();
    if (!e->has_value()) return std::optional<T>();
    absl::StatusOr<T> typed = T::FromEntity(**e);
    if (!typed.ok()) return typed.status();
    return std::optional<T>(std::move(*typed));
  }
  template <typename T>
  absl::Status Put(const T& entity) {
    return Put(T::kTable, entity.ToEntity());
  }
  template <typename T>
  absl::Status Delete(const typename T::Key& key) {
    return Delete(T::kTable, key.Values());
  }
  // The entities of T whose key starts with `prefix` (at least the group's key).
  template <typename T>
  absl::StatusOr<std::vector<T>> Query(std::vector<schema::KeyValue> prefix,
                                       QueryOptions options = {}) {
    return TypedEntities<T>(Query(T::kTable, std::move(prefix), options));
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> IndexQuery(std::string_view index,
                                            std::vector<schema::KeyValue> values,
                                            QueryOptions options = {}) {
    return TypedEntities<T>(IndexQuery(index, std::move(values), options));
  }
  // The same a page at a time (options.limit entities), keeping the cursor.
  template <typename T>
  absl::StatusOr<TypedPage<T>> QueryPage(std::vector<schema::KeyValue> prefix,
                                         QueryOptions options) {
    return TypedResult<T>(Query(T::kTable, std::move(prefix), options));
  }
  template <typename T>
  absl::StatusOr<TypedPage<T>> IndexQueryPage(std::string_view index,
                                              std::vector<schema::KeyValue> values,
                                              QueryOptions options) {
    return TypedResult<T>(IndexQuery(index, std::move(values), options));
  }

  // Where the transaction reads: the log position (and the replica's index
  // in DatabaseOptions::replicas), and that replica's datacenter by name.
  // In a Run body the position is found with the first read; asked for
  // before it, it is read then (all zero if that fails, and the next read
  // reports the failure).
  const replication::LogPosition& position() const;
  const std::string& datacenter() const;

 private:
  friend class Database;
  explicit Transaction(std::shared_ptr<txn::Transaction> txn) : txn_(std::move(txn)) {}
  Env* env() const;

  std::shared_ptr<txn::Transaction> txn_;
};

// A transaction across entity groups (Database::RunAcross).
class MultiTransaction {
 public:
  // The transaction's part in the group of `root_table`'s entity with key
  // `root_key`, begun (reading that group's position) on first use.
  absl::StatusOr<Transaction*> In(std::string_view root_table,
                                  std::vector<schema::KeyValue> root_key);
  template <typename Root>
  absl::StatusOr<Transaction*> In(const typename Root::Key& key) {
    return In(Root::kTable, key.Values());
  }

 private:
  friend class Database;
  MultiTransaction(Database* db, TransactionOptions options) : db_(db), options_(options) {}
  Database* const db_;
  const TransactionOptions options_;
  std::map<std::string, std::unique_ptr<Transaction>> parts_;  // by group root row
};

}  // namespace megastore
