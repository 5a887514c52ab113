// LogReplica: cleaning up the log of positions every replica applied, and
// the two ends of a catch-up from a snapshot of another replica's data
// (docs/replication.md, "Cleaning up the log").
#include <algorithm>
#include <memory>
#include <set>
#include <tuple>

#include "base/buggify.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/log_replica.h"
#include "replication/log_replica_internal.h"

namespace megastore::replication {

MS_FAULT_POINT(kCleanFails, "log replica: a clean-up step fails before it removes anything");
MS_FAULT_POINT(kInstallFails, "log replica: installing a page of a snapshot fails part way");

using log_internal::Corrupt;
using log_internal::InGroup;
using log_internal::kAppliedColumn;
using log_internal::kBackupColumn;
using log_internal::kCleanedColumn;
using log_internal::kInstallColumn;
using log_internal::kSnapshotColumn;
using log_internal::kSummaryPrefix;
using log_internal::LogRead;
using log_internal::NoKeyForData;
using log_internal::OpenRow;
using log_internal::ParsePositionColumn;
using log_internal::PositionCell;
using log_internal::PositionPrefix;
using log_internal::ReadCipher;
using log_internal::TopCell;
using log_internal::WriteCipher;
using storage::Mutation;
using storage::ReadOptions;
using storage::Row;
using storage::RowFilter;

// ---- clean-up -------------------------------------------------------------------

void LogReplica::RemoveLogCells(
    GroupRef group, uint64_t from, uint64_t to, std::vector<Mutation> with,
    absl::AnyInvocable<void(absl::StatusOr<std::pair<uint64_t, uint64_t>>)> done) {
  ReadOptions o = LogRead(RowFilter::QualifierMatch::kRange, "");
  o.filter.qualifier_range = storage::ByteRange{PositionPrefix(from), PositionPrefix(to + 1)};
  const std::string table = group.table(), root = group.root();
  bigtable_->ReadRow(
      table, root, std::move(o),
      [this, group, with = std::move(with),
       done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
        if (!row.ok()) return done(row.status());
        std::set<uint64_t> positions;
        uint64_t bytes = 0;
        if (*row) {
          for (const storage::Cell& c : (*row)->cells) {
            uint64_t pos;
            char kind;
            if (!ParsePositionColumn(c.qualifier, &pos, &kind)) continue;
            positions.insert(pos);
            bytes += c.qualifier.size() + c.value.size();
            with.push_back(Mutation::DeleteCells(kLogFamily, c.qualifier, 0, 0));
          }
        }
        if (with.empty()) return done(std::make_pair(uint64_t{0}, uint64_t{0}));
        // One atomic row mutation: the cleaned mark lands with the removal.
        bigtable_->MutateRow(
            group.table(), group.root(), std::move(with), storage::kServerTimestamp,
            [n = positions.size(), bytes, done = std::move(done)](absl::Status s) mutable {
              if (!s.ok()) return done(s);
              done(std::make_pair(static_cast<uint64_t>(n), bytes));
            });
      });
}

void LogReplica::MeasureLog(GroupRef group, uint64_t cleaned, Callback<uint64_t> done) {
  // Position columns sort before the summary ("L..." < "S:").
  ReadOptions o = LogRead(RowFilter::QualifierMatch::kRange, "");
  o.filter.qualifier_range =
      storage::ByteRange{PositionPrefix(cleaned + 1), std::string(kSummaryPrefix), false};
  const std::string table = group.table(), root = group.root();
  bigtable_->ReadRow(table, root, std::move(o),
                     [done = std::move(done)](absl::StatusOr<std::optional<Row>> row) mutable {
                       if (!row.ok()) return done(row.status());
                       uint64_t bytes = 0;
                       if (*row)
                         for (const storage::Cell& c : (*row)->cells)
                           bytes += c.qualifier.size() + c.value.size();
                       done(bytes);
                     });
}

void LogReplica::Clean(GroupRef group, uint64_t through, Callback<CleanReply> done) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  if (kCleanFails.Fire())
    return done(absl::UnavailableError("injected fault: the clean-up step failed"));
  State(group, [this, group, through,
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    const uint64_t applied = state->applied().position();
    const uint64_t old = state->cleaned();
    const uint64_t top = std::max(state->top(), applied);
    auto finish = [this, group, top,
                   done = std::move(done)](absl::StatusOr<CleanReply> result) mutable {
      if (!result.ok() || result->more()) return done(std::move(result));
      CleanReply reply = std::move(*result);
      MeasureLog(group, reply.cleaned(),
                 [top, reply = std::move(reply),
                  done = std::move(done)](absl::StatusOr<uint64_t> bytes) mutable {
                   if (!bytes.ok()) return done(bytes.status());
                   reply.set_kept_positions(top > reply.cleaned() ? top - reply.cleaned() : 0);
                   reply.set_kept_bytes(*bytes);
                   done(std::move(reply));
                 });
    };
    CleanReply reply;
    reply.set_cleaned(old);
    // Nothing this replica has not applied is ever removed.
    uint64_t to = std::min(through, applied);
    if (to <= old) return finish(std::move(reply));
    if (to - old > kMaxClean) {
      to = old + kMaxClean;
      reply.set_more(true);
    }
    RemoveLogCells(group, old + 1, to, {PositionCell(kCleanedColumn, to)},
                   [to, reply = std::move(reply), finish = std::move(finish)](
                       absl::StatusOr<std::pair<uint64_t, uint64_t>> removed) mutable {
                     if (!removed.ok()) return finish(removed.status());
                     reply.set_cleaned(to);
                     reply.set_removed_positions(removed->first);
                     reply.set_removed_bytes(removed->second);
                     finish(std::move(reply));
                   });
  });
}

void LogReplica::EntryTimestamp(GroupRef group, uint64_t position, Callback<int64_t> done) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  if (position == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  SealingOf(
      group, false,
      [this, group, position, done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
        if (!sealing.ok()) return done(sealing.status());
        ReadLogRequest req;
        *req.mutable_group() = group;
        req.set_from(position);
        req.set_to(position);
        ReadLogSealed(
            std::move(req), std::move(*sealing),
            [group, position, done = std::move(done)](absl::StatusOr<ReadLogReply> log) mutable {
              if (!log.ok()) return done(log.status());
              if (log->positions_size() == 0)
                return done(
                    absl::NotFoundError(StrCat("position ", position, " is not known here")));
              LogEntry entry;
              if (!entry.ParseFromString(log->values(0)))
                return done(Corrupt(group, StrCat("unreadable log entry at "
                                                  "position ",
                                                  position)));
              done(entry.timestamp());
            });
      });
}

void LogReplica::MarkBackup(GroupRef group, uint64_t position, Callback<StateReply> done) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  if (position == 0) return done(absl::InvalidArgumentError("log positions start at 1"));
  // A backup is read from a replica that applied what it covers: a mark
  // beyond this replica's log would let clean-up outrun every backup.
  State(group, [this, group, position,
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    if (position > state->top())
      return done(absl::InvalidArgumentError(StrCat(
          "repl.MarkBackup: position ", position, " of entity group ", EscapeBytes(group.root()),
          " is beyond this replica's log (top ", state->top(), ")")));
    const std::string table = group.table(), root = group.root();
    bigtable_->MutateRow(table, root, {PositionCell(kBackupColumn, position)},
                         storage::kServerTimestamp,
                         [this, group, done = std::move(done)](absl::Status s) mutable {
                           if (!s.ok()) return done(s);
                           State(group, std::move(done));
                         });
  });
}

// ---- backups ----------------------------------------------------------------------

void LogReplica::SealBackup(BackupSealRequest request, Callback<BackupSealReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (request.items_size() != request.bindings_size())
    return done(
        absl::InvalidArgumentError(StrCat("repl.SealBackup: ", request.items_size(), " items but ",
                                          request.bindings_size(), " bindings")));
  if (request.items_size() > kMaxBackupItems)
    return done(absl::InvalidArgumentError(StrCat("repl.SealBackup: ", request.items_size(),
                                                  " items, more than the ", kMaxBackupItems,
                                                  " one call may carry")));
  const GroupRef group = request.group();
  SealingOf(group, false,
            [request = std::move(request),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              BackupSealReply reply;
              reply.set_encrypted((*sealing)->encrypted);
              if (!(*sealing)->encrypted || request.items_size() == 0) return done(reply);
              const GroupCipher* cipher = (*sealing)->cipher.get();
              if (cipher == nullptr)
                return done((*sealing)->missing.ok()
                                ? absl::FailedPreconditionError(
                                      StrCat("entity group ", EscapeBytes(request.group().root()),
                                             " has no key in this datacenter yet"))
                                : (*sealing)->missing);
              for (int i = 0; i < request.items_size(); ++i) {
                absl::StatusOr<std::string> out =
                    request.open() ? cipher->OpenBackup(request.bindings(i), request.items(i))
                                   : cipher->SealBackup(request.bindings(i), request.items(i));
                if (!out.ok()) return done(out.status());
                reply.add_items(std::move(*out));
              }
              done(std::move(reply));
            });
}

void LogReplica::ListGroups(ListGroupsRequest request, Callback<ListGroupsReply> done) {
  if (request.table().empty() || request.table().size() > 1024)
    return done(absl::InvalidArgumentError("repl.ListGroups: give an entity table's name"));
  if (request.after().size() > 64 * 1024)
    return done(absl::InvalidArgumentError("repl.ListGroups: the cursor is too long"));
  ReadOptions o;
  o.filter.families = {kLogFamily};
  o.filter.qualifier_match = RowFilter::QualifierMatch::kExact;
  o.filter.qualifier = kAppliedColumn;
  o.filter.cells_per_column = 1;
  o.filter.strip_value = true;
  o.rows_limit = kMaxListedGroups;
  std::string start = request.after().empty() ? "" : request.after() + '\0';
  bigtable_->ReadRows(request.table(), storage::RowRange{std::move(start), ""}, std::move(o),
                      [done = std::move(done)](absl::StatusOr<std::vector<Row>> rows) mutable {
                        if (!rows.ok()) return done(rows.status());
                        ListGroupsReply reply;
                        for (Row& r : *rows) reply.add_roots(std::move(r.key));
                        if (static_cast<int>(rows->size()) >= kMaxListedGroups)
                          reply.set_after(rows->back().key);
                        done(std::move(reply));
                      });
}

// ---- catch-up from a snapshot: the source --------------------------------------

namespace {

absl::Status CheckSnapshotKey(const GroupRef& group, std::string_view key, std::string_view what) {
  if (!InGroup(group, key))
    return absl::InvalidArgumentError(StrCat(
        what, ": row ", EscapeBytes(key), " is not in entity group ", EscapeBytes(group.root())));
  return absl::OkStatus();
}

// Whether `row` has cells other than the log's (the root row may hold only
// its log).
bool HasData(const Row& row) {
  return std::any_of(row.cells.begin(), row.cells.end(),
                     [](const storage::Cell& c) { return c.family != kLogFamily; });
}

// `row` without its log cells, opened if `cipher`, as a SnapshotRow.
absl::StatusOr<SnapshotRow> ToSnapshotRow(Row row, const GroupCipher* cipher, bool keys_only) {
  std::erase_if(row.cells, [](const storage::Cell& c) { return c.family == kLogFamily; });
  if (cipher != nullptr && !row.cells.empty()) MS_RETURN_IF_ERROR(OpenRow(*cipher, &row));
  SnapshotRow out;
  out.set_key(std::move(row.key));
  if (keys_only) return out;
  for (storage::Cell& c : row.cells) {
    SnapshotCell* cell = out.add_cells();
    cell->set_family(std::move(c.family));
    cell->set_qualifier(std::move(c.qualifier));
    cell->set_timestamp(c.timestamp);
    cell->set_value(std::move(c.value));
  }
  return out;
}

// Reads rows one by one (the keys of a SnapshotRowsRequest), in parallel.
struct KeyReads {
  absl::Mutex mu;
  std::vector<std::optional<Row>> rows ABSL_GUARDED_BY(mu);
  int left ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  absl::AnyInvocable<void(absl::StatusOr<std::vector<std::optional<Row>>>)> done;

  void Finish(size_t i, absl::StatusOr<std::optional<Row>> r) {
    std::vector<std::optional<Row>> out;
    absl::Status status_copy;
    {
      absl::MutexLock lock(&mu);
      if (!r.ok() && status.ok()) status = r.status();
      if (r.ok()) rows[i] = std::move(*r);
      if (--left > 0) return;
      out = std::move(rows);
      status_copy = status;
    }
    if (!status_copy.ok()) return done(status_copy);
    done(std::move(out));
  }
};

}  // namespace

void LogReplica::SnapshotRows(SnapshotRowsRequest request, Callback<SnapshotRowsReply> done) {
  if (absl::Status s = CheckGroup(request.group()); !s.ok()) return done(s);
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
  if (request.keys_size() > kMaxSnapshotRows)
    return done(absl::InvalidArgumentError(StrCat("repl.SnapshotRows: ", request.keys_size(),
                                                  " keys, more than the ", kMaxSnapshotRows,
                                                  " one call may name")));
  if (!request.after().empty() && request.keys_size() > 0)
    return done(
        absl::InvalidArgumentError("repl.SnapshotRows: give either a cursor or keys, not both"));
  if (!request.latest() && request.timestamp() <= 0)
    return done(absl::InvalidArgumentError("repl.SnapshotRows: no timestamp to read at"));
  for (const std::string& key : request.keys())
    if (absl::Status s = CheckSnapshotKey(request.group(), key, "repl.SnapshotRows"); !s.ok())
      return done(s);
  if (!request.after().empty()) {
    if (absl::Status s =
            CheckSnapshotKey(request.group(), request.after(), "repl.SnapshotRows cursor");
        !s.ok())
      return done(s);
  }
  const GroupRef group = request.group();
  done = HoldingPosition<SnapshotRowsReply>(group, request.position(), std::move(done));
  SealingOf(group, false,
            [this, request = std::move(request),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              SnapshotSealed(std::move(request), std::move(*sealing), std::move(done));
            });
}

void LogReplica::SnapshotSealed(SnapshotRowsRequest request, Sealing sealing,
                                Callback<SnapshotRowsReply> done) {
  absl::StatusOr<const GroupCipher*> cipher_or = ReadCipher(*sealing);
  if (!cipher_or.ok()) return done(cipher_or.status());
  const GroupCipher* cipher = *cipher_or;
  // An encrypted group with no key here has no data either.
  const bool must_be_empty = sealing->encrypted && cipher == nullptr;
  ReadOptions o;
  o.filter.cells_per_column = 1;
  if (!request.latest()) o.read_timestamp = request.timestamp();
  const GroupRef group = request.group();
  const bool keys_only = request.keys_only();
  auto convert = [group, sealing, cipher, must_be_empty, keys_only](
                     std::vector<Row> rows, SnapshotRowsReply* reply) -> absl::Status {
    for (Row& r : rows) {
      if (must_be_empty && HasData(r)) return NoKeyForData(group);
      MS_ASSIGN_OR_RETURN(SnapshotRow out, ToSnapshotRow(std::move(r), cipher, keys_only));
      *reply->add_rows() = std::move(out);
    }
    return absl::OkStatus();
  };
  if (request.keys_size() > 0) {
    auto reads = std::make_shared<KeyReads>();
    const int n = request.keys_size();
    {
      absl::MutexLock lock(&reads->mu);
      reads->rows.resize(n);
      reads->left = n;
    }
    std::vector<std::string> keys(request.keys().begin(), request.keys().end());
    reads->done = [keys, convert, done = std::move(done)](
                      absl::StatusOr<std::vector<std::optional<Row>>> rows) mutable {
      if (!rows.ok()) return done(rows.status());
      std::vector<Row> found;
      for (size_t i = 0; i < keys.size(); ++i) {
        Row r;
        if ((*rows)[i]) r = std::move(*(*rows)[i]);
        found.push_back(std::move(r));
      }
      SnapshotRowsReply reply;
      if (absl::Status s = convert(std::move(found), &reply); !s.ok()) return done(s);
      // Each row answers under the key asked for (absent ones too).
      for (int i = 0; i < reply.rows_size(); ++i) reply.mutable_rows(i)->set_key(keys[i]);
      done(std::move(reply));
    };
    for (int i = 0; i < n; ++i) {
      const std::string& key = request.keys(i);
      bigtable_->ReadRow(group.table(), cipher != nullptr ? cipher->StoredRow(key) : key, o,
                         [reads, i](absl::StatusOr<std::optional<Row>> r) mutable {
                           reads->Finish(i, std::move(r));
                         });
    }
    return;
  }
  // A page of the group's rows in stored order (the cursor is a stored key).
  std::string start = request.after().empty() ? group.root() : request.after() + '\0';
  o.rows_limit = kMaxSnapshotRows;
  bigtable_->ReadRows(
      group.table(), storage::RowRange{std::move(start), PrefixSuccessor(group.root())},
      std::move(o),
      [convert, done = std::move(done)](absl::StatusOr<std::vector<Row>> rows) mutable {
        if (!rows.ok()) return done(rows.status());
        SnapshotRowsReply reply;
        const bool full = static_cast<int>(rows->size()) >= kMaxSnapshotRows;
        std::string last = rows->empty() ? "" : rows->back().key;
        std::erase_if(*rows, [](const Row& r) { return !HasData(r); });
        if (absl::Status s = convert(std::move(*rows), &reply); !s.ok()) return done(s);
        if (full) reply.set_after(std::move(last));
        done(std::move(reply));
      });
}

// ---- catch-up from a snapshot: the receiver --------------------------------------

namespace {

// Installs a page of snapshot rows, each row's read-and-write on its own.
struct RowInstall : std::enable_shared_from_this<RowInstall> {
  storage::BigtableClient* bigtable;
  GroupRef group;
  std::shared_ptr<const GroupSealing> sealing;
  const GroupCipher* cipher = nullptr;
  int64_t timestamp = 0;
  absl::Mutex mu;
  int left ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  InstallRowsReply reply ABSL_GUARDED_BY(mu);
  absl::AnyInvocable<void(absl::StatusOr<InstallRowsReply>)> done;

  void Row(SnapshotRow row) {
    const std::string stored = cipher != nullptr ? cipher->StoredRow(row.key()) : row.key();
    ReadOptions o;
    o.filter.cells_per_column = 1;
    bigtable->ReadRow(group.table(), stored, std::move(o),
                      [self = shared_from_this(), stored, row = std::move(row)](
                          absl::StatusOr<std::optional<storage::Row>> here) mutable {
                        if (!here.ok()) return self->Finish(here.status(), 0, 0);
                        self->Write(stored, std::move(row), std::move(*here));
                      });
  }

  void Write(const std::string& stored, SnapshotRow row, std::optional<storage::Row> here) {
    // The row's columns as the snapshot has them (plaintext).
    std::set<std::pair<std::string, std::string>> wanted;
    for (const SnapshotCell& c : row.cells()) wanted.emplace(c.family(), c.qualifier());
    std::vector<Mutation> muts;
    uint64_t deleted = 0, written = 0;
    if (here) {
      for (const storage::Cell& c : here->cells) {
        if (c.family == kLogFamily) continue;
        std::string plain = c.qualifier;
        if (cipher != nullptr) {
          absl::StatusOr<GroupCipher::Opened> opened =
              cipher->OpenCell(stored, c.family, c.qualifier, c.timestamp, c.value);
          if (!opened.ok()) return Finish(opened.status(), 0, 0);
          plain = std::move(opened->qualifier);
        } else if (sealing->encrypted) {
          return Finish(NoKeyForData(group), 0, 0);
        }
        if (wanted.count({c.family, plain})) continue;
        // A column the snapshot does not have: deleted by an entry this
        // replica missed.
        muts.push_back(Mutation::DeleteCells(c.family, c.qualifier, 0, timestamp + 1));
        ++deleted;
      }
    }
    for (const SnapshotCell& c : row.cells()) {
      std::string qualifier = c.qualifier(), value = c.value();
      if (cipher != nullptr) {
        absl::StatusOr<std::string> sealed =
            cipher->SealCell(row.key(), c.family(), c.qualifier(), c.timestamp(), c.value());
        if (!sealed.ok()) return Finish(sealed.status(), 0, 0);
        value = std::move(*sealed);
        qualifier = cipher->StoredQualifier(c.qualifier());
      }
      muts.push_back(
          Mutation::SetCell(c.family(), std::move(qualifier), std::move(value), c.timestamp()));
      ++written;
    }
    if (muts.empty()) return Finish(absl::OkStatus(), 0, 0);
    if (kInstallFails.Fire())
      return Finish(absl::UnavailableError("injected fault: a snapshot row was not written"), 0, 0);
    bigtable->MutateRow(group.table(), stored, std::move(muts), timestamp,
                        [self = shared_from_this(), written, deleted](absl::Status s) {
                          self->Finish(s, written, deleted);
                        });
  }

  void Finish(absl::Status s, uint64_t written, uint64_t deleted) {
    InstallRowsReply out;
    absl::Status result;
    {
      absl::MutexLock lock(&mu);
      if (!s.ok() && status.ok()) status = s;
      if (s.ok()) {
        reply.set_cells_written(reply.cells_written() + written);
        reply.set_cells_deleted(reply.cells_deleted() + deleted);
      }
      if (--left > 0) return;
      result = status;
      out = reply;
    }
    if (!result.ok()) return done(result);
    done(std::move(out));
  }
};

}  // namespace

void LogReplica::InstallRows(InstallRowsRequest request, Callback<InstallRowsReply> done) {
  const GroupRef group = request.group();  // a copy: `request` moves below
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  if (request.begin()) {
    if (request.install_id().empty() || request.install_id().size() > 64 || request.rows_size() > 0)
      return done(absl::InvalidArgumentError(
          "repl.InstallRows: a begin carries an install id of 1 to 64 bytes and no rows"));
    const std::string table = group.table(), root = group.root();
    return bigtable_->MutateRow(table, root,
                                {Mutation::SetCell(kLogFamily, kInstallColumn, request.install_id(),
                                                   storage::kServerTimestamp)},
                                storage::kServerTimestamp,
                                [done = std::move(done)](absl::Status s) mutable {
                                  if (!s.ok()) return done(s);
                                  done(InstallRowsReply());
                                });
  }
  if (type_ == ReplicaType::kWitness)
    return done(absl::FailedPreconditionError("a witness replica keeps no data"));
  if (request.timestamp() <= 0)
    return done(absl::InvalidArgumentError("repl.InstallRows: no snapshot timestamp"));
  if (request.rows_size() > kMaxSnapshotRows)
    return done(absl::InvalidArgumentError(StrCat("repl.InstallRows: ", request.rows_size(),
                                                  " rows, more than the ", kMaxSnapshotRows,
                                                  " one call may carry")));
  for (const SnapshotRow& row : request.rows()) {
    if (absl::Status s = CheckSnapshotKey(group, row.key(), "repl.InstallRows"); !s.ok())
      return done(s);
    for (const SnapshotCell& c : row.cells()) {
      if (c.family().empty() || c.family() == kLogFamily)
        return done(absl::InvalidArgumentError(
            StrCat("repl.InstallRows: row ", EscapeBytes(row.key()), " has a cell of family \"",
                   c.family(), "\", which is not a data family")));
      if (c.timestamp() < 0 || c.timestamp() > request.timestamp())
        return done(absl::InvalidArgumentError(
            StrCat("repl.InstallRows: row ", EscapeBytes(row.key()), " has a cell at timestamp ",
                   c.timestamp(), ", outside the snapshot (at ", request.timestamp(), ")")));
    }
  }
  SealingOf(group, true,
            [this, request = std::move(request),
             done = std::move(done)](absl::StatusOr<Sealing> sealing) mutable {
              if (!sealing.ok()) return done(sealing.status());
              InstallSealed(std::move(request), std::move(*sealing), std::move(done));
            });
}

void LogReplica::InstallSealed(InstallRowsRequest request, Sealing sealing,
                               Callback<InstallRowsReply> done) {
  absl::StatusOr<const GroupCipher*> cipher = WriteCipher(*sealing);
  if (!cipher.ok()) return done(cipher.status());
  if (request.rows_size() == 0) return done(InstallRowsReply());
  auto install = std::make_shared<RowInstall>();
  install->bigtable = bigtable_;
  install->group = request.group();
  install->sealing = sealing;
  install->cipher = *cipher;
  install->timestamp = request.timestamp();
  install->done = std::move(done);
  {
    absl::MutexLock lock(&install->mu);
    install->left = request.rows_size();
  }
  for (SnapshotRow& row : *request.mutable_rows()) install->Row(std::move(row));
}

void LogReplica::FinishSnapshot(FinishSnapshotRequest request, Callback<StateReply> done) {
  const GroupRef group = request.group();
  if (absl::Status s = CheckGroup(group); !s.ok()) return done(s);
  const AppliedRecord applied = request.applied();
  const uint64_t pos = applied.position();
  if (pos == 0) return done(absl::InvalidArgumentError("repl.FinishSnapshot: no position"));
  if (request.install_id().empty())
    return done(absl::InvalidArgumentError("repl.FinishSnapshot: no install id"));
  State(group, [this, group, applied, pos, id = request.install_id(),
                done = std::move(done)](absl::StatusOr<StateReply> state) mutable {
    if (!state.ok()) return done(state.status());
    // What the old log held at or below the snapshot's position goes; the
    // summary says so first, so no Paxos step finds those positions empty.
    const uint64_t from = state->cleaned() + 1;
    const uint64_t old_end = std::min(pos, std::max(state->top(), state->applied().position()));
    std::vector<Mutation> summary = {
        Mutation::SetCell(kLogFamily, kAppliedColumn, applied.SerializeAsString(),
                          static_cast<int64_t>(pos)),
        TopCell(pos), PositionCell(kCleanedColumn, pos), PositionCell(kSnapshotColumn, pos),
        Mutation::DeleteCells(kLogFamily, kInstallColumn, 0, 0)};
    // Only while this install's record is there: rows installed and then
    // lost (the data wiped) must not be recorded as applied.
    RowFilter ours = LogRead(RowFilter::QualifierMatch::kExact, kInstallColumn).filter;
    ours.value_range = storage::ByteRange{id, id, true};
    bigtable_->CheckAndMutateRow(
        group.table(), group.root(), std::move(ours), std::move(summary), {},
        [this, group, pos, from, old_end,
         done = std::move(done)](absl::StatusOr<bool> matched) mutable {
          if (!matched.ok()) return done(matched.status());
          if (!*matched) {
            // A repeat of a finish that went through, or another install
            // that got this far: nothing to do. Otherwise the rows are gone.
            return State(group, [group, pos,
                                 done = std::move(done)](absl::StatusOr<StateReply> now) mutable {
              if (!now.ok()) return done(now.status());
              if (now->applied().position() >= pos) return done(std::move(*now));
              done(absl::FailedPreconditionError(
                  StrCat("repl.FinishSnapshot: entity group ", EscapeBytes(group.root()),
                         ": this install's record is gone from the replica (its data was lost or "
                         "another install began); copy the snapshot again")));
            });
          }
          struct Sweep {
            LogReplica* self;
            GroupRef group;
            uint64_t next, end;
            Callback<StateReply> done;
            static void Step(std::shared_ptr<Sweep> sw) {
              if (sw->next > sw->end) return sw->self->State(sw->group, std::move(sw->done));
              const uint64_t to = std::min(sw->end, sw->next + kMaxClean - 1);
              sw->self->RemoveLogCells(
                  sw->group, sw->next, to, {},
                  [sw, to](absl::StatusOr<std::pair<uint64_t, uint64_t>> r) mutable {
                    if (!r.ok()) return sw->done(r.status());
                    sw->next = to + 1;
                    Step(std::move(sw));
                  });
            }
          };
          Sweep::Step(std::make_shared<Sweep>(Sweep{this, group, from, old_end, std::move(done)}));
        });
  });
}

}  // namespace megastore::replication
