// Checking a backup directory (docs/backup.md, `msadmin backup verify`)
// and reading a group's data back out of it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backup/backup.pb.h"
#include "base/transport.h"

namespace megastore::backup {

struct VerifyOptions {
  std::string dir;
  // With a transport and a datacenter's replication server: sealed chunks
  // are opened there (proving the key still opens them); without, they are
  // checked against their checksums only.
  Transport* transport = nullptr;
  std::string replication;
  absl::Duration timeout = absl::Seconds(30);
  // Instead of the two above: how sealed chunks are opened.
  std::function<absl::StatusOr<std::string>(const FileHeader&, const std::string&,
                                            const std::string&)>
      open;
};

struct VerifyReport {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t chunks = 0;
  uint64_t sealed_opened = 0;  // sealed chunks opened at the datacenter
  uint64_t sealed_unchecked = 0;
  // Every problem, naming the file: damaged, missing, not matching the
  // catalog, a gap in a group's chain of files.
  std::vector<std::string> problems;
  // Files in the directory the catalog does not name (left by a crash).
  std::vector<std::string> strays;
};

// Reads every file the catalog names, end to end. Errors: the catalog
// itself cannot be read (the report lists everything else).
absl::StatusOr<VerifyReport> VerifyBackup(const VerifyOptions& options);

// The plaintext chunks of one catalog file, in order: sealed ones opened
// through `open` (which gets the file's header, the chunk's binding and
// its sealed bytes); without `open`, sealed chunks are checked against
// their checksums only and not passed to `each`. DataLoss naming the file
// for any damage.
using OpenChunk = std::function<absl::StatusOr<std::string>(
    const FileHeader& header, const std::string& binding, const std::string& sealed)>;
absl::Status ReadChunks(const std::string& dir, const FileEntry& file, const OpenChunk& open,
                        const std::function<absl::Status(Chunk&)>& each);

// An OpenChunk that asks a datacenter's replication server (repl.SealBackup
// with `open`).
OpenChunk OpenAt(Transport* transport, std::string replication, absl::Duration timeout);
// ... the replication server of the datacenter that sealed each file (its
// header says which), from `replication_of` (datacenter -> address).
OpenChunk OpenAtSource(Transport* transport, std::map<std::string, std::string> replication_of,
                       absl::Duration timeout);

}  // namespace megastore::backup
