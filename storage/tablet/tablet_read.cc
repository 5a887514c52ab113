// Tablet reads: point reads through the row cache, pooled iterators, and
// range scans.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/tablet/compaction_filter.h"
#include "storage/tablet/key_format.h"
#include "storage/tablet/log_record.h"
#include "storage/tablet/row_builder.h"
#include "storage/tablet/tablet.h"
#include "storage/tablet/tablet_internal.h"

namespace megastore::storage {

using tablet_internal::EncodeRowBound;
using tablet_internal::PointReadOptions;
using tablet_internal::RangeString;
using tablet_internal::ReadBudget;

absl::StatusOr<std::optional<Row>> Tablet::ReadRow(std::string_view row,
                                                   const ReadOptions& options) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateRow(row));
  MS_RETURN_IF_ERROR(ValidateFilter(options.filter, *v->schema));
  return ReadRowInternal(*v, row, options);
}

// The stretches of `row` a read with `filter` must visit, per locality group
// and in key order; empty when the filter names no family and the read must
// visit the whole row. Each group that holds a named family visits its row
// tombstones, then each named family's tombstones and the columns the
// qualifier condition can match: a read of one log position in a root row
// with a hundred thousand of them seeks to it instead of walking them all.
std::vector<std::vector<Tablet::KeySpan>> Tablet::NarrowSpans(const CompiledSchema& schema,
                                                              size_t groups, std::string_view row,
                                                              const RowFilter& filter) {
  std::vector<std::vector<KeySpan>> spans;
  if (filter.families.empty()) return spans;
  std::vector<std::string_view> families(filter.families.begin(), filter.families.end());
  std::sort(families.begin(), families.end());
  families.erase(std::unique(families.begin(), families.end()), families.end());

  std::string row_prefix;
  key_format::AppendRowPrefix(&row_prefix, row);
  // The qualifier condition as a stretch of encoded qualifiers: `q_lower`
  // onwards, before `q_upper` ("" = to the family's end).
  std::string q_lower, q_upper;
  bool whole_family = false;
  switch (filter.qualifier_match) {
    case RowFilter::QualifierMatch::kAll:
      whole_family = true;
      break;
    case RowFilter::QualifierMatch::kExact:
      AppendOrderedBytes(&q_lower, filter.qualifier);
      q_upper = PrefixSuccessor(q_lower);
      break;
    case RowFilter::QualifierMatch::kPrefix:
      // The encoding of every qualifier with this prefix starts with the
      // prefix's encoding minus its terminator.
      AppendOrderedBytes(&q_lower, filter.qualifier);
      q_lower.resize(q_lower.size() - 2);
      q_upper = PrefixSuccessor(q_lower);
      break;
    case RowFilter::QualifierMatch::kRange: {
      const ByteRange& r = filter.qualifier_range;
      AppendOrderedBytes(&q_lower, r.start);
      if (r.end) {
        AppendOrderedBytes(&q_upper, *r.end);
        if (r.end_inclusive) q_upper = PrefixSuccessor(q_upper);
      }
      break;
    }
  }

  spans.resize(groups);
  for (std::string_view family : families) {
    const FamilyInfo* info = schema.FindFamily(family);
    if (info == nullptr || info->locality_group < 0 ||
        static_cast<size_t>(info->locality_group) >= groups) {
      continue;
    }
    std::vector<KeySpan>& g = spans[static_cast<size_t>(info->locality_group)];
    if (g.empty()) g.push_back({StrCat(row_prefix, "\x01"), StrCat(row_prefix, "\x02")});
    const std::string family_prefix = StrCat(row_prefix, family, std::string_view("\0", 1));
    if (whole_family) {
      g.push_back({family_prefix, PrefixSuccessor(family_prefix)});
      continue;
    }
    const std::string tombstones = StrCat(family_prefix, std::string_view("\0\0", 2));
    g.push_back({tombstones, PrefixSuccessor(tombstones)});
    g.push_back({StrCat(family_prefix, q_lower), q_upper.empty() ? PrefixSuccessor(family_prefix)
                                                                 : StrCat(family_prefix, q_upper)});
  }
  return spans;
}

absl::StatusOr<std::optional<Row>> Tablet::ReadRowInternal(const View& view, std::string_view row,
                                                           const ReadOptions& options,
                                                           ReadBudget* shared_budget) {
  RowBuilder builder(view.schema.get(), &options, GcClock(*view.schema));
  builder.StartRow(row);
  ReadBudget own_budget(options);
  ReadBudget& budget = shared_budget != nullptr ? *shared_budget : own_budget;
  const std::vector<std::vector<KeySpan>> spans =
      NarrowSpans(*view.schema, view.groups.size(), row, options.filter);
  if (!spans.empty()) {
    // Seek past what the filter cannot match, and bypass the row cache,
    // which holds whole rows: feeding a large cached row (a busy root row)
    // through the builder costs what the seeks save.
    MS_RETURN_IF_ERROR(ReadSpans(view, spans, &builder, &budget));
    return FinishRead(builder);
  }
  rocksdb::Cache* cache = resources_->row_cache();
  std::string cache_key;
  std::unique_ptr<CachedRow> fresh;
  const size_t stripe = StripeOf(row);
  uint64_t version_before = 0;

  auto feed_cached = [&](const CachedRow& cached) -> absl::Status {
    for (const auto& group : cached.groups) {
      builder.StartLocalityGroup();
      for (const auto& [k, value] : group) MS_RETURN_IF_ERROR(builder.Add(k, value));
    }
    return absl::OkStatus();
  };

  if (cache != nullptr) {
    cache_key = RowCacheKey(row, cache_generation_.load());
    if (rocksdb::Cache::Handle* h = cache->Lookup(cache_key)) {
      const auto* cached = static_cast<const CachedRow*>(cache->Value(h));
      absl::Status s = cached->groups.size() == view.groups.size()
                           ? feed_cached(*cached)
                           : absl::AbortedError("stale view");
      cache->Release(h);
      if (s.ok()) {
        resources_->counters().row_cache_hits.fetch_add(1, std::memory_order_relaxed);
        return FinishRead(builder);
      }
      if (!absl::IsAborted(s)) return s;
      builder.StartRow(row);
    }
    resources_->counters().row_cache_misses.fetch_add(1, std::memory_order_relaxed);
    version_before = row_versions_[stripe].load();
    fresh = std::make_unique<CachedRow>();
    fresh->groups.resize(view.groups.size());
  }

  // Read every locality group's part of the row from one consistent state.
  // One group (the common case) reads through a pooled iterator; several
  // need iterators created together at one sequence number.
  const std::string lower = EncodeRowBound(row);
  std::unique_ptr<PooledIterator> pooled;
  std::string upper;
  rocksdb::Slice upper_slice;
  std::vector<std::unique_ptr<rocksdb::Iterator>> owned;
  std::vector<rocksdb::Iterator*> iters;
  if (view.groups.size() == 1) {
    MS_ASSIGN_OR_RETURN(pooled, AcquireIterator(view.groups[0], budget.memory_only()));
    pooled->upper = PrefixSuccessor(lower);
    pooled->upper_slice = rocksdb::Slice(pooled->upper);
    iters.push_back(pooled->it.get());
  } else {
    upper = PrefixSuccessor(lower);
    upper_slice = rocksdb::Slice(upper);
    rocksdb::ReadOptions ro = PointReadOptions(budget.memory_only());
    ro.iterate_upper_bound = &upper_slice;
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    for (LocalityGroupHandle* g : view.groups) cfs.push_back(g->cf);
    MS_RETURN_IF_ERROR(FromRocksDB(db_->NewIterators(ro, cfs, &iters), "create iterators"));
    for (rocksdb::Iterator* it : iters) owned.emplace_back(it);
  }
  for (size_t g = 0; g < iters.size(); ++g) {
    rocksdb::Iterator* it = iters[g];
    builder.StartLocalityGroup();
    for (it->Seek(lower); it->Valid(); it->Next()) {
      MS_RETURN_IF_ERROR(budget.Visit());
      const std::string_view k = it->key().ToStringView();
      const std::string_view value = it->value().ToStringView();
      MS_RETURN_IF_ERROR(builder.Add(k, value));
      if (fresh != nullptr) {
        fresh->bytes += k.size() + value.size() + 32;
        fresh->groups[g].emplace_back(k, value);
      }
    }
    if (!it->status().ok())
      return budget.Check(it->status(), StrCat("read tablet ", options_.path));
  }
  if (pooled != nullptr) ReleaseIterator(std::move(pooled));

  if (fresh != nullptr) {
    const size_t limit = std::min<size_t>(256 * 1024, resources_->options().row_cache_bytes / 16);
    // A nonblocking read leaves the row uncached rather than wait.
    absl::Mutex& lock = cache_locks_[stripe];
    if (fresh->bytes <= limit && (budget.memory_only() ? lock.TryLock() : (lock.Lock(), true))) {
      if (row_versions_[stripe].load() == version_before) {
        const size_t charge = fresh->bytes;
        cache
            ->Insert(
                cache_key, fresh.release(), charge,
                [](const rocksdb::Slice&, void* value) { delete static_cast<CachedRow*>(value); })
            .PermitUncheckedError();
      }
      lock.Unlock();
    }
  }

  return FinishRead(builder);
}

namespace {
constexpr int kWalkBeforeSeek = 8;
}  // namespace

absl::Status Tablet::ReadSpans(const View& view, const std::vector<std::vector<KeySpan>>& spans,
                               RowBuilder* builder, ReadBudget* budget) {
  // As for whole rows: one group through a pooled iterator, several through
  // iterators created together at one sequence number.
  std::vector<size_t> used;
  for (size_t g = 0; g < spans.size(); ++g) {
    if (!spans[g].empty()) used.push_back(g);
  }
  if (used.empty()) return absl::OkStatus();
  std::unique_ptr<PooledIterator> pooled;
  std::string upper;
  rocksdb::Slice upper_slice;
  std::vector<std::unique_ptr<rocksdb::Iterator>> owned;
  std::vector<rocksdb::Iterator*> iters;
  if (used.size() == 1) {
    MS_ASSIGN_OR_RETURN(pooled, AcquireIterator(view.groups[used[0]], budget->memory_only()));
    pooled->upper = spans[used[0]].back().upper;
    pooled->upper_slice = rocksdb::Slice(pooled->upper);
    iters.push_back(pooled->it.get());
  } else {
    upper = PrefixSuccessor(spans[used[0]].front().lower.substr(
        0, key_format::RowPrefixLength(spans[used[0]].front().lower)));
    upper_slice = rocksdb::Slice(upper);
    rocksdb::ReadOptions ro = PointReadOptions(budget->memory_only());
    ro.iterate_upper_bound = &upper_slice;
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    for (size_t g : used) cfs.push_back(view.groups[g]->cf);
    MS_RETURN_IF_ERROR(FromRocksDB(db_->NewIterators(ro, cfs, &iters), "create iterators"));
    for (rocksdb::Iterator* it : iters) owned.emplace_back(it);
  }
  for (size_t i = 0; i < used.size(); ++i) {
    rocksdb::Iterator* it = iters[i];
    builder->StartLocalityGroup();
    bool positioned = false;  // `it` rests at or past the span's lower bound
    for (const KeySpan& span : spans[used[i]]) {
      // The iterator rests where the last span ended: often already in
      // this one (the spans before were empty), which saves a seek.
      if (!positioned || (it->Valid() && it->key().compare(span.lower) < 0)) {
        it->Seek(span.lower);
        positioned = true;
      }
      // Walk a finished column's next few entries (cheaper than a seek when
      // it has few), then seek past it.
      int walked = 0;
      while (it->Valid()) {
        MS_RETURN_IF_ERROR(budget->Visit());
        const rocksdb::Slice k = it->key();
        if (!span.upper.empty() && k.compare(span.upper) >= 0) break;
        MS_RETURN_IF_ERROR(builder->Add(k.ToStringView(), it->value().ToStringView()));
        const std::string_view finished = builder->FinishedColumn();
        if (finished.empty() || ++walked < kWalkBeforeSeek) {
          if (finished.empty()) walked = 0;
          it->Next();
          continue;
        }
        walked = 0;
        it->Seek(PrefixSuccessor(finished));
      }
      if (!it->status().ok())
        return budget->Check(it->status(), StrCat("read tablet ", options_.path));
    }
  }
  if (pooled != nullptr) ReleaseIterator(std::move(pooled));
  return absl::OkStatus();
}

std::optional<Row> Tablet::FinishRead(RowBuilder& builder) {
  Row out;
  if (!builder.Finish(&out)) return std::nullopt;
  size_t bytes = 0;
  for (const Cell& c : out.cells) bytes += c.value.size();
  auto& counters = resources_->counters();
  counters.rows_read.fetch_add(1, std::memory_order_relaxed);
  counters.cells_read.fetch_add(out.cells.size(), std::memory_order_relaxed);
  counters.bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  return out;
}

absl::StatusOr<std::unique_ptr<Tablet::PooledIterator>> Tablet::AcquireIterator(
    LocalityGroupHandle* group, bool memory_only) {
  std::unique_ptr<PooledIterator> p;
  {
    absl::MutexLock lock(&pool_mu_);
    for (auto it = iterator_pool_.begin(); it != iterator_pool_.end(); ++it) {
      if ((*it)->group == group && (*it)->memory_only == memory_only) {
        p = std::move(*it);
        iterator_pool_.erase(it);
        break;
      }
    }
  }
  if (p != nullptr) {
    // Cheap unless a flush or compaction changed the LSM tree: then it
    // rebuilds. Either way the iterator now sees the latest writes.
    if (rocksdb::Status s = p->it->Refresh(); !s.ok()) {
      if (memory_only && s.IsIncomplete()) return WouldBlockError();
      return FromRocksDB(s, "refresh iterator");
    }
    return p;
  }
  p = std::make_unique<PooledIterator>();
  p->group = group;
  p->memory_only = memory_only;
  rocksdb::ReadOptions ro = PointReadOptions(memory_only);
  ro.iterate_upper_bound = &p->upper_slice;
  p->it.reset(db_->NewIterator(ro, group->cf));
  return p;
}

void Tablet::ReleaseIterator(std::unique_ptr<PooledIterator> p) {
  absl::MutexLock lock(&pool_mu_);
  if (iterator_pool_.size() < kMaxPooledIterators) iterator_pool_.push_back(std::move(p));
}

void Tablet::DropPooledIterators() {
  std::vector<std::unique_ptr<PooledIterator>> dropped;
  absl::MutexLock lock(&pool_mu_);
  dropped.swap(iterator_pool_);
}

absl::Status Tablet::ReadRows(const RowSet& rows, const ReadOptions& options,
                              const std::function<bool(Row&)>& on_row) {
  const auto v = view();
  MS_RETURN_IF_ERROR(ValidateFilter(options.filter, *v->schema));
  if (options.rows_limit < 0) {
    return absl::InvalidArgumentError(StrCat("rows_limit ", options.rows_limit, " is negative"));
  }

  // The row set as sorted, disjoint [lower, upper) ranges of encoded keys,
  // clipped to this tablet; "" as upper means unbounded.
  std::vector<std::pair<std::string, std::string>> ranges;
  auto add_range = [&](std::string lower, std::string upper) {
    if (lower < start_key_) lower = start_key_;
    if (!end_key_.empty() && (upper.empty() || upper > end_key_)) upper = end_key_;
    if (!upper.empty() && lower >= upper) return;
    ranges.emplace_back(std::move(lower), std::move(upper));
  };
  if (rows.keys.empty() && rows.ranges.empty()) add_range(start_key_, end_key_);
  for (const std::string& k : rows.keys) {
    if (k.empty() || k.size() > kMaxRowKeyBytes) {
      return absl::InvalidArgumentError(
          StrCat("row set key \"", EscapeBytes(k), "\" is empty or longer than 4 KiB"));
    }
    std::string lower = EncodeRowBound(k);
    std::string upper = PrefixSuccessor(lower);
    add_range(std::move(lower), std::move(upper));
  }
  for (const RowRange& r : rows.ranges) {
    if (!r.end.empty() && r.end < r.start) {
      return absl::InvalidArgumentError(
          StrCat("row range ", RangeString(r.start, r.end), " is inverted"));
    }
    add_range(EncodeRowBound(r.start), r.end.empty() ? std::string() : EncodeRowBound(r.end));
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& r : ranges) {
    if (!merged.empty() && (merged.back().second.empty() || r.first <= merged.back().second)) {
      if (!merged.back().second.empty() && (r.second.empty() || r.second > merged.back().second)) {
        merged.back().second = r.second;
      }
      continue;
    }
    merged.push_back(std::move(r));
  }

  ReadBudget budget(options);
  if (rows.ranges.empty() && !rows.keys.empty()) {
    // Only keys: point reads, each through the row cache, its bloom filter
    // and a pooled iterator, in key order.
    std::vector<std::string_view> keys(rows.keys.begin(), rows.keys.end());
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    int64_t delivered = 0;
    for (std::string_view k : keys) {
      const std::string encoded = EncodeRowBound(k);
      if (encoded < start_key_ || (!end_key_.empty() && encoded >= end_key_)) continue;
      MS_ASSIGN_OR_RETURN(std::optional<Row> row, ReadRowInternal(*v, k, options, &budget));
      if (!row) continue;
      ++delivered;
      if (!on_row(*row) || (options.rows_limit > 0 && delivered >= options.rows_limit)) break;
    }
    return absl::OkStatus();
  }
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  ro.ignore_range_deletions = true;
  if (budget.memory_only()) ro.read_tier = rocksdb::kBlockCacheTier;
  std::vector<rocksdb::Iterator*> raw_iters;
  if (v->groups.size() == 1) {
    raw_iters.push_back(db_->NewIterator(ro, v->groups[0]->cf));
  } else {
    // Created together, so every group reads the same snapshot.
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    for (LocalityGroupHandle* g : v->groups) cfs.push_back(g->cf);
    MS_RETURN_IF_ERROR(FromRocksDB(db_->NewIterators(ro, cfs, &raw_iters), "create iterators"));
  }
  std::vector<std::unique_ptr<rocksdb::Iterator>> iters(raw_iters.begin(), raw_iters.end());

  RowBuilder builder(v->schema.get(), &options, GcClock(*v->schema));
  int64_t delivered = 0;
  uint64_t cells = 0, bytes = 0;
  Row row;
  std::string prefix;
  absl::Status status;
  for (const auto& [lower, upper] : merged) {
    for (auto& it : iters) it->Seek(lower);
    bool stop = false;
    while (!stop) {
      // The smallest row among the groups' iterators.
      prefix.clear();
      for (auto& it : iters) {
        if (!it->Valid()) continue;
        const std::string_view k = it->key().ToStringView();
        if (!upper.empty() && k >= upper) continue;
        const size_t len = key_format::RowPrefixLength(k);
        if (len == 0) {
          return absl::DataLossError(StrCat("tablet ", options_.path, ": corrupt entry key ",
                                            HexEncode(k.substr(0, 256))));
        }
        if (prefix.empty() || k.substr(0, len) < prefix) prefix.assign(k.substr(0, len));
      }
      if (prefix.empty()) break;
      builder.StartRow();
      for (auto& it : iters) {
        builder.StartLocalityGroup();
        while (it->Valid() && it->key().starts_with(prefix)) {
          MS_RETURN_IF_ERROR(budget.Visit());
          MS_RETURN_IF_ERROR(builder.Add(it->key().ToStringView(), it->value().ToStringView()));
          it->Next();
        }
      }
      if (builder.Finish(&row)) {
        ++delivered;
        cells += row.cells.size();
        for (const Cell& c : row.cells) bytes += c.value.size();
        if (!on_row(row) || (options.rows_limit > 0 && delivered >= options.rows_limit)) {
          stop = true;
        }
      }
    }
    for (auto& it : iters) {
      if (!it->status().ok()) {
        return budget.Check(it->status(), StrCat("scan tablet ", options_.path));
      }
    }
    if (stop) break;
  }
  resources_->counters().rows_read.fetch_add(delivered, std::memory_order_relaxed);
  resources_->counters().cells_read.fetch_add(cells, std::memory_order_relaxed);
  resources_->counters().bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace megastore::storage
