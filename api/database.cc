#include "api/database.h"

#include "absl/synchronization/notification.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"

namespace megastore {

namespace {

// Runs an asynchronous call and waits for its answer.
template <typename T, typename Fn>
absl::StatusOr<T> Wait(Fn fn) {
  absl::Notification done;
  std::optional<absl::StatusOr<T>> out;
  fn([&](absl::StatusOr<T> r) {
    out = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return std::move(*out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> Database::Open(DatabaseOptions options) {
  if (options.replicas.empty()) return absl::InvalidArgumentError("DatabaseOptions names no replicas");
  int local = -1;
  for (size_t i = 0; i < options.replicas.size(); ++i)
    if (options.replicas[i].name == options.local) local = static_cast<int>(i);
  if (local < 0)
    return absl::InvalidArgumentError(StrCat("the local datacenter '", options.local,
                                             "' is not among the replicas"));
  if (options.replicas[local].type == replication::ReplicaType::kWitness)
    return absl::InvalidArgumentError(StrCat("the local datacenter '", options.local,
                                             "' is a witness: it has no data to read"));
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(options.schema);
  if (!layout.ok()) return layout.status();

  std::unique_ptr<Database> db(new Database());
  db->env_ = options.env;
  if (db->env_ == nullptr) {
    db->owned_env_ = std::make_unique<RealEnv>();
    db->env_ = db->owned_env_.get();
  }
  Transport* transport = options.transport;
  if (transport == nullptr) {
    db->owned_transport_ = std::make_unique<rpc::RpcTransport>();
    transport = db->owned_transport_.get();
  }
  db->layout_ = std::make_unique<schema::Layout>(std::move(*layout));
  replication::GroupClientOptions co = options.replication;
  co.replicas = options.replicas;
  co.local = local;
  db->client_ = std::make_unique<replication::GroupClient>(db->env_, transport, co);
  return db;
}

Database::~Database() = default;

absl::StatusOr<std::unique_ptr<Transaction>> Database::Begin(std::string_view root_table,
                                                             std::vector<schema::KeyValue> root_key,
                                                             TransactionOptions options) {
  txn::Context ctx{client_.get(), layout_.get()};
  absl::StatusOr<std::shared_ptr<txn::Transaction>> t =
      Wait<std::shared_ptr<txn::Transaction>>([&](auto cb) {
        txn::Transaction::Begin(ctx, std::string(root_table), std::move(root_key), options, std::move(cb));
      });
  if (!t.ok()) return t.status();
  return std::unique_ptr<Transaction>(new Transaction(std::move(*t)));
}

absl::StatusOr<CommitInfo> Database::Run(std::string_view root_table,
                                         std::vector<schema::KeyValue> root_key, const Body& fn,
                                         TransactionOptions options) {
  absl::Status last;
  for (int attempt = 1; attempt <= std::max(1, options.max_attempts); ++attempt) {
    if (attempt > 1) {
      retries_.fetch_add(1);
      const int64_t max = std::max<int64_t>(1, absl::ToInt64Microseconds(options.max_retry_backoff));
      absl::SleepFor(absl::Microseconds(static_cast<int64_t>(env_->Random64() % max)));
    }
    absl::StatusOr<std::unique_ptr<Transaction>> t = Begin(root_table, root_key, options);
    if (!t.ok()) {
      // Nothing was proposed yet: transient failures are retried too.
      last = t.status();
      if (absl::IsUnavailable(last) || absl::IsDeadlineExceeded(last)) continue;
      return last;
    }
    absl::Status body = fn(**t);
    if (!body.ok()) {
      last = body;
      if (absl::IsAborted(body)) continue;
      return body;
    }
    absl::StatusOr<CommitInfo> info = (*t)->Commit();
    if (info.ok()) {
      info->attempts = attempt;
      return info;
    }
    last = info.status();
    if (!absl::IsAborted(last)) return last;  // an unknown outcome is not retried
  }
  return last;
}

absl::StatusOr<std::optional<schema::Entity>> Transaction::Get(std::string_view table,
                                                               std::vector<schema::KeyValue> key) {
  return Wait<std::optional<schema::Entity>>(
      [&](auto cb) { txn_->Get(std::string(table), std::move(key), std::move(cb)); });
}

absl::Status Transaction::Put(std::string_view table, schema::Entity entity) {
  return txn_->Put(table, std::move(entity));
}

absl::Status Transaction::Delete(std::string_view table, std::vector<schema::KeyValue> key) {
  return txn_->Delete(table, std::move(key));
}

absl::StatusOr<txn::QueryResult> Transaction::Query(std::string_view table,
                                                    std::vector<schema::KeyValue> key_prefix,
                                                    QueryOptions options) {
  return Wait<txn::QueryResult>([&](auto cb) {
    txn_->Query(std::string(table), std::move(key_prefix), std::move(options), std::move(cb));
  });
}

absl::StatusOr<txn::QueryResult> Transaction::IndexQuery(std::string_view index,
                                                         std::vector<schema::KeyValue> values,
                                                         QueryOptions options) {
  return Wait<txn::QueryResult>([&](auto cb) {
    txn_->IndexQuery(std::string(index), std::move(values), std::move(options), std::move(cb));
  });
}

absl::StatusOr<CommitInfo> Transaction::Commit() {
  return Wait<CommitInfo>([&](auto cb) { txn_->Commit(std::move(cb)); });
}

}  // namespace megastore
