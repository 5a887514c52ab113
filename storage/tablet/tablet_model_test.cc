// Randomized model test: an in-memory reference model and a real tablet get
// the same random mutations and reads, with flushes, major compactions,
// reopens and a split in between; every read must agree.
//
// The model implements the rules of docs/tablet.md directly (it shares no
// code with the tablet's read path). Environment:
//   MS_TABLET_MODEL_OPS   operations per seed (default 20000)
//   MS_TABLET_MODEL_SEEDS how many seeds to run (default 1)
//   MS_SEED               the first seed (default 1); printed on failure
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "base/coding.h"
#include "base/env.h"
#include "base/random.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/tablet/tablet.h"

namespace megastore::storage {
namespace {

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  return v == nullptr ? def : std::atoll(v);
}

struct ModelCell {
  uint64_t seq;
  std::string value;
};

using ColumnKey = std::pair<std::string, std::string>;  // family, qualifier

struct ModelRow {
  // (family, qualifier, ts) -> cell
  std::map<std::tuple<std::string, std::string, int64_t>, ModelCell> cells;
  std::map<int64_t, uint64_t> row_tombstones;                             // T -> seq
  std::map<std::pair<std::string, int64_t>, uint64_t> family_tombstones;  // (family, T) -> seq
  // (family, qualifier, T, start, end) -> seq
  std::map<std::tuple<std::string, std::string, int64_t, int64_t, int64_t>, uint64_t>
      column_tombstones;
};

class Model {
 public:
  explicit Model(TableSchema schema) : schema_(std::move(schema)) {}

  uint64_t NextSeq() { return ++seq_; }

  void Apply(const std::string& row, const std::vector<Mutation>& ms, int64_t now) {
    ModelRow& r = rows_[row];
    for (const Mutation& m : ms) {
      const uint64_t seq = NextSeq();
      switch (m.type) {
        case Mutation::Type::kSetCell:
          r.cells[{m.family, m.qualifier, m.timestamp >= 0 ? m.timestamp : now}] = {seq, m.value};
          break;
        case Mutation::Type::kDeleteCells:
          r.column_tombstones[{m.family, m.qualifier, now, m.start_ts, m.end_ts}] = seq;
          break;
        case Mutation::Type::kDeleteFamily:
          r.family_tombstones[{m.family, now}] = seq;
          break;
        case Mutation::Type::kDeleteRow:
          r.row_tombstones[now] = seq;
          break;
      }
    }
  }

  const GcRule& RuleOf(const std::string& family) const {
    for (const auto& f : schema_.families()) {
      if (f.name() == family) return f.gc_rule();
    }
    ADD_FAILURE() << "no family " << family;
    static GcRule none;
    return none;
  }

  // Classification of every cell of `r` for a read as of `read_ts`.
  struct Verdict {
    bool visible;
    bool garbage;
  };
  std::map<std::tuple<std::string, std::string, int64_t>, Verdict> Classify(const ModelRow& r,
                                                                            int64_t read_ts,
                                                                            int64_t now) const {
    std::map<std::tuple<std::string, std::string, int64_t>, Verdict> out;
    std::map<ColumnKey, int> rank;
    // Cells are in (family, qualifier, ts ascending) order; walk each column
    // newest first.
    for (auto it = r.cells.rbegin(); it != r.cells.rend(); ++it) {
      const auto& [family, qualifier, ts] = it->first;
      const uint64_t seq = it->second.seq;
      bool masked_any = false, masked_visible = false;
      auto mask = [&](int64_t t, uint64_t tomb_seq) {
        if (tomb_seq <= seq) return;
        masked_any = true;
        if (t <= read_ts) masked_visible = true;
      };
      for (const auto& [t, s] : r.row_tombstones) mask(t, s);
      for (const auto& [k, s] : r.family_tombstones) {
        if (k.first == family) mask(k.second, s);
      }
      for (const auto& [k, s] : r.column_tombstones) {
        const auto& [f, q, t, start, end] = k;
        if (f == family && q == qualifier && ts >= start && (end == 0 || ts < end)) mask(t, s);
      }
      const GcRule& rule = RuleOf(family);
      bool too_many = false;
      if (!masked_any) {
        int& n = rank[{family, qualifier}];
        too_many = rule.max_versions() > 0 && n >= rule.max_versions();
        ++n;
      }
      const bool too_old = rule.max_age_micros() > 0 && ts < now - rule.max_age_micros();
      bool collected;
      if (rule.mode() == GcRule::INTERSECTION && rule.max_versions() > 0 &&
          rule.max_age_micros() > 0) {
        collected = too_many && too_old;
      } else {
        collected = too_many || too_old;
      }
      const bool visible = !collected && ts <= read_ts && !masked_visible;
      out[it->first] = Verdict{visible, collected || masked_any};
    }
    return out;
  }

  std::optional<Row> Read(const std::string& key, const ReadOptions& options, int64_t now) const {
    auto it = rows_.find(key);
    if (it == rows_.end()) return std::nullopt;
    const auto verdicts = Classify(it->second, options.read_timestamp, now);
    const RowFilter& f = options.filter;
    Row row;
    row.key = key;
    std::map<ColumnKey, int> per_column;
    // Output order: family, qualifier ascending; timestamp descending.
    std::vector<std::tuple<std::string, std::string, int64_t>> order;
    for (const auto& [k, v] : it->second.cells) order.push_back(k);
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
      if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
      return std::get<2>(a) > std::get<2>(b);
    });
    for (const auto& k : order) {
      if (!verdicts.at(k).visible) continue;
      const auto& [family, qualifier, ts] = k;
      const std::string& value = it->second.cells.at(k).value;
      if (!f.families.empty() &&
          std::find(f.families.begin(), f.families.end(), family) == f.families.end()) {
        continue;
      }
      switch (f.qualifier_match) {
        case RowFilter::QualifierMatch::kAll:
          break;
        case RowFilter::QualifierMatch::kExact:
          if (qualifier != f.qualifier) continue;
          break;
        case RowFilter::QualifierMatch::kPrefix:
          if (qualifier.compare(0, f.qualifier.size(), f.qualifier) != 0) continue;
          break;
        case RowFilter::QualifierMatch::kRange:
          if (qualifier < f.qualifier_range.start) continue;
          if (f.qualifier_range.end &&
              (qualifier > *f.qualifier_range.end ||
               (qualifier == *f.qualifier_range.end && !f.qualifier_range.end_inclusive))) {
            continue;
          }
          break;
      }
      if (ts < f.timestamp_start || (f.timestamp_end != 0 && ts >= f.timestamp_end)) continue;
      int& n = per_column[{family, qualifier}];
      if (f.cells_per_column > 0 && n >= f.cells_per_column) continue;
      ++n;
      if (f.value_range) {
        if (value < f.value_range->start) continue;
        if (f.value_range->end &&
            (value > *f.value_range->end ||
             (value == *f.value_range->end && !f.value_range->end_inclusive))) {
          continue;
        }
      }
      row.cells.push_back(Cell{family, qualifier, ts, f.strip_value ? "" : value});
    }
    if (row.cells.empty()) return std::nullopt;
    return row;
  }

  std::vector<Row> Scan(const std::string& start, const std::string& end, const ReadOptions& o,
                        int64_t now) const {
    std::vector<Row> out;
    for (auto it = rows_.lower_bound(start); it != rows_.end(); ++it) {
      if (!end.empty() && it->first >= end) break;
      if (auto r = Read(it->first, o, now)) {
        out.push_back(std::move(*r));
        if (o.rows_limit > 0 && static_cast<int64_t>(out.size()) >= o.rows_limit) break;
      }
    }
    return out;
  }

  void MajorCompact(int64_t now) {
    for (auto& [key, r] : rows_) {
      const auto verdicts = Classify(r, kMaxTimestamp, now);
      for (auto it = r.cells.begin(); it != r.cells.end();) {
        it = verdicts.at(it->first).garbage ? r.cells.erase(it) : std::next(it);
      }
      r.row_tombstones.clear();
      r.family_tombstones.clear();
      r.column_tombstones.clear();
    }
  }

  void KeepRange(const std::string& start, const std::string& end) {
    for (auto it = rows_.begin(); it != rows_.end();) {
      const bool inside = it->first >= start && (end.empty() || it->first < end);
      it = inside ? std::next(it) : rows_.erase(it);
    }
  }

 private:
  TableSchema schema_;
  uint64_t seq_ = 0;
  std::map<std::string, ModelRow> rows_;
};

TableSchema ModelSchema() {
  TableSchema s;
  s.set_name("model");
  auto* lg = s.add_locality_groups();
  lg->set_name("hot");
  lg->set_compression(LocalityGroup::LZ4);
  lg->set_in_memory(true);
  auto* a = s.add_families();
  a->set_name("a");  // no GC
  auto* b = s.add_families();
  b->set_name("b");
  b->mutable_gc_rule()->set_max_versions(2);
  auto* c = s.add_families();
  c->set_name("c");
  c->set_locality_group("hot");
  c->mutable_gc_rule()->set_max_age_micros(5000);
  auto* d = s.add_families();
  d->set_name("d");
  d->set_locality_group("hot");
  d->mutable_gc_rule()->set_max_versions(1);
  d->mutable_gc_rule()->set_max_age_micros(3000);
  d->mutable_gc_rule()->set_mode(GcRule::INTERSECTION);
  return s;
}

class TabletModelTest : public ::testing::TestWithParam<int> {};

std::string DescribeRows(const std::vector<Row>& rows) {
  std::string out;
  for (const Row& r : rows) {
    out += "row " + EscapeBytes(r.key) + ":";
    for (const Cell& c : r.cells) {
      out += " " + c.family + ":" + EscapeBytes(c.qualifier) + "@" + std::to_string(c.timestamp) +
             "=" + EscapeBytes(c.value, 16);
    }
    out += "\n";
  }
  return out;
}

void RunModel(uint64_t seed, int64_t ops) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with MS_SEED=" + std::to_string(seed) +
               ")");
  Random rng(seed);
  ManualEnv env(1'700'000'000'000'000, seed);
  TestDir dir;
  TabletResourcesOptions ro;
  ro.row_cache_bytes = (seed % 2 == 0) ? (1 << 20) : 0;
  TabletResources resources(ro);
  const TableSchema schema = ModelSchema();
  Model model(schema);

  TabletOptions options;
  options.path = dir.path() + "/t0";
  options.tuning.write_buffer_bytes = 64 << 10;  // small: many flushes and SSTables
  auto opened = Tablet::Open(options, schema, &resources, &env);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<Tablet> tablet = std::move(*opened);
  bool did_split = false;
  int generation = 0;

  const std::vector<std::string> rows = {
      "a",    "b",        "b\x01", std::string("c\0", 2), std::string("c\0d", 3), "m",
      "\xff", "\xff\xff", "zz"};
  const std::vector<std::string> families = {"a", "b", "c", "d"};
  const std::vector<std::string> qualifiers = {"", "q", "q2", std::string("\0", 1), "\xff", "r"};
  auto random_ts = [&]() -> int64_t {
    switch (rng.Uniform(6)) {
      case 0:
        return 0;
      case 1:
        return static_cast<int64_t>(rng.Uniform(20));
      case 2:
        return kMaxTimestamp;
      case 3:
        return env.NowMicros() - static_cast<int64_t>(rng.Uniform(8000));
      default:
        return kServerTimestamp;
    }
  };
  auto random_read_ts = [&]() -> int64_t {
    switch (rng.Uniform(5)) {
      case 0:
        return static_cast<int64_t>(rng.Uniform(25));
      case 1:
        return env.NowMicros() - static_cast<int64_t>(rng.Uniform(10000));
      default:
        return kMaxTimestamp;
    }
  };
  auto random_mutations = [&](size_t max) {
    std::vector<Mutation> ms;
    const size_t n = 1 + rng.Uniform(max);
    for (size_t i = 0; i < n; ++i) {
      const std::string& f = families[rng.Uniform(families.size())];
      const std::string& q = qualifiers[rng.Uniform(qualifiers.size())];
      const uint64_t kind = rng.Uniform(20);
      if (kind < 14) {
        ms.push_back(Mutation::SetCell(
            f, q, rng.OneIn(8) ? "" : "v" + std::to_string(rng.Uniform(1000)), random_ts()));
      } else if (kind < 17) {
        const int64_t start = rng.OneIn(2) ? 0 : static_cast<int64_t>(rng.Uniform(15));
        const int64_t end = rng.OneIn(2) ? 0 : start + 1 + static_cast<int64_t>(rng.Uniform(15));
        ms.push_back(Mutation::DeleteCells(f, q, start, end));
      } else if (kind < 19) {
        ms.push_back(Mutation::DeleteFamily(f));
      } else {
        ms.push_back(Mutation::DeleteRow());
      }
    }
    return ms;
  };
  auto random_filter = [&]() {
    RowFilter f;
    // Reads naming families seek to the stretches of the row they can
    // match; the rest walk the whole row. Both must agree with the model.
    switch (rng.Uniform(6)) {
      case 0:
        f.families = {families[rng.Uniform(families.size())]};
        break;
      case 1:  // two families, possibly in different locality groups
        f.families = {families[rng.Uniform(families.size())],
                      families[rng.Uniform(families.size())]};
        break;
      case 2:
        f.families = {families[rng.Uniform(families.size())]};
        break;
      default:
        break;
    }
    const std::vector<std::string> bounds = {"", "q", std::string("\0", 1), "\xff", "q2", "r"};
    switch (rng.Uniform(8)) {
      case 0:
        f.qualifier_match = RowFilter::QualifierMatch::kExact;
        f.qualifier = qualifiers[rng.Uniform(qualifiers.size())];
        break;
      case 1:
        f.qualifier_match = RowFilter::QualifierMatch::kPrefix;
        f.qualifier = bounds[rng.Uniform(bounds.size())];
        break;
      case 2: {
        f.qualifier_match = RowFilter::QualifierMatch::kRange;
        std::string a = bounds[rng.Uniform(bounds.size())];
        std::string b = bounds[rng.Uniform(bounds.size())];
        if (b < a) std::swap(a, b);
        f.qualifier_range.start = a;
        if (!rng.OneIn(4)) f.qualifier_range.end = b;
        f.qualifier_range.end_inclusive = rng.OneIn(2) || a == b;
        break;
      }
      default:
        break;
    }
    if (rng.OneIn(6)) {
      f.timestamp_start = static_cast<int64_t>(rng.Uniform(10));
      f.timestamp_end =
          rng.OneIn(2) ? 0 : f.timestamp_start + 1 + static_cast<int64_t>(rng.Uniform(1LL << 62));
    }
    if (rng.OneIn(6)) f.value_range = ByteRange{"v3", std::string("v7"), rng.OneIn(2)};
    if (rng.OneIn(4)) f.cells_per_column = 1 + static_cast<int32_t>(rng.Uniform(2));
    if (rng.OneIn(8)) f.strip_value = true;
    return f;
  };
  auto in_range = [&](const std::string& row) { return tablet->ContainsRow(row); };

  for (int64_t op = 0; op < ops; ++op) {
    env.Advance(absl::Microseconds(rng.Uniform(400)));
    const int64_t now = env.NowMicros();
    const std::string& row = rows[rng.Uniform(rows.size())];
    const uint64_t kind = rng.Uniform(1000);
    SCOPED_TRACE("op " + std::to_string(op) + " kind " + std::to_string(kind) + " row " +
                 EscapeBytes(row));
    if (kind < 450) {
      if (!in_range(row)) continue;
      const auto ms = random_mutations(3);
      const int64_t ts = rng.OneIn(3) ? random_ts() : kServerTimestamp;
      ASSERT_TRUE(tablet->MutateRow(row, ms, ts).ok());
      model.Apply(row, ms, ts >= 0 ? ts : now);
    } else if (kind < 700) {
      if (!in_range(row)) continue;
      ReadOptions o;
      o.read_timestamp = random_read_ts();
      o.filter = random_filter();
      auto got = tablet->ReadRow(row, o);
      ASSERT_TRUE(got.ok()) << got.status();
      const auto want = model.Read(row, o, now);
      ASSERT_EQ(DescribeRows(got->has_value() ? std::vector<Row>{**got} : std::vector<Row>{}),
                DescribeRows(want ? std::vector<Row>{*want} : std::vector<Row>{}))
          << "read_ts " << o.read_timestamp;
    } else if (kind < 800) {
      ReadOptions o;
      o.read_timestamp = random_read_ts();
      o.filter = random_filter();
      o.rows_limit = rng.OneIn(3) ? 1 + static_cast<int64_t>(rng.Uniform(3)) : 0;
      std::string start = rng.OneIn(3) ? "" : rows[rng.Uniform(rows.size())];
      std::string end = rng.OneIn(3) ? "" : rows[rng.Uniform(rows.size())];
      if (!end.empty() && end < start) std::swap(start, end);
      RowSet set;
      set.ranges.push_back(RowRange{start, end});
      std::vector<Row> got;
      ASSERT_TRUE(tablet
                      ->ReadRows(set, o,
                                 [&](Row& r) {
                                   got.push_back(std::move(r));
                                   return true;
                                 })
                      .ok());
      std::string lo = std::max(start, tablet->start_row());
      std::string hi = end;
      if (!tablet->end_row().empty() && (hi.empty() || hi > tablet->end_row()))
        hi = tablet->end_row();
      const auto want = (hi.empty() || lo < hi) ? model.Scan(lo, hi, o, now) : std::vector<Row>{};
      ASSERT_EQ(DescribeRows(got), DescribeRows(want))
          << "scan [" << EscapeBytes(start) << ", " << EscapeBytes(end) << ")";
    } else if (kind < 880) {
      if (!in_range(row)) continue;
      RowFilter predicate = random_filter();
      const auto yes = random_mutations(2);
      const auto no = random_mutations(2);
      ReadOptions check;
      check.filter = predicate;
      const bool want = model.Read(row, check, now).has_value();
      auto got = tablet->CheckAndMutateRow(row, predicate, yes, no);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, want);
      model.Apply(row, want ? yes : no, now);
    } else if (kind < 930) {
      if (!in_range(row)) continue;
      const std::string& f = families[rng.Uniform(families.size())];
      const std::string& q = qualifiers[rng.Uniform(qualifiers.size())];
      ReadOptions latest;
      latest.filter.families = {f};
      latest.filter.qualifier_match = RowFilter::QualifierMatch::kExact;
      latest.filter.qualifier = q;
      latest.filter.cells_per_column = 1;
      const auto old = model.Read(row, latest, now);
      const std::string suffix = "+" + std::to_string(rng.Uniform(10));
      ReadModifyWriteRule rule;
      rule.type = ReadModifyWriteRule::Type::kAppend;
      rule.family = f;
      rule.qualifier = q;
      rule.append_value = suffix;
      auto got = tablet->ReadModifyWriteRow(row, {rule});
      ASSERT_TRUE(got.ok()) << got.status();
      const int64_t old_ts = old ? old->cells[0].timestamp : -1;
      const int64_t ts = std::max(now, old_ts < kMaxTimestamp ? old_ts + 1 : kMaxTimestamp);
      const std::string value = (old ? old->cells[0].value : "") + suffix;
      ASSERT_EQ(got->cells.size(), 1u);
      ASSERT_EQ(got->cells[0], (Cell{f, q, ts, value}));
      model.Apply(row, {Mutation::SetCell(f, q, value, ts)}, now);
    } else if (kind < 960) {
      ASSERT_TRUE(tablet->Flush().ok());
    } else if (kind < 975) {
      ASSERT_TRUE(tablet->CompactTablet().ok());
      model.MajorCompact(now);
    } else if (kind < 990) {
      const std::string start = tablet->start_row(), end = tablet->end_row();
      const std::string path = tablet->path();
      tablet.reset();
      TabletOptions o = options;
      o.path = path;
      o.start_row = start;
      o.end_row = end;
      auto reopened = Tablet::Open(o, schema, &resources, &env);
      ASSERT_TRUE(reopened.ok()) << reopened.status();
      tablet = std::move(*reopened);
    } else if (!did_split && op > ops / 3) {
      did_split = true;
      const std::string split = "c";
      const std::string left = dir.path() + "/left" + std::to_string(++generation);
      const std::string right = dir.path() + "/right" + std::to_string(generation);
      ASSERT_TRUE(tablet->Split(split, left, right).ok());
      ASSERT_EQ(tablet->MutateRow("a", {Mutation::SetCell("a", "q", "x")}).code(),
                absl::StatusCode::kFailedPrecondition);
      const bool keep_left = rng.OneIn(2);
      TabletOptions o = options;
      o.path = keep_left ? left : right;
      o.start_row = keep_left ? "" : split;
      o.end_row = keep_left ? split : "";
      tablet.reset();
      auto child = Tablet::Open(o, schema, &resources, &env);
      ASSERT_TRUE(child.ok()) << child.status();
      tablet = std::move(*child);
      model.KeepRange(o.start_row, o.end_row);
    }
  }
}

TEST(TabletModelTest, RandomOperationsAgreeWithTheReferenceModel) {
  const int64_t ops = EnvInt("MS_TABLET_MODEL_OPS", 20000);
  const int64_t seeds = EnvInt("MS_TABLET_MODEL_SEEDS", 1);
  const uint64_t first = static_cast<uint64_t>(EnvInt("MS_SEED", 1));
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    RunModel(seed, ops);
    if (HasFatalFailure()) return;
  }
}

TEST(TabletModelTest, RowCacheSeedAgreesToo) {
  // Even seeds run with the row cache on; run one even seed in CI too.
  RunModel(2, EnvInt("MS_TABLET_MODEL_OPS", 20000) / 4);
}

}  // namespace
}  // namespace megastore::storage
