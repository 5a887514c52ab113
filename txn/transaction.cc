#include "txn/transaction.h"

#include <deque>

#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::txn {

namespace {

constexpr char kEntityFamily[] = "e";

absl::StatusOr<const schema::TableDescriptor*> FindTable(const Context& ctx,
                                                         std::string_view name) {
  const schema::TableDescriptor* t = ctx.layout->schema().FindTable(name);
  if (t == nullptr)
    return absl::NotFoundError(
        StrCat("schema ", ctx.layout->schema().schema().name(), " has no table ", name));
  return t;
}

// One CellChange per Bigtable mutation the layout produced.
absl::Status AddChanges(const schema::BigtableWrite& w, replication::RowChange* rc) {
  for (const storage::Mutation& m : w.mutations) {
    replication::CellChange* c = rc->add_cells();
    c->set_family(m.family);
    c->set_qualifier(m.qualifier);
    switch (m.type) {
      case storage::Mutation::Type::kSetCell:
        c->set_value(m.value);
        break;
      case storage::Mutation::Type::kDeleteCells:
        c->set_delete_cells(true);
        break;
      default:
        return absl::InternalError(
            "the schema layout produced a mutation a log entry cannot carry");
    }
  }
  return absl::OkStatus();
}

}  // namespace

Transaction::Transaction(Context ctx, TransactionOptions options, replication::GroupRef group,
                         replication::LogPosition position, int64_t deadline,
                         std::string lock_owner)
    : ctx_(ctx),
      options_(options),
      group_(std::move(group)),
      position_(position),
      deadline_(deadline),
      lock_owner_(std::move(lock_owner)) {}

Transaction::~Transaction() { ReleaseLock(); }

bool Transaction::holds_lock() const {
  absl::MutexLock lock(&mu_);
  return !lock_owner_.empty();
}

void Transaction::ReleaseLock() {
  std::string owner;
  {
    absl::MutexLock lock(&mu_);
    owner = std::exchange(lock_owner_, "");
  }
  if (!owner.empty()) ctx_.client->UnlockGroup(group_, std::move(owner));
}

void Transaction::Begin(Context ctx, std::string root_table, std::vector<KeyValue> root_key,
                        TransactionOptions options, Callback<std::shared_ptr<Transaction>> done) {
  absl::StatusOr<const schema::TableDescriptor*> table = FindTable(ctx, root_table);
  if (!table.ok()) return done(table.status());
  absl::StatusOr<std::string> root = ctx.layout->GroupRow(**table, root_key);
  if (!root.ok()) return done(root.status());
  BeginAtRow(ctx, *root, options, std::move(done));
}

void Transaction::BeginAtRow(Context ctx, std::string root_row, TransactionOptions options,
                             Callback<std::shared_ptr<Transaction>> done) {
  replication::GroupRef group;
  group.set_table(ctx.layout->entity_table());
  group.set_root(std::move(root_row));
  int64_t deadline = 0;
  if (options.deadline > absl::ZeroDuration())
    deadline = ctx.client->env()->MonotonicMicros() + absl::ToInt64Microseconds(options.deadline);
  // Reads the position (after taking the lock, so the read sees the
  // previous holder's commit).
  auto read = [ctx, options, group, deadline](std::string lock_owner,
                                              Callback<std::shared_ptr<Transaction>> done) {
    ctx.client->ReadPosition(
        group, options.level,
        [ctx, options, group, deadline, lock_owner,
         done = std::move(done)](absl::StatusOr<replication::LogPosition> p) mutable {
          if (!p.ok()) {
            if (!lock_owner.empty()) ctx.client->UnlockGroup(group, lock_owner);
            return done(p.status());
          }
          done(std::make_shared<Transaction>(ctx, options, group, *p, deadline, lock_owner));
        },
        deadline);
  };
  if (!options.advisory_lock) return read("", std::move(done));
  std::string owner = fmt::format("{:016x}", ctx.client->env()->Random64());
  ctx.client->LockGroup(
      group, owner, options.lock_wait, options.lock_lease,
      [ctx, group, read, owner, done = std::move(done)](absl::StatusOr<bool> granted) mutable {
        // Not granted: go ahead unlocked. Without an answer the request may
        // still sit in the queue (or even be granted): withdraw it.
        if (!granted.ok()) ctx.client->UnlockGroup(group, owner);
        read(granted.ok() && *granted ? owner : "", std::move(done));
      },
      deadline);
}

absl::StatusOr<std::string> Transaction::RowOf(const schema::TableDescriptor& table,
                                               const std::vector<KeyValue>& key) const {
  MS_ASSIGN_OR_RETURN(std::string group_row, ctx_.layout->GroupRow(table, key));
  if (group_row != group_.root())
    return absl::InvalidArgumentError(StrCat("this ", table.name(),
                                             " entity belongs to another entity group than the "
                                             "transaction's (",
                                             EscapeBytes(group_.root()), ")"));
  return ctx_.layout->EntityRow(table, key);
}

void Transaction::ReadRow(const schema::TableDescriptor* table, std::string row,
                          Callback<std::optional<Entity>> done) {
  auto self = shared_from_this();
  ctx_.client->Read(
      group_, position_, row, kEntityFamily,
      [self, table, row, done = std::move(done)](absl::StatusOr<replication::ReadReply> r) mutable {
        if (!r.ok()) return done(r.status());
        storage::Row stored;
        stored.key = row;
        const std::string prefix = table->name() + ".";
        bool found = false;
        for (int i = 0; i < r->qualifiers_size(); ++i) {
          found |= r->qualifiers(i).compare(0, prefix.size(), prefix) == 0;
          stored.cells.push_back(storage::Cell{kEntityFamily, r->qualifiers(i), 0, r->values(i)});
        }
        std::optional<Entity> entity;
        if (found) {
          absl::StatusOr<Entity> e = self->ctx_.layout->EntityFromRow(*table, stored);
          if (!e.ok()) return done(e.status());
          entity = std::move(*e);
        }
        {
          absl::MutexLock lock(&self->mu_);
          self->read_.emplace(row, Row{table, entity});
        }
        done(std::move(entity));
      },
      deadline_);
}

void Transaction::Get(std::string table_name, std::vector<KeyValue> key,
                      Callback<std::optional<Entity>> done) {
  absl::StatusOr<const schema::TableDescriptor*> table = FindTable(ctx_, table_name);
  if (!table.ok()) return done(table.status());
  absl::StatusOr<std::string> row = RowOf(**table, key);
  if (!row.ok()) return done(row.status());
  std::optional<std::optional<Entity>> known;
  {
    absl::MutexLock lock(&mu_);
    if (auto w = writes_.find(*row); w != writes_.end()) {
      known = w->second.after;  // the transaction's own write
    } else if (auto r = read_.find(*row); r != read_.end()) {
      known = r->second.entity;
    }
  }
  if (known) return done(std::move(*known));
  ReadRow(*table, std::move(*row), std::move(done));
}

namespace {

// The first row after `cursor` in [start, end) (an empty end: unbounded),
// or an error if the cursor does not belong to this query.
absl::StatusOr<std::string> ResumeAt(const storage::RowRange& range, const std::string& cursor) {
  if (cursor.empty()) return range.start;
  if (cursor < range.start || (!range.end.empty() && cursor >= range.end))
    return absl::InvalidArgumentError("the query cursor belongs to another query");
  return cursor + std::string(1, '\0');
}

}  // namespace

void Transaction::Query(std::string table_name, std::vector<KeyValue> key_prefix,
                        QueryOptions options, Callback<QueryResult> done) {
  absl::StatusOr<const schema::TableDescriptor*> table = FindTable(ctx_, table_name);
  if (!table.ok()) return done(table.status());
  absl::StatusOr<std::string> group_row = ctx_.layout->GroupRow(**table, key_prefix);
  if (!group_row.ok()) return done(group_row.status());
  if (*group_row != group_.root())
    return done(absl::InvalidArgumentError("the query's key prefix is in another entity group"));
  absl::StatusOr<storage::RowRange> range = ctx_.layout->TableRange(**table, key_prefix);
  if (!range.ok()) return done(range.status());
  absl::StatusOr<std::string> start = ResumeAt(*range, options.cursor);
  if (!start.ok()) return done(start.status());
  auto self = shared_from_this();
  const schema::TableDescriptor* t = *table;
  const std::string end = range->end;
  ctx_.client->Scan(
      group_, position_, *start, end, kEntityFamily, options.limit,
      [self, t, start = *start, end, limit = options.limit,
       done = std::move(done)](absl::StatusOr<replication::ScanReply> reply) mutable {
        if (!reply.ok()) return done(reply.status());
        // What storage says, as of the read position...
        std::map<std::string, std::optional<Entity>> rows;
        const std::string prefix = t->name() + ".";
        for (const replication::ScannedRow& r : reply->rows()) {
          storage::Row stored;
          stored.key = r.key();
          bool found = false;
          for (int i = 0; i < r.qualifiers_size(); ++i) {
            found |= r.qualifiers(i).compare(0, prefix.size(), prefix) == 0;
            stored.cells.push_back(storage::Cell{kEntityFamily, r.qualifiers(i), 0, r.values(i)});
          }
          if (!found) continue;
          absl::StatusOr<Entity> e = self->ctx_.layout->EntityFromRow(*t, stored);
          if (!e.ok()) return done(e.status());
          rows.emplace(r.key(), std::move(*e));
        }
        // ...overlaid with this transaction's writes in the part scanned.
        const std::string scanned_to =
            reply->more() ? reply->rows(reply->rows_size() - 1).key() + std::string(1, '\0') : end;
        {
          absl::MutexLock lock(&self->mu_);
          for (const auto& [row, e] : rows) self->read_.emplace(row, Row{t, e});
          for (auto it = self->writes_.lower_bound(start);
               it != self->writes_.end() && it->first < scanned_to; ++it) {
            if (it->second.table == t) rows[it->first] = it->second.after;
          }
        }
        QueryResult result;
        std::string last;
        bool cut = false;
        for (auto& [row, e] : rows) {
          if (!e) continue;
          if (limit > 0 && static_cast<int64_t>(result.entities.size()) == limit) {
            cut = true;
            break;
          }
          result.entities.push_back(std::move(*e));
          last = row;
        }
        if ((cut || reply->more()) && !last.empty()) result.cursor = last;
        done(std::move(result));
      },
      deadline_);
}

void Transaction::IndexQuery(std::string index_name, std::vector<KeyValue> values,
                             QueryOptions options, Callback<QueryResult> done) {
  const schema::IndexDescriptor* index = ctx_.layout->schema().FindIndex(index_name);
  if (index == nullptr)
    return done(absl::NotFoundError(
        StrCat("schema ", ctx_.layout->schema().schema().name(), " has no index ", index_name)));
  absl::StatusOr<storage::RowRange> range =
      ctx_.layout->LocalIndexRange(*index, group_.root(), values);
  if (!range.ok()) return done(range.status());
  absl::StatusOr<std::string> start = ResumeAt(*range, options.cursor);
  if (!start.ok()) return done(start.status());
  auto self = shared_from_this();
  ctx_.client->Scan(
      group_, position_, *start, range->end, schema::kIndexFamily, options.limit,
      [self, index, done = std::move(done)](absl::StatusOr<replication::ScanReply> reply) mutable {
        if (!reply.ok()) return done(reply.status());
        // Fetch the entities one after another, in index order.
        struct Fetch {
          std::shared_ptr<Transaction> txn;
          std::string table;
          std::vector<std::pair<std::string, std::vector<KeyValue>>> keys;  // entry row, key
          size_t next = 0;
          bool more = false;
          QueryResult result;
          Callback<QueryResult> done;
          static void Step(std::shared_ptr<Fetch> f) {
            if (f->next == f->keys.size()) {
              if (f->more && !f->keys.empty()) f->result.cursor = f->keys.back().first;
              return f->done(std::move(f->result));
            }
            const size_t i = f->next++;
            f->txn->Get(f->table, f->keys[i].second, [f](absl::StatusOr<std::optional<Entity>> e) {
              if (!e.ok()) return f->done(e.status());
              if (*e) f->result.entities.push_back(std::move(**e));
              Step(f);
            });
          }
        };
        auto f = std::make_shared<Fetch>();
        f->txn = self;
        f->table = index->table();
        f->more = reply->more();
        f->done = std::move(done);
        for (const replication::ScannedRow& r : reply->rows()) {
          absl::StatusOr<std::vector<KeyValue>> key =
              self->ctx_.layout->KeyOfIndexEntry(*index, self->group_.root(), r.key());
          if (!key.ok()) return f->done(key.status());
          f->keys.emplace_back(r.key(), std::move(*key));
        }
        Fetch::Step(f);
      },
      deadline_);
}

// ---- queues ------------------------------------------------------------------------

namespace {

constexpr char kTargetColumn[] = "t";
constexpr char kQueueColumn[] = "q";
constexpr char kBodyColumn[] = "b";
constexpr char kSourceColumn[] = "s";
constexpr char kMarkerColumn[] = "d";
constexpr char kListedColumn[] = "o";  // in the outbox table: the group has messages to deliver
// Two-phase commit rows.
constexpr char kWritesColumn[] = "w";
constexpr char kDecisionGroupColumn[] = "c";
constexpr char kPreparedAtColumn[] = "t";
constexpr char kDecisionColumn[] = "x";

replication::CellChange SetCell(const char* qualifier, std::string value) {
  replication::CellChange c;
  c.set_family(kEntityFamily);
  c.set_qualifier(qualifier);
  c.set_value(std::move(value));
  return c;
}

replication::CellChange DeleteCell(const char* qualifier) {
  replication::CellChange c;
  c.set_family(kEntityFamily);
  c.set_qualifier(qualifier);
  c.set_delete_cells(true);
  return c;
}

std::string QueuePrefix(const std::string& root, std::string_view queue) {
  std::string row = root;
  row.push_back(schema::kQueueRow);
  AppendOrderedBytes(&row, queue);
  return row;
}

std::string RowAfter(const std::string& root, char kind, std::string_view id = {}) {
  std::string row = root;
  row.push_back(kind);
  row += id;
  return row;
}

}  // namespace

bool Transaction::sent_messages() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

void Transaction::RawGet(std::string row, Callback<std::map<std::string, std::string>> done) {
  std::optional<std::map<std::string, std::string>> buffered;
  {
    absl::MutexLock lock(&mu_);
    if (auto w = raw_writes_.find(row); w != raw_writes_.end()) {
      buffered.emplace();
      for (const auto& c : w->second)
        if (!c.delete_cells()) (*buffered)[c.qualifier()] = c.value();
    }
  }
  if (buffered) return done(std::move(*buffered));
  ctx_.client->Read(
      group_, position_, row, kEntityFamily,
      [done = std::move(done)](absl::StatusOr<replication::ReadReply> r) mutable {
        if (!r.ok()) return done(r.status());
        std::map<std::string, std::string> cells;
        for (int i = 0; i < r->qualifiers_size(); ++i) cells[r->qualifiers(i)] = r->values(i);
        done(std::move(cells));
      },
      deadline_);
}

absl::Status Transaction::AddRepair(const schema::BigtableWrite& w) {
  replication::RowChange rc;
  rc.set_table(w.table == ctx_.layout->entity_table() ? "" : w.table);
  rc.set_row(w.row);
  MS_RETURN_IF_ERROR(AddChanges(w, &rc));
  absl::MutexLock lock(&mu_);
  extra_changes_.push_back(std::move(rc));
  return absl::OkStatus();
}

void Transaction::RawWrite(std::string row, std::vector<replication::CellChange> cells) {
  absl::MutexLock lock(&mu_);
  raw_writes_[std::move(row)] = std::move(cells);
}

absl::Status Transaction::Send(std::string_view root_table, const std::vector<KeyValue>& root_key,
                               std::string queue, std::string body) {
  MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table, FindTable(ctx_, root_table));
  MS_ASSIGN_OR_RETURN(std::string target, ctx_.layout->GroupRow(*table, root_key));
  if (queue.empty()) return absl::InvalidArgumentError("a message needs a queue name");
  absl::MutexLock lock(&mu_);
  if (committing_) return absl::FailedPreconditionError("the transaction is already committing");
  if (options_.level == replication::ReadLevel::kInconsistent)
    return absl::FailedPreconditionError("a transaction at the inconsistent level cannot send");
  const std::string id =
      fmt::format("{:016x}{:04x}", ctx_.client->env()->Random64(), ++message_seq_);
  raw_writes_[RowAfter(group_.root(), schema::kOutboxRow, id)] = {
      SetCell(kTargetColumn, std::move(target)), SetCell(kQueueColumn, std::move(queue)),
      SetCell(kBodyColumn, std::move(body))};
  if (!sent_) {
    // The group goes on the list of outboxes to sweep, in the same commit.
    replication::RowChange listed;
    listed.set_table(OutboxTable(*ctx_.layout));
    listed.set_row(group_.root());
    *listed.add_cells() = SetCell(kListedColumn, "");
    listed.mutable_cells(0)->set_family(schema::kIndexFamily);
    extra_changes_.push_back(std::move(listed));
  }
  sent_ = true;
  return absl::OkStatus();
}

void Transaction::ReadQueue(std::string queue, int64_t limit,
                            Callback<std::vector<QueueMessage>> done) {
  const std::string prefix = QueuePrefix(group_.root(), queue);
  auto self = shared_from_this();
  ctx_.client->Scan(
      group_, position_, prefix, PrefixSuccessor(prefix), kEntityFamily, limit,
      [self, prefix, queue,
       done = std::move(done)](absl::StatusOr<replication::ScanReply> r) mutable {
        if (!r.ok()) return done(r.status());
        std::vector<QueueMessage> out;
        {
          absl::MutexLock lock(&self->mu_);
          for (const auto& row : r->rows()) {
            auto w = self->raw_writes_.find(row.key());
            if (w != self->raw_writes_.end() && !w->second.empty() && w->second[0].delete_cells())
              continue;  // consumed by this transaction
            QueueMessage m;
            m.id = row.key().substr(prefix.size());
            m.queue = queue;
            for (int i = 0; i < row.qualifiers_size(); ++i) {
              if (row.qualifiers(i) == kBodyColumn) m.body = row.values(i);
              if (row.qualifiers(i) == kSourceColumn) m.source = row.values(i);
            }
            out.push_back(std::move(m));
          }
        }
        done(std::move(out));
      },
      deadline_);
}

absl::Status Transaction::Consume(const QueueMessage& m) {
  if (m.id.empty()) return absl::InvalidArgumentError("the message has no id");
  RawWrite(QueuePrefix(group_.root(), m.queue) + m.id,
           {DeleteCell(kBodyColumn), DeleteCell(kSourceColumn)});
  return absl::OkStatus();
}

// Moves one outbox message: into the target's queue (once), out of the
// source's outbox.
struct Delivery : std::enable_shared_from_this<Delivery> {
  Context ctx;
  std::string source;
  std::string outbox_row;
  QueueMessage message;
  std::string target;
  Callback<bool> done;  // true: delivered now; false: it had been already

  void Run() {
    TransactionOptions o;
    o.max_attempts = 20;
    auto self = shared_from_this();
    RunAtRow(
        ctx, target,
        [self](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> commit) {
          auto shared_commit =
              std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(commit));
          const std::string marker =
              RowAfter(self->target, schema::kDeliveredRow, self->message.id);
          t->RawGet(marker, [self, t, marker,
                             shared_commit](absl::StatusOr<std::map<std::string, std::string>> m) {
            if (!m.ok()) return (*shared_commit)(m.status());
            if (m->empty()) {
              t->RawWrite(
                  QueuePrefix(self->target, self->message.queue) + self->message.id,
                  {SetCell(kBodyColumn, self->message.body), SetCell(kSourceColumn, self->source)});
              t->RawWrite(marker, {SetCell(kMarkerColumn, "")});
            }
            (*shared_commit)(absl::OkStatus());
          });
        },
        [self](absl::StatusOr<CommitInfo> info) {
          if (!info.ok()) return self->done(info.status());
          const bool now = info->wrote;
          // Then leave the outbox.
          RunAtRow(
              self->ctx, self->source,
              [self](std::shared_ptr<Transaction> t,
                     absl::AnyInvocable<void(absl::Status)> commit) {
                t->RawWrite(self->outbox_row, {DeleteCell(kTargetColumn), DeleteCell(kQueueColumn),
                                               DeleteCell(kBodyColumn)});
                commit(absl::OkStatus());
              },
              [self, now](absl::StatusOr<CommitInfo> info) {
                if (!info.ok()) return self->done(info.status());
                self->done(now);
              });
        });
  }
};

void RunAtRow(Context ctx, std::string root, Body body, Callback<CommitInfo> done) {
  struct Attempt : std::enable_shared_from_this<Attempt> {
    Context ctx;
    std::string root;
    Body body;
    Callback<CommitInfo> finished;
    int attempt = 0;
    void Go() {
      ++attempt;
      auto self = shared_from_this();
      Transaction::BeginAtRow(ctx, root, {},
                              [self](absl::StatusOr<std::shared_ptr<Transaction>> t) {
                                if (!t.ok()) return self->Retry(t.status());
                                auto txn = *t;
                                self->body(txn, [self, txn](absl::Status s) {
                                  if (!s.ok()) return self->Retry(s);
                                  txn->Commit([self](absl::StatusOr<CommitInfo> info) {
                                    if (info.ok() || !absl::IsAborted(info.status()))
                                      return self->finished(std::move(info));
                                    self->Retry(info.status());
                                  });
                                });
                              });
    }
    void Retry(absl::Status s) {
      const bool transient =
          absl::IsAborted(s) || absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
      if (!transient || attempt >= 20) return finished(s);
      auto self = shared_from_this();
      Env* env = ctx.client->env();
      env->Schedule(absl::Microseconds(static_cast<int64_t>(env->Random64() % 50000)),
                    [self] { self->Go(); });
    }
  };
  auto a = std::make_shared<Attempt>();
  a->ctx = ctx;
  a->root = std::move(root);
  a->body = std::move(body);
  a->finished = std::move(done);
  a->Go();
}

namespace {

// Takes the group whose root row is `root` off the sweep list, if its
// outbox is empty as of the transaction's read (a later send lists it
// again: its cell is newer than the deletion).
void Unlist(Context ctx, std::string root, absl::AnyInvocable<void(absl::Status)> done) {
  auto parked = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
  RunAtRow(
      ctx, root,
      [ctx, root](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> commit) {
        auto c = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(commit));
        const std::string prefix = RowAfter(root, schema::kOutboxRow);
        ctx.client->Scan(t->group(), t->position(), prefix, PrefixSuccessor(prefix), kEntityFamily,
                         1, [ctx, root, t, c](absl::StatusOr<replication::ScanReply> r) {
                           if (!r.ok()) return (*c)(r.status());
                           if (r->rows_size() == 0) {
                             schema::BigtableWrite unlist;
                             unlist.table = OutboxTable(*ctx.layout);
                             unlist.row = root;
                             unlist.mutations.push_back(storage::Mutation::DeleteCells(
                                 schema::kIndexFamily, kListedColumn));
                             if (absl::Status s = t->AddRepair(unlist); !s.ok()) return (*c)(s);
                           }
                           (*c)(absl::OkStatus());
                         });
      },
      [parked](absl::StatusOr<CommitInfo> info) { (*parked)(info.status()); });
}

}  // namespace

std::string OutboxTable(const schema::Layout& layout) {
  return layout.entity_table() + ".outboxes";
}

void SweepQueues(Context ctx, Callback<int> done) {
  ctx.client->ScanIndex(
      OutboxTable(*ctx.layout), "", "", 0,
      [ctx, done = std::move(done)](absl::StatusOr<replication::ScanReply> r) mutable {
        if (!r.ok()) return done(r.status());
        struct Sweep : std::enable_shared_from_this<Sweep> {
          Context ctx;
          std::vector<std::string> roots;
          size_t next = 0;
          int delivered = 0;
          absl::Status first_error;
          Callback<int> done;
          void Step() {
            if (next == roots.size()) {
              if (!first_error.ok() && delivered == 0) return done(first_error);
              return done(delivered);
            }
            auto self = shared_from_this();
            DeliverPending(ctx, roots[next++], [self](absl::StatusOr<int> n) {
              // One group's trouble does not stop the others.
              if (n.ok())
                self->delivered += *n;
              else if (self->first_error.ok())
                self->first_error = n.status();
              self->Step();
            });
          }
        };
        auto sweep = std::make_shared<Sweep>();
        sweep->ctx = ctx;
        for (const auto& row : r->rows()) sweep->roots.push_back(row.key());
        sweep->done = std::move(done);
        sweep->Step();
      });
}

void DeliverPending(Context ctx, std::string source_root, Callback<int> done) {
  Transaction::BeginAtRow(
      ctx, source_root, {},
      [ctx, source_root,
       done = std::move(done)](absl::StatusOr<std::shared_ptr<Transaction>> t) mutable {
        if (!t.ok()) return done(t.status());
        const std::string prefix = RowAfter(source_root, schema::kOutboxRow);
        ctx.client->Scan(
            (*t)->group(), (*t)->position(), prefix, PrefixSuccessor(prefix), kEntityFamily, 0,
            [ctx, source_root, prefix,
             done = std::move(done)](absl::StatusOr<replication::ScanReply> r) mutable {
              if (!r.ok()) return done(r.status());
              struct Each {
                std::vector<std::shared_ptr<Delivery>> pending;
                size_t next = 0;
                int delivered = 0;
                Callback<int> done;
                static void Step(std::shared_ptr<Each> e) {
                  if (e->next == e->pending.size()) return e->done(e->delivered);
                  // Taken out of the list: the delivery holds `e` until it ends.
                  auto d = std::move(e->pending[e->next++]);
                  d->done = [e](absl::StatusOr<bool> now) {
                    if (!now.ok()) return e->done(now.status());
                    e->delivered += *now ? 1 : 0;
                    Step(e);
                  };
                  d->Run();
                }
              };
              auto each = std::make_shared<Each>();
              // Once every message is out, take the group off the sweep list
              // (if nothing new was sent meanwhile).
              each->done = [ctx, source_root,
                            done = std::move(done)](absl::StatusOr<int> delivered) mutable {
                if (!delivered.ok()) return done(delivered.status());
                Unlist(ctx, source_root,
                       [delivered = *delivered, done = std::move(done)](absl::Status s) mutable {
                         if (!s.ok()) return done(s);
                         done(delivered);
                       });
              };
              for (const auto& row : r->rows()) {
                auto d = std::make_shared<Delivery>();
                d->ctx = ctx;
                d->source = source_root;
                d->outbox_row = row.key();
                d->message.id = row.key().substr(prefix.size());
                for (int i = 0; i < row.qualifiers_size(); ++i) {
                  if (row.qualifiers(i) == kTargetColumn) d->target = row.values(i);
                  if (row.qualifiers(i) == kQueueColumn) d->message.queue = row.values(i);
                  if (row.qualifiers(i) == kBodyColumn) d->message.body = row.values(i);
                }
                if (d->target.empty() || d->message.queue.empty())
                  return each->done(
                      absl::DataLossError(StrCat("damaged outbox row ", EscapeBytes(row.key()))));
                each->pending.push_back(std::move(d));
              }
              Each::Step(each);
            });
      });
}

void Transaction::ResolvePrepared(Callback<bool> done) {
  const std::string prefix = RowAfter(group_.root(), schema::kPreparedRow);
  auto self = shared_from_this();
  ctx_.client->Scan(
      group_, position_, prefix, PrefixSuccessor(prefix), kEntityFamily, 0,
      [self, prefix, done = std::move(done)](absl::StatusOr<replication::ScanReply> r) mutable {
        if (!r.ok()) return done(r.status());
        for (const auto& row : r->rows()) {
          const std::string txid = row.key().substr(prefix.size());
          std::string decision_root;
          int64_t prepared_at = 0;
          for (int i = 0; i < row.qualifiers_size(); ++i) {
            if (row.qualifiers(i) == kDecisionGroupColumn) decision_root = row.values(i);
            if (row.qualifiers(i) == kPreparedAtColumn)
              prepared_at = std::atoll(row.values(i).c_str());
          }
          const Context ctx = self->ctx_;
          const std::string group = self->group_.root();
          // Past the timeout an undecided transaction may be decided aborted;
          // before it, only an existing decision is applied.
          const bool expired = ctx.client->env()->NowMicros() - prepared_at >
                               absl::ToInt64Microseconds(kPreparedTimeout);
          std::optional<bool> propose;
          if (expired) propose = false;
          Decide(ctx, decision_root, txid, propose,
                 [ctx, group, txid,
                  done = std::move(done)](absl::StatusOr<std::optional<bool>> d) mutable {
                   if (!d.ok()) return done(d.status());
                   if (!d->has_value())
                     return done(true);  // still undecided: the caller retries later
                   FinishPrepared(ctx, group, txid, **d,
                                  [done = std::move(done)](absl::StatusOr<bool> f) mutable {
                                    if (!f.ok()) return done(f.status());
                                    done(true);
                                  });
                 });
          return;
        }
        done(false);
      },
      deadline_);
}

void Decide(Context ctx, std::string decision_root, std::string txid, std::optional<bool> propose,
            Callback<std::optional<bool>> done) {
  auto decided = std::make_shared<std::optional<bool>>();
  const std::string row = RowAfter(decision_root, schema::kDecisionRow, txid);
  RunAtRow(
      ctx, decision_root,
      [row, propose, decided](std::shared_ptr<Transaction> t,
                              absl::AnyInvocable<void(absl::Status)> commit) {
        {
          absl::MutexLock lock(&t->mu_);
          t->two_phase_bookkeeping_ = true;
        }
        auto shared_commit =
            std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(commit));
        t->RawGet(row, [t, row, propose, decided,
                        shared_commit](absl::StatusOr<std::map<std::string, std::string>> cells) {
          if (!cells.ok()) return (*shared_commit)(cells.status());
          auto it = cells->find(kDecisionColumn);
          if (it != cells->end()) {
            *decided = it->second == "commit";
          } else if (propose) {
            *decided = *propose;
            t->RawWrite(row, {SetCell(kDecisionColumn, *propose ? "commit" : "abort")});
          } else {
            decided->reset();
          }
          (*shared_commit)(absl::OkStatus());
        });
      },
      [decided, done = std::move(done)](absl::StatusOr<CommitInfo> info) mutable {
        if (!info.ok()) return done(info.status());
        done(*decided);
      });
}

void FinishPrepared(Context ctx, std::string group_root, std::string txid, bool commit,
                    Callback<bool> done) {
  auto found = std::make_shared<bool>(false);
  const std::string row = RowAfter(group_root, schema::kPreparedRow, txid);
  RunAtRow(
      ctx, group_root,
      [row, commit, found](std::shared_ptr<Transaction> t,
                           absl::AnyInvocable<void(absl::Status)> done) {
        {
          absl::MutexLock lock(&t->mu_);
          t->two_phase_bookkeeping_ = true;
        }
        auto shared_done =
            std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
        t->RawGet(row, [t, row, commit, found,
                        shared_done](absl::StatusOr<std::map<std::string, std::string>> cells) {
          if (!cells.ok()) return (*shared_done)(cells.status());
          auto w = cells->find(kWritesColumn);
          *found = w != cells->end();
          if (!*found) return (*shared_done)(absl::OkStatus());  // already finished
          if (commit) {
            replication::LogEntry prepared;
            if (!prepared.ParseFromString(w->second))
              return (*shared_done)(absl::DataLossError("unreadable prepared writes"));
            absl::MutexLock lock(&t->mu_);
            for (const replication::RowChange& rc : prepared.changes())
              t->extra_changes_.push_back(rc);
          }
          t->RawWrite(row, {DeleteCell(kWritesColumn), DeleteCell(kDecisionGroupColumn),
                            DeleteCell(kPreparedAtColumn)});
          (*shared_done)(absl::OkStatus());
        });
      },
      [found, done = std::move(done)](absl::StatusOr<CommitInfo> info) mutable {
        if (!info.ok()) return done(info.status());
        done(*found);
      });
}

namespace {

// The merge-join of IndexIntersect: one cursor per condition over entry
// rows `prefix` + encoded primary key, all in key order.
struct MergeJoin : std::enable_shared_from_this<MergeJoin> {
  static constexpr int64_t kPage = 100;
  struct Cursor {
    std::string prefix, end;
    std::deque<std::string> ahead;  // encoded keys read and not yet passed
    std::string resume;             // encoded key to read on from ("": the start)
    bool exhausted = false;
  };
  std::shared_ptr<Transaction> txn;
  Context ctx;
  replication::GroupRef group;
  replication::LogPosition at;
  int64_t deadline = 0;
  const schema::IndexDescriptor* index0 = nullptr;  // to decode keys
  const schema::TableDescriptor* table = nullptr;
  std::vector<Cursor> cursors;
  std::string target;  // the smallest key that may still match
  int64_t limit = 0;   // 0: all
  std::vector<std::vector<KeyValue>> matches;
  std::string last;  // encoded key of the last match
  bool more = false;
  Callback<QueryResult> done;

  void Step() {
    for (size_t i = 0; i < cursors.size(); ++i) {
      Cursor& c = cursors[i];
      while (!c.ahead.empty() && c.ahead.front() < target) c.ahead.pop_front();
      if (!c.ahead.empty()) continue;
      if (c.exhausted) return Finish();
      // Seek: read on from the target (or from where the last page ended).
      return Fetch(i, std::max(target, c.resume));
    }
    std::string high;
    for (const Cursor& c : cursors) high = std::max(high, c.ahead.front());
    bool all = true;
    for (const Cursor& c : cursors) all &= c.ahead.front() == high;
    if (!all) {
      target = high;
      return Step();
    }
    absl::StatusOr<std::vector<KeyValue>> key =
        ctx.layout->KeyOfIndexEntry(*index0, group.root(), cursors[0].prefix + high);
    if (!key.ok()) return Fail(key.status());
    matches.push_back(std::move(*key));
    last = high;
    target = high + std::string(1, '\0');
    if (limit > 0 && static_cast<int64_t>(matches.size()) >= limit) {
      more = true;
      return Finish();
    }
    Step();
  }
  void Fetch(size_t i, const std::string& from) {
    auto self = shared_from_this();
    Cursor& c = cursors[i];
    ctx.client->Scan(
        group, at, c.prefix + from, c.end, schema::kIndexFamily, kPage,
        [self, i](absl::StatusOr<replication::ScanReply> r) {
          if (!r.ok()) return self->Fail(r.status());
          Cursor& c = self->cursors[i];
          for (const auto& row : r->rows()) {
            if (row.key().compare(0, c.prefix.size(), c.prefix) != 0) continue;
            c.ahead.push_back(row.key().substr(c.prefix.size()));
          }
          c.exhausted = !r->more() || r->rows_size() == 0;
          if (!c.ahead.empty()) c.resume = c.ahead.back() + std::string(1, '\0');
          self->Step();
        },
        deadline);
  }
  void Fail(absl::Status s) {
    if (done) std::exchange(done, nullptr)(std::move(s));
  }
  // Reads the matched entities in key order (with the transaction's writes).
  void Finish() { Read(0, std::make_shared<QueryResult>()); }
  void Read(size_t next, std::shared_ptr<QueryResult> out) {
    if (next == matches.size()) {
      if (more) out->cursor = last;
      if (done) std::exchange(done, nullptr)(std::move(*out));
      return;
    }
    auto self = shared_from_this();
    txn->Get(table->name(), matches[next],
             [self, next, out](absl::StatusOr<std::optional<Entity>> e) {
               if (!e.ok()) return self->Fail(e.status());
               if (*e) out->entities.push_back(std::move(**e));
               self->Read(next + 1, out);
             });
  }
};

}  // namespace

void Transaction::IndexIntersect(
    std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions, QueryOptions options,
    Callback<QueryResult> done) {
  if (conditions.empty())
    return done(absl::InvalidArgumentError("an intersection needs conditions"));
  auto join = std::make_shared<MergeJoin>();
  bool full = true;
  for (const auto& [name, values] : conditions) {
    const schema::IndexDescriptor* index = ctx_.layout->schema().FindIndex(name);
    if (index == nullptr) return done(absl::NotFoundError(StrCat("no index ", name)));
    const schema::TableDescriptor* t = ctx_.layout->schema().FindTable(index->table());
    if (join->table != nullptr && t != join->table)
      return done(absl::InvalidArgumentError("intersected indexes must be on one table"));
    join->table = t;
    if (join->index0 == nullptr) join->index0 = index;
    absl::StatusOr<storage::RowRange> range =
        ctx_.layout->LocalIndexRange(*index, group_.root(), values);
    if (!range.ok()) return done(range.status());
    full &= values.size() == static_cast<size_t>(index->columns_size());
    join->cursors.push_back(MergeJoin::Cursor{range->start, range->end, {}, {}, false});
  }
  if (!full) {
    // Entries are not in key order within a range: intersect in memory,
    // then page the result.
    IndexIntersect(std::move(conditions), [options, done = std::move(done)](
                                              absl::StatusOr<std::vector<Entity>> all) mutable {
      if (!all.ok()) return done(all.status());
      QueryResult r;
      const size_t skip =
          options.cursor.empty() ? 0 : std::strtoull(options.cursor.c_str(), nullptr, 10);
      for (size_t i = skip; i < all->size(); ++i) {
        if (options.limit > 0 && static_cast<int64_t>(r.entities.size()) >= options.limit) {
          r.cursor = std::to_string(i);
          break;
        }
        r.entities.push_back(std::move((*all)[i]));
      }
      done(std::move(r));
    });
    return;
  }
  join->txn = shared_from_this();
  join->ctx = ctx_;
  join->group = group_;
  join->at = position_;
  join->deadline = deadline_;
  join->limit = options.limit;
  if (!options.cursor.empty()) join->target = options.cursor + std::string(1, '\0');
  join->done = std::move(done);
  join->Step();
}

void Transaction::IndexIntersect(
    std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions,
    Callback<std::vector<Entity>> done) {
  if (conditions.empty())
    return done(absl::InvalidArgumentError("an intersection needs conditions"));
  bool full = true;
  for (const auto& [name, values] : conditions) {
    const schema::IndexDescriptor* index = ctx_.layout->schema().FindIndex(name);
    full &= index != nullptr && values.size() == static_cast<size_t>(index->columns_size());
  }
  if (full) {
    // The merge-join, all in one page.
    return IndexIntersect(std::move(conditions), QueryOptions{},
                          [done = std::move(done)](absl::StatusOr<QueryResult> r) mutable {
                            if (!r.ok()) return done(r.status());
                            done(std::move(r->entities));
                          });
  }
  struct Scan {
    const schema::IndexDescriptor* index = nullptr;
    storage::RowRange range;
  };
  std::vector<Scan> scans;
  const schema::TableDescriptor* table = nullptr;
  for (const auto& [name, values] : conditions) {
    const schema::IndexDescriptor* index = ctx_.layout->schema().FindIndex(name);
    if (index == nullptr) return done(absl::NotFoundError(StrCat("no index ", name)));
    const schema::TableDescriptor* t = ctx_.layout->schema().FindTable(index->table());
    if (table != nullptr && t != table)
      return done(absl::InvalidArgumentError("intersected indexes must be on one table"));
    table = t;
    absl::StatusOr<storage::RowRange> range =
        ctx_.layout->LocalIndexRange(*index, group_.root(), values);
    if (!range.ok()) return done(range.status());
    scans.push_back(Scan{index, *range});
  }
  // Scan each index in turn (page by page), keeping the entity rows every
  // scan so far found.
  struct Op : std::enable_shared_from_this<Op> {
    std::shared_ptr<Transaction> txn;
    const schema::TableDescriptor* table;
    std::vector<Scan> scans;
    size_t current = 0;
    std::string from;
    std::set<std::string> found;                                       // this scan's entity rows
    std::optional<std::map<std::string, std::vector<KeyValue>>> keep;  // intersection so far
    Callback<std::vector<Entity>> done;

    void Page() {
      const Scan& s = scans[current];
      auto self = shared_from_this();
      txn->ctx_.client->Scan(
          txn->group_, txn->position_, from.empty() ? s.range.start : from, s.range.end,
          schema::kIndexFamily, 0,
          [self](absl::StatusOr<replication::ScanReply> r) {
            if (!r.ok()) return self->done(r.status());
            self->Collect(*r);
          },
          txn->deadline_);
    }
    void Collect(const replication::ScanReply& r) {
      const Scan& s = scans[current];
      for (const auto& row : r.rows()) {
        absl::StatusOr<std::vector<KeyValue>> key =
            txn->ctx_.layout->KeyOfIndexEntry(*s.index, txn->group_.root(), row.key());
        if (!key.ok()) return done(key.status());
        absl::StatusOr<std::string> entity_row = txn->ctx_.layout->EntityRow(*table, *key);
        if (!entity_row.ok()) return done(entity_row.status());
        if (!keep || keep->count(*entity_row)) {
          found.insert(*entity_row);
          if (!keep) first.emplace(*entity_row, std::move(*key));
        }
      }
      if (r.more() && r.rows_size() > 0) {
        from = r.rows(r.rows_size() - 1).key() + std::string(1, '\0');
        return Page();
      }
      // This index is done: narrow the intersection.
      if (!keep) {
        keep = std::move(first);
      } else {
        for (auto it = keep->begin(); it != keep->end();)
          it = found.count(it->first) ? std::next(it) : keep->erase(it);
      }
      found.clear();
      from.clear();
      if (++current < scans.size() && !keep->empty()) return Page();
      Fetch(keep->begin());
    }
    // The surviving entities, in key (row) order.
    void Fetch(std::map<std::string, std::vector<KeyValue>>::iterator it) {
      if (it == keep->end()) return done(std::move(out));
      auto self = shared_from_this();
      txn->Get(table->name(), it->second, [self, it](absl::StatusOr<std::optional<Entity>> e) {
        if (!e.ok()) return self->done(e.status());
        if (*e) self->out.push_back(std::move(**e));
        self->Fetch(std::next(it));
      });
    }
    std::map<std::string, std::vector<KeyValue>> first;
    std::vector<Entity> out;
  };
  auto op = std::make_shared<Op>();
  op->txn = shared_from_this();
  op->table = table;
  op->scans = std::move(scans);
  op->done = std::move(done);
  op->Page();
}

absl::Status Transaction::Put(std::string_view table_name, Entity entity) {
  MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table, FindTable(ctx_, table_name));
  MS_ASSIGN_OR_RETURN(std::vector<KeyValue> key, ctx_.layout->KeyOf(*table, entity));
  MS_ASSIGN_OR_RETURN(std::string row, RowOf(*table, key));
  // The schema check (required fields, types), naming the field.
  MS_RETURN_IF_ERROR(ctx_.layout->Mutations(table->name(), nullptr, &entity, 0).status());
  absl::MutexLock lock(&mu_);
  if (committing_) return absl::FailedPreconditionError("the transaction is already committing");
  writes_[row] = Write{table, std::move(entity)};
  return absl::OkStatus();
}

absl::Status Transaction::Delete(std::string_view table_name, std::vector<KeyValue> key) {
  MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table, FindTable(ctx_, table_name));
  MS_ASSIGN_OR_RETURN(std::string row, RowOf(*table, key));
  absl::MutexLock lock(&mu_);
  if (committing_) return absl::FailedPreconditionError("the transaction is already committing");
  writes_[row] = Write{table, std::nullopt};
  return absl::OkStatus();
}

bool Transaction::has_writes() const {
  absl::MutexLock lock(&mu_);
  return !writes_.empty() || !raw_writes_.empty() || !extra_changes_.empty();
}

void Transaction::Prepare(std::string txid, std::string decision_root, Callback<CommitInfo> done) {
  {
    absl::MutexLock lock(&mu_);
    prepare_ = std::make_pair(std::move(txid), std::move(decision_root));
  }
  Commit(std::move(done));
}

void Transaction::Commit(Callback<CommitInfo> done_in) {
  // The advisory lock goes back as soon as the commit's outcome is known.
  Callback<CommitInfo> done = [self = shared_from_this(),
                               done = std::move(done_in)](absl::StatusOr<CommitInfo> r) mutable {
    self->ReleaseLock();
    done(std::move(r));
  };
  bool again = false, read_only = false;
  {
    absl::MutexLock lock(&mu_);
    again = std::exchange(committing_, true);
    read_only = writes_.empty() && raw_writes_.empty() && extra_changes_.empty();
  }
  // (Callbacks run outside the mutex: `done` itself takes it.)
  if (again) return done(absl::FailedPreconditionError("Commit was already called"));
  if (read_only) {
    CommitInfo info;
    info.position = position_.position;
    info.timestamp = position_.timestamp;
    return done(info);
  }
  // A group with an undecided two-phase transaction takes no other commit:
  // resolve it first, then this one retries from a fresh read.
  auto self = shared_from_this();
  bool bookkeeping;
  {
    absl::MutexLock lock(&mu_);
    bookkeeping = two_phase_bookkeeping_;
  }
  if (bookkeeping) return CommitUnlocked(std::move(done));
  ResolvePrepared([self, done = std::move(done)](absl::StatusOr<bool> found) mutable {
    if (!found.ok()) return done(found.status());
    if (*found)
      return done(absl::AbortedError(
          "conflict: the entity group had a two-phase transaction to settle first; retry"));
    self->CommitUnlocked(std::move(done));
  });
}

void Transaction::CommitUnlocked(Callback<CommitInfo> done) {
  std::vector<std::pair<const schema::TableDescriptor*, std::string>> unread;
  if (options_.level == replication::ReadLevel::kInconsistent)
    return done(absl::FailedPreconditionError(
        "a transaction that reads at the inconsistent level cannot commit writes"));
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [row, w] : writes_)
      if (!read_.count(row)) unread.emplace_back(w.table, row);
  }
  // Index maintenance needs every written entity's current version.
  struct Pending {
    absl::Mutex mu;
    size_t left;
    absl::Status status;
    Callback<CommitInfo> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = unread.size() + 1;
  pending->done = std::move(done);
  auto self = shared_from_this();
  auto one_done = [self, pending](absl::Status s) {
    Callback<CommitInfo> done;
    absl::Status status;
    {
      absl::MutexLock lock(&pending->mu);
      if (!s.ok() && pending->status.ok()) pending->status = s;
      if (--pending->left > 0) return;
      done = std::move(pending->done);
      status = pending->status;
    }
    if (!status.ok()) return done(status);
    self->FinishCommit(std::move(done));
  };
  for (auto& [table, row] : unread)
    ReadRow(table, row,
            [one_done](absl::StatusOr<std::optional<Entity>> e) mutable { one_done(e.status()); });
  one_done(absl::OkStatus());
}

absl::Status Transaction::BuildChanges(replication::LogEntry* entry) {
  std::map<std::pair<std::string, std::string>, int> change_of;  // (table, row) -> index
  auto change = [&](const std::string& table, const std::string& row) {
    auto [it, added] = change_of.emplace(std::make_pair(table, row), entry->changes_size());
    if (added) {
      replication::RowChange* rc = entry->add_changes();
      rc->set_row(row);
      rc->set_table(table);
    }
    return entry->mutable_changes(it->second);
  };
  for (const auto& [row, w] : writes_) {
    const std::optional<Entity>& before = read_.at(row).entity;
    if (!before && !w.after) continue;  // deleting what is not there
    MS_ASSIGN_OR_RETURN(std::vector<schema::BigtableWrite> writes,
                        ctx_.layout->Mutations(w.table->name(), before ? &*before : nullptr,
                                               w.after ? &*w.after : nullptr, 0));
    for (const schema::BigtableWrite& bw : writes) {
      const std::string table = bw.table == ctx_.layout->entity_table() ? "" : bw.table;
      MS_RETURN_IF_ERROR(AddChanges(bw, change(table, bw.row)));
    }
  }
  for (const auto& [row, cells] : raw_writes_) {
    replication::RowChange* rc = change("", row);
    for (const replication::CellChange& c : cells) *rc->add_cells() = c;
  }
  for (const replication::RowChange& extra : extra_changes_) {
    replication::RowChange* rc = change(extra.table(), extra.row());
    for (const replication::CellChange& c : extra.cells()) *rc->add_cells() = c;
  }
  return absl::OkStatus();
}

void Transaction::FinishCommit(Callback<CommitInfo> done) {
  replication::LogEntry entry;
  std::optional<std::pair<std::string, std::string>> prepare;
  absl::Status built;
  {
    absl::MutexLock lock(&mu_);
    built = BuildChanges(&entry);
    prepare = prepare_;
  }
  if (!built.ok()) return done(built);
  if (entry.changes_size() == 0) {
    CommitInfo info;
    info.position = position_.position;
    info.timestamp = position_.timestamp;
    return done(info);
  }
  if (prepare) {
    // Phase one: the writes go into the group's prepared row, not its data.
    replication::LogEntry prepared;
    replication::RowChange* rc = prepared.add_changes();
    rc->set_row(RowAfter(group_.root(), schema::kPreparedRow, prepare->first));
    *rc->add_cells() = SetCell(kWritesColumn, entry.SerializeAsString());
    *rc->add_cells() = SetCell(kDecisionGroupColumn, prepare->second);
    *rc->add_cells() = SetCell(kPreparedAtColumn, std::to_string(ctx_.client->env()->NowMicros()));
    entry = std::move(prepared);
  }
  ProposeEntry(std::move(entry), std::move(done));
}

void Transaction::ProposeEntry(replication::LogEntry entry, Callback<CommitInfo> done) {
  entry.set_id(fmt::format("txn-{:016x}", ctx_.client->env()->Random64()));
  ctx_.client->Commit(
      group_, position_, std::move(entry),
      [done = std::move(done)](absl::StatusOr<replication::CommitResult> r) mutable {
        if (!r.ok()) return done(r.status());
        CommitInfo info;
        info.position = r->position;
        info.timestamp = r->timestamp;
        info.wrote = true;
        done(info);
      },
      deadline_);
}

void GlobalIndexQuery(Context ctx, std::string index_name, std::vector<KeyValue> values,
                      QueryOptions options, replication::ReadLevel level,
                      Callback<QueryResult> done) {
  const schema::IndexDescriptor* index = ctx.layout->schema().FindIndex(index_name);
  if (index == nullptr)
    return done(absl::NotFoundError(
        StrCat("schema ", ctx.layout->schema().schema().name(), " has no index ", index_name)));
  absl::StatusOr<storage::RowRange> range = ctx.layout->GlobalIndexRange(*index, values);
  if (!range.ok()) return done(range.status());
  absl::StatusOr<std::string> start = ResumeAt(*range, options.cursor);
  if (!start.ok()) return done(start.status());
  ctx.client->ScanIndex(
      ctx.layout->GlobalIndexTable(*index), *start, range->end, options.limit,
      [ctx, index, level,
       done = std::move(done)](absl::StatusOr<replication::ScanReply> reply) mutable {
        if (!reply.ok()) return done(reply.status());
        // Check each entry against its entity, read from the entity's group.
        struct Check : std::enable_shared_from_this<Check> {
          Context ctx;
          const schema::IndexDescriptor* index;
          replication::ReadLevel level;
          std::vector<std::pair<std::string, std::vector<KeyValue>>> entries;  // row, key
          size_t next = 0;
          bool more = false;
          QueryResult result;
          Callback<QueryResult> done;

          void Step() {
            if (next == entries.size()) {
              if (more && !entries.empty()) result.cursor = entries.back().first;
              return done(std::move(result));
            }
            const auto& [row, key] = entries[next++];
            TransactionOptions o;
            o.level = level;
            auto self = shared_from_this();
            const std::string entry_row = row;
            const std::vector<KeyValue> entity_key = key;
            Transaction::Begin(
                ctx, index->table(), entity_key, o,
                [self, entry_row, entity_key](absl::StatusOr<std::shared_ptr<Transaction>> t) {
                  if (!t.ok()) return self->done(t.status());
                  (*t)->Get(self->index->table(), entity_key,
                            [self, entry_row](absl::StatusOr<std::optional<Entity>> e) {
                              if (!e.ok()) return self->done(e.status());
                              if (*e) {
                                absl::StatusOr<std::vector<std::string>> rows =
                                    self->ctx.layout->IndexEntryRows(*self->index, **e);
                                if (!rows.ok()) return self->done(rows.status());
                                if (std::find(rows->begin(), rows->end(), entry_row) != rows->end())
                                  self->result.entities.push_back(std::move(**e));
                              }
                              self->Step();
                            });
                });
          }
        };
        auto check = std::make_shared<Check>();
        check->ctx = ctx;
        check->index = index;
        check->level = level;
        check->more = reply->more();
        check->done = std::move(done);
        for (const replication::ScannedRow& r : reply->rows()) {
          absl::StatusOr<std::vector<KeyValue>> key =
              ctx.layout->KeyOfGlobalIndexEntry(*index, r.key());
          if (!key.ok()) return check->done(key.status());
          check->entries.emplace_back(r.key(), std::move(*key));
        }
        check->Step();
      });
}

std::vector<storage::TableSchema> TablesFor(const schema::Layout& layout) {
  std::vector<storage::TableSchema> out;
  storage::TableSchema entities;
  entities.set_name(layout.entity_table());
  entities.set_replicated(true);
  *entities.add_families() = replication::LogFamilySchema();
  *entities.add_families() = replication::DataFamilySchema(schema::kEntityFamily);
  *entities.add_families() = replication::DataFamilySchema(schema::kIndexFamily);
  bool encrypted = false;
  for (const schema::TableDescriptor& t : layout.schema().schema().tables())
    encrypted |= t.entity_group_root() && t.encrypted();
  if (encrypted) {
    // Sealed cells are random bytes to a compressor: SSTables do not try.
    storage::LocalityGroup* g = entities.add_locality_groups();
    g->set_name("default");
    g->set_compression(storage::LocalityGroup::NONE);
  }
  out.push_back(entities);
  for (const schema::IndexDescriptor& x : layout.schema().schema().indexes()) {
    if (x.scope() != schema::IndexDescriptor::GLOBAL) continue;
    storage::TableSchema t;
    t.set_name(layout.GlobalIndexTable(x));
    t.set_replicated(true);
    *t.add_families() = replication::DataFamilySchema(schema::kIndexFamily);
    out.push_back(t);
  }
  storage::TableSchema outboxes;
  outboxes.set_name(OutboxTable(layout));
  outboxes.set_replicated(true);
  *outboxes.add_families() = replication::DataFamilySchema(schema::kIndexFamily);
  out.push_back(outboxes);
  return out;
}

// ---- Run -------------------------------------------------------------------------------

namespace {

struct RunOp : std::enable_shared_from_this<RunOp> {
  Context ctx;
  std::string root_table;
  std::vector<KeyValue> root_key;
  TransactionOptions options;
  Body body;
  Callback<CommitInfo> done;
  int attempt = 0;
  int64_t deadline = 0;  // env MonotonicMicros; 0: none

  void Attempt() {
    ++attempt;
    auto self = shared_from_this();
    TransactionOptions this_try = options;
    if (deadline != 0) {
      const int64_t left = deadline - ctx.client->env()->MonotonicMicros();
      if (left <= 0)
        return Finish(absl::DeadlineExceededError(
                          StrCat("transaction deadline (", absl::FormatDuration(options.deadline),
                                 ") passed after ", attempt - 1, " attempt(s)")),
                      false);
      this_try.deadline = absl::Microseconds(left);
    }
    Transaction::Begin(ctx, root_table, root_key, this_try,
                       [self](absl::StatusOr<std::shared_ptr<Transaction>> txn) {
                         if (!txn.ok()) {
                           // Nothing was proposed: a transient failure is
                           // as safe to retry as a conflict.
                           const bool transient = absl::IsUnavailable(txn.status()) ||
                                                  absl::IsDeadlineExceeded(txn.status());
                           return self->Finish(txn.status(), transient);
                         }
                         auto t = *txn;
                         self->body(t, [self, t](absl::Status s) {
                           if (!s.ok()) return self->Finish(s, false);  // the application's own
                           t->Commit([self](absl::StatusOr<CommitInfo> info) {
                             if (info.ok()) info->attempts = self->attempt;
                             // After Commit only a conflict is certain not
                             // to have committed.
                             const bool retry = absl::IsAborted(info.status());
                             self->Finish(std::move(info), retry);
                           });
                         });
                       });
  }

  void Finish(absl::StatusOr<CommitInfo> result, bool retryable) {
    if (!result.ok() && retryable && attempt < options.max_attempts) {
      Env* env = ctx.client->env();
      const int64_t max =
          std::max<int64_t>(1, absl::ToInt64Microseconds(options.max_retry_backoff));
      int64_t pause = static_cast<int64_t>(env->Random64() % max);
      if (deadline != 0) pause = std::clamp<int64_t>(deadline - env->MonotonicMicros(), 0, pause);
      auto self = shared_from_this();
      env->Schedule(absl::Microseconds(pause), [self] { self->Attempt(); });
      return;
    }
    if (done) std::exchange(done, nullptr)(std::move(result));
  }
};

}  // namespace

namespace {

struct CommitAcrossOp : std::enable_shared_from_this<CommitAcrossOp> {
  Context ctx;
  std::vector<std::shared_ptr<Transaction>> writers;
  std::string txid;
  std::string decision_root;
  absl::Status prepared;
  bool commit = false;
  Callback<CommitInfo> done;

  void Prepare(size_t i) {
    if (i == writers.size()) return Decide();
    auto self = shared_from_this();
    writers[i]->Prepare(txid, decision_root, [self, i](absl::StatusOr<CommitInfo> r) {
      if (!r.ok()) {
        self->prepared = r.status();
        return self->Decide();
      }
      self->Prepare(i + 1);
    });
  }
  // Commit if every group prepared (unless a group's other writer already
  // timed this transaction out and decided abort: the first decision wins).
  void Decide() {
    auto self = shared_from_this();
    txn::Decide(
        ctx, decision_root, txid, std::optional<bool>(prepared.ok()),
        [self](absl::StatusOr<std::optional<bool>> decided) {
          // Unknown: prepared groups wait for a resolver to read or
          // make the decision. Whatever failed, this is not "nothing
          // written" (the status must not say Unavailable).
          if (!decided.ok())
            return self->done(absl::DeadlineExceededError(
                StrCat("outcome unknown: two-phase transaction ", self->txid,
                       " was prepared but its decision could not be recorded (",
                       decided.status().message(), "); the next writer of its groups settles it")));
          self->commit = decided->value_or(false);
          self->Finish(0);
        });
  }
  // Phase two in every group (also where preparing failed: a no-op there).
  // A failure leaves the group to the next writer's resolution, which
  // applies the recorded decision.
  void Finish(size_t i) {
    if (i == writers.size()) {
      if (commit) {
        CommitInfo info;
        info.wrote = true;
        return done(info);
      }
      return done(prepared.ok() ? absl::AbortedError("the two-phase transaction was aborted")
                                : prepared);
    }
    auto self = shared_from_this();
    FinishPrepared(ctx, writers[i]->group().root(), txid, commit,
                   [self, i](absl::StatusOr<bool>) { self->Finish(i + 1); });
  }
};

}  // namespace

void CommitAcross(Context ctx, std::vector<std::shared_ptr<Transaction>> parts,
                  Callback<CommitInfo> done) {
  auto op = std::make_shared<CommitAcrossOp>();
  for (auto& p : parts)
    if (p->has_writes()) op->writers.push_back(std::move(p));
  if (op->writers.empty()) return done(CommitInfo{});
  if (op->writers.size() == 1) return op->writers[0]->Commit(std::move(done));
  op->ctx = ctx;
  op->txid = fmt::format("{:016x}", ctx.client->env()->Random64());
  op->decision_root = op->writers[0]->group().root();
  op->done = std::move(done);
  op->Prepare(0);
}

void Run(Context ctx, std::string root_table, std::vector<KeyValue> root_key,
         TransactionOptions options, Body body, Callback<CommitInfo> done) {
  auto op = std::make_shared<RunOp>();
  op->ctx = ctx;
  op->root_table = std::move(root_table);
  op->root_key = std::move(root_key);
  op->options = options;
  op->body = std::move(body);
  op->done = std::move(done);
  if (options.deadline > absl::ZeroDuration())
    op->deadline =
        ctx.client->env()->MonotonicMicros() + absl::ToInt64Microseconds(options.deadline);
  op->Attempt();
}

}  // namespace megastore::txn
