#include "backup/backup_job.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "backup/backup_file.h"
#include "base/await.h"
#include "base/coding.h"
#include "base/crypto.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/replication_server.h"

namespace megastore::backup {

namespace {

using replication::GroupRef;

template <typename Reply, typename Request>
absl::StatusOr<Reply> Call(const JobOptions& o, std::string_view method, const Request& req) {
  absl::StatusOr<std::string> raw = Await<std::string>([&](auto cb) {
    o.transport->Call(o.replication, method, req.SerializeAsString(), o.timeout, std::move(cb));
  });
  if (!raw.ok()) return raw.status();
  Reply reply;
  if (!reply.ParseFromString(*raw))
    return absl::DataLossError(
        StrCat("unparsable ", method, " reply from ", o.datacenter, " (", o.replication, ")"));
  return reply;
}

std::string Describe(const GroupRef& g) {
  return StrCat("group ", EscapeBytes(g.root()), " of ", g.table());
}

// Holds DIR/LOCK while a job writes the directory.
class DirLock {
 public:
  static absl::StatusOr<std::unique_ptr<DirLock>> Take(const std::string& dir) {
    const std::string path = dir + "/LOCK";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(StrCat("open ", path, ": ", std::strerror(errno)));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return absl::FailedPreconditionError(
          StrCat("another backup job is writing ", dir, " (", path, " is locked)"));
    }
    return std::unique_ptr<DirLock>(new DirLock(fd));
  }
  ~DirLock() { ::close(fd_); }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

// Pages of entries or rows become chunks of about this many bytes.
constexpr size_t kChunkBytes = 1 << 20;

class Runner {
 public:
  Runner(const JobOptions& o, Manifest* manifest, JobReport* report)
      : o_(o), env_(o.env != nullptr ? o.env : Env::Default()), m_(manifest), report_(report) {}

  absl::Status Run(Job* job);

 private:
  // The highest position the backup covers for `group`, if any file does.
  std::optional<uint64_t> Covered(const GroupRef& group) const;
  absl::Status Save() { return SaveManifest(o_.dir, *m_); }
  bool Cancelled() const { return o_.cancel != nullptr && o_.cancel->load(); }
  void Report(Job* job);

  // One group's file; nullopt when it needs none (a note says why).
  // `chain_start`: the log chain (re)starts at this full backup.
  absl::StatusOr<std::optional<FileEntry>> Full(const GroupRef& group, Job* job,
                                                bool chain_start = false);
  absl::StatusOr<std::optional<FileEntry>> Log(const GroupRef& group, Job* job);
  // A file being written: its header, writer, footer so far, and the
  // chunk being filled.
  struct OpenFile {
    FileHeader header;
    std::unique_ptr<FileWriter> writer;
    FileFooter footer;
    Chunk chunk;
    size_t chunk_bytes = 0;
    Job* job = nullptr;
  };
  // Starts `group`'s file of `kind` for positions [from, to], sealed if the
  // group is encrypted at the source.
  absl::StatusOr<std::unique_ptr<OpenFile>> Start(const GroupRef& group, FileKind kind,
                                                  uint64_t from, uint64_t to, int64_t timestamp,
                                                  Job* job, bool chain_start = false);
  // Writes the chunk being filled (sealed when the file is).
  absl::Status Flush(OpenFile& f);
  absl::StatusOr<std::optional<FileEntry>> Finish(OpenFile& f);

  const JobOptions& o_;
  Env* const env_;
  Manifest* const m_;
  JobReport* const report_;
  int64_t started_ = 0;
  // Whether each group is sealed at the source (asked once per group).
  std::map<std::string, bool> sealed_;
};

std::optional<uint64_t> Runner::Covered(const GroupRef& group) const {
  return ChainEnd(*m_, group);
}

void Runner::Report(Job* job) {
  if (!o_.on_progress) return;
  Progress p;
  p.job = job->id();
  p.kind = job->kind();
  p.groups_total = static_cast<uint64_t>(job->groups_size());
  p.groups_done = job->groups_done();
  p.bytes = report_->bytes;
  p.rows = report_->rows;
  p.entries = report_->entries;
  p.elapsed = absl::Microseconds(env_->NowMicros() - started_);
  o_.on_progress(p);
}

absl::StatusOr<std::unique_ptr<Runner::OpenFile>> Runner::Start(const GroupRef& group,
                                                                FileKind kind, uint64_t from,
                                                                uint64_t to, int64_t timestamp,
                                                                Job* job, bool chain_start) {
  replication::BackupSealRequest probe;
  *probe.mutable_group() = group;
  absl::StatusOr<replication::BackupSealReply> enc =
      Call<replication::BackupSealReply>(o_, "repl.SealBackup", probe);
  if (!enc.ok()) return enc.status();
  auto f = std::make_unique<OpenFile>();
  FileHeader& h = f->header;
  h.set_format(kFormat);
  *h.mutable_group() = group;
  h.set_schema(o_.schema.name());
  h.set_kind(kind);
  h.set_from(from);
  h.set_to(to);
  h.set_timestamp(timestamp);
  h.set_sealed(enc->encrypted());
  h.set_datacenter(o_.datacenter);
  h.set_created_micros(env_->NowMicros());
  h.set_chain_start(chain_start);
  absl::StatusOr<std::unique_ptr<FileWriter>> w =
      FileWriter::Create(o_.dir + "/" + DataFileName(h), h);
  if (!w.ok()) return w.status();
  f->writer = std::move(*w);
  f->job = job;
  return f;
}

absl::Status Runner::Flush(OpenFile& f) {
  if (f.chunk.rows_size() == 0 && f.chunk.entries_size() == 0) return absl::OkStatus();
  Record r;
  if (!f.header.sealed()) {
    *r.mutable_chunk() = std::move(f.chunk);
  } else {
    replication::BackupSealRequest req;
    *req.mutable_group() = f.header.group();
    req.add_items(f.chunk.SerializeAsString());
    req.add_bindings(ChunkBinding(f.header, f.footer.chunks()));
    absl::StatusOr<replication::BackupSealReply> sealed =
        Call<replication::BackupSealReply>(o_, "repl.SealBackup", req);
    if (!sealed.ok()) return sealed.status();
    if (!sealed->encrypted() || sealed->items_size() != 1)
      return absl::FailedPreconditionError(StrCat(Describe(f.header.group()),
                                                  " stopped being encrypted at ", o_.datacenter,
                                                  " during its backup"));
    r.set_sealed_chunk(std::move(*sealed->mutable_items(0)));
  }
  MS_RETURN_IF_ERROR(f.writer->Add(r));
  f.footer.set_chunks(f.footer.chunks() + 1);
  f.footer.set_plain_bytes(f.footer.plain_bytes() + f.chunk_bytes);
  report_->bytes += f.chunk_bytes;
  f.chunk.Clear();
  f.chunk_bytes = 0;
  Report(f.job);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<FileEntry>> Runner::Finish(OpenFile& f) {
  MS_RETURN_IF_ERROR(Flush(f));
  absl::StatusOr<FileEntry> e = f.writer->Finish(f.footer);
  if (!e.ok()) return e.status();
  e->set_path(DataFileName(f.header));
  e->set_job(f.job->id());
  return std::optional<FileEntry>(std::move(*e));
}

absl::StatusOr<std::optional<FileEntry>> Runner::Full(const GroupRef& group, Job* job,
                                                      bool chain_start) {
  replication::StateRequest sreq;
  *sreq.mutable_group() = group;
  absl::StatusOr<replication::StateReply> st =
      Call<replication::StateReply>(o_, "repl.State", sreq);
  if (!st.ok()) return st.status();
  const uint64_t position = st->applied().position();
  if (position == 0) {
    report_->notes.push_back(StrCat(Describe(group), ": no data at ", o_.datacenter));
    return std::nullopt;
  }
  for (const FileEntry& f : m_->files()) {
    if (f.header().kind() == FULL && f.header().to() == position &&
        replication::GroupKey(f.header().group()) == replication::GroupKey(group)) {
      report_->notes.push_back(StrCat(Describe(group), ": already backed up at position ", position,
                                      " (", f.path(), ")"));
      return std::nullopt;
    }
  }
  absl::StatusOr<std::unique_ptr<OpenFile>> file =
      Start(group, FULL, position, position, st->applied().timestamp(), job,
            chain_start || !Covered(group).has_value());
  if (!file.ok()) return file.status();
  OpenFile& f = **file;
  const FileHeader& h = f.header;
  std::string after;
  do {
    if (Cancelled()) return absl::CancelledError("the backup was cancelled");
    replication::SnapshotRowsRequest req;
    *req.mutable_group() = group;
    req.set_timestamp(h.timestamp());
    req.set_position(position);
    req.set_after(after);
    absl::StatusOr<replication::SnapshotRowsReply> page =
        Call<replication::SnapshotRowsReply>(o_, "repl.SnapshotRows", req);
    if (!page.ok()) return page.status();
    if (!page->after().empty() && page->after() <= after)
      return absl::DataLossError(StrCat(o_.datacenter, " answered a page of ", Describe(group),
                                        " with a cursor that does not advance"));
    for (replication::SnapshotRow& row : *page->mutable_rows()) {
      f.chunk_bytes += row.ByteSizeLong();
      *f.chunk.add_rows() = std::move(row);
      f.footer.set_rows(f.footer.rows() + 1);
      report_->rows++;
      if (f.chunk_bytes >= kChunkBytes) MS_RETURN_IF_ERROR(Flush(f));
    }
    after = page->after();
  } while (!after.empty());
  // Each page was checked against the position as it was read; once more
  // after the last, so a replica rebuilt meanwhile (from a later snapshot)
  // cannot have served part of the copy.
  absl::StatusOr<replication::StateReply> after_st =
      Call<replication::StateReply>(o_, "repl.State", sreq);
  if (!after_st.ok()) return after_st.status();
  if (after_st->applied().position() < position || after_st->snapshot() > position)
    return absl::UnavailableError(StrCat(
        o_.datacenter, " lost or replaced its copy of ", Describe(group),
        " during the backup (it holds ", after_st->snapshot(), "..", after_st->applied().position(),
        ", the copy is at ", position, "); the next run takes it again"));
  return Finish(f);
}

absl::StatusOr<std::optional<FileEntry>> Runner::Log(const GroupRef& group, Job* job) {
  const std::optional<uint64_t> covered = Covered(group);
  if (!covered) {
    report_->notes.push_back(
        StrCat(Describe(group), ": no full backup of it yet; took one (log entries need a base)"));
    return Full(group, job, /*chain_start=*/true);
  }
  replication::StateRequest sreq;
  *sreq.mutable_group() = group;
  absl::StatusOr<replication::StateReply> st =
      Call<replication::StateReply>(o_, "repl.State", sreq);
  if (!st.ok()) return st.status();
  const uint64_t applied = st->applied().position();
  if (applied <= *covered) {
    report_->notes.push_back(StrCat(Describe(group), ": nothing new since position ", *covered));
    return std::nullopt;
  }
  auto cleaned_past = [&](uint64_t cleaned) {
    report_->notes.push_back(StrCat(Describe(group), ": positions ", *covered + 1, "..", cleaned,
                                    " were cleaned up at ", o_.datacenter,
                                    " before a backup covered them; took a full backup instead"));
    return Full(group, job, /*chain_start=*/true);
  };
  if (st->cleaned() > *covered) return cleaned_past(st->cleaned());

  absl::StatusOr<std::unique_ptr<OpenFile>> file =
      Start(group, LOG, *covered + 1, applied, st->applied().timestamp(), job);
  if (!file.ok()) return file.status();
  OpenFile& f = **file;
  const FileHeader& h = f.header;
  uint64_t next = h.from();
  while (next <= applied) {
    if (Cancelled()) return absl::CancelledError("the backup was cancelled");
    replication::ReadLogRequest req;
    *req.mutable_group() = group;
    req.set_from(next);
    req.set_to(applied);
    absl::StatusOr<replication::ReadLogReply> page =
        Call<replication::ReadLogReply>(o_, "repl.ReadLog", req);
    if (!page.ok()) return page.status();
    if (page->cleaned() >= next) return cleaned_past(page->cleaned());
    if (page->positions_size() != page->values_size() || page->positions_size() == 0)
      return absl::DataLossError(StrCat(o_.datacenter, " has no log entry for position ", next,
                                        " of ", Describe(group), " though it applied ", applied));
    for (int i = 0; i < page->positions_size(); ++i) {
      if (page->positions(i) != next)
        return absl::DataLossError(StrCat(o_.datacenter, " has no log entry for position ", next,
                                          " of ", Describe(group), " though it applied ", applied));
      LogItem* item = f.chunk.add_entries();
      item->set_position(next);
      item->set_value(std::move(*page->mutable_values(i)));
      f.chunk_bytes += item->value().size() + 16;
      f.footer.set_entries(f.footer.entries() + 1);
      report_->entries++;
      if (f.chunk_bytes >= kChunkBytes) MS_RETURN_IF_ERROR(Flush(f));
      if (++next > applied) break;
    }
  }
  return Finish(f);
}

absl::Status Runner::Run(Job* job) {
  started_ = env_->NowMicros();
  // Groups this job already finished (a resumed job): for a full job,
  // those with its full backup.
  std::set<std::string> done;
  for (const FileEntry& f : m_->files())
    if (f.job() == job->id() && (job->kind() == LOG || f.header().kind() == FULL))
      done.insert(replication::GroupKey(f.header().group()));
  for (const GroupRef& group : job->groups()) {
    if (done.count(replication::GroupKey(group)) > 0) continue;
    if (Cancelled()) return absl::CancelledError("the backup was cancelled");
    bool got_file = false;
    // Keeps a step's file: in the catalog, and its coverage recorded at
    // the replica. A failed step is reported and the group goes on.
    auto keep = [&](absl::StatusOr<std::optional<FileEntry>> file) -> absl::Status {
      if (absl::IsCancelled(file.status())) return file.status();
      if (!file.ok()) {
        const std::string problem = StrCat(Describe(group), ": ", file.status().ToString());
        report_->problems.push_back(problem);
        *job->add_problems() = problem;
        return absl::OkStatus();
      }
      if (!*file) return absl::OkStatus();
      report_->files++;
      got_file = true;
      job->set_bytes(job->bytes() + (*file)->bytes());
      *m_->add_files() = std::move(**file);
      MS_RETURN_IF_ERROR(Save());
      // The log through the chain's end is safe in the backup now:
      // clean-up may remove it (a failure here only delays that). Not a
      // later full backup's position: entries before it may not be
      // shipped yet, and point-in-time restores need them.
      const uint64_t covered = Covered(group).value_or(0);
      replication::MarkBackupRequest mark;
      *mark.mutable_group() = group;
      mark.set_position(covered);
      absl::StatusOr<replication::StateReply> marked =
          Call<replication::StateReply>(o_, "repl.MarkBackup", mark);
      if (!marked.ok())
        report_->notes.push_back(
            StrCat(Describe(group), ": backed up through ", covered, ", but recording that at ",
                   o_.datacenter, " failed (log clean-up waits): ", marked.status().ToString()));
      return absl::OkStatus();
    };
    // A full job first ships the log the chain is missing up to now, so
    // the full backup leaves no gap and clean-up can follow it.
    if (job->kind() == LOG || Covered(group).has_value()) MS_RETURN_IF_ERROR(keep(Log(group, job)));
    if (job->kind() == FULL) MS_RETURN_IF_ERROR(keep(Full(group, job)));
    if (got_file) report_->groups++;
    job->set_groups_done(job->groups_done() + 1);
    Report(job);
  }
  job->set_finished_micros(env_->NowMicros());
  return Save();
}

// Every group of the schema at the source.
absl::StatusOr<std::vector<GroupRef>> ListGroups(const JobOptions& o) {
  std::vector<GroupRef> out;
  std::string after;
  do {
    replication::ListGroupsRequest req;
    req.set_table(o.schema.name());
    req.set_after(after);
    absl::StatusOr<replication::ListGroupsReply> page =
        Call<replication::ListGroupsReply>(o, "repl.ListGroups", req);
    if (!page.ok()) return page.status();
    if (!page->after().empty() && page->after() <= after)
      return absl::DataLossError(StrCat(o.datacenter,
                                        " listed groups with a cursor that does not "
                                        "advance"));
    for (const std::string& root : page->roots()) {
      GroupRef g;
      g.set_table(o.schema.name());
      g.set_root(root);
      out.push_back(std::move(g));
    }
    after = page->after();
  } while (!after.empty());
  return out;
}

}  // namespace

double Progress::Rate() const {
  const double secs = absl::ToDoubleSeconds(elapsed);
  return secs > 0 ? static_cast<double>(bytes) / secs : 0;
}

std::optional<absl::Duration> Progress::Eta() const {
  if (groups_done == 0 || groups_total < groups_done) return std::nullopt;
  return elapsed *
         (static_cast<double>(groups_total - groups_done) / static_cast<double>(groups_done));
}

absl::StatusOr<PruneReport> PruneBackup(const std::string& dir, int64_t horizon, bool dry_run) {
  absl::StatusOr<std::unique_ptr<DirLock>> lock = DirLock::Take(dir);
  if (!lock.ok()) return lock.status();
  absl::StatusOr<Manifest> m = LoadManifest(dir);
  if (!m.ok()) return m.status();
  // Per group, the position of the base to keep: its latest full backup
  // at or before the horizon.
  std::map<std::string, uint64_t> base;
  for (const FileEntry& f : m->files()) {
    if (f.header().kind() != FULL || f.header().timestamp() > horizon) continue;
    uint64_t& b = base[replication::GroupKey(f.header().group())];
    b = std::max(b, f.header().to());
  }
  PruneReport report;
  Manifest kept = *m;
  kept.clear_files();
  std::vector<std::string> doomed;
  for (const FileEntry& f : m->files()) {
    auto b = base.find(replication::GroupKey(f.header().group()));
    const bool old = b != base.end() && (f.header().kind() == FULL ? f.header().to() < b->second
                                                                   : f.header().to() <= b->second);
    // Only files at the place their header gives: a damaged or forged
    // catalog cannot make prune delete anything else.
    if (old && f.path() != DataFileName(f.header()))
      return absl::DataLossError(StrCat("the backup catalog in ", dir, " names file ",
                                        EscapeBytes(f.path(), 200), " where ",
                                        DataFileName(f.header()), " belongs; nothing was deleted"));
    if (old) {
      doomed.push_back(f.path());
      report.files++;
      report.bytes += f.bytes();
    } else {
      *kept.add_files() = f;
      report.kept++;
    }
  }
  kept.clear_jobs();
  for (const Job& j : m->jobs()) {
    if (j.finished_micros() != 0 && j.finished_micros() < horizon) {
      report.jobs++;
      continue;
    }
    *kept.add_jobs() = j;
  }
  if (dry_run) return report;
  // The catalog first: a crash between leaves stray files, never a
  // catalog naming files that are gone.
  MS_RETURN_IF_ERROR(SaveManifest(dir, kept));
  for (const std::string& path : doomed) {
    std::error_code ec;
    std::filesystem::remove(dir + "/" + path, ec);
    if (ec) return absl::InternalError(StrCat("delete ", dir, "/", path, ": ", ec.message()));
  }
  return report;
}

absl::StatusOr<JobReport> RunBackup(const JobOptions& o) {
  if (o.transport == nullptr || o.replication.empty())
    return absl::InvalidArgumentError("a backup needs a datacenter to read from");
  if (o.schema.name().empty()) return absl::InvalidArgumentError("a backup needs the schema");
  Env* env = o.env != nullptr ? o.env : Env::Default();
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) return absl::InternalError(StrCat("create backup directory ", o.dir, ": ", ec.message()));
  absl::StatusOr<std::unique_ptr<DirLock>> lock = DirLock::Take(o.dir);
  if (!lock.ok()) return lock.status();
  absl::StatusOr<Manifest> m = LoadManifest(o.dir);
  if (!m.ok()) return m.status();

  // The schema, once per version.
  const std::string descriptor = o.schema.SerializeAsString();
  bool have = false;
  for (const SchemaCopy& s : m->schemas())
    if (s.name() == o.schema.name()) have = s.schema_descriptor() == descriptor;
  if (!have) {
    SchemaCopy* s = m->add_schemas();
    s->set_name(o.schema.name());
    s->set_schema_descriptor(descriptor);
    s->set_saved_micros(env->NowMicros());
    // Also as a file `msadmin schema apply` takes (restoring into a new
    // cluster starts with it).
    const std::string& name = o.schema.name();
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      return absl::InvalidArgumentError(StrCat("schema name '", name, "' is not a file name"));
    std::filesystem::create_directories(o.dir + "/schemas", ec);
    if (ec) return absl::InternalError(StrCat("create ", o.dir, "/schemas: ", ec.message()));
    MS_RETURN_IF_ERROR(
        WriteFileAtomically(StrCat(o.dir, "/schemas/", name, ".schema.pb"), descriptor));
  }
  // Partial files a crash left behind.
  for (auto it = std::filesystem::recursive_directory_iterator(o.dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tmp") std::filesystem::remove(it->path(), ec);
  }

  JobReport report;
  const int64_t started = env->NowMicros();
  // An unfinished job of this kind and schema is finished first.
  std::vector<int> jobs_to_run;
  for (int i = 0; i < m->jobs_size(); ++i) {
    const Job& j = m->jobs(i);
    if (j.finished_micros() == 0 && j.kind() == o.kind && j.schema() == o.schema.name()) {
      jobs_to_run.push_back(i);
      report.resumed = true;
    }
  }
  std::vector<GroupRef> groups = o.groups;
  if (o.all) {
    absl::StatusOr<std::vector<GroupRef>> listed = ListGroups(o);
    if (!listed.ok()) return listed.status();
    groups.insert(groups.end(), listed->begin(), listed->end());
  }
  if (o.kind == LOG && (o.all || o.groups.empty())) {
    // Every group this backup holds of the schema.
    for (const FileEntry& f : m->files())
      if (f.header().schema() == o.schema.name()) groups.push_back(f.header().group());
  }
  std::set<std::string> seen;
  std::vector<GroupRef> unique;
  for (GroupRef& g : groups)
    if (seen.insert(replication::GroupKey(g)).second) unique.push_back(std::move(g));
  if (!unique.empty()) {
    Job* j = m->add_jobs();
    j->set_id(HexEncode(crypto::RandomBytes(6)));
    j->set_kind(o.kind);
    j->set_datacenter(o.datacenter);
    j->set_schema(o.schema.name());
    j->set_started_micros(started);
    for (GroupRef& g : unique) *j->add_groups() = std::move(g);
    jobs_to_run.push_back(m->jobs_size() - 1);
  }
  if (absl::Status s = SaveManifest(o.dir, *m); !s.ok()) return s;
  for (int i : jobs_to_run) {
    Job* job = m->mutable_jobs(i);
    report.job = job->id();
    Runner runner(o, &*m, &report);
    if (absl::Status s = runner.Run(job); !s.ok()) {
      if (absl::IsCancelled(s)) (void)SaveManifest(o.dir, *m);
      return s;
    }
  }
  report.seconds = static_cast<double>(env->NowMicros() - started) / 1e6;
  return report;
}

}  // namespace megastore::backup
