#include "storage/tablet/compaction_filter.h"

#include "base/coding.h"
#include "base/logging.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/row_visibility.h"

namespace megastore::storage {
namespace {

class TabletCompactionFilter : public rocksdb::CompactionFilter {
 public:
  TabletCompactionFilter(std::shared_ptr<const TabletCompactionContext> context, bool major)
      : context_(std::move(context)),
        schema_(context_->schema()),
        major_(major),
        drop_out_of_range_(context_->range_verified.load()),
        // Read as of "forever": RowVisibility's garbage verdict does not
        // depend on the read time, only on the current time for max_age.
        visibility_(schema_.get(), INT64_MAX, context_->env->NowMicros()) {}

  const char* Name() const override { return "megastore.TabletCompactionFilter"; }

  // Called for keys in order, on one thread per compaction; the state below
  // is per compaction, hence `mutable`.
  Decision FilterV2(int /*level*/, const rocksdb::Slice& key, ValueType type,
                    const rocksdb::Slice& value, std::string* /*new_value*/,
                    std::string* /*skip_until*/) const override {
    if (type != ValueType::kValue) return Decision::kKeep;
    key_format::ParsedKey parsed;
    uint64_t seq;
    std::string_view user_value;
    if (!key_format::ParseKey(key.ToStringView(), &parsed) ||
        !key_format::ParseValue(value.ToStringView(), &seq, &user_value)) {
      // Never drop what we cannot understand; reads will report it.
      if (!reported_corruption_) {
        MS_LOG_ERROR("tablet compaction: corrupt entry kept, key {}",
                     HexEncode(key.ToStringView().substr(0, 128)));
        reported_corruption_ = true;
      }
      return Decision::kKeep;
    }
    if (drop_out_of_range_ &&
        (parsed.row_prefix < context_->start_key ||
         (!context_->end_key.empty() && parsed.row_prefix >= context_->end_key))) {
      return Decision::kRemove;
    }
    if (!major_) return Decision::kKeep;
    if (parsed.row_prefix != row_prefix_) {
      row_prefix_.assign(parsed.row_prefix);
      visibility_.StartRow();
    }
    // Tombstones carry the time they were written (8 bytes; none before
    // timestamp_deletes existed).
    const int64_t written = parsed.kind != key_format::EntryKind::kCell && user_value.size() == 8
                                ? static_cast<int64_t>(DecodeFixed64(user_value.data()))
                                : 0;
    return visibility_.Add(parsed, seq, written) == RowVisibility::Verdict::kGarbage
               ? Decision::kRemove
               : Decision::kKeep;
  }

 private:
  std::shared_ptr<const TabletCompactionContext> context_;
  std::shared_ptr<const CompiledSchema> schema_;
  const bool major_;
  const bool drop_out_of_range_;
  mutable RowVisibility visibility_;
  mutable std::string row_prefix_;
  mutable bool reported_corruption_ = false;
};

}  // namespace

TabletCompactionFilterFactory::TabletCompactionFilterFactory(
    std::shared_ptr<const TabletCompactionContext> context)
    : context_(std::move(context)) {}

std::unique_ptr<rocksdb::CompactionFilter> TabletCompactionFilterFactory::CreateCompactionFilter(
    const rocksdb::CompactionFilter::Context& context) {
  const bool major = major_.load() && context.is_manual_compaction && context_->range_verified;
  return std::make_unique<TabletCompactionFilter>(context_, major);
}

}  // namespace megastore::storage
