#include "replication/log_replica.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/match.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "paxos/paxos.h"
#include "schema/layout.h"

namespace megastore::replication {

namespace {

using storage::Mutation;
using storage::ReadOptions;
using storage::Row;
using storage::RowFilter;

static_assert(std::string_view(kLogFamily) == schema::kLogFamily,
              "the schema layout reserves the log's family");

constexpr char kAppliedColumn[] = "S:applied";
constexpr char kTopColumn[] = "S:top";
constexpr char kSummaryPrefix[] = "S:";
// A changed acceptor cell is retried this often before the step gives up
// (each retry means another writer stepped the same position meanwhile).
constexpr int kMaxStepAttempts = 16;

std::string PositionPrefix(uint64_t position) {
  std::string s = "L";
  AppendOrderedUint64(&s, position);
  return s;
}

bool ParsePositionColumn(std::string_view q, uint64_t* position, char* kind) {
  if (q.size() != 10 || q[0] != 'L') return false;
  std::string_view rest = q.substr(1, 8);
  if (!ConsumeOrderedUint64(&rest, position)) return false;
  *kind = q[9];
  return true;
}

paxos::Ballot FromProto(const Ballot& b) { return paxos::Ballot{b.round(), b.proposer()}; }
void ToProto(const paxos::Ballot& b, Ballot* out) {
  out->set_round(b.round);
  out->set_proposer(b.proposer);
}

AcceptorRecord ToRecord(const paxos::AcceptorState& state) {
  AcceptorRecord r;
  ToProto(state.promised, r.mutable_promised());
  if (state.accepted_ballot) {
    ToProto(*state.accepted_ballot, r.mutable_accepted());
    r.set_accepted_value(state.accepted_value);
  }
  return r;
}

PaxosReply ToReply(const paxos::Message& m) {
  PaxosReply reply;
  reply.set_ok(m.ok);
  ToProto(m.promised, reply.mutable_promised());
  if (m.accepted_ballot) {
    ToProto(*m.accepted_ballot, reply.mutable_accepted());
    reply.set_accepted_value(m.accepted_value);
  }
  return reply;
}

paxos::Message ToMessage(const PaxosRequest& req) {
  paxos::Message m;
  m.type = req.accept() ? paxos::Message::Type::kAccept : paxos::Message::Type::kPrepare;
  m.ballot = FromProto(req.ballot());
  m.value = req.value();
  return m;
}

ReadOptions LogRead(RowFilter::QualifierMatch match, std::string qualifier) {
  ReadOptions o;
  o.filter.families = {kLogFamily};
  o.filter.qualifier_match = match;
  o.filter.qualifier = std::move(qualifier);
  o.filter.cells_per_column = 1;
  return o;
}

Mutation TopCell(uint64_t position) {
  std::string v;
  AppendOrderedUint64(&v, position);
  return Mutation::SetCell(kLogFamily, kTopColumn, v, static_cast<int64_t>(position));
}

absl::Status Corrupt(const GroupRef& group, std::string_view what) {
  return absl::DataLossError(
      StrCat("entity group ", EscapeBytes(group.root()), " in table ", group.table(), ": ", what));
}

// Parses the summary cells of a root row into `out`.
absl::Status ParseSummary(const GroupRef& group, const std::optional<Row>& row, StateReply* out) {
  out->Clear();
  if (!row) return absl::OkStatus();
  for (const storage::Cell& c : row->cells) {
    if (c.qualifier == kAppliedColumn) {
      if (!out->mutable_applied()->ParseFromString(c.value))
        return Corrupt(group, "unreadable applied record");
    } else if (c.qualifier == kTopColumn) {
      std::string_view v = c.value;
      uint64_t top = 0;
      if (!ConsumeOrderedUint64(&v, &top)) return Corrupt(group, "unreadable top position");
      out->set_top(top);
    }
  }
  return absl::OkStatus();
}

}  // namespace

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

absl::Status CheckGroup(const GroupRef& group) {
  if (group.table().empty()) return absl::InvalidArgumentError("request names no table");
  if (group.root().empty())
    return absl::InvalidArgumentError("request names no entity group root row");
  return absl::OkStatus();
}

// A group's log entry writes only its own schema's tables: the group's table
// and the tables named after it ("PhotoApp.PhotosByTag", "PhotoApp.outboxes").
// Otherwise a writer allowed one schema could write another's rows
// through its own group's log.
absl::Status CheckEntryTables(const GroupRef& group, const LogEntry& entry, std::string_view method,
                              uint64_t position) {
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

namespace {

absl::Status BeyondTop(const GroupRef& group, uint64_t position, uint64_t top) {
  return absl::OutOfRangeError(
      StrCat("entity group ", EscapeBytes(group.root()), ": position ", position,
             " is beyond one past the highest position this replica knows (", top, ")"));
}

}  // namespace

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

namespace {

// An encrypted group's cipher for a write: nullptr for an unencrypted
// group, the reason if the group is encrypted and its key is not at hand.
absl::StatusOr<const GroupCipher*> WriteCipher(const GroupSealing& sealing) {
  if (!sealing.encrypted) return nullptr;
  if (sealing.cipher != nullptr) return sealing.cipher.get();
  return sealing.missing;
}

// The same for a read: nullptr also when the group has no key yet (then
// it has no data either; NoKeyForData if some shows up).
absl::StatusOr<const GroupCipher*> ReadCipher(const GroupSealing& sealing) {
  if (!sealing.encrypted || sealing.cipher != nullptr) return sealing.cipher.get();
  if (sealing.no_key_yet) return nullptr;
  return sealing.missing;
}

absl::Status NoKeyForData(const GroupRef& group) {
  return absl::DataLossError(
      StrCat("entity group ", EscapeBytes(group.root()), " of encrypted table ", group.table(),
             " has data here but no key in this datacenter's key directory (was the key "
             "directory lost or replaced?)"));
}

// An acceptor record as stored: its accepted value sealed in an
// encrypted group.
absl::StatusOr<std::string> EncodeRecord(const paxos::AcceptorState& state,
                                         const GroupSealing& sealing, uint64_t position) {
  AcceptorRecord r = ToRecord(state);
  if (r.has_accepted()) {
    MS_ASSIGN_OR_RETURN(const GroupCipher* cipher, WriteCipher(sealing));
    if (cipher != nullptr) {
      MS_ASSIGN_OR_RETURN(std::string sealed,
                          cipher->SealLog(AcceptorColumn(position), r.accepted_value(),
                                          r.accepted().SerializeAsString()));
      r.set_accepted_value(std::move(sealed));
    }
  }
  return r.SerializeAsString();
}

absl::StatusOr<paxos::AcceptorState> DecodeRecord(const GroupRef& group, const std::string& stored,
                                                  const GroupSealing& sealing, uint64_t position) {
  AcceptorRecord record;
  if (!record.ParseFromString(stored))
    return Corrupt(group, StrCat("unreadable acceptor state at position ", position));
  paxos::AcceptorState state;
  state.promised = FromProto(record.promised());
  if (record.has_accepted()) {
    state.accepted_ballot = FromProto(record.accepted());
    MS_ASSIGN_OR_RETURN(const GroupCipher* cipher, ReadCipher(sealing));
    if (cipher != nullptr) {
      MS_ASSIGN_OR_RETURN(state.accepted_value,
                          cipher->OpenLog(AcceptorColumn(position), record.accepted_value(),
                                          record.accepted().SerializeAsString()));
    } else if (sealing.encrypted) {
      return NoKeyForData(group);
    } else {
      state.accepted_value = record.accepted_value();
    }
  }
  return state;
}

absl::StatusOr<std::string> OpenLearned(const GroupRef& group, const GroupSealing& sealing,
                                        uint64_t position, std::string value) {
  MS_ASSIGN_OR_RETURN(const GroupCipher* cipher, ReadCipher(sealing));
  if (cipher != nullptr) return cipher->OpenLog(LearnedColumn(position), value);
  if (sealing.encrypted) return NoKeyForData(group);
  return value;
}

// An encrypted group's entry writes values only into its own rows: other
// tables (the outbox list) get markers and deletions, nothing in the clear.
absl::Status CheckSealedEntry(const GroupRef& group, const LogEntry& entry, uint64_t position) {
  for (const RowChange& change : entry.changes()) {
    if (change.table().empty() || change.table() == group.table()) {
      const std::string& root = group.root();
      if (change.row().compare(0, root.size(), root) != 0)
        return absl::InvalidArgumentError(
            StrCat("the entry for position ", position, " of an encrypted group writes row ",
                   EscapeBytes(change.row()), ", which is not in the group"));
      continue;
    }
    for (const CellChange& c : change.cells()) {
      if (!c.delete_cells() && !c.value().empty())
        return absl::InvalidArgumentError(
            StrCat("the entry for position ", position,
                   " of an encrypted group writes a value into table ", change.table(),
                   ", outside the group, where it would not be encrypted"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  if (request.position() == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  if (type_ == ReplicaType::kReadOnly)
    return done(absl::FailedPreconditionError("a read-only replica does not vote"));
  std::shared_ptr<LogEntry> entry;
  if (request.accept()) {
    entry = std::make_shared<LogEntry>();
    if (!entry->ParseFromString(request.value()))
      return done(absl::InvalidArgumentError(StrCat("repl.Paxos: the value proposed for position ",
                                                    request.position(), " is not a log entry")));
    if (absl::Status s =
            CheckEntryTables(request.group(), *entry, "repl.Paxos", request.position());
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
  paxos::AcceptorState state;
  const PaxosReply reply = ToReply(paxos::HandleRequest(state, ToMessage(*req)));
  absl::StatusOr<std::string> record = EncodeRecord(state, *sealing, pos);
  if (!record.ok()) return done(record.status());
  RowFilter top_is_previous = LogRead(RowFilter::QualifierMatch::kExact, kTopColumn).filter;
  std::string previous;
  AppendOrderedUint64(&previous, pos - 1);
  top_is_previous.value_range = storage::ByteRange{previous, previous, true};
  bigtable_->CheckAndMutateRow(
      req->group().table(), req->group().root(), std::move(top_is_previous),
      {Mutation::SetCell(kLogFamily, AcceptorColumn(pos), std::move(*record), 0), TopCell(pos)}, {},
      [this, req, known_elsewhere, reply, sealing,
       done = std::move(done)](absl::StatusOr<bool> matched) mutable {
        if (!matched.ok()) return done(matched.status());
        if (*matched) return done(std::move(reply));
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
              PaxosReply learned;
              learned.set_learned(true);
              learned.set_learned_value(std::move(*value));
              return done(std::move(learned));
            }
            if (c.qualifier == AcceptorColumn(pos)) stored = c.value;
          }
        }
        if (stored || pos == 1 || pos <= known_elsewhere + 1) {
          return PaxosStep(req, attempt, std::move(stored), std::move(sealing), std::move(done));
        }
        // Nothing stored for this position: it must be at most one past
        // the highest position known here.
        State(req->group(), [this, req, attempt, pos, sealing = std::move(sealing),
                             done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
          if (!state.ok()) return done(state.status());
          const uint64_t top = std::max(state->top(), state->applied().position());
          if (pos > top + 1) return done(BeyondTop(req->group(), pos, top));
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
  const paxos::AcceptorState before = state;
  const paxos::Message r = paxos::HandleRequest(state, ToMessage(*req));
  PaxosReply reply = ToReply(r);
  if (state == before) return done(std::move(reply));

  absl::StatusOr<std::string> next = EncodeRecord(state, *sealing, pos);
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
  bigtable_->CheckAndMutateRow(
      req->group().table(), req->group().root(), std::move(pred), std::move(if_true),
      std::move(if_false),
      [this, req, attempt, expect, sealing = std::move(sealing), reply = std::move(reply),
       done = std::move(done)](absl::StatusOr<bool> matched) mutable {
        if (!matched.ok()) return done(matched.status());
        if (*matched == expect) return done(std::move(reply));
        if (attempt + 1 >= kMaxStepAttempts)
          return done(absl::AbortedError(StrCat("acceptor state of position ", req->position(),
                                                " kept changing under this step; try again")));
        // Re-read: the state changed, so the position is no longer empty
        // here and needs no bound check.
        PaxosAttempt(req, req->position(), attempt + 1, std::move(sealing), std::move(done));
      });
}

// ---- state, log, apply, read ---------------------------------------------------

void LogReplica::State(GroupRef group, Callback<StateReply> done) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
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
              ReadLogSealed(std::move(request), std::move(*sealing), std::move(done));
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
  if (request.position() == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  LogEntry entry;
  if (!entry.ParseFromString(request.value()))
    return done(absl::InvalidArgumentError(
        StrCat("repl.Apply: the value of position ", request.position(), " is not a log entry")));
  if (absl::Status s = CheckEntryTables(request.group(), entry, "repl.Apply", request.position());
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
  auto then = [this, group, pos, sealing, value = request.value(),
               done = std::move(done)](absl::Status s) mutable {
    if (!s.ok()) return done(s);
    ApplyLoop(group, std::move(sealing), std::move(done), std::make_pair(pos, std::move(value)));
  };
  if (pos == 1 || pos <= known_elsewhere + 1) {
    return bigtable_->MutateRow(group.table(), group.root(), std::move(learn),
                                storage::kServerTimestamp, std::move(then));
  }
  // Recorded only if the top here is at least the previous position (the
  // top's ordered encoding compares as its number does).
  RowFilter top_reaches_previous = LogRead(RowFilter::QualifierMatch::kExact, kTopColumn).filter;
  std::string previous;
  AppendOrderedUint64(&previous, pos - 1);
  top_reaches_previous.value_range = storage::ByteRange{previous, std::nullopt, false};
  bigtable_->CheckAndMutateRow(
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
      self->bigtable->MutateRow(
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
    const AppliedRecord applied = state->applied();
    const uint64_t next = applied.position() + 1;
    if (state->top() < next) {
      ApplyReply reply;
      *reply.mutable_applied() = applied;
      return done(std::move(reply));
    }
    ReadLogRequest req;
    *req.mutable_group() = group;
    req.set_from(next);
    req.set_to(next);
    const uint64_t top = state->top();
    auto apply = [this, group, sealing, applied, next, top,
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
      AppliedRecord rec;
      rec.set_position(next);
      rec.set_timestamp(std::max(applied.timestamp(), writer->entry.timestamp()));
      rec.set_next_leader(writer->entry.next_leader());
      auto record = [this, group, sealing, rec, next, top,
                     done = std::move(done)](absl::Status s) mutable {
        if (!s.ok()) return done(s);
        bigtable_->MutateRow(
            group.table(), group.root(),
            {Mutation::SetCell(kLogFamily, kAppliedColumn, rec.SerializeAsString(),
                               static_cast<int64_t>(next))},
            storage::kServerTimestamp,
            [this, group, sealing, rec, next, top, done = std::move(done)](absl::Status s) mutable {
              if (!s.ok()) return done(s);
              // Done if no later position was seen when this round began; a
              // position learned since runs its own Apply, whose loop
              // applies it (and, if it read the state before this write,
              // this position again: harmless, applies are idempotent).
              if (next >= top) {
                ApplyReply reply;
                *reply.mutable_applied() = rec;
                return done(std::move(reply));
              }
              ApplyLoop(group, std::move(sealing), std::move(done));
            });
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
  });
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

namespace {

// An encrypted group's stored row, opened in place: its plaintext key and
// cells (ordered as a plaintext row's are).
absl::Status OpenRow(const GroupCipher& cipher, Row* row) {
  std::string key;
  for (storage::Cell& c : row->cells) {
    MS_ASSIGN_OR_RETURN(GroupCipher::Opened opened,
                        cipher.OpenCell(row->key, c.family, c.qualifier, c.timestamp, c.value));
    if (key.empty()) key = std::move(opened.row);
    c.qualifier = std::move(opened.qualifier);
    c.value = std::move(opened.value);
  }
  if (!key.empty()) row->key = std::move(key);
  std::stable_sort(row->cells.begin(), row->cells.end(),
                   [](const storage::Cell& a, const storage::Cell& b) {
                     return std::tie(a.family, a.qualifier) < std::tie(b.family, b.qualifier);
                   });
  return absl::OkStatus();
}

bool InGroup(const GroupRef& group, std::string_view row) {
  return row.size() >= group.root().size() &&
         row.compare(0, group.root().size(), group.root()) == 0;
}

}  // namespace

void LogReplica::Read(ReadRequest request, Callback<ReadReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
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
        bigtable_->ReadRow(table, row, std::move(o),
                           [group = request.group(), sealing = *sealing, cipher = *cipher,
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
                             done(std::move(reply));
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
  const std::string& root = request.group().root();
  const std::string group_end = PrefixSuccessor(root);
  if (request.start() < root || request.end().empty() || request.end() > group_end ||
      request.end() <= request.start())
    return done(absl::InvalidArgumentError(
        "repl.Scan: the range must be non-empty and inside the entity group's rows"));
  const GroupRef group = request.group();
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
