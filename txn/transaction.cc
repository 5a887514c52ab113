// Transaction's core (docs/transactions.md): beginning at a group's read
// position, reading entities, buffering writes, and committing them as one
// log entry. Queries, queues, two-phase commit and Run live in query.cc,
// queue.cc, two_phase.cc and run.cc.
#include "txn/transaction.h"

#include <deque>

#include "base/coding.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "txn/internal.h"

namespace megastore::txn {

Transaction::Transaction(Context ctx, TransactionOptions options, replication::GroupRef group,
                         std::optional<replication::LogPosition> position, int64_t deadline,
                         std::string lock_owner)
    : ctx_(ctx),
      options_(options),
      group_(std::move(group)),
      replica_(position ? position->replica
                        : (options.replica >= 0 ? options.replica : ctx.client->options().local)),
      deadline_(deadline),
      lock_owner_(std::move(lock_owner)) {
  if (position) {
    position_ = *position;
    position_known_.store(true, std::memory_order_release);
  }
}

const replication::LogPosition& Transaction::position() const {
  MS_CHECK(position_known_.load(std::memory_order_acquire),
           "Transaction::position() before the position was read (use WithPosition)");
  return position_;
}

absl::Status Transaction::position_failure() const {
  absl::MutexLock lock(&mu_);
  return position_failure_;
}

void Transaction::SetPosition(absl::StatusOr<replication::LogPosition> at) {
  std::vector<Callback<replication::LogPosition>> waiters;
  {
    absl::MutexLock lock(&mu_);
    position_reading_ = false;
    if (at.ok()) {
      position_ = *at;
      position_known_.store(true, std::memory_order_release);
    } else {
      position_failure_ = at.status();
    }
    waiters.swap(position_waiters_);
  }
  for (auto& w : waiters) w(at);
}

void Transaction::WithPosition(Callback<replication::LogPosition> done) {
  if (position_known_.load(std::memory_order_acquire)) return done(position_);
  absl::Status failed;
  bool start = false;
  {
    absl::MutexLock lock(&mu_);
    failed = position_failure_;
    if (failed.ok() && !position_known_.load(std::memory_order_acquire)) {
      position_waiters_.push_back(std::move(done));
      start = !std::exchange(position_reading_, true);  // else a read is finding it
      if (!start) return;
    }
  }
  if (!failed.ok()) return done(failed);
  if (!start) return done(position_);  // found meanwhile
  ctx_.client->ReadPosition(
      group_, options_.level,
      [self = shared_from_this()](absl::StatusOr<replication::LogPosition> at) {
        self->SetPosition(std::move(at));
      },
      deadline_, options_.replica);
}

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
                        TransactionOptions options, Callback<std::shared_ptr<Transaction>> done,
                        bool deferred) {
  absl::StatusOr<const schema::TableDescriptor*> table = FindTable(ctx, root_table);
  if (!table.ok()) return done(table.status());
  absl::StatusOr<std::string> root = ctx.layout->GroupRow(**table, root_key);
  if (!root.ok()) return done(root.status());
  BeginAtRow(ctx, *root, options, std::move(done), deferred);
}

void Transaction::BeginAtRow(Context ctx, std::string root_row, TransactionOptions options,
                             Callback<std::shared_ptr<Transaction>> done, bool deferred) {
  const std::vector<replication::ReplicaInfo>& replicas = ctx.client->options().replicas;
  if (options.replica >= static_cast<int>(replicas.size()))
    return done(absl::InvalidArgumentError(
        StrCat("read at replica ", options.replica, ": the cluster has ", replicas.size())));
  replication::GroupRef group;
  group.set_table(ctx.layout->entity_table());
  group.set_root(std::move(root_row));
  int64_t deadline = 0;
  if (options.deadline > absl::ZeroDuration())
    deadline = ctx.client->env()->MonotonicMicros() + absl::ToInt64Microseconds(options.deadline);
  // Reads the position (after taking the lock, so the read sees the
  // previous holder's commit).
  auto read = [ctx, options, group, deadline, deferred](
                  std::string lock_owner, Callback<std::shared_ptr<Transaction>> done) {
    if (deferred)
      return done(
          std::make_shared<Transaction>(ctx, options, group, std::nullopt, deadline, lock_owner));
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
        deadline, options.replica);
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
  NoteRead(row);
  auto self = shared_from_this();
  bool first = false;  // this read finds the deferred position
  if (!position_known_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&mu_);
    first = !position_known_.load(std::memory_order_acquire) && !position_reading_ &&
            position_failure_.ok();
    if (first) position_reading_ = true;
  }
  if (first) {
    return ctx_.client->ReadFirst(
        group_, options_.level, row, kEntityFamily,
        [self, table, row,
         done = std::move(done)](absl::StatusOr<replication::FirstRead> r) mutable {
          if (!r.ok()) {
            self->SetPosition(r.status());
            return done(r.status());
          }
          self->SetPosition(r->at);
          self->OnRowRead(table, row, std::move(r->reply), std::move(done));
        },
        deadline_, options_.replica, PreparedScan());
  }
  if (!PositionKnown<std::optional<Entity>>(
          done, [self, table, row](Callback<std::optional<Entity>> d) mutable {
            self->ReadRow(table, std::move(row), std::move(d));
          }))
    return;
  ctx_.client->Read(
      group_, position_, row, kEntityFamily,
      [self, table, row, done = std::move(done)](absl::StatusOr<replication::ReadReply> r) mutable {
        self->OnRowRead(table, row, std::move(r), std::move(done));
      },
      deadline_, PreparedScan());
}

void Transaction::OnRowRead(const schema::TableDescriptor* table, const std::string& row,
                            absl::StatusOr<replication::ReadReply> r,
                            Callback<std::optional<Entity>> done) {
  if (!r.ok()) return done(r.status());
  KeepPreparedRows(*r);
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
    absl::StatusOr<Entity> e = ctx_.layout->EntityFromRow(*table, stored);
    if (!e.ok()) return done(e.status());
    entity = std::move(*e);
  }
  {
    absl::MutexLock lock(&mu_);
    read_.emplace(row, Row{table, entity});
  }
  done(std::move(entity));
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

bool Transaction::sent_messages() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

void Transaction::RawGet(std::string row, Callback<std::map<std::string, std::string>> done) {
  if (!PositionKnown<std::map<std::string, std::string>>(
          done, [self = shared_from_this(), row](auto d) mutable {
            self->RawGet(std::move(row), std::move(d));
          }))
    return;
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
  NoteRead(row);
  ctx_.client->Read(
      group_, position_, row, kEntityFamily,
      [self = shared_from_this(),
       done = std::move(done)](absl::StatusOr<replication::ReadReply> r) mutable {
        if (!r.ok()) return done(r.status());
        self->KeepPreparedRows(*r);
        std::map<std::string, std::string> cells;
        for (int i = 0; i < r->qualifiers_size(); ++i) cells[r->qualifiers(i)] = r->values(i);
        done(std::move(cells));
      },
      deadline_, PreparedScan());
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

void Transaction::Commit(Callback<CommitInfo> done_in) {
  // The advisory lock goes back as soon as the commit's outcome is known.
  Callback<CommitInfo> done = [self = shared_from_this(),
                               done = std::move(done_in)](absl::StatusOr<CommitInfo> r) mutable {
    self->ReleaseLock();
    done(std::move(r));
  };
  // A deferred transaction that has not read commits after the position.
  if (!PositionKnown<CommitInfo>(
          done, [self = shared_from_this()](auto d) mutable { self->Commit(std::move(d)); }))
    return;
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
  // A prepare proposes its (maybe empty) prepared row even when nothing
  // changes: that proposal is what makes the part conditional on nothing
  // having committed in its group since its reads.
  if (entry.changes_size() == 0 && !prepare) {
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

void Transaction::NoteRead(const std::string& row) {
  absl::MutexLock lock(&mu_);
  read_rows_.insert(row);
}

void Transaction::NoteRange(std::string start, std::string end) {
  absl::MutexLock lock(&mu_);
  read_ranges_.emplace_back(std::move(start), std::move(end));
}

void Transaction::ScanGroup(std::string start, std::string end, std::string family, int64_t limit,
                            Callback<replication::ScanReply> done) {
  NoteRange(start, end);
  ctx_.client->Scan(group_, position(), std::move(start), std::move(end), std::move(family), limit,
                    std::move(done), deadline_);
}

replication::GroupClient::Reads Transaction::Reads() const {
  absl::MutexLock lock(&mu_);
  // Two-phase prepares and bookkeeping are never promoted: their writes
  // rest on reads made elsewhere (the decision group's, the participants').
  if (prepare_ || two_phase_bookkeeping_) return nullptr;
  auto reads = std::make_shared<replication::ReadSet>();
  for (const std::string& row : read_rows_) reads->add_rows(row);  // (a set: ascending)
  for (const auto& [start, end] : read_ranges_) {
    replication::ReadSet::Range* r = reads->add_ranges();
    r->set_start(start);
    r->set_end(end);
  }
  return reads;
}

void Transaction::ProposeEntry(replication::LogEntry entry, Callback<CommitInfo> done) {
  entry.set_id(fmt::format("txn-{:016x}", ctx_.client->env()->Random64()));
  // With no read set (promotion off, or a two-phase record) the commit
  // races for its position on its own.
  replication::GroupClient::Reads reads = options_.promote ? Reads() : nullptr;
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
      deadline_, std::move(reads), options_.first_attempt);
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

}  // namespace megastore::txn
