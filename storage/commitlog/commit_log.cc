#include "storage/commitlog/commit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/thread_name.h"
#include "storage/commitlog/commit_log_internal.h"

namespace megastore::storage::commitlog {
namespace internal {

absl::Status Errno(std::string_view what, const std::string& path) {
  const int e = errno;
  const std::string msg = StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

std::string StandIns(uint64_t first_lsn, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) AppendRecord(&out, first_lsn + i, "", "");
  return out;
}

}  // namespace internal

namespace {

using internal::Errno;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::InternalError(StrCat("cannot open commit log segment ", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::InternalError(StrCat("cannot size commit log segment ", path));
  std::string data(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(data.data(), size);
  // Short if the segment was cut meanwhile (closed while a replay reads it).
  if (in.bad()) return absl::InternalError(StrCat("cannot read commit log segment ", path));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// Zero-filled files the preparer makes are named next-segment-N.zeros, N
// counting up within one open log (a taken file is renamed; the next one
// never has its name).
constexpr char kPreparedPrefix[] = "next-segment-";
constexpr char kPreparedSuffix[] = ".zeros";

bool IsPreparedName(std::string_view name) {
  return name.starts_with(kPreparedPrefix) && name.ends_with(kPreparedSuffix);
}

// A prepared file takes this much of the free space at most: never the
// last of it, which the log's own writes and the tablets' flushes need.
bool RoomFor(const std::string& dir, uint64_t bytes) {
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0) return false;
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  return free_bytes >= 2 * bytes + (64 << 20);
}
// The first prepared file's size; each next one doubles, to segment_bytes.
constexpr uint64_t kFirstPreparedBytes = 4 << 20;

// Creates `path` holding `bytes` zeros, synced. Stops early (Cancelled) once
// `abort` is set.
absl::Status FillWithZeros(const std::string& path, uint64_t bytes,
                           const std::atomic<bool>& abort) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", path);
  static const std::string zeros(1 << 20, '\0');
  absl::Status s;
  for (uint64_t done = 0; done < bytes && s.ok();) {
    if (abort.load()) {
      s = absl::CancelledError("commit log closing");
      break;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), bytes - done));
    const ssize_t w = ::write(fd, zeros.data(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) s = Errno("zero-fill", path);
    if (w > 0) done += static_cast<uint64_t>(w);
  }
  if (s.ok() && ::fdatasync(fd) != 0) s = Errno("fdatasync", path);
  ::close(fd);
  return s;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("fsync directory", dir);
}

// After damage at `from`, the offset of the next record in `data` whose
// checksum holds, or npos.
size_t FindNextGoodRecord(std::string_view data, size_t from) {
  for (size_t off = from + 1; off + kHeaderBytes <= data.size(); ++off) {
    if (data[off] == '\0') {
      // No record starts with a header of zeros (its length would be 0):
      // skip a run of them (the unwritten end of a zero-filled segment).
      const size_t nonzero = data.find_first_not_of('\0', off);
      if (nonzero == std::string_view::npos) return std::string_view::npos;
      if (nonzero - off > kHeaderBytes) {
        off = nonzero - kHeaderBytes;  // the loop's ++off: the first header with a non-zero byte
        continue;
      }
    }
    Record r;
    size_t n;
    if (ParseRecord(data.substr(off), &r, &n) == ParseResult::kOk) return off;
  }
  return std::string_view::npos;
}

// Whether the damaged record at `offset` (of the last segment) is torn: its
// header is zeros, or its part in some 512-byte sector is all zeros (a page
// of the write that never reached the disk). As etcd's WAL decides.
bool TornEntry(std::string_view data, size_t offset) {
  constexpr size_t kSector = 512;
  const std::string_view header = data.substr(offset, kHeaderBytes);
  if (header.find_first_not_of('\0') == std::string_view::npos) return true;
  if (header.size() < kHeaderBytes) return false;
  const uint32_t length = DecodeFixed32(header.data() + 4);
  if (length > kMaxRecordBytes || length < 9) {
    // The header itself cut by an unwritten sector: zeros from inside it on.
    const size_t zeros_from = data.find_last_not_of('\0') + 1;
    return zeros_from > offset && zeros_from < offset + kHeaderBytes;
  }
  const size_t end = std::min(data.size(), offset + kHeaderBytes + length);
  for (size_t sector = offset / kSector * kSector; sector < end; sector += kSector) {
    const size_t from = std::max(sector, offset), to = std::min(sector + kSector, end);
    if (data.substr(from, to - from).find_first_not_of('\0') == std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

CommitLog::CommitLog(const CommitLogOptions& options) : options_(options) {}

CommitLog::~CommitLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // The writer drains what is queued first: no accepted record is dropped.
  if (writer_.joinable()) writer_.join();
  // No zero-filling competes with the last sync.
  {
    absl::MutexLock lock(&prep_mu_);
    prep_stopping_ = true;
  }
  prep_abort_ = true;
  if (preparer_.joinable()) preparer_.join();
  if (fd_ >= 0) {
    // Lazy records durable and the unwritten zeros cut at a clean close.
    if (absl::Status s = FinishSegment(); !s.ok()) MS_LOG_WARN("commit log: {}", s.message());
    ::close(fd_);
  }
  absl::MutexLock lock(&prep_mu_);
  if (prepared_) ::unlink(prepared_->path.c_str());  // never taken
}

absl::StatusOr<std::unique_ptr<CommitLog>> CommitLog::Open(const CommitLogOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("commit log directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create commit log directory ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<CommitLog> log(new CommitLog(options));
  MS_RETURN_IF_ERROR(log->Recover());
  if (options.read_only) {
    absl::MutexLock lock(&log->mu_);
    log->error_ =
        absl::FailedPreconditionError(StrCat("commit log ", options.dir, " is open read-only"));
    return log;
  }
  if (log->resume_lsn_ > log->last_lsn() + 1) {
    absl::MutexLock lock(&log->mu_);
    log->last_lsn_ = log->resume_lsn_ - 1;
    log->synced_lsn_ = log->last_lsn_;
  }
  if (options.preallocate && options.sync && !options.inline_writes) {
    {
      absl::MutexLock lock(&log->prep_mu_);
      log->next_prepare_bytes_ = std::min<uint64_t>(kFirstPreparedBytes, options.segment_bytes);
    }
    log->preparer_ = std::thread([raw = log.get()] {
      SetThreadName("ms-log-prepare");
      raw->PreparerLoop();
    });
  }
  MS_RETURN_IF_ERROR(log->StartSegment(log->last_lsn() + 1));
  if (!options.inline_writes) {
    log->writer_ = std::thread([raw = log.get()] {
      SetThreadName("ms-log-writer");
      raw->WriterLoop();
    });
  }
  return log;
}

absl::Status CommitLog::Recover() {
  if (!options_.read_only) {
    // Leftover prepared files hold nothing.
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(options_.dir)) {
      if (IsPreparedName(entry.path().filename().string()))
        std::filesystem::remove(entry.path(), ignored);
    }
  }
  std::vector<Segment> segments;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir)) {
    uint64_t first;
    if (entry.is_regular_file() && ParseSegmentFileName(entry.path().filename().string(), &first)) {
      segments.push_back(Segment{first, entry.path().string()});
    }
  }
  std::sort(segments.begin(), segments.end(),
            [](const Segment& a, const Segment& b) { return a.first_lsn < b.first_lsn; });
  fresh_ = segments.empty();
  // Ranges skipped on purpose (AdvanceTo): FROM -> TO. A damaged marker
  // counts for nothing (the range is then a gap, as without it).
  std::map<uint64_t, uint64_t> skipped;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir)) {
    unsigned long long from = 0, to = 0;
    char tail = 0;
    const std::string name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "skipped-%llu-%llu%c", &from, &to, &tail) != 2) continue;
    if (ReadChecksummedFile(entry.path().string()).ok()) skipped[from] = to;
  }

  uint64_t last = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    const bool is_last = i + 1 == segments.size();
    MS_ASSIGN_OR_RETURN(std::string data, ReadFile(seg.path));
    std::string_view in = data;
    size_t offset = 0;
    uint64_t expected = seg.first_lsn;
    if (last != 0 && expected != last + 1) {
      auto skip = skipped.find(last + 1);
      const bool known = !gaps_.empty() && gaps_.back().last_good_lsn == last &&
                         gaps_.back().next_good_lsn == seg.first_lsn;  // the damage just before
      if (!known && (skip == skipped.end() || skip->second + 1 != expected)) {
        // A whole segment is missing (or misnamed) between `last` and here.
        gaps_.push_back(LogGap{seg.path, 0, last, seg.first_lsn});
      }
    }
    while (offset < in.size()) {
      Record r;
      size_t n = 0;
      ParseResult result = ParseRecord(in.substr(offset), &r, &n);
      if (result == ParseResult::kOk && r.lsn != expected) result = ParseResult::kCorrupt;
      if (result == ParseResult::kOk) {
        last = r.lsn;
        expected = r.lsn + 1;
        offset += n;
        continue;
      }
      const size_t next = FindNextGoodRecord(in, offset);
      const std::string_view rest = in.substr(offset);
      const bool zeros = rest.find_first_not_of('\0') == std::string_view::npos;
      const bool torn = result == ParseResult::kTruncated || zeros;
      // In a zero-filled segment the last record may be cut anywhere by
      // zeros, not by the end of the file: a damaged record with a part of a
      // sector still all zeros, and no readable record after it, is torn.
      // (Readable records after it are damage, never skipped silently.)
      const bool torn_entry =
          is_last && !zeros && next == std::string_view::npos && TornEntry(in, offset);
      // A segment closed by a crash before its zeros were cut, with the
      // next one going on right after its last record: nothing is missing.
      const bool closed_uncut =
          !is_last && zeros && last != 0 && segments[i + 1].first_lsn == last + 1;
      if ((is_last && next == std::string_view::npos && torn) || torn_entry || closed_uncut) {
        // A write the crash interrupted (never acknowledged), or space never
        // written: cut it off.
        recovery_note_ =
            StrCat("commit log: ", zeros ? "unwritten space" : "torn tail", " in ", seg.path,
                   " at offset ", offset, " (", in.size() - offset,
                   " bytes after the last good record, LSN ", last, "); truncated there");
        if (zeros) {
          MS_LOG_INFO("{}", recovery_note_);
        } else {
          MS_LOG_WARN("{}", recovery_note_);
        }
        if (::truncate(seg.path.c_str(), static_cast<off_t>(offset)) != 0) {
          return Errno("truncate", seg.path);
        }
        // Durable before new records (which may reuse these LSNs) are.
        if (const int fd = ::open(seg.path.c_str(), O_WRONLY | O_CLOEXEC); fd >= 0) {
          const int rc = ::fsync(fd);
          ::close(fd);
          if (rc != 0) return absl::InternalError(StrCat("fsync ", seg.path, " after the cut"));
        }
        break;
      }
      uint64_t next_lsn = 0;
      if (is_last && next == std::string_view::npos) {
        // One complete record (its length fits the file) holds LSN last+1:
        // the log goes on at last+2, so the damage stays a gap between two
        // segments at every later recovery and its LSN is never reused.
        next_lsn = last + 2;
        resume_lsn_ = next_lsn;
        recovery_note_ = StrCat(
            "commit log: corrupt record in ", seg.path, " at offset ", offset, " after LSN ", last,
            " (complete, but its checksum or LSN is wrong): kept for inspection; tablets "
            "that need LSN ",
            last + 1, " are not loaded; new records start at LSN ", next_lsn);
      } else if (next != std::string_view::npos) {
        Record nr;
        size_t nn;
        ParseRecord(in.substr(next), &nr, &nn);
        next_lsn = nr.lsn;
      } else if (!is_last) {
        next_lsn = segments[i + 1].first_lsn;
      }
      gaps_.push_back(LogGap{seg.path, offset, last, next_lsn});
      MS_LOG_ERROR("commit log: damaged records in {} at offset {} after LSN {}{}", seg.path,
                   offset, last,
                   next_lsn != 0 ? StrCat(", readable again from LSN ", next_lsn) : std::string());
      if (next == std::string_view::npos) break;
      offset = next;
      Record nr;
      size_t nn;
      ParseRecord(in.substr(offset), &nr, &nn);
      expected = nr.lsn;
    }
  }
  // A segment is named by the LSN that was next when it started: the log
  // reached the one before, even if every record up to there is in
  // segments since deleted (flushed) and the last holds none yet.
  if (!segments.empty()) last = std::max(last, segments.back().first_lsn - 1);
  // After a process crash the last segment's tail may be written and not
  // synced (lazy records): it counts as synced from here on, so it is
  // made so before tablets replay it and flush. (Earlier segments were
  // synced before the next one began.)
  if (!options_.read_only && options_.sync && !segments.empty()) {
    const int fd = ::open(segments.back().path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Errno("open", segments.back().path);
    if (::fdatasync(fd) != 0) {
      absl::Status s = Errno("fdatasync", segments.back().path);
      ::close(fd);
      return s;
    }
    ::close(fd);
  }
  absl::MutexLock lock(&mu_);
  segments_ = std::move(segments);
  last_lsn_ = last;
  synced_lsn_ = last;
  return absl::OkStatus();
}

absl::Status CommitLog::AdvanceTo(uint64_t next_lsn) {
  uint64_t from;
  std::string empty_segment;
  {
    absl::MutexLock lock(&mu_);
    if (!pending_.empty() || stats_.records > 0) {
      return absl::FailedPreconditionError("commit log: AdvanceTo after appends");
    }
    if (next_lsn <= last_lsn_ + 1) return absl::OkStatus();
    from = last_lsn_ + 1;
    if (!segments_.empty() && segments_.back().first_lsn == from)
      empty_segment = segments_.back().path;
  }
  const std::string marker =
      (std::filesystem::path(options_.dir) / StrCat("skipped-", from, "-", next_lsn - 1)).string();
  MS_RETURN_IF_ERROR(
      WriteChecksummedFile(marker, StrCat("LSNs ", from, " to ", next_lsn - 1,
                                          " were skipped: the log ended before tablets' redo "
                                          "points (it was moved or truncated), and the server was "
                                          "started with --accept-log-loss")));
  MS_RETURN_IF_ERROR(StartSegment(next_lsn));  // nothing is pending: the writer is idle
  {
    absl::MutexLock lock(&mu_);
    last_lsn_ = next_lsn - 1;
    synced_lsn_ = last_lsn_;
    if (!empty_segment.empty()) {
      segments_.erase(std::remove_if(segments_.begin(), segments_.end(),
                                     [&](const Segment& s) { return s.path == empty_segment; }),
                      segments_.end());
    }
  }
  if (!empty_segment.empty()) {
    std::error_code ec;
    std::filesystem::remove(empty_segment, ec);
    if (ec) return absl::InternalError(StrCat("cannot remove ", empty_segment, ": ", ec.message()));
  }
  return SyncDir(options_.dir);
}

absl::Status CommitLog::FinishSegment() {
  bool cut = false;
  if (zeroed_bytes_ > segment_size_) {
    if (::ftruncate(fd_, static_cast<off_t>(segment_size_)) != 0)
      return Errno("cut the unwritten end of commit log segment in", options_.dir);
    cut = true;
  }
  zeroed_bytes_ = 0;
  // Lazy records in the segment: the next sync, in another segment, would
  // not cover them. The cut, if any: so that only the last segment can
  // ever end in zeros.
  if ((unsynced_ || cut) && options_.sync && ::fdatasync(fd_) != 0) {
    // As SyncGroup: whatever errno says, the state of what was written is
    // unknown, so it is never retried (and never taken for a full disk).
    return absl::InternalError(
        StrCat("fdatasync commit log segment in ", options_.dir, ": ", std::strerror(errno)));
  }
  unsynced_ = false;
  return absl::OkStatus();
}

absl::Status CommitLog::MaybeStartSegment(uint64_t first_lsn, size_t bytes) {
  const bool plain = zeroed_bytes_ == 0;
  if (plain || segment_size_ + bytes > zeroed_bytes_) {
    if (std::optional<Prepared> p = TakePrepared()) return StartSegment(first_lsn, std::move(p));
  }
  if (segment_size_ >= options_.segment_bytes) return StartSegment(first_lsn);
  return absl::OkStatus();
}

absl::Status CommitLog::StartSegment(uint64_t first_lsn, std::optional<Prepared> prepared) {
  const std::string path =
      (std::filesystem::path(options_.dir) / SegmentFileName(first_lsn)).string();
  // The segment being closed first: cut and synced before a later one
  // exists, so a crash can leave zeros only at the end of the last.
  if (fd_ >= 0) MS_RETURN_IF_ERROR(FinishSegment());
  int fd = -1;
  uint64_t zeroed = 0;
  if (prepared) {
    if (::rename(prepared->path.c_str(), path.c_str()) == 0) {
      fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      zeroed = prepared->bytes;
    }
    if (fd < 0) {
      MS_LOG_WARN("commit log: cannot use the zero-filled file {} for {}: {}", prepared->path, path,
                  std::strerror(errno));
      ::unlink(prepared->path.c_str());
      zeroed = 0;
    }
  }
  if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create commit log segment", path);
  if (options_.sync) {
    if (absl::Status s = SyncDir(options_.dir); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  auto sync_file = std::make_shared<SyncFile>(::dup(fd));
  if (sync_file->fd < 0) {
    absl::Status s = Errno("duplicate the descriptor of commit log segment", path);
    ::close(fd);
    return s;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  segment_size_ = 0;
  zeroed_bytes_ = zeroed;
  absl::MutexLock lock(&mu_);
  sync_file_ = std::move(sync_file);
  if (zeroed > 0) ++stats_.preallocated_segments;
  // An empty last segment (a crash right after creating it) has this name.
  if (segments_.empty() || segments_.back().path != path)
    segments_.push_back(Segment{first_lsn, path});
  return absl::OkStatus();
}

std::optional<CommitLog::Prepared> CommitLog::TakePrepared() {
  if (!preparer_.joinable()) return std::nullopt;
  absl::MutexLock lock(&prep_mu_);
  // Asked for on the first write (an idle log zero-fills nothing), and
  // again as each is taken.
  prepare_wanted_ = true;
  std::optional<Prepared> p = std::move(prepared_);
  prepared_.reset();
  return p;
}

void CommitLog::PreparerLoop() {
  for (uint64_t n = 1;; ++n) {
    const std::string path =
        (std::filesystem::path(options_.dir) / StrCat(kPreparedPrefix, n, kPreparedSuffix))
            .string();
    uint64_t bytes;
    {
      absl::MutexLock lock(&prep_mu_);
      prep_mu_.Await(absl::Condition(
          +[](CommitLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return log->prep_stopping_ || (log->prepare_wanted_ && !log->prepared_);
          },
          this));
      if (prep_stopping_) return;
      prepare_wanted_ = false;
      bytes = next_prepare_bytes_;
    }
    absl::Status s = RoomFor(options_.dir, bytes)
                         ? FillWithZeros(path, bytes, prep_abort_)
                         : absl::ResourceExhaustedError("too little free space");
    absl::MutexLock lock(&prep_mu_);
    if (!s.ok() || prep_stopping_) {
      ::unlink(path.c_str());
      if (prep_stopping_) return;
      // Plain segments meanwhile; no new attempt for a while (the disk may
      // be full).
      MS_LOG_WARN_LIMITED("commit log: no zero-filled segment ({}); writing plain segments",
                          s.message());
      prep_mu_.AwaitWithTimeout(absl::Condition(&prep_stopping_), absl::Seconds(10));
      if (prep_stopping_) return;
      continue;
    }
    prepared_ = Prepared{path, bytes};
    next_prepare_bytes_ = std::min(bytes * 2, std::max<uint64_t>(options_.segment_bytes, 1));
  }
}

absl::Status CommitLog::Replay(uint64_t after_lsn,
                               const std::function<absl::Status(const Record&)>& fn) const {
  for (const LogGap& gap : gaps_) {
    // The gap hides records (last_good_lsn, next_good_lsn); unknown end
    // means "everything after".
    const bool needed = gap.next_good_lsn == 0 || after_lsn + 1 < gap.next_good_lsn;
    if (needed) {
      return absl::DataLossError(StrCat(
          "commit log ", gap.segment, " is damaged at offset ", gap.offset, " after LSN ",
          gap.last_good_lsn,
          gap.next_good_lsn != 0
              ? StrCat("; records before LSN ", gap.next_good_lsn, " are unreadable")
              : std::string("; no readable record follows"),
          ", and records after LSN ", after_lsn,
          " are needed. Restore the segment from a copy, or accept the loss by moving it aside "
          "(data in it will be gone)"));
    }
  }
  std::vector<Segment> segments;
  {
    absl::MutexLock lock(&mu_);
    segments = segments_;
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    // Skip segments that hold only records at or below after_lsn.
    if (i + 1 < segments.size() && segments[i + 1].first_lsn <= after_lsn + 1) continue;
    MS_ASSIGN_OR_RETURN(std::string data, ReadFile(segments[i].path));
    std::string_view in = data;
    size_t offset = 0;
    while (offset < in.size()) {
      Record r;
      size_t n = 0;
      if (ParseRecord(in.substr(offset), &r, &n) != ParseResult::kOk) {
        // A known gap the caller does not need (checked above), or the tail
        // of the segment being appended to: resynchronize.
        const size_t next = FindNextGoodRecord(in, offset);
        if (next == std::string_view::npos) break;
        offset = next;
        continue;
      }
      offset += n;
      if (r.lsn <= after_lsn) continue;
      MS_RETURN_IF_ERROR(fn(r));
    }
  }
  return absl::OkStatus();
}

absl::Status CommitLog::DeleteSegmentsThrough(uint64_t lsn) {
  std::vector<std::string> doomed;
  {
    absl::MutexLock lock(&mu_);
    // Segment i holds LSNs [first_i, first_{i+1} - 1]; never delete the last.
    size_t keep_from = 0;
    while (keep_from + 1 < segments_.size() && segments_[keep_from + 1].first_lsn - 1 <= lsn) {
      doomed.push_back(segments_[keep_from].path);
      ++keep_from;
    }
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<ptrdiff_t>(keep_from));
  }
  for (const std::string& path : doomed) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("delete", path);
  }
  return absl::OkStatus();
}

uint64_t CommitLog::last_lsn() const {
  absl::MutexLock lock(&mu_);
  return last_lsn_;
}

uint64_t CommitLog::synced_lsn() const {
  absl::MutexLock lock(&mu_);
  return synced_lsn_;
}

CommitLogStats CommitLog::stats() const {
  absl::MutexLock lock(&mu_);
  CommitLogStats s = stats_;
  s.segments = segments_.size();
  return s;
}

}  // namespace megastore::storage::commitlog
