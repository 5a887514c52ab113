#include "backup/backup_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/crypto.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::backup {

namespace {

constexpr char kMagic[] = "MSBK";
constexpr size_t kMagicBytes = 4;
constexpr char kFormatByte = '\x01';

std::string Errno(const std::string& what, const std::string& path) {
  return StrCat(what, " ", path, ": ", std::strerror(errno));
}

}  // namespace

// ---- writing -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FileWriter>> FileWriter::Create(const std::string& path,
                                                               const FileHeader& header) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(StrCat("create the directory of ", path, ": ", ec.message()));
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(Errno("create", tmp));
  std::unique_ptr<FileWriter> w(new FileWriter(path, f));
  w->header_ = header;
  MS_RETURN_IF_ERROR(w->Write(std::string(kMagic, kMagicBytes) + kFormatByte));
  Record r;
  *r.mutable_header() = header;
  MS_RETURN_IF_ERROR(w->Add(r));
  return w;
}

FileWriter::~FileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove((path_ + ".tmp").c_str());
  }
}

absl::Status FileWriter::Write(const std::string& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    return absl::InternalError(Errno("write", path_ + ".tmp"));
  crc_ = crc32c::Extend(crc_, bytes.data(), bytes.size());
  bytes_ += bytes.size();
  return absl::OkStatus();
}

absl::Status FileWriter::Add(const Record& record) {
  if (file_ == nullptr) return absl::FailedPreconditionError(StrCat(path_, " is finished"));
  std::string payload;
  if (!record.SerializeToString(&payload))
    return absl::InternalError(StrCat("a record of ", path_, " does not serialize"));
  if (payload.size() > kMaxRecordBytes)
    return absl::ResourceExhaustedError(StrCat("a record of ", path_, " has ", payload.size(),
                                               " bytes; at most ", kMaxRecordBytes));
  std::string frame;
  PutFixed32(&frame, crc32c::Mask(crc32c::Value(payload)));
  PutFixed32(&frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  return Write(frame);
}

absl::StatusOr<FileEntry> FileWriter::Finish(const FileFooter& footer) {
  Record r;
  *r.mutable_footer() = footer;
  MS_RETURN_IF_ERROR(Add(r));
  const std::string tmp = path_ + ".tmp";
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0)
    return absl::InternalError(Errno("sync", tmp));
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(Errno("close", tmp));
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(Errno("rename into place", tmp));
  }
  MS_RETURN_IF_ERROR(SyncDir(std::filesystem::path(path_).parent_path().string()));
  FileEntry e;
  e.set_path(path_);
  *e.mutable_header() = header_;
  e.set_bytes(bytes_);
  e.set_crc32c(crc_);
  *e.mutable_footer() = footer;
  return e;
}

// ---- reading -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FileReader>> FileReader::Open(const std::string& path) {
  // A regular file only: not a symlink (to anywhere), a FIFO (a read
  // that never ends) or a device.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(StrCat("backup file ", path, " is missing"));
    if (errno == ELOOP)
      return absl::DataLossError(StrCat("backup file ", path, " is a symbolic link"));
    return absl::InternalError(Errno("open", path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError(StrCat("backup file ", path, " is not a regular file"));
  }
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) {
    ::close(fd);
    return absl::InternalError(Errno("open", path));
  }
  std::unique_ptr<FileReader> r(new FileReader(path, f));
  char magic[kMagicBytes + 1];
  const size_t n = std::fread(magic, 1, sizeof magic, f);
  if (n != sizeof magic || std::memcmp(magic, kMagic, kMagicBytes) != 0)
    return r->Damaged(0, "it is not a megastore backup file (no MSBK header)");
  if (magic[kMagicBytes] != kFormatByte)
    return r->Damaged(kMagicBytes, StrCat("unknown format ", static_cast<int>(magic[kMagicBytes]),
                                          " (a newer msadmin wrote it?)"));
  r->crc_ = crc32c::Extend(0, magic, sizeof magic);
  r->offset_ = sizeof magic;
  Record header;
  absl::StatusOr<bool> got = r->ReadRecord(&header);
  if (!got.ok()) return got.status();
  if (!*got || !header.has_header()) return r->Damaged(r->offset_, "its first record is no header");
  r->header_ = header.header();
  if (r->header_.format() != kFormat)
    return r->Damaged(kMagicBytes + 1,
                      StrCat("header format ", r->header_.format(), ", not ", kFormat));
  return r;
}

FileReader::~FileReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status FileReader::Damaged(uint64_t at, const std::string& why) const {
  return absl::DataLossError(StrCat("backup file ", path_, " is damaged at byte ", at, ": ", why));
}

// One record; false at a clean end of file.
absl::StatusOr<bool> FileReader::ReadRecord(Record* record) {
  const uint64_t at = offset_;
  char frame[8];
  const size_t n = std::fread(frame, 1, sizeof frame, file_);
  if (n == 0 && std::feof(file_)) return false;
  if (n != sizeof frame) return Damaged(at, "a record's frame is cut short");
  const uint32_t crc = crc32c::Unmask(DecodeFixed32(frame));
  const uint32_t length = DecodeFixed32(frame + 4);
  if (length > kMaxRecordBytes)
    return Damaged(at, StrCat("a record claims ", length, " bytes; at most ", kMaxRecordBytes));
  std::string payload(length, '\0');
  if (std::fread(payload.data(), 1, length, file_) != length)
    return Damaged(at, StrCat("a record of ", length, " bytes is cut short"));
  if (crc32c::Value(payload) != crc) return Damaged(at, "a record fails its checksum");
  crc_ = crc32c::Extend(crc_, frame, sizeof frame);
  crc_ = crc32c::Extend(crc_, payload.data(), payload.size());
  offset_ += sizeof frame + length;
  if (!record->ParseFromString(payload)) return Damaged(at, "a record does not parse");
  return true;
}

absl::StatusOr<bool> FileReader::Next(Record* record) {
  if (done_) return false;
  const uint64_t at = offset_;
  absl::StatusOr<bool> got = ReadRecord(record);
  if (!got.ok()) return got.status();
  if (!*got) return Damaged(at, "the file ends before its footer (truncated)");
  if (record->has_header()) return Damaged(at, "a second header");
  if (record->has_footer()) {
    footer_ = record->footer();
    done_ = true;
    Record extra;
    absl::StatusOr<bool> more = ReadRecord(&extra);
    if (!more.ok()) return more.status();
    if (*more) return Damaged(offset_, "records follow the footer");
    return false;
  }
  if (!record->has_chunk() && !record->has_sealed_chunk())
    return Damaged(at, "a record of an unknown kind");
  return true;
}

// ---- the catalog -------------------------------------------------------------

absl::StatusOr<Manifest> LoadManifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  absl::StatusOr<std::string> bytes = ReadChecksummedFile(path, 1 << 30);
  Manifest m;
  if (absl::IsNotFound(bytes.status())) {
    m.set_format(kFormat);
    return m;
  }
  if (!bytes.ok()) return bytes.status();
  if (!m.ParseFromString(*bytes))
    return absl::DataLossError(StrCat("backup catalog ", path, " does not parse"));
  if (m.format() != kFormat)
    return absl::FailedPreconditionError(
        StrCat("backup catalog ", path, " has format ", m.format(), ", not ", kFormat));
  return m;
}

absl::Status SaveManifest(const std::string& dir, const Manifest& manifest) {
  std::string bytes;
  if (!manifest.SerializeToString(&bytes))
    return absl::InternalError("the backup catalog does not serialize");
  return WriteChecksummedFile(dir + "/" + kManifestName, bytes);
}

std::string GroupDirName(const replication::GroupRef& group) {
  std::string identity;
  PutLengthPrefixed(&identity, group.table());
  PutLengthPrefixed(&identity, group.root());
  return "groups/" + HexEncode(crypto::Sha256(identity).substr(0, 12));
}

std::string DataFileName(const FileHeader& h) {
  if (h.kind() == FULL) return StrCat(GroupDirName(h.group()), "/full-", h.to(), ".msb");
  return StrCat(GroupDirName(h.group()), "/log-", h.from(), "-", h.to(), ".msb");
}

std::optional<uint64_t> ChainEnd(const Manifest& manifest, const replication::GroupRef& group) {
  std::vector<const FileEntry*> files;
  for (const FileEntry& f : manifest.files())
    if (f.header().group().table() == group.table() && f.header().group().root() == group.root())
      files.push_back(&f);
  // In position order; at equal positions full backups first.
  std::sort(files.begin(), files.end(), [](const FileEntry* a, const FileEntry* b) {
    if (a->header().from() != b->header().from()) return a->header().from() < b->header().from();
    return a->header().kind() == FULL && b->header().kind() != FULL;
  });
  std::optional<uint64_t> end;
  for (const FileEntry* f : files) {
    const FileHeader& h = f->header();
    if (h.kind() == FULL && (!end || h.chain_start())) end = std::max(end.value_or(0), h.to());
  }
  if (!end) return end;
  // Log files extend it wherever they sort (one that began before the
  // full backup that set the end still counts): until nothing moves.
  for (bool moved = true; moved;) {
    moved = false;
    for (const FileEntry* f : files) {
      const FileHeader& h = f->header();
      if (h.kind() == LOG && h.from() <= *end + 1 && h.to() > *end) {
        end = h.to();
        moved = true;
      }
    }
  }
  return end;
}

std::string ChunkBinding(const FileHeader& h, uint64_t index) {
  return StrCat("megastore backup chunk|", h.kind() == FULL ? "full" : "log", "|", h.from(), "|",
                h.to(), "|", index);
}

}  // namespace megastore::backup
