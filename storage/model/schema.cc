#include "storage/model/schema.h"

#include "base/coding.h"
#include "base/strings.h"
#include "google/protobuf/util/message_differencer.h"

namespace megastore::storage {

absl::Status ValidateName(std::string_view name, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("invalid ", what, " name \"", EscapeBytes(name), "\": ", why));
  };
  if (name.empty()) return bad("must not be empty");
  if (name.size() > 64) return bad("longer than 64 bytes");
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  if (!word(name[0])) return bad("must start with a letter, digit or '_'");
  for (char c : name) {
    if (!word(c) && c != '-' && c != '.')
      return bad("only letters, digits, '_', '-' and '.' are allowed");
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidateGroup(const LocalityGroup& g) {
  const std::string what = StrCat("locality group \"", g.name(), "\"");
  if (g.has_block_size() && (g.block_size() < 1024 || g.block_size() > 4 * 1024 * 1024)) {
    return absl::InvalidArgumentError(
        StrCat(what, ": block_size ", g.block_size(), " is outside 1 KiB .. 4 MiB"));
  }
  if (g.has_bloom_bits_per_key() && g.bloom_bits_per_key() > 64) {
    return absl::InvalidArgumentError(
        StrCat(what, ": bloom_bits_per_key ", g.bloom_bits_per_key(), " is above 64"));
  }
  if (g.has_zstd_dictionary_bytes() && g.zstd_dictionary_bytes() > 1024 * 1024) {
    return absl::InvalidArgumentError(StrCat(what, ": zstd_dictionary_bytes above 1 MiB"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledSchema>> CompiledSchema::Compile(
    const TableSchema& schema) {
  auto out = std::shared_ptr<CompiledSchema>(new CompiledSchema());
  out->proto_ = schema;
  absl::flat_hash_map<std::string, int> group_index;
  for (const LocalityGroup& g : schema.locality_groups()) {
    if (absl::Status s = ValidateName(g.name(), "locality group"); !s.ok()) return s;
    if (absl::Status s = ValidateGroup(g); !s.ok()) return s;
    if (!group_index.emplace(g.name(), static_cast<int>(out->groups_.size())).second) {
      return absl::InvalidArgumentError(StrCat("duplicate locality group \"", g.name(), "\""));
    }
    out->groups_.push_back(g);
  }
  for (const ColumnFamily& f : schema.families()) {
    if (absl::Status s = ValidateName(f.name(), "column family"); !s.ok()) return s;
    if (out->family_index_.contains(f.name())) {
      return absl::InvalidArgumentError(StrCat("duplicate column family \"", f.name(), "\""));
    }
    if (f.gc_rule().max_versions() < 0 || f.gc_rule().max_age_micros() < 0) {
      return absl::InvalidArgumentError(
          StrCat("column family \"", f.name(), "\": GC limits must not be negative"));
    }
    const std::string group =
        f.locality_group().empty() ? std::string(kDefaultLocalityGroup) : f.locality_group();
    auto it = group_index.find(group);
    if (it == group_index.end()) {
      if (group != kDefaultLocalityGroup) {
        return absl::InvalidArgumentError(StrCat(
            "column family \"", f.name(), "\" names unknown locality group \"", group, "\""));
      }
      LocalityGroup def;
      def.set_name(std::string(kDefaultLocalityGroup));
      it = group_index.emplace(group, static_cast<int>(out->groups_.size())).first;
      out->groups_.push_back(def);
    }
    if (f.has_tombstone_grace_micros() && !f.timestamp_deletes()) {
      return absl::InvalidArgumentError(StrCat(
          "column family \"", f.name(), "\": tombstone_grace_micros needs timestamp_deletes"));
    }
    if (f.tombstone_grace_micros() < 0) {
      return absl::InvalidArgumentError(
          StrCat("column family \"", f.name(), "\": tombstone_grace_micros must not be negative"));
    }
    if (f.gc_rule().max_age_micros() > 0) out->uses_clock_ = true;
    FamilyInfo info{f.name(), f.gc_rule(), it->second};
    info.timestamp_deletes = f.timestamp_deletes();
    if (info.timestamp_deletes) {
      info.tombstone_grace_micros = f.has_tombstone_grace_micros() ? f.tombstone_grace_micros()
                                                                   : kDefaultTombstoneGraceMicros;
      out->max_tombstone_grace_ = std::max(out->max_tombstone_grace_, info.tombstone_grace_micros);
    }
    out->family_index_.emplace(f.name(), out->families_.size());
    out->families_.push_back(std::move(info));
  }
  return std::shared_ptr<const CompiledSchema>(std::move(out));
}

const FamilyInfo* CompiledSchema::FindFamily(std::string_view name) const {
  auto it = family_index_.find(ToAbsl(name));
  return it == family_index_.end() ? nullptr : &families_[it->second];
}

absl::Status CompiledSchema::CheckChange(const CompiledSchema& from, const CompiledSchema& to) {
  for (const FamilyInfo& f : from.families_) {
    const FamilyInfo* g = to.FindFamily(f.name);
    if (g == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("removing column family \"", f.name, "\" from an open tablet is not supported"));
    }
    if (f.timestamp_deletes && !g->timestamp_deletes) {
      return absl::FailedPreconditionError(
          StrCat("column family \"", f.name,
                 "\" masks deletes by timestamp; turning that off would bring back "
                 "old writes that arrived after their delete"));
    }
    if (from.groups_[f.locality_group].name() != to.groups_[g->locality_group].name()) {
      return absl::FailedPreconditionError(StrCat("column family \"", f.name,
                                                  "\" cannot move from locality group \"",
                                                  from.groups_[f.locality_group].name(), "\" to \"",
                                                  to.groups_[g->locality_group].name(), "\""));
    }
  }
  for (const LocalityGroup& g : from.groups_) {
    const LocalityGroup* next = nullptr;
    for (const LocalityGroup& h : to.groups_) {
      if (h.name() == g.name()) next = &h;
    }
    if (next == nullptr) {
      return absl::FailedPreconditionError(StrCat("removing locality group \"", g.name(),
                                                  "\" from an open tablet is not supported"));
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(g, *next)) {
      return absl::FailedPreconditionError(StrCat(
          "changing the storage options of locality group \"", g.name(),
          "\" on an open tablet is not supported; they take effect when the tablet is reopened"));
    }
  }
  return absl::OkStatus();
}

}  // namespace megastore::storage
