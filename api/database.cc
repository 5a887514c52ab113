#include "api/database.h"

#include <map>
#include <set>

#include "base/await.h"
#include "base/coding.h"
#include "base/logging.h"
#include "base/retry.h"
#include "base/rpc/rpc_transport.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/layout.h"
#include "schema/lexer.h"
#include "txn/transaction.h"

namespace megastore {

absl::StatusOr<std::unique_ptr<Database>> Database::Open(DatabaseOptions options) {
  if (options.replicas.empty())
    return absl::InvalidArgumentError("DatabaseOptions names no replicas");
  int local = -1;
  for (size_t i = 0; i < options.replicas.size(); ++i)
    if (options.replicas[i].name == options.local) local = static_cast<int>(i);
  if (local < 0)
    return absl::InvalidArgumentError(
        StrCat("the local datacenter '", options.local, "' is not among the replicas"));
  if (options.replicas[local].type == replication::ReplicaType::kWitness)
    return absl::InvalidArgumentError(
        StrCat("the local datacenter '", options.local, "' is a witness: it has no data to read"));
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
  if (options.queue_sweep_interval > absl::ZeroDuration()) {
    Database* d = db.get();
    db->sweeper_ = std::thread([d, interval = options.queue_sweep_interval] {
      absl::MutexLock lock(&d->sweeper_mu_);
      while (true) {
        d->sweeper_mu_.AwaitWithTimeout(absl::Condition(&d->stopping_), interval);
        if (d->stopping_) return;
        d->sweeper_mu_.Unlock();
        absl::StatusOr<int> swept = d->SweepQueues();
        if (!swept.ok()) MS_LOG_WARN("queue sweep: {}", swept.status().ToString());
        d->sweeper_mu_.Lock();
      }
    });
  }
  return db;
}

Database::~Database() {
  {
    absl::MutexLock lock(&sweeper_mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
  // The last commits' local applies land (a request each, already sent)
  // rather than being left to the next read of their groups.
  client_->AwaitLocalApplies(client_->options().rpc_timeout);
}

txn::Context Database::context() const { return txn::Context{client_.get(), layout_.get()}; }

absl::StatusOr<int> Database::SweepQueues() {
  txn::Context ctx{client_.get(), layout_.get()};
  return Await<int>(env_, [&](auto cb) { txn::SweepQueues(ctx, std::move(cb)); });
}

absl::StatusOr<std::unique_ptr<Transaction>> Database::Begin(std::string_view root_table,
                                                             std::vector<schema::KeyValue> root_key,
                                                             TransactionOptions options) {
  return BeginTransaction(root_table, std::move(root_key), options, /*deferred=*/false);
}

absl::StatusOr<std::unique_ptr<Transaction>> Database::BeginTransaction(
    std::string_view root_table, std::vector<schema::KeyValue> root_key, TransactionOptions options,
    bool deferred) {
  txn::Context ctx{client_.get(), layout_.get()};
  absl::StatusOr<std::shared_ptr<txn::Transaction>> t =
      Await<std::shared_ptr<txn::Transaction>>(env_, [&](auto cb) {
        txn::Transaction::Begin(ctx, std::string(root_table), std::move(root_key), options,
                                std::move(cb), deferred);
      });
  if (!t.ok()) return t.status();
  return std::unique_ptr<Transaction>(new Transaction(std::move(*t)));
}

absl::Status Database::PauseBeforeRetry(Retry& retry, absl::Duration total, absl::Status failure) {
  if (retry.SleepBeforeRetry()) {
    retries_.fetch_add(1);
    return absl::OkStatus();
  }
  // Out of attempts: the last failure says what happened. Out of time with
  // attempts left: the deadline.
  if (retry.attempts_left()) return txn::DeadlinePassed(total, retry.attempts());
  return failure;
}

absl::Status Database::AwaitTurn(Retry& retry, absl::Duration total, const txn::Transaction& t,
                                 int64_t since, absl::Status failure) {
  if (!retry.attempts_left()) return failure;
  if (retry.Expired()) return txn::DeadlinePassed(total, retry.attempts());
  absl::StatusOr<bool> turn = Await<bool>(env_, [&](auto cb) {
    client_->AwaitTurn(t.group(), since, std::move(cb), retry.deadline());
  });
  if (!turn.ok())
    return retry.deadline() != 0 ? txn::DeadlinePassed(total, retry.attempts()) : failure;
  retries_.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<CommitInfo> Database::Run(std::string_view root_table,
                                         std::vector<schema::KeyValue> root_key, const Body& fn,
                                         TransactionOptions options) {
  const absl::Duration total = options.deadline;
  // Orders this app server's commits to the group, oldest first.
  if (options.first_attempt == 0)
    options.first_attempt = std::max<int64_t>(1, env_->MonotonicMicros());
  Retry retry = txn::TransactionRetry(env_, options);
  while (true) {
    if (absl::Status s = txn::StartAttempt(retry, total, &options); !s.ok()) return s;
    // The position is read with the body's first read (one request less).
    absl::StatusOr<std::unique_ptr<Transaction>> t =
        BeginTransaction(root_table, root_key, options, /*deferred=*/true);
    if (!t.ok()) {
      // Nothing was proposed yet: transient failures are retried too.
      const absl::Status& failed = t.status();
      if (!txn::PositionFailure(failed)) return failed;
      MS_RETURN_IF_ERROR(PauseBeforeRetry(retry, total, failed));
      continue;
    }
    absl::Status body = fn(**t);
    if (!body.ok()) {
      // A conflict, or no position found (as a failed Begin): retried.
      if (!absl::IsAborted(body) && !txn::PositionFailure((*t)->txn_->position_failure()))
        return body;
      t->reset();  // its advisory lock goes back before the pause
      MS_RETURN_IF_ERROR(PauseBeforeRetry(retry, total, body));
      continue;
    }
    absl::StatusOr<CommitInfo> info = (*t)->Commit();
    if (info.ok()) {
      info->attempts = retry.attempts();
      if ((*t)->txn_->sent_messages()) {
        // Deliver now; a failure leaves them in the outbox for DeliverQueues.
        txn::Context ctx{client_.get(), layout_.get()};
        const std::string source = (*t)->txn_->group().root();
        (void)Await<int>(env_, [&](auto cb) { txn::DeliverPending(ctx, source, std::move(cb)); });
      }
      return info;
    }
    // An unknown outcome is not retried (a position never found is no
    // outcome at all).
    if (!absl::IsAborted(info.status()) && !txn::PositionFailure((*t)->txn_->position_failure()))
      return info.status();
    if (replication::GroupClient::HasTurn(info.status())) {
      std::shared_ptr<txn::Transaction> failed = (*t)->txn_;
      t->reset();  // its advisory lock goes back before the wait
      MS_RETURN_IF_ERROR(AwaitTurn(retry, total, *failed, options.first_attempt, info.status()));
      continue;
    }
    t->reset();
    MS_RETURN_IF_ERROR(PauseBeforeRetry(retry, total, info.status()));
  }
}

absl::StatusOr<txn::QueryResult> Database::GlobalIndexQuery(std::string_view index,
                                                            std::vector<schema::KeyValue> values,
                                                            QueryOptions options,
                                                            replication::ReadLevel level) {
  txn::Context ctx{client_.get(), layout_.get()};
  return Await<txn::QueryResult>(env_, [&](auto cb) {
    txn::GlobalIndexQuery(ctx, std::string(index), std::move(values), std::move(options), level,
                          std::move(cb));
  });
}

// What the checker found, with the writes that would fix it.
struct Database::IndexExamination {
  IndexReport report;
  struct Group {
    replication::GroupRef group;
    replication::LogPosition at;               // where the group was read
    std::vector<schema::BigtableWrite> fixes;  // entries to write or delete
  };
  std::map<std::string, Group> groups;  // by root row
};

absl::StatusOr<Database::IndexExamination> Database::ExamineIndexes(
    const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups) {
  const schema::SchemaIndex& sx = layout_->schema();
  IndexExamination ex;
  IndexReport& report = ex.report;
  struct Expected {
    std::string what;             // the entity, for messages
    std::string root;             // its group
    schema::BigtableWrite write;  // the entry, as the layout writes it
  };
  // Expected global entries of the checked groups: index -> entry row -> entity.
  std::map<std::string, std::map<std::string, Expected>> expected_global;
  auto describe = [](const schema::TableDescriptor& t, const std::string& row) {
    return StrCat(t.name(), " at row ", EscapeBytes(row));
  };
  // A row found by a scan: its key and the index cells it has.
  struct Found {
    std::string key;
    std::vector<std::string> qualifiers;
  };
  // Every row of a scan, page by page.
  auto scan_all = [&](auto scan_page) -> absl::StatusOr<std::vector<Found>> {
    std::vector<Found> rows;
    std::string start;
    for (bool first = true; first || !start.empty(); first = false) {
      absl::StatusOr<replication::ScanReply> page = scan_page(start);
      if (!page.ok()) return page.status();
      for (const auto& r : page->rows())
        rows.push_back(Found{r.key(), {r.qualifiers().begin(), r.qualifiers().end()}});
      start = page->more() && page->rows_size() > 0
                  ? page->rows(page->rows_size() - 1).key() + std::string(1, '\0')
                  : "";
    }
    return rows;
  };
  // The fix for an entry that points to nothing: delete its cells.
  auto removal = [](std::string table, const Found& f) {
    schema::BigtableWrite w;
    w.table = std::move(table);
    w.row = f.key;
    for (const std::string& q : f.qualifiers)
      w.mutations.push_back(storage::Mutation::DeleteCells(schema::kIndexFamily, q));
    return w;
  };
  for (const auto& [root_table, root_key] : groups) {
    absl::StatusOr<std::unique_ptr<Transaction>> t = Begin(root_table, root_key);
    if (!t.ok()) return t.status();
    const replication::GroupRef group = (*t)->txn_->group();
    const replication::LogPosition at = (*t)->position();
    IndexExamination::Group& g = ex.groups[group.root()];
    g.group = group;
    g.at = at;
    std::map<std::string, std::map<std::string, schema::BigtableWrite>>
        expected_local;  // index -> row -> entry
    for (const schema::TableDescriptor& table : sx.schema().tables()) {
      const bool in_group = table.entity_group_root()
                                ? schema::EqualsIgnoreCase(table.name(), root_table)
                                : schema::EqualsIgnoreCase(table.root_table(), root_table);
      if (!in_group) continue;
      std::vector<schema::KeyValue> prefix = root_key;
      if (!table.entity_group_root())
        prefix.resize(static_cast<size_t>(table.entity_group_key_size()));
      QueryOptions page;
      do {
        absl::StatusOr<txn::QueryResult> r = (*t)->Query(table.name(), prefix, page);
        if (!r.ok()) return r.status();
        for (const schema::Entity& e : r->entities) {
          ++report.entities;
          absl::StatusOr<std::vector<schema::KeyValue>> key = layout_->KeyOf(table, e);
          if (!key.ok()) return key.status();
          absl::StatusOr<std::string> row = layout_->EntityRow(table, *key);
          if (!row.ok()) return row.status();
          // Every write of the entity as if new: its index entries among them.
          absl::StatusOr<std::vector<schema::BigtableWrite>> writes =
              layout_->Mutations(table.name(), nullptr, &e, 0);
          if (!writes.ok()) return writes.status();
          auto entry_write = [&](const std::string& bt_table, const std::string& er) {
            for (const schema::BigtableWrite& w : *writes)
              if (w.table == bt_table && w.row == er) return w;
            return schema::BigtableWrite{bt_table, er, {}, 0};
          };
          for (const schema::IndexDescriptor& x : sx.schema().indexes()) {
            if (!schema::EqualsIgnoreCase(x.table(), table.name()) || !x.inline_in().empty())
              continue;
            absl::StatusOr<std::vector<std::string>> rows = layout_->IndexEntryRows(x, e);
            if (!rows.ok()) return rows.status();
            for (const std::string& er : *rows) {
              if (x.scope() == schema::IndexDescriptor::GLOBAL) {
                expected_global[x.name()][er] =
                    Expected{describe(table, *row), group.root(),
                             entry_write(layout_->GlobalIndexTable(x), er)};
              } else {
                expected_local[x.name()][er] = entry_write(layout_->entity_table(), er);
              }
            }
          }
        }
        page.cursor = r->cursor;
      } while (!page.cursor.empty());
    }
    for (const schema::IndexDescriptor& x : sx.schema().indexes()) {
      if (x.scope() != schema::IndexDescriptor::LOCAL || !x.inline_in().empty()) continue;
      const schema::TableDescriptor* table = sx.FindTable(x.table());
      if (table == nullptr ||
          (table->entity_group_root() ? !schema::EqualsIgnoreCase(table->name(), root_table)
                                      : !schema::EqualsIgnoreCase(table->root_table(), root_table)))
        continue;
      absl::StatusOr<storage::RowRange> range = layout_->LocalIndexRange(x, group.root(), {});
      if (!range.ok()) return range.status();
      absl::StatusOr<std::vector<Found>> actual = scan_all([&](const std::string& from) {
        return Await<replication::ScanReply>(env_, [&](auto cb) {
          client_->Scan(group, at, from.empty() ? range->start : from, range->end,
                        schema::kIndexFamily, 0, std::move(cb));
        });
      });
      if (!actual.ok()) return actual.status();
      std::map<std::string, schema::BigtableWrite>& want = expected_local[x.name()];
      for (const Found& f : *actual) {
        ++report.entries;
        if (want.erase(f.key)) continue;
        report.problems.push_back(StrCat("index ", x.name(), ": entry ", EscapeBytes(f.key),
                                         " points to no entity that has it"));
        g.fixes.push_back(removal(layout_->entity_table(), f));
      }
      for (auto& [r, w] : want) {
        report.problems.push_back(
            StrCat("index ", x.name(), ": entry ", EscapeBytes(r), " is missing"));
        g.fixes.push_back(std::move(w));
      }
    }
  }
  for (const schema::IndexDescriptor& x : sx.schema().indexes()) {
    if (x.scope() != schema::IndexDescriptor::GLOBAL) continue;
    const schema::TableDescriptor* table = sx.FindTable(x.table());
    const std::string bt_table = layout_->GlobalIndexTable(x);
    absl::StatusOr<std::vector<Found>> actual = scan_all([&](const std::string& from) {
      return Await<replication::ScanReply>(
          env_, [&](auto cb) { client_->ScanIndex(bt_table, from, "", 0, std::move(cb)); });
    });
    if (!actual.ok()) return actual.status();
    std::map<std::string, Expected>& want = expected_global[x.name()];
    for (const Found& f : *actual) {
      absl::StatusOr<std::vector<schema::KeyValue>> key = layout_->KeyOfGlobalIndexEntry(x, f.key);
      if (!key.ok()) {
        report.problems.push_back(
            StrCat("index ", x.name(), ": damaged entry ", EscapeBytes(f.key)));
        continue;  // no group to repair it in
      }
      absl::StatusOr<std::string> root = layout_->GroupRow(*table, *key);
      if (!root.ok() || !ex.groups.count(*root)) continue;  // a group not checked
      ++report.entries;
      if (want.erase(f.key)) continue;
      report.problems.push_back(StrCat("index ", x.name(), ": entry ", EscapeBytes(f.key),
                                       " points to no entity that has it"));
      ex.groups[*root].fixes.push_back(removal(bt_table, f));
    }
    for (auto& [r, e] : want) {
      report.problems.push_back(
          StrCat("index ", x.name(), ": the entry of ", e.what, " is missing"));
      ex.groups[e.root].fixes.push_back(std::move(e.write));
    }
  }
  return ex;
}

absl::StatusOr<Database::IndexReport> Database::CheckIndexes(
    const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups) {
  absl::StatusOr<IndexExamination> ex = ExamineIndexes(groups);
  if (!ex.ok()) return ex.status();
  return std::move(ex->report);
}

absl::StatusOr<Database::IndexReport> Database::RepairIndexes(
    const std::vector<std::pair<std::string, std::vector<schema::KeyValue>>>& groups) {
  txn::Context ctx = context();
  int64_t repaired = 0;
  for (int round = 0; round < 5; ++round) {
    absl::StatusOr<IndexExamination> ex = ExamineIndexes(groups);
    if (!ex.ok()) return ex.status();
    bool any = false;
    for (auto& [root, g] : ex->groups) {
      if (g.fixes.empty()) continue;
      any = true;
      // Commit right after the examined read: if the group changed since,
      // the fixes may be stale — the commit then loses its position
      // (Aborted) and the next round examines the group again. Never
      // promoted: the examination's reads are not this transaction's.
      TransactionOptions options;
      options.promote = false;
      auto t = std::make_shared<txn::Transaction>(ctx, options, g.group, g.at);
      for (const schema::BigtableWrite& w : g.fixes) MS_RETURN_IF_ERROR(t->AddRepair(w));
      absl::StatusOr<CommitInfo> info =
          Await<CommitInfo>(env_, [&](auto cb) { t->Commit(std::move(cb)); });
      if (info.ok()) {
        repaired += static_cast<int64_t>(g.fixes.size());
      } else if (!absl::IsAborted(info.status())) {
        return info.status();
      }
    }
    if (!any) {
      ex->report.repaired = repaired;
      return std::move(ex->report);
    }
  }
  // Still changing under us after five rounds: say what is left.
  absl::StatusOr<IndexExamination> last = ExamineIndexes(groups);
  if (!last.ok()) return last.status();
  last->report.repaired = repaired;
  return std::move(last->report);
}

absl::StatusOr<Transaction*> MultiTransaction::In(std::string_view root_table,
                                                  std::vector<schema::KeyValue> root_key) {
  const schema::TableDescriptor* table = db_->layout().schema().FindTable(root_table);
  if (table == nullptr) return absl::NotFoundError(StrCat("no table ", root_table));
  absl::StatusOr<std::string> root = db_->layout().GroupRow(*table, root_key);
  if (!root.ok()) return root.status();
  auto it = parts_.find(*root);
  if (it == parts_.end()) {
    absl::StatusOr<std::unique_ptr<Transaction>> t =
        db_->Begin(root_table, std::move(root_key), options_);
    if (!t.ok()) return t.status();
    it = parts_.emplace(*root, std::move(*t)).first;
  }
  return it->second.get();
}

absl::StatusOr<CommitInfo> Database::RunAcross(const MultiBody& fn, TransactionOptions options) {
  txn::Context ctx = context();
  const absl::Duration total = options.deadline;
  Retry retry = txn::TransactionRetry(env_, options);
  while (true) {
    if (absl::Status s = txn::StartAttempt(retry, total, &options); !s.ok()) return s;
    absl::Status failed;
    {
      // The attempt's parts (and their advisory locks) end with this block,
      // before the pause.
      MultiTransaction multi(this, options);
      failed = fn(multi);
      if (!failed.ok()) {
        const bool transient = absl::IsAborted(failed) || absl::IsUnavailable(failed) ||
                               absl::IsDeadlineExceeded(failed);
        if (!transient) return failed;
      } else {
        std::vector<std::shared_ptr<txn::Transaction>> parts;
        for (auto& [root, part] : multi.parts_) parts.push_back(part->txn_);
        absl::StatusOr<CommitInfo> info = Await<CommitInfo>(
            env_, [&](auto cb) { txn::CommitAcross(ctx, std::move(parts), std::move(cb)); });
        if (info.ok()) {
          info->attempts = retry.attempts();
          return info;
        }
        if (!absl::IsAborted(info.status())) return info.status();
        failed = info.status();
      }
    }
    MS_RETURN_IF_ERROR(PauseBeforeRetry(retry, total, failed));
  }
}

absl::StatusOr<int> Database::DeliverQueues(std::string_view root_table,
                                            std::vector<schema::KeyValue> root_key) {
  const schema::TableDescriptor* table = layout_->schema().FindTable(root_table);
  if (table == nullptr) return absl::NotFoundError(StrCat("no table ", root_table));
  absl::StatusOr<std::string> root = layout_->GroupRow(*table, root_key);
  if (!root.ok()) return root.status();
  txn::Context ctx{client_.get(), layout_.get()};
  return Await<int>(env_, [&](auto cb) { txn::DeliverPending(ctx, *root, std::move(cb)); });
}

absl::Status Transaction::Send(std::string_view root_table, std::vector<schema::KeyValue> root_key,
                               std::string queue, std::string body) {
  return txn_->Send(root_table, root_key, std::move(queue), std::move(body));
}

absl::Status Transaction::Consume(const txn::QueueMessage& m) { return txn_->Consume(m); }

const replication::LogPosition& Transaction::position() const {
  // In a Run body before any read, the position is read now (a failure
  // leaves it zero; the body's next read reports it).
  static const replication::LogPosition kUnknown;
  absl::StatusOr<replication::LogPosition> at =
      Await<replication::LogPosition>(env(), [&](auto cb) { txn_->WithPosition(std::move(cb)); });
  return at.ok() ? txn_->position() : kUnknown;
}

const std::string& Transaction::datacenter() const { return txn_->datacenter(); }

Env* Transaction::env() const { return txn_->env(); }

absl::StatusOr<std::vector<txn::QueueMessage>> Transaction::ReadQueue(std::string_view queue,
                                                                      int64_t limit) {
  return Await<std::vector<txn::QueueMessage>>(
      env(), [&](auto cb) { txn_->ReadQueue(std::string(queue), limit, std::move(cb)); });
}

absl::StatusOr<std::optional<schema::Entity>> Transaction::Get(std::string_view table,
                                                               std::vector<schema::KeyValue> key) {
  return Await<std::optional<schema::Entity>>(
      env(), [&](auto cb) { txn_->Get(std::string(table), std::move(key), std::move(cb)); });
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
  return Await<txn::QueryResult>(env(), [&](auto cb) {
    txn_->Query(std::string(table), std::move(key_prefix), std::move(options), std::move(cb));
  });
}

absl::StatusOr<txn::QueryResult> Transaction::IndexQuery(std::string_view index,
                                                         std::vector<schema::KeyValue> values,
                                                         QueryOptions options) {
  return Await<txn::QueryResult>(env(), [&](auto cb) {
    txn_->IndexQuery(std::string(index), std::move(values), std::move(options), std::move(cb));
  });
}

absl::StatusOr<std::vector<schema::Entity>> Transaction::IndexIntersect(
    std::vector<std::pair<std::string, std::vector<schema::KeyValue>>> conditions) {
  return Await<std::vector<schema::Entity>>(
      env(), [&](auto cb) { txn_->IndexIntersect(std::move(conditions), std::move(cb)); });
}

absl::StatusOr<CommitInfo> Transaction::Commit() {
  return Await<CommitInfo>(env(), [&](auto cb) { txn_->Commit(std::move(cb)); });
}

}  // namespace megastore
