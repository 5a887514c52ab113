// Two-phase commit across entity groups (docs/transactions.md): prepare in
// each group, the decision in one, phase two in each, and resolution of a
// prepared transaction whose coordinator went away.
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "txn/internal.h"
#include "txn/transaction.h"

namespace megastore::txn {

void Transaction::Prepare(std::string txid, std::string decision_root, Callback<CommitInfo> done) {
  {
    absl::MutexLock lock(&mu_);
    prepare_ = std::make_pair(std::move(txid), std::move(decision_root));
  }
  Commit(std::move(done));
}

std::optional<replication::ScanRange> Transaction::PreparedScan() {
  // Only a transaction that may commit needs it.
  if (options_.level == replication::ReadLevel::kInconsistent) return std::nullopt;
  {
    absl::MutexLock lock(&mu_);
    if (std::exchange(prepared_scan_asked_, true)) return std::nullopt;
  }
  const std::string prefix = RowAfter(group_.root(), schema::kPreparedRow);
  NoteRange(prefix, PrefixSuccessor(prefix));
  replication::ScanRange range;
  range.set_start(prefix);
  range.set_end(PrefixSuccessor(prefix));
  range.set_limit(1);  // the first undecided transaction is resolved, then the commit retries
  return range;
}

void Transaction::KeepPreparedRows(const replication::ReadReply& reply) {
  if (!reply.has_scan()) return;
  absl::MutexLock lock(&mu_);
  prepared_rows_ = reply.scan();
}

void Transaction::ResolvePrepared(Callback<bool> done) {
  std::optional<replication::ScanReply> kept;
  {
    absl::MutexLock lock(&mu_);
    kept = prepared_rows_;
  }
  // The rows as of the transaction's position, whichever request read them.
  if (kept) return ResolvePreparedRows(*kept, std::move(done));
  const std::string prefix = RowAfter(group_.root(), schema::kPreparedRow);
  auto self = shared_from_this();
  ScanGroup(prefix, PrefixSuccessor(prefix), kEntityFamily, 1,
            [self, done = std::move(done)](absl::StatusOr<replication::ScanReply> r) mutable {
              if (!r.ok()) return done(r.status());
              self->ResolvePreparedRows(*r, std::move(done));
            });
}

void Transaction::ResolvePreparedRows(const replication::ScanReply& rows, Callback<bool> done) {
  if (rows.rows().empty()) return done(false);
  const replication::ScannedRow& row = rows.rows(0);
  const std::string prefix = RowAfter(group_.root(), schema::kPreparedRow);
  const std::string txid = row.key().substr(std::min(prefix.size(), row.key().size()));
  std::string decision_root;
  int64_t prepared_at = 0;
  for (int i = 0; i < row.qualifiers_size(); ++i) {
    if (row.qualifiers(i) == kDecisionGroupColumn) decision_root = row.values(i);
    if (row.qualifiers(i) == kPreparedAtColumn) prepared_at = std::atoll(row.values(i).c_str());
  }
  const Context ctx = ctx_;
  const std::string group = group_.root();
  // Past the timeout an undecided transaction may be decided aborted;
  // before it, only an existing decision is applied.
  const bool expired =
      ctx.client->env()->NowMicros() - prepared_at > absl::ToInt64Microseconds(kPreparedTimeout);
  std::optional<bool> propose;
  if (expired) propose = false;
  Decide(ctx, decision_root, txid, propose,
         [ctx, group, txid, done = std::move(done)](absl::StatusOr<std::optional<bool>> d) mutable {
           if (!d.ok()) return done(d.status());
           if (!d->has_value()) return done(true);  // still undecided: the caller retries later
           FinishPrepared(ctx, group, txid, **d,
                          [done = std::move(done)](absl::StatusOr<bool> f) mutable {
                            if (!f.ok()) return done(f.status());
                            done(true);
                          });
         });
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

}  // namespace megastore::txn
