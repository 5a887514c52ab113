// LogReplica (docs/replication.md): one replica's side of the entity
// groups' logs in their root rows. This file: the log's schema and checks,
// and the acceptor (Paxos). State, log reads, apply and truncation are in
// log_replica_apply.cc; reads and scans of the group's data in
// log_replica_read.cc.
#include "replication/log_replica.h"

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
#include "replication/log_replica_internal.h"
#include "schema/layout.h"

namespace megastore::replication {

MS_FAULT_POINT(kPaxosStepFails,
               "log replica: an acceptor step fails before it touches storage (a lost request)");

using log_internal::CheckSealedEntry;
using log_internal::DecodeRecord;
using log_internal::EncodeRecord;
using log_internal::kAppliedColumn;
using log_internal::kMaxStepAttempts;
using log_internal::kTopColumn;
using log_internal::LogRead;
using log_internal::NoKeyForData;
using log_internal::OpenLearned;
using log_internal::ParsePositionColumn;
using log_internal::PositionPrefix;
using log_internal::TakeReply;
using log_internal::ToMessage;
using log_internal::TopCell;
using storage::Mutation;
using storage::Row;
using storage::RowFilter;

storage::ColumnFamily LogFamilySchema() {
  storage::ColumnFamily f;
  f.set_name(kLogFamily);
  f.mutable_gc_rule()->set_max_versions(1);
  return f;
}

storage::ColumnFamily DataFamilySchema(std::string_view name) {
  storage::ColumnFamily f;
  f.set_name(std::string(name));
  f.set_timestamp_deletes(true);
  return f;
}

std::string AcceptorColumn(uint64_t position) { return PositionPrefix(position) + "a"; }
std::string LearnedColumn(uint64_t position) { return PositionPrefix(position) + "l"; }

const char* ToString(ReplicaType type) {
  switch (type) {
    case ReplicaType::kFull:
      return "full";
    case ReplicaType::kWitness:
      return "witness";
    case ReplicaType::kReadOnly:
      return "read-only";
  }
  return "?";
}

bool Votes(ReplicaType type) { return type != ReplicaType::kReadOnly; }

std::string GroupKey(const GroupRef& g) {
  std::string k = g.table();
  k.push_back('\0');
  k += g.root();
  return k;
}

absl::Status CheckGroup(const GroupRef& group) {
  if (group.table().empty()) return absl::InvalidArgumentError("request names no table");
  if (group.root().empty())
    return absl::InvalidArgumentError("request names no entity group root row");
  return absl::OkStatus();
}

// A group's log entry writes only its own schema's tables: the group's table
// and the tables named after it ("PhotoApp.PhotosByTag", "PhotoApp.outboxes").
// Otherwise a writer allowed one schema could write another's rows
// through its own group's log. A combined entry's members name themselves
// and account for its changes exactly.
absl::Status CheckEntry(const GroupRef& group, const LogEntry& entry, std::string_view method,
                        uint64_t position) {
  uint64_t member_changes = 0;
  for (const LogEntry::Member& m : entry.members()) {
    if (m.id().empty())
      return absl::InvalidArgumentError(
          StrCat(method, ": the entry for position ", position, " has a member with no id"));
    member_changes += m.changes();
  }
  if (entry.members_size() > 0 && member_changes != static_cast<uint64_t>(entry.changes_size()))
    return absl::InvalidArgumentError(
        StrCat(method, ": the entry for position ", position, " has ", entry.changes_size(),
               " changes but its members account for ", member_changes));
  for (const RowChange& change : entry.changes()) {
    for (const CellChange& c : change.cells()) {
      if (c.family() == kLogFamily)
        return absl::InvalidArgumentError(StrCat(method, ": the entry for position ", position,
                                                 " writes family ", kLogFamily,
                                                 ", which only the log itself uses"));
    }
    const std::string& t = change.table();
    if (t.empty() || t == group.table() ||
        (t.size() > group.table().size() &&
         t.compare(0, group.table().size(), group.table()) == 0 && t[group.table().size()] == '.'))
      continue;
    return absl::InvalidArgumentError(StrCat(method, ": the entry for position ", position,
                                             " of a group of table ", group.table(),
                                             " writes table ", t, ", which is not its schema's"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Mutation>> EntryMutations(const RowChange& change, int64_t timestamp,
                                                     const GroupCipher* cipher) {
  std::vector<Mutation> out;
  out.reserve(change.cells_size());
  for (const CellChange& c : change.cells()) {
    const std::string qualifier =
        cipher == nullptr ? c.qualifier() : cipher->StoredQualifier(c.qualifier());
    if (c.delete_cells()) {
      // Bounded by the commit timestamp: a late or repeated apply of this
      // entry never hides a later entry's cells. And the family masks by
      // timestamp (DataFamilySchema): a late apply of an earlier entry's
      // cells stays hidden by this delete.
      out.push_back(Mutation::DeleteCells(c.family(), qualifier, 0, timestamp + 1));
    } else if (cipher == nullptr) {
      out.push_back(Mutation::SetCell(c.family(), qualifier, c.value(), timestamp));
    } else {
      MS_ASSIGN_OR_RETURN(
          std::string sealed,
          cipher->SealCell(change.row(), c.family(), c.qualifier(), timestamp, c.value()));
      out.push_back(Mutation::SetCell(c.family(), qualifier, std::move(sealed), timestamp));
    }
  }
  return out;
}

// ---- acceptor -------------------------------------------------------------------

bool IsBeyondTop(const absl::Status& s) {
  return absl::IsOutOfRange(s) && absl::StrContains(s.message(), "beyond one past");
}

absl::Status BeyondTop(const GroupRef& group, uint64_t position, uint64_t top) {
  return absl::OutOfRangeError(
      StrCat("entity group ", EscapeBytes(group.root()), ": position ", position,
             " is beyond one past the highest position this replica knows (", top, ")"));
}

bool IsCleanedUp(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "was cleaned up");
}

absl::Status CleanedUp(const GroupRef& group, uint64_t position, uint64_t cleaned) {
  return absl::FailedPreconditionError(
      StrCat("entity group ", EscapeBytes(group.root()), ": position ", position,
             " was cleaned up from this replica's log (applied everywhere; the log here starts "
             "at position ",
             cleaned + 1, ")"));
}

absl::Status LogReplica::CheckTimestamp(const GroupRef& group, uint64_t position,
                                        int64_t timestamp) const {
  if (env_ == nullptr) return absl::OkStatus();
  const int64_t now = env_->NowMicros();
  const int64_t skew = absl::ToInt64Microseconds(max_clock_skew_);
  if (timestamp <= now || timestamp - now <= skew) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("entity group ", EscapeBytes(group.root()),
                                           ": the entry for position ", position, " has timestamp ",
                                           timestamp, " us, beyond this replica's clock (", now,
                                           " us) plus the allowed skew (", skew, " us)"));
}

void LogReplica::SealingOf(const GroupRef& group, bool create, Callback<Sealing> done) {
  static const Sealing kPlain = std::make_shared<const GroupSealing>();
  if (encryption_ == nullptr) return done(kPlain);
  encryption_->SealingOf(
      group, false,
      [this, group, create, done = std::move(done)](absl::StatusOr<GroupSealing> s) mutable {
        if (!s.ok()) return done(s.status());
        if (!create || !s->no_key_yet)
          return done(std::make_shared<const GroupSealing>(std::move(*s)));
        // A new key only for a group with no log here: one whose key is
        // missing (a lost or wrong key directory) must not get a second key
        // that opens none of its cells.
        bigtable_->ReadRow(
            group.table(), group.root(), LogRead(RowFilter::QualifierMatch::kPrefix, ""),
            [this, group, done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
              if (!row.ok()) return done(row.status());
              if (*row) {
                for (const storage::Cell& c : (*row)->cells) {
                  uint64_t pos;
                  char kind;
                  AcceptorRecord r;
                  const bool learned = ParsePositionColumn(c.qualifier, &pos, &kind) && kind == 'l';
                  const bool accepted = ParsePositionColumn(c.qualifier, &pos, &kind) &&
                                        kind == 'a' && r.ParseFromString(c.value) &&
                                        r.has_accepted();
                  if (learned || accepted || c.qualifier == kAppliedColumn) {
                    // Another first writer may have made the key and written
                    // since we asked: use it if it exists now.
                    return encryption_->SealingOf(
                        group, false,
                        [group, done = std::move(done)](absl::StatusOr<GroupSealing> s) mutable {
                          if (!s.ok()) return done(s.status());
                          if (s->no_key_yet) return done(NoKeyForData(group));
                          done(std::make_shared<const GroupSealing>(std::move(*s)));
                        });
                  }
                }
              }
              encryption_->SealingOf(
                  group, true, [done = std::move(done)](absl::StatusOr<GroupSealing> s) mutable {
                    if (!s.ok()) return done(s.status());
                    done(std::make_shared<const GroupSealing>(std::move(*s)));
                  });
            });
      });
}

void LogReplica::Paxos(PaxosRequest request, uint64_t known_elsewhere, Callback<PaxosReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (kPaxosStepFails.Fire())
    return done(absl::UnavailableError("injected fault: the acceptor step failed before storage"));
  if (request.position() == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  if (type_ == ReplicaType::kReadOnly)
    return done(absl::FailedPreconditionError("a read-only replica does not vote"));
  std::shared_ptr<LogEntry> entry;
  if (request.accept()) {
    entry = std::make_shared<LogEntry>();
    if (!entry->ParseFromString(request.value()))
      return done(absl::InvalidArgumentError(StrCat("repl.Paxos: the value proposed for position ",
                                                    request.position(), " is not a log entry")));
    if (absl::Status s = CheckEntry(request.group(), *entry, "repl.Paxos", request.position());
        !s.ok())
      return done(s);
    if (absl::Status s = CheckTimestamp(request.group(), request.position(), entry->timestamp());
        !s.ok())
      return done(s);
  }
  auto req = std::make_shared<PaxosRequest>(std::move(request));
  const GroupRef group = req->group();
  // An accept stores a value: the group's key is made if it has none.
  SealingOf(group, req->accept(),
            [this, req, entry, known_elsewhere,
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              if (entry != nullptr && (*sealing)->encrypted) {
                if (absl::Status s = CheckSealedEntry(req->group(), *entry, req->position());
                    !s.ok())
                  return done(s);
              }
              PaxosSealed(req, known_elsewhere, std::move(*sealing), std::move(done));
            });
}

void LogReplica::PaxosSealed(std::shared_ptr<PaxosRequest> req, uint64_t known_elsewhere,
                             Sealing sealing, Callback<PaxosReply> done) {
  const uint64_t pos = req->position();
  if (!req->accept() || req->ballot().round() != 0 || req->ballot().proposer() != 0 || pos == 1)
    return PaxosAttempt(req, known_elsewhere, 0, std::move(sealing), std::move(done));
  // The fast path's accept usually finds the group's top at the previous
  // position: then nothing is stored for this one yet (every step writes
  // the top with its position), and one CheckAndMutateRow conditioned on
  // the top writes the acceptor state. Otherwise the general
  // read-then-write path decides, bounds included.
  paxos::Ready ready = paxos::HandleRequest(paxos::AcceptorState{}, ToMessage(*req));
  MS_CHECK(ready.persist().has_value(), "a ballot-0 accept on an empty position changes it");
  absl::StatusOr<std::string> record = EncodeRecord(*ready.persist(), *sealing, pos);
  if (!record.ok()) return done(record.status());
  RowFilter top_is_previous = LogRead(RowFilter::QualifierMatch::kExact, kTopColumn).filter;
  std::string previous;
  AppendOrderedUint64(&previous, pos - 1);
  top_is_previous.value_range = storage::ByteRange{previous, previous, true};
  const uint64_t epoch = DurableEpoch();  // before the write: a truncation after it voids the note
  bigtable_->CheckAndMutateRow(
      req->group().table(), req->group().root(), std::move(top_is_previous),
      {Mutation::SetCell(kLogFamily, AcceptorColumn(pos), std::move(*record), 0), TopCell(pos)}, {},
      [this, req, known_elsewhere, epoch, ready = std::move(ready), sealing,
       done = std::move(done)](absl::StatusOr<bool> matched) mutable {
        if (!matched.ok()) return done(matched.status());
        if (*matched) {
          ready.Persisted();
          NoteDurableTop(req->group(), req->position(), epoch);
          return done(TakeReply(ready));
        }
        PaxosAttempt(req, known_elsewhere, 0, std::move(sealing), std::move(done));
      });
}

void LogReplica::PaxosAttempt(std::shared_ptr<PaxosRequest> req, uint64_t known_elsewhere,
                              int attempt, Sealing sealing, Callback<PaxosReply> done) {
  const uint64_t pos = req->position();
  bigtable_->ReadRow(
      req->group().table(), req->group().root(),
      LogRead(RowFilter::QualifierMatch::kPrefix, PositionPrefix(pos)),
      [this, req, known_elsewhere, attempt, pos, sealing,
       done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
        if (!row.ok()) return done(row.status());
        std::optional<std::string> stored;  // the acceptor cell as read
        if (*row) {
          for (const storage::Cell& c : (*row)->cells) {
            if (c.qualifier == LearnedColumn(pos)) {
              absl::StatusOr<std::string> value = OpenLearned(req->group(), *sealing, pos, c.value);
              if (!value.ok()) return done(value.status());
              paxos::Ready ready =
                  paxos::HandleRequest(paxos::AcceptorState{}, ToMessage(*req), std::move(*value));
              return done(TakeReply(ready));
            }
            if (c.qualifier == AcceptorColumn(pos)) stored = c.value;
          }
        }
        if (stored) {
          return PaxosStep(req, attempt, std::move(stored), std::move(sealing), std::move(done));
        }
        // Nothing stored for this position: it must not be one cleaned up
        // (whose promises are gone with its cells), and it must be at most
        // one past the highest position known here.
        State(req->group(), [this, req, attempt, pos, known_elsewhere, sealing = std::move(sealing),
                             done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
          if (!state.ok()) return done(state.status());
          if (pos <= state->cleaned()) return done(CleanedUp(req->group(), pos, state->cleaned()));
          const uint64_t top = std::max(state->top(), state->applied().position());
          if (pos > top + 1 && pos != 1 && pos > known_elsewhere + 1)
            return done(BeyondTop(req->group(), pos, top));
          PaxosStep(req, attempt, std::nullopt, std::move(sealing), std::move(done));
        });
      });
}

void LogReplica::PaxosStep(std::shared_ptr<PaxosRequest> req, int attempt,
                           std::optional<std::string> stored, Sealing sealing,
                           Callback<PaxosReply> done) {
  const uint64_t pos = req->position();
  paxos::AcceptorState state;
  if (stored) {
    absl::StatusOr<paxos::AcceptorState> decoded =
        DecodeRecord(req->group(), *stored, *sealing, pos);
    if (!decoded.ok()) return done(decoded.status());
    state = std::move(*decoded);
  }
  paxos::Ready ready = paxos::HandleRequest(state, ToMessage(*req));
  if (!ready.persist()) return done(TakeReply(ready));

  absl::StatusOr<std::string> next = EncodeRecord(*ready.persist(), *sealing, pos);
  if (!next.ok()) return done(next.status());
  std::vector<Mutation> write = {
      Mutation::SetCell(kLogFamily, AcceptorColumn(pos), std::move(*next), 0), TopCell(pos)};
  // The predicate matches iff the acceptor cell is still what we read.
  RowFilter pred = LogRead(RowFilter::QualifierMatch::kExact, AcceptorColumn(pos)).filter;
  std::vector<Mutation> if_true, if_false;
  if (stored) {
    pred.value_range = storage::ByteRange{*stored, *stored, true};
    if_true = std::move(write);
  } else {
    if_false = std::move(write);
  }
  const bool expect = stored.has_value();
  const uint64_t epoch = DurableEpoch();  // before the write: a truncation after it voids the note
  bigtable_->CheckAndMutateRow(
      req->group().table(), req->group().root(), std::move(pred), std::move(if_true),
      std::move(if_false),
      [this, req, attempt, expect, epoch, sealing = std::move(sealing), ready = std::move(ready),
       done = std::move(done)](absl::StatusOr<bool> matched) mutable {
        if (!matched.ok()) return done(matched.status());
        if (*matched == expect) {
          ready.Persisted();
          NoteDurableTop(req->group(), req->position(), epoch);
          return done(TakeReply(ready));
        }
        if (attempt + 1 >= kMaxStepAttempts)
          return done(absl::AbortedError(StrCat("acceptor state of position ", req->position(),
                                                " kept changing under this step; try again")));
        // Re-read: the state changed, so the position is no longer empty
        // here and needs no bound check.
        PaxosAttempt(req, req->position(), attempt + 1, std::move(sealing), std::move(done));
      });
}

uint64_t LogReplica::DurableEpoch() {
  absl::MutexLock lock(&durable_tops_mu_);
  return durable_epoch_;
}

void LogReplica::NoteDurableTop(const GroupRef& group, uint64_t position, uint64_t epoch) {
  absl::MutexLock lock(&durable_tops_mu_);
  // A truncation ran meanwhile, or runs: the top may be lower.
  if (epoch != durable_epoch_ || truncations_ > 0) return;
  std::string key = GroupKey(group);
  auto it = durable_tops_.find(key);
  if (it == durable_tops_.end()) {
    // Forgetting is safe (what is not known is applied durably).
    if (durable_tops_.size() >= kMaxDurableTops ||
        durable_tops_bytes_ + key.size() > kMaxDurableTopsBytes) {
      durable_tops_.clear();
      durable_tops_bytes_ = 0;
    }
    durable_tops_bytes_ += key.size();
    it = durable_tops_.emplace(std::move(key), position).first;
  }
  it->second = std::max(it->second, position);
}

void LogReplica::BeginTruncation() {
  absl::MutexLock lock(&durable_tops_mu_);
  ++truncations_;
  ++durable_epoch_;
  durable_tops_.clear();
  durable_tops_bytes_ = 0;
}

void LogReplica::EndTruncation() {
  absl::MutexLock lock(&durable_tops_mu_);
  --truncations_;
  ++durable_epoch_;
}

bool LogReplica::LazyApplyOk(const GroupRef& group, uint64_t position, uint64_t state_top,
                             const LogEntry& entry, uint64_t* epoch) {
  if (state_top < position || !entry.payload().empty()) return false;
  for (const RowChange& rc : entry.changes())
    if (!rc.table().empty()) return false;
  absl::MutexLock lock(&durable_tops_mu_);
  *epoch = durable_epoch_;
  if (truncations_ > 0) return false;
  auto it = durable_tops_.find(GroupKey(group));
  return it != durable_tops_.end() && it->second >= position;
}

}  // namespace megastore::replication
