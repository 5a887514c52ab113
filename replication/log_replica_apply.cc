// LogReplica: the log's state, reading it, applying chosen entries to the
// group's data in order (step 5 of a write, at this replica), and
// truncating the log.
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

MS_FAULT_POINT(kApplyFails, "log replica: an apply fails before it writes anything");
MS_FAULT_POINT(kStateFails,
               "log replica: reading a group's log state fails (inside an apply, possibly after "
               "some of its idempotent writes)");

using log_internal::CheckSealedEntry;
using log_internal::Corrupt;
using log_internal::kAppliedColumn;
using log_internal::kSummaryPrefix;
using log_internal::kTopColumn;
using log_internal::LogRead;
using log_internal::OpenLearned;
using log_internal::ParsePositionColumn;
using log_internal::ParseSummary;
using log_internal::PositionPrefix;
using log_internal::TopCell;
using log_internal::WriteCipher;
using storage::Mutation;
using storage::ReadOptions;
using storage::Row;
using storage::RowFilter;

void LogReplica::DurableState(GroupRef group, Callback<StateReply> done) {
  State(std::move(group), [this, done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    // Read first, then synced: the applied record read is in the log by now.
    bigtable_->SyncLazyWrites(
        [state = std::move(*state), done = std::move(done)](absl::Status s) mutable {
          if (!s.ok()) return done(s);
          done(std::move(state));
        });
  });
}

void LogReplica::State(GroupRef group, Callback<StateReply> done) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  if (kStateFails.Fire())
    return done(absl::UnavailableError("injected fault: the log state could not be read"));
  const std::string table = group.table(), root = group.root();
  bigtable_->ReadRow(table, root, LogRead(RowFilter::QualifierMatch::kPrefix, kSummaryPrefix),
                     [group = std::move(group),
                      done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
                       if (!row.ok()) return done(row.status());
                       StateReply reply;
                       if (absl::Status s = ParseSummary(group, *row, &reply); !s.ok())
                         return done(s);
                       done(std::move(reply));
                     });
}

void LogReplica::ReadLog(ReadLogRequest request, Callback<ReadLogReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (request.from() == 0 || request.to() < request.from())
    return done(absl::InvalidArgumentError(
        StrCat("repl.ReadLog: bad range [", request.from(), ", ", request.to(), "]")));
  const GroupRef group = request.group();
  SealingOf(group, false,
            [this, request = std::move(request),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              const GroupRef group = request.group();
              ReadLogSealed(
                  std::move(request), std::move(*sealing),
                  [this, group, done = std::move(done)](absl::StatusOr<ReadLogReply> log) mutable {
                    if (!log.ok()) return done(log.status());
                    // Where this log starts, for a catch-up that finds the
                    // positions it wants gone.
                    State(group, [log = std::move(*log), done = std::move(done)](
                                     absl::StatusOr<StateReply> state) mutable {
                      if (!state.ok()) return done(state.status());
                      log.set_cleaned(state->cleaned());
                      done(std::move(log));
                    });
                  });
            });
}

void LogReplica::ReadLogSealed(ReadLogRequest request, Sealing sealing,
                               Callback<ReadLogReply> done) {
  const uint64_t to = std::min(request.to(), request.from() + kMaxReadLog - 1);
  ReadOptions o = LogRead(RowFilter::QualifierMatch::kRange, "");
  o.filter.qualifier_range =
      storage::ByteRange{PositionPrefix(request.from()), PositionPrefix(to + 1)};
  const std::string table = request.group().table(), root = request.group().root();
  bigtable_->ReadRow(table, root, std::move(o),
                     [group = request.group(), sealing = std::move(sealing),
                      done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
                       if (!row.ok()) return done(row.status());
                       ReadLogReply reply;
                       if (*row) {
                         for (storage::Cell& c : (*row)->cells) {
                           uint64_t pos;
                           char kind;
                           if (!ParsePositionColumn(c.qualifier, &pos, &kind) || kind != 'l')
                             continue;
                           absl::StatusOr<std::string> value =
                               OpenLearned(group, *sealing, pos, std::move(c.value));
                           if (!value.ok()) return done(value.status());
                           reply.add_positions(pos);
                           reply.add_values(std::move(*value));
                         }
                       }
                       done(std::move(reply));
                     });
}

void LogReplica::Apply(ApplyRequest request, uint64_t known_elsewhere, Callback<ApplyReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (kApplyFails.Fire())
    return done(absl::UnavailableError("injected fault: the apply failed before storage"));
  if (request.position() == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  LogEntry entry;
  if (!entry.ParseFromString(request.value()))
    return done(absl::InvalidArgumentError(
        StrCat("repl.Apply: the value of position ", request.position(), " is not a log entry")));
  if (absl::Status s = CheckEntry(request.group(), entry, "repl.Apply", request.position());
      !s.ok())
    return done(s);
  const GroupRef group = request.group();
  auto req = std::make_shared<ApplyRequest>(std::move(request));
  SealingOf(group, true,
            [this, req, known_elsewhere,
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              ApplySealed(std::move(*req), known_elsewhere, std::move(*sealing), std::move(done));
            });
}

void LogReplica::ApplySealed(ApplyRequest request, uint64_t known_elsewhere, Sealing sealing,
                             Callback<ApplyReply> done) {
  const GroupRef group = request.group();
  const uint64_t pos = request.position();
  if (sealing->encrypted) {
    // Also here: a read-only replica never votes, and Apply may come
    // straight from a client.
    LogEntry entry;
    if (!entry.ParseFromString(request.value()))
      return done(absl::InvalidArgumentError(
          StrCat("repl.Apply: the value of position ", pos, " is not a log entry")));
    if (absl::Status s = CheckSealedEntry(group, entry, pos); !s.ok()) return done(s);
  }
  std::string learned_cell = request.value();
  {
    absl::StatusOr<const GroupCipher*> cipher = WriteCipher(*sealing);
    if (!cipher.ok()) return done(cipher.status());
    if (*cipher != nullptr) {
      absl::StatusOr<std::string> sealed = (*cipher)->SealLog(LearnedColumn(pos), request.value());
      if (!sealed.ok()) return done(sealed.status());
      learned_cell = std::move(*sealed);
    }
  }
  std::vector<Mutation> learn = {
      Mutation::SetCell(kLogFamily, LearnedColumn(pos), std::move(learned_cell), 0), TopCell(pos)};
  State(group, [this, group, pos, known_elsewhere, sealing = std::move(sealing),
                value = std::move(*request.mutable_value()), learn = std::move(learn),
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    const uint64_t applied = state->applied().position();
    // Already applied here: nothing to record (its value was learned when
    // it was applied); later learned positions are applied as usual.
    if (pos <= applied)
      return ApplyFrom(group, std::move(sealing), std::move(*state), std::move(done));
    // The next position to apply (the usual case): its data, then its
    // learned value and the top with the applied record, in one write.
    if (pos == applied + 1)
      return ApplyFrom(group, std::move(sealing), std::move(*state), std::move(done),
                       std::make_pair(pos, std::move(value)), std::move(learn));
    LearnBeyond(group, pos, known_elsewhere, std::move(sealing), std::move(value), std::move(learn),
                std::move(done));
  });
}

void LogReplica::LearnBeyond(GroupRef group, uint64_t pos, uint64_t known_elsewhere,
                             Sealing sealing, std::string value, std::vector<Mutation> learn,
                             Callback<ApplyReply> done) {
  auto then = [this, group, pos, sealing, value = std::move(value),
               done = std::move(done)](absl::Status s) mutable {
    if (!s.ok()) return done(s);
    ApplyLoop(group, std::move(sealing), std::move(done), std::make_pair(pos, std::move(value)));
  };
  // The learned value and the top are lazy writes: the value was chosen
  // (a majority holds it durably accepted), so losing them in a crash loses
  // only what catch-up learns again; and the applied record written after
  // them, durably, makes them durable too (one commit log).
  if (pos == 1 || pos <= known_elsewhere + 1) {
    return bigtable_->MutateRowLazily(group.table(), group.root(), std::move(learn),
                                      storage::kServerTimestamp, std::move(then));
  }
  // Recorded only if the top here is at least the previous position (the
  // top's ordered encoding compares as its number does).
  RowFilter top_reaches_previous = LogRead(RowFilter::QualifierMatch::kExact, kTopColumn).filter;
  std::string previous;
  AppendOrderedUint64(&previous, pos - 1);
  top_reaches_previous.value_range = storage::ByteRange{previous, std::nullopt, false};
  bigtable_->CheckAndMutateRowLazily(
      group.table(), group.root(), std::move(top_reaches_previous), std::move(learn), {},
      [this, group, pos, then = std::move(then)](absl::StatusOr<bool> matched) mutable {
        if (!matched.ok()) return then(matched.status());
        if (*matched) return then(absl::OkStatus());
        State(group,
              [group, pos, then = std::move(then)](absl::StatusOr<StateReply> state) mutable {
                if (!state.ok()) return then(state.status());
                then(BeyondTop(group, pos, std::max(state->top(), state->applied().position())));
              });
      });
}

namespace {

// Writes the data of one entry, all its rows at once (they are
// independent); `done` once every row is written, with the first error.
struct EntryWriter {
  storage::BigtableClient* bigtable;
  std::string table;
  std::shared_ptr<const GroupSealing> sealing;
  LogEntry entry;
  absl::Mutex mu;
  int left ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  absl::AnyInvocable<void(absl::Status)> done;

  static void Run(std::shared_ptr<EntryWriter> self) {
    const int n = self->entry.changes_size();
    if (n == 0) return self->done(absl::OkStatus());
    {
      absl::MutexLock lock(&self->mu);
      self->left = n;
    }
    // An encrypted group's own rows are sealed; what it writes elsewhere
    // (markers in the outbox list) holds no values (CheckSealedEntry).
    const GroupCipher* cipher = self->sealing->cipher.get();
    for (int i = 0; i < n; ++i) {
      const RowChange& change = self->entry.changes(i);
      const bool own = change.table().empty() || change.table() == self->table;
      absl::StatusOr<std::vector<Mutation>> mutations =
          EntryMutations(change, self->entry.timestamp(), own ? cipher : nullptr);
      if (!mutations.ok()) {
        self->Finish(mutations.status());
        continue;
      }
      // Lazy: the applied record, written durably once every row is in,
      // makes them durable (BigtableClient::MutateRowLazily).
      self->bigtable->MutateRowLazily(
          own ? self->table : change.table(),
          own && cipher != nullptr ? cipher->StoredRow(change.row()) : change.row(),
          std::move(*mutations), self->entry.timestamp(),
          [self](absl::Status s) { self->Finish(s); });
    }
  }

  void Finish(absl::Status s) {
    absl::Status result;
    {
      absl::MutexLock lock(&mu);
      if (!s.ok() && status.ok()) status = s;
      if (--left > 0) return;
      result = status;
    }
    done(result);
  }
};

}  // namespace

void LogReplica::ApplyLoop(GroupRef group, Sealing sealing, Callback<ApplyReply> done,
                           std::optional<std::pair<uint64_t, std::string>> known) {
  State(group, [this, group, sealing, known = std::move(known),
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    ApplyFrom(std::move(group), std::move(sealing), std::move(*state), std::move(done),
              std::move(known));
  });
}

void LogReplica::ApplyFrom(GroupRef group, Sealing sealing, StateReply state,
                           Callback<ApplyReply> done,
                           std::optional<std::pair<uint64_t, std::string>> known,
                           std::vector<Mutation> learn) {
  const AppliedRecord applied = state.applied();
  const uint64_t next = applied.position() + 1;
  const bool learning = known && known->first == next && !learn.empty();
  if (!learning) learn.clear();
  const uint64_t top = learning ? std::max(state.top(), next) : state.top();
  if (top < next) {
    ApplyReply reply;
    *reply.mutable_applied() = applied;
    return done(std::move(reply));
  }
  ReadLogRequest req;
  *req.mutable_group() = group;
  req.set_from(next);
  req.set_to(next);
  auto apply = [this, group, sealing, applied, next, top, state_top = state.top(),
                learn = std::move(learn),
                done = std::move(done)](absl::StatusOr<ReadLogReply> log) mutable {
    if (!log.ok()) return done(log.status());
    if (log->positions_size() == 0) {  // a hole: wait for catch-up
      ApplyReply reply;
      *reply.mutable_applied() = applied;
      return done(std::move(reply));
    }
    auto writer = std::make_shared<EntryWriter>();
    if (!writer->entry.ParseFromString(log->values(0)))
      return done(Corrupt(group, StrCat("unreadable log entry at position ", next)));
    // The applied record is lazy where a power cut losing it leaves the
    // durable top above the applied position (LazyApplyOk): the log here
    // holds the entry, and current reads catch up first. The entry's data
    // is lazy in any case, made durable by the record or by any later sync.
    uint64_t epoch = 0;
    const bool lazy = LazyApplyOk(group, next, state_top, writer->entry, &epoch);
    AppliedRecord rec;
    rec.set_position(next);
    rec.set_timestamp(std::max(applied.timestamp(), writer->entry.timestamp()));
    rec.set_next_leader(writer->entry.next_leader());
    auto record = [this, group, sealing, rec, next, top, lazy, epoch, learn = std::move(learn),
                   done = std::move(done)](absl::Status s) mutable {
      if (!s.ok()) return done(s);
      // Done if no later position was seen when this round began; a
      // position learned since runs its own Apply, whose loop applies it
      // (and, if it read the state before this write, this position
      // again: harmless, applies are idempotent).
      absl::AnyInvocable<void(absl::StatusOr<bool>)> then =
          [this, group, sealing, rec, next, top,
           done = std::move(done)](absl::StatusOr<bool> top_unmoved) mutable {
            if (!top_unmoved.ok()) return done(top_unmoved.status());
            if (*top_unmoved && next >= top) {
              ApplyReply reply;
              *reply.mutable_applied() = rec;
              return done(std::move(reply));
            }
            ApplyLoop(group, std::move(sealing), std::move(done));
          };
      if (lazy) {
        // A truncation that began after the lazy decision may lower the
        // top it counted on; then the record is synced before the apply
        // is reported. (One that ran before it forgot the durable tops,
        // and one running refuses lazy applies; a lazy write done before
        // one began is ahead of its synced removal in the log.)
        then = [this, epoch, inner = std::move(then)](absl::StatusOr<bool> r) mutable {
          if (!r.ok() || DurableEpoch() == epoch) return inner(std::move(r));
          bigtable_->SyncLazyWrites([r = *r, inner = std::move(inner)](absl::Status s) mutable {
            if (!s.ok()) return inner(s);
            inner(r);
          });
        };
      }
      std::vector<Mutation> write = std::move(learn);
      const bool learning = !write.empty();
      write.push_back(Mutation::SetCell(kLogFamily, kAppliedColumn, rec.SerializeAsString(),
                                        static_cast<int64_t>(next)));
      if (!learning) {
        auto written = [then = std::move(then)](absl::Status s) mutable {
          if (!s.ok()) return then(s);
          then(true);
        };
        if (lazy)
          return bigtable_->MutateRowLazily(group.table(), group.root(), std::move(write),
                                            storage::kServerTimestamp, std::move(written));
        return bigtable_->MutateRow(group.table(), group.root(), std::move(write),
                                    storage::kServerTimestamp, std::move(written));
      }
      // The position's learned value is written only now: an apply of a
      // later position that ran meanwhile may have found it missing and
      // stopped. It recorded its own position (and top) before looking,
      // so either its top is here by this write, and the loop goes on to
      // apply it, or it looks after this write and applies it itself.
      RowFilter top_unmoved = LogRead(RowFilter::QualifierMatch::kExact, kTopColumn).filter;
      std::string beyond;
      AppendOrderedUint64(&beyond, next + 1);
      top_unmoved.value_range = storage::ByteRange{"", beyond, false};
      std::vector<Mutation> same = write;
      if (lazy)
        return bigtable_->CheckAndMutateRowLazily(group.table(), group.root(),
                                                  std::move(top_unmoved), std::move(write),
                                                  std::move(same), std::move(then));
      bigtable_->CheckAndMutateRow(group.table(), group.root(), std::move(top_unmoved),
                                   std::move(write), std::move(same), std::move(then));
    };
    if (type_ == ReplicaType::kWitness) return record(absl::OkStatus());
    if (sealing->encrypted && sealing->cipher == nullptr) return record(sealing->missing);
    writer->bigtable = bigtable_;
    writer->table = group.table();
    writer->sealing = sealing;
    writer->done = std::move(record);
    EntryWriter::Run(writer);
  };
  if (known && known->first == next) {
    ReadLogReply reply;
    reply.add_positions(next);
    reply.add_values(std::move(known->second));
    return apply(std::move(reply));
  }
  ReadLogSealed(std::move(req), std::move(sealing), std::move(apply));
}

void LogReplica::Truncate(TruncateRequest request, Callback<TruncateReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  const GroupRef group = request.group();
  const uint64_t keep = request.keep_through();
  if (keep == std::numeric_limits<uint64_t>::max()) return done(TruncateReply());
  SealingOf(group, false,
            [this, group, keep, apply = request.apply(),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              TruncateSealed(group, keep, apply, std::move(*sealing), std::move(done));
            });
}

void LogReplica::TruncateSealed(GroupRef group, uint64_t keep, bool apply, Sealing sealing,
                                Callback<TruncateReply> done) {
  // The top may go down: positions above it are no longer held here.
  // While the removal is in flight no durable top is noted or trusted,
  // and once it is written (or failed: it may be in) every one noted
  // before is forgotten again.
  if (apply) {
    // Ended when `done` runs, or if it is dropped unrun (a shutdown).
    struct Ending {
      LogReplica* replica;
      ~Ending() { replica->EndTruncation(); }
    };
    BeginTruncation();
    done = [ending = std::unique_ptr<Ending>(new Ending{this}),
            done = std::move(done)](absl::StatusOr<TruncateReply> r) mutable {
      ending.reset();
      done(std::move(r));
    };
  }
  State(group, [this, group, keep, apply, sealing = std::move(sealing),
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    if (state->applied().position() > keep) {
      return done(absl::FailedPreconditionError(StrCat("this replica applied position ",
                                                       state->applied().position(), ", above ",
                                                       keep, ": nothing applied is ever removed")));
    }
    // Position columns sort before the summary ("L..." < "S:").
    ReadOptions o = LogRead(RowFilter::QualifierMatch::kRange, "");
    o.filter.qualifier_range =
        storage::ByteRange{PositionPrefix(keep + 1), std::string(kSummaryPrefix), false};
    bigtable_->ReadRow(
        group.table(), group.root(), std::move(o),
        [this, group, keep, apply, sealing, top = state->top(),
         done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
          if (!row.ok()) return done(row.status());
          TruncateReply reply;
          reply.set_top_before(top);
          std::vector<Mutation> removal;
          std::map<uint64_t, std::string> found;  // position -> learned value ("" if none)
          if (*row) {
            for (const storage::Cell& c : (*row)->cells) {
              uint64_t pos;
              char kind;
              if (!ParsePositionColumn(c.qualifier, &pos, &kind)) continue;
              if (found.size() >= static_cast<size_t>(kMaxTruncate) && !found.count(pos)) {
                reply.set_more(true);
                break;
              }
              std::string& learned = found[pos];
              if (kind == 'l') {
                absl::StatusOr<std::string> value = OpenLearned(group, *sealing, pos, c.value);
                if (!value.ok()) return done(value.status());
                learned = std::move(*value);
              }
              removal.push_back(Mutation::DeleteCells(kLogFamily, c.qualifier, 0, 0));
            }
          }
          for (const auto& [pos, learned] : found) {
            reply.add_positions(pos);
            reply.add_learned(learned);
          }
          if (!apply || (removal.empty() && top <= keep)) return done(std::move(reply));
          if (!reply.more() && top > keep) {
            // The top comes back to `keep`: deleted, then written again
            // below its old timestamp (the later write is not masked).
            removal.push_back(Mutation::DeleteCells(kLogFamily, kTopColumn, 0, 0));
            removal.push_back(TopCell(keep));
          }
          bigtable_->MutateRow(
              group.table(), group.root(), std::move(removal), storage::kServerTimestamp,
              [reply = std::move(reply), done = std::move(done)](absl::Status s) mutable {
                if (!s.ok()) return done(s);
                done(std::move(reply));
              });
        });
  });
}

}  // namespace megastore::replication
