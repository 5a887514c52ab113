// A validated, indexed TableSchema, shared read-only by a tablet's readers,
// writers and compaction filters. Replaced as a whole on schema change.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "storage/model/schema.pb.h"

namespace megastore::storage {

inline constexpr std::string_view kDefaultLocalityGroup = "default";

// Tombstones of a timestamp_deletes family are kept this long by default.
inline constexpr int64_t kDefaultTombstoneGraceMicros = int64_t{24} * 3600 * 1000 * 1000;

struct FamilyInfo {
  std::string name;
  GcRule gc_rule;
  int locality_group = 0;  // index into CompiledSchema::locality_groups()
  // ColumnFamily.timestamp_deletes, and its tombstones' grace (resolved).
  bool timestamp_deletes = false;
  int64_t tombstone_grace_micros = 0;
};

class CompiledSchema {
 public:
  // Validates `schema`. Errors are InvalidArgument and name the offending
  // family or locality group.
  static absl::StatusOr<std::shared_ptr<const CompiledSchema>> Compile(const TableSchema& schema);

  // nullptr if the table has no such family.
  const FamilyInfo* FindFamily(std::string_view name) const;
  // The locality groups in use (every declared one, plus "default" if a
  // family uses it without declaring it), in declaration order.
  const std::vector<LocalityGroup>& locality_groups() const { return groups_; }
  const std::vector<FamilyInfo>& families() const { return families_; }
  const TableSchema& proto() const { return proto_; }
  // Whether any family's GC rule depends on the current time (max_age).
  bool uses_clock() const { return uses_clock_; }
  // The longest tombstone grace of any timestamp_deletes family (row
  // tombstones are kept that long); 0 if there is none.
  int64_t max_tombstone_grace_micros() const { return max_tombstone_grace_; }

  // Whether a tablet may switch from `from` to `to` while open: families and
  // locality groups may be added, GC rules changed and timestamp_deletes
  // turned on; removing a family or locality group, moving a family between
  // groups, turning timestamp_deletes off or changing a group's storage
  // options is refused with FailedPrecondition.
  static absl::Status CheckChange(const CompiledSchema& from, const CompiledSchema& to);

 private:
  TableSchema proto_;
  std::vector<LocalityGroup> groups_;
  std::vector<FamilyInfo> families_;
  absl::flat_hash_map<std::string, size_t> family_index_;
  bool uses_clock_ = false;
  int64_t max_tombstone_grace_ = 0;
};

// [_a-zA-Z0-9][-_.a-zA-Z0-9]*, 1..64 bytes; `what` names the thing in errors.
absl::Status ValidateName(std::string_view name, std::string_view what);

}  // namespace megastore::storage
