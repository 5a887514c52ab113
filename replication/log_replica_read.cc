// LogReplica: reads and scans of an entity group's data as of a log
// position, and of global index tables; opening sealed cells of encrypted
// groups.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/match.h"
#include "base/buggify.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "paxos/paxos.h"
#include "replication/log_replica.h"
#include "replication/log_replica_internal.h"
#include "schema/layout.h"

namespace megastore::replication {

MS_FAULT_POINT(kReplicaReadFails, "log replica: a read of a group's row fails");

using log_internal::NoKeyForData;
using log_internal::ReadCipher;
using storage::ReadOptions;
using storage::Row;

using log_internal::InGroup;
using log_internal::OpenRow;

template <typename T>
LogReplica::Callback<T> LogReplica::HoldingPosition(const GroupRef& group, uint64_t position,
                                                    Callback<T> done) {
  if (position == 0) return done;
  struct Join {
    absl::Mutex mu;
    std::optional<absl::Status> held ABSL_GUARDED_BY(mu);
    std::optional<absl::StatusOr<T>> result ABSL_GUARDED_BY(mu);
    Callback<T> done ABSL_GUARDED_BY(mu);
    // Runs `done` once both are in (outside the lock).
    void Maybe() {
      absl::StatusOr<T> out = absl::UnknownError("");
      Callback<T> run;
      {
        absl::MutexLock lock(&mu);
        if (!held || !result || !done) return;
        out = held->ok() ? std::move(*result) : absl::StatusOr<T>(*held);
        run = std::exchange(done, nullptr);
      }
      run(std::move(out));
    }
  };
  auto join = std::make_shared<Join>();
  {
    absl::MutexLock lock(&join->mu);
    join->done = std::move(done);
  }
  State(group, [join, group, position](absl::StatusOr<StateReply> state) {
    absl::Status held;
    if (!state.ok()) {
      held = state.status();
    } else if (state->applied().position() < position) {
      held = absl::AbortedError(StrCat("entity group ", EscapeBytes(group.root()),
                                       ": this replica has applied position ",
                                       state->applied().position(), ", not ", position,
                                       " (it lost its data?); read again from a new position"));
    } else if (position < state->snapshot()) {
      held = absl::AbortedError(StrCat("entity group ", EscapeBytes(group.root()),
                                       ": this replica has no history before position ",
                                       state->snapshot(),
                                       " (it was caught up from a snapshot "
                                       "there); read again from a new position"));
    }
    {
      absl::MutexLock lock(&join->mu);
      join->held = std::move(held);
    }
    join->Maybe();
  });
  return [join](absl::StatusOr<T> r) {
    {
      absl::MutexLock lock(&join->mu);
      join->result = std::move(r);
    }
    join->Maybe();
  };
}

// Snapshot pages for backups are guarded too (log_replica_clean.cc).
template LogReplica::Callback<SnapshotRowsReply> LogReplica::HoldingPosition(
    const GroupRef& group, uint64_t position, Callback<SnapshotRowsReply> done);

namespace {

// A scan's range must lie inside the group's rows.
absl::Status CheckScanRange(const GroupRef& group, const std::string& start, const std::string& end,
                            std::string_view method) {
  const std::string& root = group.root();
  if (start < root || end.empty() || end > PrefixSuccessor(root) || end <= start)
    return absl::InvalidArgumentError(
        StrCat(method, ": the range must be non-empty and inside the entity group's rows"));
  return absl::OkStatus();
}

}  // namespace

void LogReplica::Read(ReadRequest request, Callback<ReadReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (request.has_also_scan()) {
    if (absl::Status s = CheckScanRange(request.group(), request.also_scan().start(),
                                        request.also_scan().end(), "repl.Read also_scan");
        !s.ok())
      return done(s);
  }
  if (kReplicaReadFails.Fire())
    return done(absl::UnavailableError("injected fault: the read failed"));
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
  const GroupRef group = request.group();
  if (request.at_applied()) {
    if (request.latest() || request.position() != 0 || request.timestamp() != 0)
      return done(absl::InvalidArgumentError(
          "repl.Read: at_applied reads at the applied position; it takes no position, "
          "timestamp or latest"));
    // The position first, then the rows as of it, held as any read's
    // position is (a catch-up from a snapshot landing meanwhile refuses it).
    return State(group, [this, group, request = std::move(request),
                         done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
      if (!state.ok()) return done(state.status());
      request.set_timestamp(state->applied().timestamp());
      request.set_position(state->applied().position());
      Callback<ReadReply> answer = [state = std::move(*state),
                                    done = std::move(done)](absl::StatusOr<ReadReply> r) mutable {
        if (r.ok()) *r->mutable_state() = std::move(state);
        done(std::move(r));
      };
      const uint64_t position = request.position();
      ReadAt(std::move(request), HoldingPosition<ReadReply>(group, position, std::move(answer)));
    });
  }
  if (!request.latest())
    done = HoldingPosition<ReadReply>(group, request.position(), std::move(done));
  ReadAt(std::move(request), std::move(done));
}

void LogReplica::ReadAt(ReadRequest request, Callback<ReadReply> done) {
  const GroupRef group = request.group();
  SealingOf(
      group, false,
      [this, request = std::move(request),
       done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
        if (!sealing.ok()) return done(sealing.status());
        absl::StatusOr<const GroupCipher*> cipher = ReadCipher(**sealing);
        if (!cipher.ok()) return done(cipher.status());
        if ((*sealing)->encrypted && !InGroup(request.group(), request.row()))
          return done(absl::InvalidArgumentError("repl.Read: the row is not in the entity group"));
        ReadOptions o;
        o.filter.families = {request.family()};
        o.filter.cells_per_column = 1;
        if (!request.latest()) o.read_timestamp = request.timestamp();
        const std::string table = request.group().table();
        const std::string row =
            *cipher != nullptr ? (*cipher)->StoredRow(request.row()) : request.row();
        // The range to scan as well, as a ScanRequest (its position is held
        // by this read already).
        std::optional<ScanRequest> scan;
        if (request.has_also_scan()) {
          scan.emplace();
          *scan->mutable_group() = request.group();
          scan->set_start(request.also_scan().start());
          scan->set_end(request.also_scan().end());
          scan->set_limit(request.also_scan().limit());
          scan->set_family(request.family());
          scan->set_timestamp(request.timestamp());
          scan->set_latest(request.latest());
        }
        bigtable_->ReadRow(table, row, std::move(o),
                           [this, group = request.group(), sealing = *sealing, cipher = *cipher,
                            scan = std::move(scan),
                            done = std::move(done)](absl::StatusOr<std::optional<Row>> r) mutable {
                             if (!r.ok()) return done(r.status());
                             ReadReply reply;
                             if (*r) {
                               if (sealing->encrypted && cipher == nullptr)
                                 return done(NoKeyForData(group));
                               if (cipher != nullptr) {
                                 if (absl::Status s = OpenRow(*cipher, &**r); !s.ok())
                                   return done(s);
                               }
                               reply.set_found(true);
                               for (const storage::Cell& c : (*r)->cells) {
                                 reply.add_qualifiers(c.qualifier);
                                 reply.add_values(c.value);
                               }
                             }
                             if (!scan) return done(std::move(reply));
                             ScanSealed(std::move(*scan), std::move(sealing),
                                        [reply = std::move(reply), done = std::move(done)](
                                            absl::StatusOr<ScanReply> s) mutable {
                                          if (!s.ok()) return done(s.status());
                                          *reply.mutable_scan() = std::move(*s);
                                          done(std::move(reply));
                                        });
                           });
      });
}

namespace {

// Rows as a ScanReply: at most `limit` (one more was asked for, to know
// whether the scan was cut short).
absl::AnyInvocable<void(absl::StatusOr<std::vector<Row>>)> ToScanReply(
    int64_t limit, LogReplica::Callback<ScanReply> done) {
  return [limit, done = std::move(done)](absl::StatusOr<std::vector<Row>> rows) mutable {
    if (!rows.ok()) return done(rows.status());
    ScanReply reply;
    for (Row& r : *rows) {
      if (reply.rows_size() == limit) {
        reply.set_more(true);
        break;
      }
      ScannedRow* out = reply.add_rows();
      out->set_key(r.key);
      for (const storage::Cell& c : r.cells) {
        out->add_qualifiers(c.qualifier);
        out->add_values(c.value);
      }
    }
    done(std::move(reply));
  };
}

}  // namespace

void LogReplica::ScanIndex(ScanIndexRequest request, Callback<ScanReply> done) {
  if (request.table().empty())
    return done(absl::InvalidArgumentError("repl.ScanIndex names no table"));
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
  if (!request.end().empty() && request.end() <= request.start())
    return done(absl::InvalidArgumentError("repl.ScanIndex: the range is empty"));
  const int64_t limit =
      request.limit() <= 0 ? kMaxScanRows : std::min(request.limit(), kMaxScanRows);
  ReadOptions o;
  o.filter.families = {schema::kIndexFamily};
  o.filter.cells_per_column = 1;
  o.rows_limit = limit + 1;
  bigtable_->ReadRows(request.table(), storage::RowRange{request.start(), request.end()},
                      std::move(o), ToScanReply(limit, std::move(done)));
}

void LogReplica::Scan(ScanRequest request, Callback<ScanReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
  if (absl::Status s = CheckScanRange(request.group(), request.start(), request.end(), "repl.Scan");
      !s.ok())
    return done(s);
  const GroupRef group = request.group();
  if (!request.latest())
    done = HoldingPosition<ScanReply>(group, request.position(), std::move(done));
  SealingOf(group, false,
            [this, request = std::move(request),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              ScanSealed(std::move(request), std::move(*sealing), std::move(done));
            });
}

namespace {

// A scan of an encrypted group: the range in up to three parts, each read
// in order — rows before the group's local index entries, the entries
// (all of them, opened, kept if inside the range, sorted), the rows after.
struct SealedScan {
  storage::BigtableClient* bigtable;
  std::string table;
  std::shared_ptr<const GroupCipher> cipher;
  ReadOptions options;  // family and timestamp; the rows limit is set per part
  std::string start, end;
  int64_t limit = 0;
  std::vector<Row> rows;
  absl::AnyInvocable<void(absl::StatusOr<std::vector<Row>>)> done;

  // Reads [from, to) (up to `max_rows`), opens the rows, then `next`.
  static void Part(std::shared_ptr<SealedScan> self, std::string from, std::string to,
                   int64_t max_rows, bool tokenized,
                   absl::AnyInvocable<void(std::shared_ptr<SealedScan>)> next) {
    ReadOptions o = self->options;
    o.rows_limit = max_rows;
    self->bigtable->ReadRows(
        self->table, storage::RowRange{std::move(from), std::move(to)}, std::move(o),
        [self, max_rows, tokenized,
         next = std::move(next)](absl::StatusOr<std::vector<Row>> rows) mutable {
          if (!rows.ok()) return self->done(rows.status());
          if (tokenized && static_cast<int64_t>(rows->size()) >= max_rows)
            return self->done(absl::ResourceExhaustedError(StrCat(
                "encrypted entity group ", EscapeBytes(self->cipher->root()), " has more than ",
                max_rows - 1,
                " local index entries; a query of them reads them all, and that is too many")));
          std::vector<Row> opened;
          for (Row& r : *rows) {
            if (absl::Status s = OpenRow(*self->cipher, &r); !s.ok()) return self->done(s);
            if (tokenized && (r.key < self->start || r.key >= self->end)) continue;
            opened.push_back(std::move(r));
          }
          if (tokenized)
            std::sort(opened.begin(), opened.end(),
                      [](const Row& a, const Row& b) { return a.key < b.key; });
          for (Row& r : opened) self->rows.push_back(std::move(r));
          if (static_cast<int64_t>(self->rows.size()) > self->limit)
            return self->done(std::move(self->rows));
          next(std::move(self));
        });
  }
};

}  // namespace

void LogReplica::ScanSealed(ScanRequest request, Sealing sealing, Callback<ScanReply> done) {
  const int64_t limit =
      request.limit() <= 0 ? kMaxScanRows : std::min(request.limit(), kMaxScanRows);
  ReadOptions o;
  o.filter.families = {request.family()};
  o.filter.cells_per_column = 1;
  if (!request.latest()) o.read_timestamp = request.timestamp();
  const std::string table = request.group().table();
  absl::StatusOr<const GroupCipher*> cipher = ReadCipher(*sealing);
  if (!cipher.ok()) return done(cipher.status());
  if (*cipher == nullptr) {
    o.rows_limit = limit + 1;  // one more tells whether there is more
    auto reply = ToScanReply(limit, std::move(done));
    if (!sealing->encrypted) {
      return bigtable_->ReadRows(table, storage::RowRange{request.start(), request.end()},
                                 std::move(o), std::move(reply));
    }
    // An encrypted group with no key here yet must have no data either.
    return bigtable_->ReadRows(
        table, storage::RowRange{request.start(), request.end()}, std::move(o),
        [group = request.group(),
         reply = std::move(reply)](absl::StatusOr<std::vector<Row>> rows) mutable {
          if (rows.ok() && !rows->empty()) return reply(NoKeyForData(group));
          reply(std::move(rows));
        });
  }
  auto scan = std::make_shared<SealedScan>();
  scan->bigtable = bigtable_;
  scan->table = table;
  scan->cipher = sealing->cipher;
  scan->options = std::move(o);
  scan->start = request.start();
  scan->end = request.end();
  scan->limit = limit;
  scan->done = ToScanReply(limit, std::move(done));
  const std::string t0 = scan->cipher->TokenizedStart(), t1 = scan->cipher->TokenizedEnd();
  auto after = [t1](std::shared_ptr<SealedScan> s) {
    if (s->end <= t1) return s->done(std::move(s->rows));
    const int64_t left = s->limit + 1 - static_cast<int64_t>(s->rows.size());
    SealedScan::Part(s, std::max(s->start, t1), s->end, left, false,
                     [](std::shared_ptr<SealedScan> s) { s->done(std::move(s->rows)); });
  };
  auto tokenized = [t0, t1, after = std::move(after)](std::shared_ptr<SealedScan> s) mutable {
    if (s->start >= t1 || s->end <= t0) return after(std::move(s));
    storage::RowRange stored = s->cipher->TokenizedRange(s->start, s->end);
    SealedScan::Part(s, std::move(stored.start), std::move(stored.end), kMaxSealedIndexRows + 1,
                     true, std::move(after));
  };
  if (scan->start >= t0) return tokenized(std::move(scan));
  SealedScan::Part(scan, scan->start, std::min(scan->end, t0), limit + 1, false,
                   std::move(tokenized));
}

}  // namespace megastore::replication
