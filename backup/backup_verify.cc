#include "backup/backup_verify.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "backup/backup_file.h"
#include "base/await.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/replication.pb.h"
#include "replication/replication_server.h"

namespace megastore::backup {

namespace {

using google::protobuf::util::MessageDifferencer;

bool InGroup(const replication::GroupRef& g, const std::string& row) {
  return row.compare(0, g.root().size(), g.root()) == 0;
}

// What the chunk's contents must satisfy beyond parsing: rows of the group
// in a FULL file, consecutive positions of the file's range in a LOG file.
absl::Status CheckChunk(const FileEntry& file, const Chunk& chunk, uint64_t* next_position) {
  const FileHeader& h = file.header();
  if (h.kind() == FULL) {
    if (chunk.entries_size() > 0)
      return absl::DataLossError("a full backup's chunk holds log entries");
    for (const replication::SnapshotRow& r : chunk.rows())
      if (!InGroup(h.group(), r.key()))
        return absl::DataLossError(
            StrCat("row ", EscapeBytes(r.key()), " is not in the file's entity group"));
    return absl::OkStatus();
  }
  if (chunk.rows_size() > 0) return absl::DataLossError("a log backup's chunk holds rows");
  for (const LogItem& e : chunk.entries()) {
    if (e.position() != *next_position)
      return absl::DataLossError(
          StrCat("log entry of position ", e.position(), " where ", *next_position, " belongs"));
    replication::LogEntry entry;
    if (!entry.ParseFromString(e.value()))
      return absl::DataLossError(StrCat("log entry of position ", e.position(), " does not parse"));
    ++*next_position;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadChunks(const std::string& dir, const FileEntry& file, const OpenChunk& open,
                        const std::function<absl::Status(Chunk&)>& each) {
  // The catalog's path must be the one its header gives: a damaged or
  // forged catalog cannot point outside the directory.
  if (file.path() != DataFileName(file.header()))
    return absl::DataLossError(StrCat("the backup catalog in ", dir, " names file ",
                                      EscapeBytes(file.path(), 200), " where ",
                                      DataFileName(file.header()), " belongs"));
  const std::string path = dir + "/" + file.path();
  absl::StatusOr<std::unique_ptr<FileReader>> r = FileReader::Open(path);
  if (!r.ok()) return r.status();
  auto damaged = [&](const std::string& why) {
    return absl::DataLossError(StrCat("backup file ", path, ": ", why));
  };
  if (!MessageDifferencer::Equals((*r)->header(), file.header()))
    return damaged("its header does not match the catalog's record of it");
  uint64_t index = 0;
  uint64_t next_position = file.header().from();
  bool unopened = false;  // sealed chunks with nothing to open them
  Record rec;
  while (true) {
    absl::StatusOr<bool> more = (*r)->Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) break;
    Chunk chunk;
    if (rec.has_sealed_chunk()) {
      if (!file.header().sealed()) return damaged("a sealed chunk in a file of plain ones");
      if (!open) {
        unopened = true;
        ++index;
        continue;
      }
      absl::StatusOr<std::string> plain =
          open(file.header(), ChunkBinding(file.header(), index), rec.sealed_chunk());
      if (!plain.ok())
        return absl::Status(plain.status().code(), StrCat("backup file ", path, " chunk ", index,
                                                          ": ", plain.status().message()));
      if (!chunk.ParseFromString(*plain))
        return damaged(StrCat("chunk ", index, " does not parse"));
    } else {
      if (file.header().sealed()) return damaged("a plain chunk in a file of sealed ones");
      chunk = std::move(*rec.mutable_chunk());
    }
    if (absl::Status s = CheckChunk(file, chunk, &next_position); !s.ok())
      return damaged(StrCat("chunk ", index, ": ", s.message()));
    MS_RETURN_IF_ERROR(each(chunk));
    ++index;
  }
  if (!MessageDifferencer::Equals((*r)->footer(), file.footer()))
    return damaged("its footer does not match the catalog's record of it");
  if (index != file.footer().chunks())
    return damaged(StrCat(index, " chunks, its footer says ", file.footer().chunks()));
  if (file.header().kind() == LOG && !unopened && next_position != file.header().to() + 1)
    return damaged(StrCat("holds positions ", file.header().from(), "..", next_position - 1,
                          ", not through ", file.header().to()));
  if ((*r)->bytes() != file.bytes() || (*r)->crc32c() != file.crc32c())
    return damaged(StrCat((*r)->bytes(), " bytes with CRC-32C ", (*r)->crc32c(),
                          "; the catalog recorded ", file.bytes(), " bytes with ", file.crc32c()));
  return absl::OkStatus();
}

OpenChunk OpenAt(Transport* transport, std::string replication, absl::Duration timeout) {
  return [transport, replication = std::move(replication), timeout](
             const FileHeader& h, const std::string& binding,
             const std::string& sealed) -> absl::StatusOr<std::string> {
    replication::BackupSealRequest req;
    *req.mutable_group() = h.group();
    req.set_open(true);
    req.add_items(sealed);
    req.add_bindings(binding);
    absl::StatusOr<std::string> raw = Await<std::string>([&](auto cb) {
      transport->Call(replication, "repl.SealBackup", req.SerializeAsString(), timeout,
                      std::move(cb));
    });
    if (!raw.ok()) return raw.status();
    replication::BackupSealReply reply;
    if (!reply.ParseFromString(*raw) || reply.items_size() != 1)
      return absl::DataLossError(StrCat("unparsable repl.SealBackup reply from ", replication));
    return reply.items(0);
  };
}

OpenChunk OpenAtSource(Transport* transport, std::map<std::string, std::string> replication_of,
                       absl::Duration timeout) {
  return [transport, replication_of = std::move(replication_of), timeout](
             const FileHeader& h, const std::string& binding,
             const std::string& sealed) -> absl::StatusOr<std::string> {
    auto it = replication_of.find(h.datacenter());
    if (it == replication_of.end())
      return absl::FailedPreconditionError(
          StrCat("it was sealed by datacenter ", h.datacenter(),
                 ", which the cluster config does not name: only that datacenter's keys open it"));
    return OpenAt(transport, it->second, timeout)(h, binding, sealed);
  };
}

absl::StatusOr<VerifyReport> VerifyBackup(const VerifyOptions& o) {
  absl::StatusOr<Manifest> m = LoadManifest(o.dir);
  if (!m.ok()) return m.status();
  VerifyReport report;
  const OpenChunk open = o.open                   ? o.open
                         : o.transport != nullptr ? OpenAt(o.transport, o.replication, o.timeout)
                                                  : OpenChunk();
  std::set<std::string> named;
  // Per group: the files' position ranges, for the chain check.
  std::map<std::string, std::vector<const FileEntry*>> by_group;
  for (const FileEntry& f : m->files()) {
    named.insert(f.path());
    by_group[replication::GroupKey(f.header().group())].push_back(&f);
    report.files++;
    report.bytes += f.bytes();
    OpenChunk counted;
    if (open) {
      counted = [&](const FileHeader& h, const std::string& b, const std::string& s) {
        report.sealed_opened++;
        return open(h, b, s);
      };
    }
    uint64_t seen = 0;
    absl::Status s = ReadChunks(o.dir, f, counted, [&](Chunk&) {
      seen++;
      return absl::OkStatus();
    });
    report.chunks += f.footer().chunks();
    // Without a datacenter, sealed chunks pass on their checksums alone.
    if (s.ok() && f.header().sealed() && !open)
      report.sealed_unchecked += f.footer().chunks() - seen;
    if (!s.ok()) report.problems.push_back(std::string(s.message()));
  }
  for (auto& [key, files] : by_group) {
    std::sort(files.begin(), files.end(), [](const FileEntry* a, const FileEntry* b) {
      return a->header().to() < b->header().to();
    });
    // From the first full backup on, every log file must continue the
    // chain: a gap makes restores past it impossible.
    std::optional<uint64_t> covered;
    for (const FileEntry* f : files) {
      if (f->header().kind() == FULL) {
        covered = std::max(covered.value_or(0), f->header().to());
        continue;
      }
      if (!covered) {
        report.problems.push_back(StrCat("backup file ", f->path(),
                                         ": log entries with no full backup of the group before "
                                         "them"));
      } else if (f->header().from() > *covered + 1) {
        report.problems.push_back(StrCat(
            "backup file ", f->path(), ": positions ", *covered + 1, "..", f->header().from() - 1,
            " of its group are in no file (restores past ", *covered, " are impossible)"));
      }
      covered = std::max(covered.value_or(0), f->header().to());
    }
  }
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(o.dir + "/groups", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string rel = std::filesystem::relative(it->path(), o.dir).string();
    if (named.count(rel) == 0) report.strays.push_back(rel);
  }
  return report;
}

}  // namespace megastore::backup
