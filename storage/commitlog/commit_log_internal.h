// Helpers the commit log's source files share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace megastore::storage::commitlog::internal {

// `what` failed on `path`, from errno: ResourceExhausted for a full disk
// or quota, Internal otherwise.
absl::Status Errno(std::string_view what, const std::string& path);

// Stand-ins for the records of a group that could not be written for lack
// of space: same LSNs (the sequence on disk stays gapless), no tablet, so
// no replay applies them — their writes were reported failed.
std::string StandIns(uint64_t first_lsn, size_t n);

}  // namespace megastore::storage::commitlog::internal
