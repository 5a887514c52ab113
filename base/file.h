// Whole-file helpers for the few places that keep small files of their own
// (a tablet server's state, log pieces, the lock service's state). Errors
// name the path and the reason.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace megastore {

// The file's bytes; NotFound if it does not exist, Internal otherwise.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Replaces `path` with `data` so that a crash leaves the old or the new
// contents, never a mix: writes `path`.tmp, fsyncs it, renames it over
// `path` and fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);

// fsyncs a directory (after creating or renaming files in it).
absl::Status SyncDir(const std::string& dir);

}  // namespace megastore
