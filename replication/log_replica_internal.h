// Internal to LogReplica (log_replica*.cc): the log's cells in the root
// row, conversions between the Paxos core and the wire, and the sealing of
// encrypted groups' log cells.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "base/coding.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "paxos/paxos.h"
#include "replication/log_replica.h"
#include "schema/layout.h"

namespace megastore::replication::log_internal {

using storage::Mutation;
using storage::ReadOptions;
using storage::Row;
using storage::RowFilter;

static_assert(std::string_view(kLogFamily) == schema::kLogFamily,
              "the schema layout reserves the log's family");

inline constexpr char kAppliedColumn[] = "S:applied";
inline constexpr char kTopColumn[] = "S:top";
inline constexpr char kCleanedColumn[] = "S:cleaned";
inline constexpr char kBackupColumn[] = "S:backup";
inline constexpr char kInstallColumn[] = "S:install";    // an install under way (its id)
inline constexpr char kSnapshotColumn[] = "S:snapshot";  // caught up from a snapshot at
inline constexpr char kSummaryPrefix[] = "S:";
// A changed acceptor cell is retried this often before the step gives up
// (each retry means another writer stepped the same position meanwhile).
inline constexpr int kMaxStepAttempts = 16;

inline std::string PositionPrefix(uint64_t position) {
  std::string s = "L";
  AppendOrderedUint64(&s, position);
  return s;
}

inline bool ParsePositionColumn(std::string_view q, uint64_t* position, char* kind) {
  if (q.size() != 10 || q[0] != 'L') return false;
  std::string_view rest = q.substr(1, 8);
  if (!ConsumeOrderedUint64(&rest, position)) return false;
  *kind = q[9];
  return true;
}

inline paxos::Ballot FromProto(const Ballot& b) { return paxos::Ballot{b.round(), b.proposer()}; }
inline void ToProto(const paxos::Ballot& b, Ballot* out) {
  out->set_round(b.round);
  out->set_proposer(b.proposer);
}

inline AcceptorRecord ToRecord(const paxos::AcceptorState& state) {
  AcceptorRecord r;
  ToProto(state.promised, r.mutable_promised());
  if (state.accepted_ballot) {
    ToProto(*state.accepted_ballot, r.mutable_accepted());
    r.set_accepted_value(state.accepted_value);
  }
  return r;
}

inline PaxosReply ToReply(const paxos::Message& m) {
  PaxosReply reply;
  if (m.learned) {
    reply.set_learned(true);
    reply.set_learned_value(*m.learned);
    return reply;
  }
  reply.set_ok(m.ok);
  ToProto(m.promised, reply.mutable_promised());
  if (m.accepted_ballot) {
    ToProto(*m.accepted_ballot, reply.mutable_accepted());
    reply.set_accepted_value(m.accepted_value);
  }
  return reply;
}

// The one reply of an acceptor's Ready (persisted first if it had a state
// to persist: Ready::TakeMessages checks).
inline PaxosReply TakeReply(paxos::Ready& ready) {
  std::vector<paxos::Message> out = ready.TakeMessages();
  MS_CHECK(out.size() == 1, "an acceptor step answers with one reply, not {}", out.size());
  return ToReply(out[0]);
}

inline paxos::Message ToMessage(const PaxosRequest& req) {
  paxos::Message m;
  m.type = req.accept() ? paxos::Message::Type::kAccept : paxos::Message::Type::kPrepare;
  m.ballot = FromProto(req.ballot());
  m.value = req.value();
  return m;
}

inline ReadOptions LogRead(RowFilter::QualifierMatch match, std::string qualifier) {
  ReadOptions o;
  o.filter.families = {kLogFamily};
  o.filter.qualifier_match = match;
  o.filter.qualifier = std::move(qualifier);
  o.filter.cells_per_column = 1;
  return o;
}

// A summary cell holding a position, written at the position as its
// timestamp so that it never goes backwards.
inline Mutation PositionCell(const char* column, uint64_t position) {
  std::string v;
  AppendOrderedUint64(&v, position);
  return Mutation::SetCell(kLogFamily, column, v, static_cast<int64_t>(position));
}
inline Mutation TopCell(uint64_t position) { return PositionCell(kTopColumn, position); }

inline absl::Status Corrupt(const GroupRef& group, std::string_view what) {
  return absl::DataLossError(
      StrCat("entity group ", EscapeBytes(group.root()), " in table ", group.table(), ": ", what));
}

// Parses the summary cells of a root row into `out`.
inline absl::Status ParseSummary(const GroupRef& group, const std::optional<Row>& row,
                                 StateReply* out) {
  out->Clear();
  if (!row) return absl::OkStatus();
  for (const storage::Cell& c : row->cells) {
    if (c.qualifier == kAppliedColumn) {
      if (!out->mutable_applied()->ParseFromString(c.value))
        return Corrupt(group, "unreadable applied record");
    } else if (c.qualifier == kTopColumn || c.qualifier == kCleanedColumn ||
               c.qualifier == kBackupColumn || c.qualifier == kSnapshotColumn) {
      std::string_view v = c.value;
      uint64_t position = 0;
      if (!ConsumeOrderedUint64(&v, &position) || !v.empty())
        return Corrupt(group, StrCat("unreadable position in summary cell ", c.qualifier));
      if (c.qualifier == kTopColumn) out->set_top(position);
      if (c.qualifier == kCleanedColumn) out->set_cleaned(position);
      if (c.qualifier == kBackupColumn) out->set_backed_up(position);
      if (c.qualifier == kSnapshotColumn) out->set_snapshot(position);
    }
  }
  return absl::OkStatus();
}

// An encrypted group's cipher for a write: nullptr for an unencrypted
// group, the reason if the group is encrypted and its key is not at hand.
inline absl::StatusOr<const GroupCipher*> WriteCipher(const GroupSealing& sealing) {
  if (!sealing.encrypted) return nullptr;
  if (sealing.cipher != nullptr) return sealing.cipher.get();
  return sealing.missing;
}

// The same for a read: nullptr also when the group has no key yet (then
// it has no data either; NoKeyForData if some shows up).
inline absl::StatusOr<const GroupCipher*> ReadCipher(const GroupSealing& sealing) {
  if (!sealing.encrypted || sealing.cipher != nullptr) return sealing.cipher.get();
  if (sealing.no_key_yet) return nullptr;
  return sealing.missing;
}

inline absl::Status NoKeyForData(const GroupRef& group) {
  return absl::DataLossError(
      StrCat("entity group ", EscapeBytes(group.root()), " of encrypted table ", group.table(),
             " has data here but no key in this datacenter's key directory (was the key "
             "directory lost or replaced?)"));
}

// An acceptor record as stored: its accepted value sealed in an
// encrypted group.
inline absl::StatusOr<std::string> EncodeRecord(const paxos::AcceptorState& state,
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

inline absl::StatusOr<paxos::AcceptorState> DecodeRecord(const GroupRef& group,
                                                         const std::string& stored,
                                                         const GroupSealing& sealing,
                                                         uint64_t position) {
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

inline absl::StatusOr<std::string> OpenLearned(const GroupRef& group, const GroupSealing& sealing,
                                               uint64_t position, std::string value) {
  MS_ASSIGN_OR_RETURN(const GroupCipher* cipher, ReadCipher(sealing));
  if (cipher != nullptr) return cipher->OpenLog(LearnedColumn(position), value);
  if (sealing.encrypted) return NoKeyForData(group);
  return value;
}

// An encrypted group's entry writes values only into its own rows: other
// tables (the outbox list) get markers and deletions, nothing in the clear.
inline absl::Status CheckSealedEntry(const GroupRef& group, const LogEntry& entry,
                                     uint64_t position) {
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

// An encrypted group's stored row, opened in place: its plaintext key and
// cells (ordered as a plaintext row's are).
inline absl::Status OpenRow(const GroupCipher& cipher, storage::Row* row) {
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

inline bool InGroup(const GroupRef& group, std::string_view row) {
  return row.size() >= group.root().size() &&
         row.compare(0, group.root().size(), group.root()) == 0;
}

}  // namespace megastore::replication::log_internal

namespace megastore::replication {

// OutOfRange: `position` is more than one past `top`, the highest position
// this replica knows of the group (IsBeyondTop recognizes it).
absl::Status BeyondTop(const GroupRef& group, uint64_t position, uint64_t top);
// FailedPrecondition: `position` is at or below `cleaned`, gone from this
// replica's log (IsCleanedUp recognizes it).
absl::Status CleanedUp(const GroupRef& group, uint64_t position, uint64_t cleaned);

// InvalidArgument if `entry` writes the log's own family, or a table that
// is not its group's schema's, or its members (a combined entry's) do not
// account for its changes (`method` and `position` name the request).
absl::Status CheckEntry(const GroupRef& group, const LogEntry& entry, std::string_view method,
                        uint64_t position);

}  // namespace megastore::replication
