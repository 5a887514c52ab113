// A backup's data files and its catalog on disk (docs/backup.md).
//
// A data file is "MSBK", a format byte, then records:
//
//   masked CRC-32C of the payload (fixed32) | payload length (fixed32) | payload
//
// each payload a backup.Record: the FileHeader first, then chunks of rows or
// log entries (sealed for an encrypted group), then the FileFooter. A file
// is written as NAME.tmp, fsynced and renamed, so a file under its own name
// is whole; the catalog (BACKUP, a checksummed backup.Manifest) names each
// file with its size and the CRC-32C of all its bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "backup/backup.pb.h"

namespace megastore::backup {

inline constexpr uint32_t kFormat = 1;
// No record is larger: a length above it is damage, not a reason to
// allocate.
inline constexpr size_t kMaxRecordBytes = 64 << 20;
inline constexpr char kManifestName[] = "BACKUP";

class FileWriter {
 public:
  // Starts `path` (as `path`.tmp) with `header`.
  static absl::StatusOr<std::unique_ptr<FileWriter>> Create(const std::string& path,
                                                            const FileHeader& header);
  ~FileWriter();  // an unfinished file's .tmp is removed

  absl::Status Add(const Record& record);
  // Writes the footer, fsyncs, renames the file into place, fsyncs the
  // directory; returns the file's catalog entry (path as given).
  absl::StatusOr<FileEntry> Finish(const FileFooter& footer);

 private:
  FileWriter(std::string path, std::FILE* f) : path_(std::move(path)), file_(f) {}
  absl::Status Write(const std::string& bytes);

  const std::string path_;
  std::FILE* file_;
  FileHeader header_;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

class FileReader {
 public:
  // Opens `path` and reads its header. Errors are DataLoss naming the file
  // (and the offset) for damage, NotFound for a missing file.
  static absl::StatusOr<std::unique_ptr<FileReader>> Open(const std::string& path);
  ~FileReader();

  const FileHeader& header() const { return header_; }
  // The next chunk record (plain or sealed) into `record`; false once the
  // footer was read and nothing follows it. A file that ends before its
  // footer, or holds bytes after it, is DataLoss.
  absl::StatusOr<bool> Next(Record* record);
  const FileFooter& footer() const { return footer_; }
  uint64_t bytes() const { return offset_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  FileReader(std::string path, std::FILE* f) : path_(std::move(path)), file_(f) {}
  absl::StatusOr<bool> ReadRecord(Record* record);
  absl::Status Damaged(uint64_t at, const std::string& why) const;

  const std::string path_;
  std::FILE* file_;
  FileHeader header_;
  FileFooter footer_;
  bool done_ = false;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

// The catalog of backup directory `dir`; an empty one if it has none yet.
absl::StatusOr<Manifest> LoadManifest(const std::string& dir);
absl::Status SaveManifest(const std::string& dir, const Manifest& manifest);

// Where a group's files go inside the backup directory: a stable name of
// the group (a digest of its table and root key; the catalog and each
// file's header name it in full).
std::string GroupDirName(const replication::GroupRef& group);
std::string DataFileName(const FileHeader& header);
// The end of `group`'s log chain in the catalog: from its first full
// backup, through the log files that continue it without a gap (a full
// backup marked chain_start restarts it). Nullopt: no full backup yet.
std::optional<uint64_t> ChainEnd(const Manifest& manifest, const replication::GroupRef& group);

// What chunk `index` of a file with `header` is sealed bound to: a sealed
// chunk moved to another file or place does not open.
std::string ChunkBinding(const FileHeader& header, uint64_t index);

}  // namespace megastore::backup
