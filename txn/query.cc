// Queries inside a transaction (docs/transactions.md): key-prefix and
// local-index queries with cursors, index intersection (a merge join), and
// global-index queries outside any transaction.
#include <deque>

#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "txn/internal.h"
#include "txn/transaction.h"

namespace megastore::txn {

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
  if (!PositionKnown<QueryResult>(
          done, [self = shared_from_this(), table_name, key_prefix, options](auto d) mutable {
            self->Query(std::move(table_name), std::move(key_prefix), options, std::move(d));
          }))
    return;
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
  ScanGroup(
      *start, end, kEntityFamily, options.limit,
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
      });
}

void Transaction::IndexQuery(std::string index_name, std::vector<KeyValue> values,
                             QueryOptions options, Callback<QueryResult> done) {
  if (!PositionKnown<QueryResult>(
          done, [self = shared_from_this(), index_name, values, options](auto d) mutable {
            self->IndexQuery(std::move(index_name), std::move(values), options, std::move(d));
          }))
    return;
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
  ScanGroup(
      *start, range->end, schema::kIndexFamily, options.limit,
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
    txn->ScanGroup(c.prefix + from, c.end, schema::kIndexFamily, kPage,
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
                   });
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
  if (!PositionKnown<QueryResult>(
          done, [self = shared_from_this(), conditions, options](auto d) mutable {
            self->IndexIntersect(std::move(conditions), options, std::move(d));
          }))
    return;
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
  join->limit = options.limit;
  if (!options.cursor.empty()) join->target = options.cursor + std::string(1, '\0');
  join->done = std::move(done);
  join->Step();
}

void Transaction::IndexIntersect(
    std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions,
    Callback<std::vector<Entity>> done) {
  if (!PositionKnown<std::vector<Entity>>(
          done, [self = shared_from_this(), conditions](auto d) mutable {
            self->IndexIntersect(std::move(conditions), std::move(d));
          }))
    return;
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
      txn->ScanGroup(from.empty() ? s.range.start : from, s.range.end, schema::kIndexFamily, 0,
                     [self](absl::StatusOr<replication::ScanReply> r) {
                       if (!r.ok()) return self->done(r.status());
                       self->Collect(*r);
                     });
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

}  // namespace megastore::txn
