// Queues (docs/transactions.md): messages sent from a transaction through
// its group's outbox, delivered exactly once into the receiving group's
// queue, read and consumed there; the sweeper that delivers what a dead
// sender left behind.
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "txn/internal.h"
#include "txn/transaction.h"

namespace megastore::txn {

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
  if (!PositionKnown<std::vector<QueueMessage>>(
          done, [self = shared_from_this(), queue, limit](auto d) mutable {
            self->ReadQueue(std::move(queue), limit, std::move(d));
          }))
    return;
  const std::string prefix = QueuePrefix(group_.root(), queue);
  auto self = shared_from_this();
  ScanGroup(
      prefix, PrefixSuccessor(prefix), kEntityFamily, limit,
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
      });
}

void Transaction::ReadMessage(std::string queue, std::string id,
                              Callback<std::optional<QueueMessage>> done) {
  std::string row = QueuePrefix(group_.root(), queue) + id;
  RawGet(row, [queue = std::move(queue), id = std::move(id), done = std::move(done)](
                  absl::StatusOr<std::map<std::string, std::string>> cells) mutable {
    if (!cells.ok()) return done(cells.status());
    auto body = cells->find(kBodyColumn);
    if (body == cells->end()) return done(std::optional<QueueMessage>());
    QueueMessage m;
    m.id = std::move(id);
    m.queue = std::move(queue);
    m.body = body->second;
    if (auto source = cells->find(kSourceColumn); source != cells->end()) m.source = source->second;
    done(std::optional<QueueMessage>(std::move(m)));
  });
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
        t->ScanGroup(prefix, PrefixSuccessor(prefix), kEntityFamily, 1,
                     [ctx, root, t, c](absl::StatusOr<replication::ScanReply> r) {
                       if (!r.ok()) return (*c)(r.status());
                       if (r->rows_size() == 0) {
                         schema::BigtableWrite unlist;
                         unlist.table = OutboxTable(*ctx.layout);
                         unlist.row = root;
                         unlist.mutations.push_back(
                             storage::Mutation::DeleteCells(schema::kIndexFamily, kListedColumn));
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
        (*t)->ScanGroup(
            prefix, PrefixSuccessor(prefix), kEntityFamily, 0,
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

}  // namespace megastore::txn
