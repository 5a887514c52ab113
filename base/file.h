// Whole-file helpers for the few places that keep small files of their own
// (a tablet server's state, log pieces, the lock service's state). Errors
// name the path and the reason.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace megastore {

// The file's bytes; NotFound if it does not exist, ResourceExhausted if it
// holds more than `max_bytes` (a mistaken path to a device or a huge file
// is refused, not read until memory runs out), Internal otherwise.
absl::StatusOr<std::string> ReadFileToString(const std::string& path, size_t max_bytes = 64 << 20);

// Replaces `path` with `data` so that a crash leaves the old or the new
// contents, never a mix: writes `path`.tmp, fsyncs it, renames it over
// `path` and fsyncs the directory.
// `mode`: the new file's permissions (0600 for a secret: it is never
// readable by others, not even briefly).
absl::Status WriteFileAtomically(const std::string& path, const std::string& data, int mode = 0644);

// Metadata files the project keeps for itself carry a header, so that a
// damaged, truncated or emptied one is never taken for a valid (empty or
// different) state:
//   "MSF1" | masked CRC-32C of the payload (fixed32) | payload length
//   (fixed64) | payload
// WriteChecksummedFile writes one atomically (WriteFileAtomically), with
// permissions `mode`.
absl::Status WriteChecksummedFile(const std::string& path, std::string_view payload,
                                  int mode = 0644);
// The payload of a checksummed file. NotFound if the file does not exist;
// FailedPrecondition if it has no header at all (a file from before
// headers, for the caller to decide on); DataLoss naming the file if it is
// empty, truncated, longer than its header says, or fails its checksum.
absl::StatusOr<std::string> ReadChecksummedFile(const std::string& path,
                                                size_t max_bytes = 64 << 20);

// fsyncs a directory (after creating or renaming files in it).
absl::Status SyncDir(const std::string& dir);

// Creates `dir` and any missing parents, each owner-only (0700): data
// directories hold what only the server should read. Directories that
// exist are left as they are. An error names the directory.
absl::Status CreatePrivateDirectories(const std::string& dir);

}  // namespace megastore
