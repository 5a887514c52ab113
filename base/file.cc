#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore {

namespace {

absl::Status Errno(std::string_view what, const std::string& path) {
  const int e = errno;
  if (e == ENOENT) return absl::NotFoundError(StrCat(what, " ", path, ": ", std::strerror(e)));
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(e)));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string data;
  char buf[1 << 16];
  while (true) {
    if (data.size() > max_bytes) {
      ::close(fd);
      return absl::ResourceExhaustedError(
          StrCat(path, " holds more than ", max_bytes, " bytes: not the file meant"));
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = Errno("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& data, int mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // O_CREAT applies `mode` only to a new file
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = Errno("cannot write", tmp);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = Errno("cannot sync", tmp);
    ::close(fd);
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return Errno(StrCat("cannot rename ", tmp, " to"), path);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncDir(dir.empty() ? "." : dir);
}

namespace {

constexpr std::string_view kChecksummedMagic = "MSF1";
constexpr size_t kChecksummedHeader = 4 + 4 + 8;

}  // namespace

absl::Status WriteChecksummedFile(const std::string& path, std::string_view payload, int mode) {
  std::string data;
  data.reserve(kChecksummedHeader + payload.size());
  data.append(kChecksummedMagic);
  PutFixed32(&data, crc32c::Mask(crc32c::Value(payload)));
  PutFixed64(&data, payload.size());
  data.append(payload);
  return WriteFileAtomically(path, data, mode);
}

absl::StatusOr<std::string> ReadChecksummedFile(const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::string> read = ReadFileToString(path, max_bytes);
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  if (data.empty())
    return absl::DataLossError(StrCat(path, " is empty (damaged): its contents are lost"));
  const std::string_view magic = kChecksummedMagic;
  if (data.size() < magic.size() && std::memcmp(data.data(), magic.data(), data.size()) == 0) {
    return absl::DataLossError(
        StrCat(path, " is truncated (", data.size(), " bytes, shorter than its header)"));
  }
  if (data.size() < magic.size() || std::memcmp(data.data(), magic.data(), magic.size()) != 0) {
    return absl::FailedPreconditionError(StrCat(path, " has no checksum header"));
  }
  if (data.size() < kChecksummedHeader) {
    return absl::DataLossError(
        StrCat(path, " is truncated (", data.size(), " bytes, shorter than its header)"));
  }
  const uint32_t crc = crc32c::Unmask(DecodeFixed32(data.data() + 4));
  const uint64_t length = DecodeFixed64(data.data() + 8);
  if (length != data.size() - kChecksummedHeader) {
    return absl::DataLossError(StrCat(path, " is damaged: its header says ", length,
                                      " bytes follow, ", data.size() - kChecksummedHeader, " do"));
  }
  std::string payload = data.substr(kChecksummedHeader);
  if (crc32c::Value(payload) != crc)
    return absl::DataLossError(StrCat(path, " is damaged: checksum mismatch"));
  return payload;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("cannot fsync directory", dir);
}

absl::Status CreatePrivateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("no directory given");
  std::string path;
  size_t at = 0;
  while (at != std::string::npos) {
    const size_t slash = dir.find('/', at + 1);
    path = dir.substr(0, slash);
    at = slash;
    if (path.empty() || path == "/") continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      return Errno("cannot create directory", path);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno("cannot create directory", dir);
  if (!S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(StrCat(dir, " exists and is not a directory"));
  return absl::OkStatus();
}

}  // namespace megastore
