#include "storage/tablet/tablet.h"

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "base/coding.h"
#include "base/logging.h"
#include "base/random.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kStart = 1'700'000'000'000'000;

TableSchema DefaultSchema() {
  TableSchema s;
  s.set_name("t");
  s.add_families()->set_name("cf");
  auto* v = s.add_families();
  v->set_name("versions");
  v->mutable_gc_rule()->set_max_versions(2);
  auto* age = s.add_families();
  age->set_name("age");
  age->mutable_gc_rule()->set_max_age_micros(1000);
  auto* lg = s.add_locality_groups();
  lg->set_name("side");
  lg->set_compression(LocalityGroup::NONE);
  auto* side = s.add_families();
  side->set_name("aside");
  side->set_locality_group("side");
  return s;
}

}  // namespace

void PrintTo(const Cell& c, std::ostream* os) {
  *os << c.family << ":" << EscapeBytes(c.qualifier) << "@" << c.timestamp << "="
      << EscapeBytes(c.value, 24);
}

namespace {

Cell C(std::string f, std::string q, int64_t ts, std::string v) {
  return Cell{std::move(f), std::move(q), ts, std::move(v)};
}

class TabletTest : public ::testing::Test {
 protected:
  TabletTest() : env_(kStart) {}

  void SetUp() override { Open(); }

  void Open(TabletOptions options = {}, TableSchema schema = DefaultSchema()) {
    tablet_.reset();
    if (options.path.empty()) options.path = dir_.path() + "/tablet";
    auto t = Tablet::Open(options, schema, resources_.get(), &env_);
    ASSERT_TRUE(t.ok()) << t.status();
    tablet_ = std::move(*t);
  }

  std::vector<Cell> Cells(std::string_view row, ReadOptions o = {}) {
    auto r = tablet_->ReadRow(row, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || !r->has_value()) return {};
    return (*r)->cells;
  }

  std::vector<Row> Scan(const RowSet& set, ReadOptions o = {}) {
    std::vector<Row> rows;
    absl::Status s = tablet_->ReadRows(set, o, [&](Row& r) {
      rows.push_back(std::move(r));
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return rows;
  }

  void Set(std::string_view row, std::string f, std::string q, std::string v,
           int64_t ts = kServerTimestamp) {
    ASSERT_TRUE(tablet_->MutateRow(row, {Mutation::SetCell(f, q, v, ts)}).ok());
  }

  TestDir dir_;
  ManualEnv env_;
  std::unique_ptr<TabletResources> resources_ = std::make_unique<TabletResources>();
  std::unique_ptr<Tablet> tablet_;
};

// A shared log that takes every record at once and whose SyncWritten
// fails: one that failed with records written and not synced.
class UnsyncableLog : public TabletLog {
 public:
  absl::StatusOr<uint64_t> AppendAsync(std::string_view, std::string_view, Callback done,
                                       bool) override {
    const uint64_t lsn = ++last_;
    done(absl::OkStatus(), lsn);
    return lsn;
  }
  absl::StatusOr<uint64_t> Append(std::string_view, std::string_view, bool) override {
    return ++last_;
  }
  uint64_t last_lsn() const override { return last_; }
  uint64_t synced_lsn() const override { return 0; }
  absl::Status SyncWritten() override { return absl::InternalError("fdatasync: I/O error"); }

 private:
  std::atomic<uint64_t> last_{0};
};

// A flush makes what it writes durable whatever the log says, so a tablet
// whose shared log cannot be synced first stops the process rather than
// flush records the log may lose.
TEST_F(TabletTest, AFlushWhoseLogCannotBeSyncedStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        megastore::LogToStderr();
        UnsyncableLog log;
        Open(TabletOptions{.log = &log, .log_id = "t1"});
        Set("r", "cf", "q", "v", 5);
        (void)tablet_->Flush();
      },
      "syncing the commit log before a flush: fdatasync: I/O error");
}

TEST_F(TabletTest, MutateRowAsyncWithoutASharedLogWritesBeforeReturning) {
  auto w = std::make_unique<Tablet::RowWrite>();
  w->row = "r";
  w->mutations = {Mutation::SetCell("cf", "q", "v", 5)};
  absl::Status result = absl::UnknownError("not called");
  w->done = [&](absl::Status s) { result = s; };
  // Non-blocking callers are told to retry where they may block: without a
  // shared log the write goes through RocksDB's WAL right here.
  EXPECT_TRUE(IsWouldBlock(tablet_->MutateRowAsync(w, /*may_block=*/false)));
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(tablet_->MutateRowAsync(w).ok());
  EXPECT_EQ(w, nullptr);
  EXPECT_TRUE(result.ok()) << result;
  ASSERT_EQ(Cells("r").size(), 1u);
  // Refused input: an error, `done` not called, the write left to the caller.
  auto bad = std::make_unique<Tablet::RowWrite>();
  bad->row = "r";
  bad->mutations = {Mutation::SetCell("nope", "q", "v")};
  bool called = false;
  bad->done = [&](absl::Status) { called = true; };
  EXPECT_TRUE(absl::IsInvalidArgument(tablet_->MutateRowAsync(bad)));
  EXPECT_NE(bad, nullptr);
  EXPECT_FALSE(called);
}

TEST_F(TabletTest, CellsOfAColumnComeBackNewestFirst) {
  Set("r", "cf", "q", "v1", 10);
  Set("r", "cf", "q", "v3", 30);
  Set("r", "cf", "q", "v2", 20);
  EXPECT_THAT(Cells("r"),
              ElementsAre(C("cf", "q", 30, "v3"), C("cf", "q", 20, "v2"), C("cf", "q", 10, "v1")));
}

TEST_F(TabletTest, ServerAssignsTimestampFromItsClock) {
  Set("r", "cf", "q", "v");
  env_.Advance(absl::Microseconds(5));
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::SetCell("cf", "p", "w")}, 42).ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "p", 42, "w"), C("cf", "q", kStart, "v")));
}

TEST_F(TabletTest, RowsAndFamiliesComeBackInOrderAcrossLocalityGroups) {
  Set("r", "versions", "q", "1", 1);
  Set("r", "aside", "q", "2", 1);
  Set("r", "cf", "b", "3", 1);
  Set("r", "cf", "a", "4", 1);
  EXPECT_THAT(Cells("r"), ElementsAre(C("aside", "q", 1, "2"), C("cf", "a", 1, "4"),
                                      C("cf", "b", 1, "3"), C("versions", "q", 1, "1")));
}

TEST_F(TabletTest, ReadAsOfTimestampSeesNewestVersionAtOrBelowIt) {
  Set("r", "cf", "q", "v10", 10);
  Set("r", "cf", "q", "v20", 20);
  ReadOptions o;
  o.read_timestamp = 15;
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "q", 10, "v10")));
  o.read_timestamp = 20;
  o.filter.cells_per_column = 1;
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "q", 20, "v20")));
  o.read_timestamp = 9;
  EXPECT_TRUE(Cells("r", o).empty());
}

TEST_F(TabletTest, ReadBelowADeleteStillSeesTheOldValue) {
  Set("r", "cf", "q", "old", 10);
  Set("r", "cf", "p", "other", 10);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteRow()}, 20).ok());
  ReadOptions below;
  below.read_timestamp = 19;
  EXPECT_THAT(Cells("r", below), ElementsAre(C("cf", "p", 10, "other"), C("cf", "q", 10, "old")));
  ReadOptions at;
  at.read_timestamp = 20;
  EXPECT_TRUE(Cells("r", at).empty());
  EXPECT_TRUE(Cells("r").empty());
}

TEST_F(TabletTest, DeleteCellsRemovesOnlyItsTimestampRange) {
  for (int64_t ts : {5, 10, 15, 20}) Set("r", "cf", "q", "v" + std::to_string(ts), ts);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("cf", "q", 10, 20)}, 100).ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 20, "v20"), C("cf", "q", 5, "v5")));
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("cf", "q")}, 100).ok());
  EXPECT_TRUE(Cells("r").empty());
}

TEST_F(TabletTest, DeleteFamilyLeavesOtherFamilies) {
  Set("r", "cf", "q", "a", 1);
  Set("r", "versions", "q", "b", 1);
  Set("r", "aside", "q", "c", 1);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteFamily("cf")}).ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("aside", "q", 1, "c"), C("versions", "q", 1, "b")));
}

TEST_F(TabletTest, DeleteRowCoversEveryLocalityGroup) {
  Set("r", "cf", "q", "a", 1);
  Set("r", "aside", "q", "c", 1);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteRow()}).ok());
  EXPECT_TRUE(Cells("r").empty());
}

TEST_F(TabletTest, WritesAfterADeleteAreVisibleWhateverTheirTimestamp) {
  Set("r", "cf", "q", "before", 50);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteRow()}, 100).ok());
  // An older timestamp written after the delete is not masked by it.
  Set("r", "cf", "q", "after-old-ts", 40);
  Set("r", "cf", "q", "after-new-ts", 200);
  EXPECT_THAT(Cells("r"),
              ElementsAre(C("cf", "q", 200, "after-new-ts"), C("cf", "q", 40, "after-old-ts")));
}

TableSchema WithTimestampDeletes(std::optional<int64_t> grace = std::nullopt) {
  TableSchema s = DefaultSchema();
  ColumnFamily* f = s.add_families();
  f->set_name("mvcc");
  f->set_timestamp_deletes(true);
  if (grace) f->set_tombstone_grace_micros(*grace);
  return s;
}

// The write a slow or repeated applier makes: an old version, arriving
// after a later delete. In a timestamp_deletes family it stays deleted.
TEST_F(TabletTest, ALateOldWriteStaysDeletedInATimestampDeletesFamily) {
  Open({}, WithTimestampDeletes());
  Set("r", "mvcc", "v", "old", 100);
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("mvcc", "v", 0, 201)}, 200).ok());
  Set("r", "mvcc", "v", "old", 100);  // the same write again, late
  Set("r", "mvcc", "v", "older", 50);
  EXPECT_TRUE(Cells("r").empty());
  ReadOptions below;
  below.read_timestamp = 150;
  EXPECT_THAT(Cells("r", below),
              ElementsAre(C("mvcc", "v", 100, "old"), C("mvcc", "v", 50, "older")));
  // Later versions are not masked, whenever they arrive.
  Set("r", "mvcc", "v", "new", 300);
  EXPECT_THAT(Cells("r"), ElementsAre(C("mvcc", "v", 300, "new")));
  // With no end, a column delete covers up to its own timestamp.
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("mvcc", "v")}, 400).ok());
  Set("r", "mvcc", "v", "late", 350);
  Set("r", "mvcc", "v", "next", 500);
  EXPECT_THAT(Cells("r"), ElementsAre(C("mvcc", "v", 500, "next")));
  // Family and row deletes: the same, up to their timestamps.
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteFamily("mvcc")}, 600).ok());
  Set("r", "mvcc", "w", "late", 550);
  EXPECT_TRUE(Cells("r").empty());
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteRow()}, 700).ok());
  Set("r", "mvcc", "w", "late", 650);
  Set("r", "cf", "q", "other-family-after-the-row-delete", 650);
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 650, "other-family-after-the-row-delete")));
}

TEST_F(TabletTest, InATimestampDeletesFamilyASetAfterADeleteAtTheSameTimestampWins) {
  Open({}, WithTimestampDeletes());
  ASSERT_TRUE(tablet_
                  ->MutateRow("r",
                              {Mutation::DeleteCells("mvcc", "v", 0, 101),
                               Mutation::SetCell("mvcc", "v", "kept", 100)},
                              100)
                  .ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("mvcc", "v", 100, "kept")));
  ASSERT_TRUE(
      tablet_
          ->MutateRow("r",
                      {Mutation::SetCell("mvcc", "v", "gone", 200), Mutation::DeleteFamily("mvcc")},
                      200)
          .ok());
  EXPECT_TRUE(Cells("r").empty()) << "set, then delete, at one timestamp: deleted";
}

TEST_F(TabletTest, ATimestampDeletesTombstoneSurvivesMajorCompactionsForItsGrace) {
  Open({}, WithTimestampDeletes(/*grace=*/1'000'000));
  Set("r", "mvcc", "v", "old", 100);
  // An old delete (a replica catching up on old log entries): its grace
  // counts from when it was written, not from its timestamp.
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("mvcc", "v", 0, 201)}, 200).ok());
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  Set("r", "mvcc", "v", "old", 100);
  EXPECT_TRUE(Cells("r").empty());
  env_.Advance(absl::Seconds(2));
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  EXPECT_TRUE(Cells("r").empty());
  // The grace is over and the tombstone gone: only a write older than the
  // grace could come back now (docs/tablet.md).
  Set("r", "mvcc", "v", "old", 100);
  EXPECT_THAT(Cells("r"), ElementsAre(C("mvcc", "v", 100, "old")));
}

TEST_F(TabletTest, TombstoneGraceNeedsTimestampDeletes) {
  TableSchema s = DefaultSchema();
  s.mutable_families(0)->set_tombstone_grace_micros(5);
  auto t = Tablet::Open(TabletOptions{.path = dir_.path() + "/bad"}, s, resources_.get(), &env_);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("tombstone_grace_micros needs timestamp_deletes"));
}

TEST_F(TabletTest, MutationsOfOneRowApplyInOrder) {
  ASSERT_TRUE(
      tablet_
          ->MutateRow("r", {Mutation::SetCell("cf", "q", "x", 5), Mutation::DeleteCells("cf", "q")},
                      10)
          .ok());
  EXPECT_TRUE(Cells("r").empty());
  ASSERT_TRUE(
      tablet_
          ->MutateRow("r", {Mutation::DeleteCells("cf", "q"), Mutation::SetCell("cf", "q", "y", 5)},
                      10)
          .ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 5, "y")));
}

TEST_F(TabletTest, MaxVersionsHidesOlderCellsAndDeletedOnesDoNotCount) {
  for (int64_t ts = 1; ts <= 4; ++ts) Set("r", "versions", "q", std::to_string(ts), ts);
  EXPECT_THAT(Cells("r"), ElementsAre(C("versions", "q", 4, "4"), C("versions", "q", 3, "3")));
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteCells("versions", "q", 4, 5)}, 100).ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("versions", "q", 3, "3"), C("versions", "q", 2, "2")));
}

TEST_F(TabletTest, MaxAgeHidesCellsOlderThanNowMinusAge) {
  Set("r", "age", "q", "old", kStart - 2000);
  Set("r", "age", "q", "new", kStart - 10);
  EXPECT_THAT(Cells("r"), ElementsAre(C("age", "q", kStart - 10, "new")));
  env_.Advance(absl::Microseconds(1000));
  EXPECT_TRUE(Cells("r").empty());
}

TEST_F(TabletTest, UnionAndIntersectionGcRules) {
  TableSchema s = DefaultSchema();
  for (auto mode : {GcRule::UNION, GcRule::INTERSECTION}) {
    auto* f = s.add_families();
    f->set_name(mode == GcRule::UNION ? "u" : "i");
    f->mutable_gc_rule()->set_max_versions(1);
    f->mutable_gc_rule()->set_max_age_micros(1000);
    f->mutable_gc_rule()->set_mode(mode);
  }
  ASSERT_TRUE(tablet_->UpdateSchema(s).ok());
  for (const std::string f : {"u", "i"}) {
    Set("r", f, "q", "ancient", kStart - 5000);
    Set("r", f, "q", "recent-1", kStart - 20);
    Set("r", f, "q", "recent-2", kStart - 10);
  }
  // Union: beyond one version OR older than 1000us. Intersection: both.
  EXPECT_THAT(Cells("r"), ElementsAre(C("i", "q", kStart - 10, "recent-2"),
                                      C("i", "q", kStart - 20, "recent-1"),
                                      C("u", "q", kStart - 10, "recent-2")));
}

TEST_F(TabletTest, GcRuleChangeTakesEffectImmediately) {
  for (int64_t ts = 1; ts <= 3; ++ts) Set("r", "cf", "q", std::to_string(ts), ts);
  TableSchema s = DefaultSchema();
  s.mutable_families(0)->mutable_gc_rule()->set_max_versions(1);
  ASSERT_TRUE(tablet_->UpdateSchema(s).ok());
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 3, "3")));
}

TEST_F(TabletTest, CheckAndMutateChoosesBranchByPredicate) {
  Set("r", "cf", "flag", "on", 1);
  RowFilter predicate;
  predicate.qualifier_match = RowFilter::QualifierMatch::kExact;
  predicate.qualifier = "flag";
  predicate.value_range = ByteRange{"on", std::string("on"), true};
  auto matched =
      tablet_->CheckAndMutateRow("r", predicate, {Mutation::SetCell("cf", "t", "yes", 2)},
                                 {Mutation::SetCell("cf", "f", "no", 2)});
  ASSERT_TRUE(matched.ok());
  EXPECT_TRUE(*matched);
  predicate.value_range = ByteRange{"off", std::string("off"), true};
  matched = tablet_->CheckAndMutateRow("r", predicate, {Mutation::SetCell("cf", "t", "yes2", 3)},
                                       {Mutation::SetCell("cf", "f", "no", 3)});
  ASSERT_TRUE(matched.ok());
  EXPECT_FALSE(*matched);
  EXPECT_THAT(Cells("r"),
              ElementsAre(C("cf", "f", 3, "no"), C("cf", "flag", 1, "on"), C("cf", "t", 2, "yes")));
}

TEST_F(TabletTest, ConcurrentCheckAndMutateIsLinearizable) {
  // Four threads each try to claim 200 distinct slots with compare-and-set on
  // a counter cell; every increment must happen exactly once.
  auto read_counter = [&]() -> int64_t {
    ReadOptions o;
    o.filter.cells_per_column = 1;
    auto cells = Cells("counter", o);
    return cells.empty() ? 0 : std::stoll(cells[0].value);
  };
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200;) {
        const int64_t seen = read_counter();
        RowFilter p;
        p.cells_per_column = 1;
        p.value_range = ByteRange{std::to_string(seen), std::to_string(seen), true};
        std::vector<Mutation> set = {Mutation::SetCell("cf", "n", std::to_string(seen + 1))};
        absl::StatusOr<bool> ok = seen == 0
                                      ? tablet_->CheckAndMutateRow("counter", RowFilter{}, {}, set)
                                      : tablet_->CheckAndMutateRow("counter", p, set, {});
        ASSERT_TRUE(ok.ok());
        // For seen == 0 the "false" branch is the successful one.
        if (seen == 0 ? !*ok : *ok) {
          ++successes;
          ++i;
        }
        env_.Advance(absl::Microseconds(1));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(successes.load(), 800);
  EXPECT_EQ(read_counter(), 800);
}

TEST_F(TabletTest, ReadModifyWriteAppendsAndIncrements) {
  ReadModifyWriteRule append{ReadModifyWriteRule::Type::kAppend, "cf", "log", "a", 0};
  ReadModifyWriteRule inc{ReadModifyWriteRule::Type::kIncrement, "cf", "n", "", 5};
  ASSERT_TRUE(tablet_->ReadModifyWriteRow("r", {append, inc}).ok());
  env_.Advance(absl::Microseconds(1));
  append.append_value = "b";
  inc.increment = -7;
  auto row = tablet_->ReadModifyWriteRow("r", {append, inc, inc});
  ASSERT_TRUE(row.ok()) << row.status();
  std::string minus9;
  AppendOrderedUint64(&minus9, static_cast<uint64_t>(int64_t{-9}));
  EXPECT_THAT(row->cells,
              ElementsAre(C("cf", "log", kStart + 1, "ab"), C("cf", "n", kStart + 1, minus9)));
  ReadOptions latest;
  latest.filter.cells_per_column = 1;
  EXPECT_THAT(Cells("r", latest),
              ElementsAre(C("cf", "log", kStart + 1, "ab"), C("cf", "n", kStart + 1, minus9)));
}

TEST_F(TabletTest, ReadModifyWriteStaysNewestWhenTheColumnHasFutureCells) {
  Set("r", "cf", "log", "x", kMaxTimestamp - 1);
  auto row = tablet_->ReadModifyWriteRow(
      "r", {ReadModifyWriteRule{ReadModifyWriteRule::Type::kAppend, "cf", "log", "y", 0}});
  ASSERT_TRUE(row.ok());
  EXPECT_THAT(row->cells, ElementsAre(C("cf", "log", kMaxTimestamp, "xy")));
}

TEST_F(TabletTest, ConcurrentIncrementsAreNotLost) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        ASSERT_TRUE(tablet_
                        ->ReadModifyWriteRow(
                            "c", {ReadModifyWriteRule{ReadModifyWriteRule::Type::kIncrement, "cf",
                                                      "n", "", 1}})
                        .ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  ReadOptions o;
  o.filter.cells_per_column = 1;
  auto cells = Cells("c", o);
  ASSERT_EQ(cells.size(), 1u);
  std::string want;
  AppendOrderedUint64(&want, 1000);
  EXPECT_EQ(cells[0].value, want);
}

TEST_F(TabletTest, IncrementOfNonIntegerOrOverflowFailsAndWritesNothing) {
  Set("r", "cf", "s", "abc", 1);
  ReadModifyWriteRule inc{ReadModifyWriteRule::Type::kIncrement, "cf", "s", "", 1};
  auto bad = tablet_->ReadModifyWriteRow("r", {inc});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("not an 8-byte"));
  std::string max;
  AppendOrderedUint64(&max, static_cast<uint64_t>(INT64_MAX));
  Set("r", "cf", "m", max, 1);
  inc.qualifier = "m";
  EXPECT_EQ(tablet_->ReadModifyWriteRow("r", {inc}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "m", 1, max), C("cf", "s", 1, "abc")));
}

TEST_F(TabletTest, MutateRowsReportsAStatusPerRow) {
  std::vector<RowMutations> entries = {
      {"a", {Mutation::SetCell("cf", "q", "1", 1)}},
      {"b", {Mutation::SetCell("nope", "q", "2", 1)}},
      {"c", {Mutation::SetCell("cf", "q", "3", 1)}},
  };
  auto statuses = tablet_->MutateRows(entries);
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(Scan({}).size(), 2u);
}

TEST_F(TabletTest, ReadRowsOverKeysRangesAndPrefixesInRowOrder) {
  for (const std::string r : {"a", "b", "ba", "bb", "c", "d"}) Set(r, "cf", "q", r, 1);
  RowSet set;
  set.keys = {"d", "a", "zzz"};
  set.ranges = {RowRange{"b", "bb"}, RowRange::Prefix("bb"), RowRange{"a", "b"}};
  std::vector<std::string> keys;
  for (const Row& r : Scan(set)) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre("a", "b", "ba", "bb", "d"));

  ReadOptions limited;
  limited.rows_limit = 2;
  EXPECT_EQ(Scan({}, limited).size(), 2u);

  int seen = 0;
  ASSERT_TRUE(tablet_->ReadRows({}, {}, [&](Row&) { return ++seen < 3; }).ok());
  EXPECT_EQ(seen, 3);
}

TEST_F(TabletTest, FiltersSelectFamiliesQualifiersTimestampsAndValues) {
  Set("r", "cf", "apple", "1", 10);
  Set("r", "cf", "apricot", "2", 20);
  Set("r", "cf", "banana", "3", 30);
  Set("r", "cf", "banana", "4", 40);
  Set("r", "versions", "apple", "5", 50);

  ReadOptions o;
  o.filter.families = {"versions"};
  EXPECT_THAT(Cells("r", o), ElementsAre(C("versions", "apple", 50, "5")));

  o = {};
  o.filter.qualifier_match = RowFilter::QualifierMatch::kPrefix;
  o.filter.qualifier = "ap";
  o.filter.families = {"cf"};
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "apple", 10, "1"), C("cf", "apricot", 20, "2")));

  o = {};
  o.filter.qualifier_match = RowFilter::QualifierMatch::kRange;
  o.filter.qualifier_range = ByteRange{"apricot", std::string("banana"), false};
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "apricot", 20, "2")));
  o.filter.qualifier_range.end_inclusive = true;
  EXPECT_EQ(Cells("r", o).size(), 3u);

  o = {};
  o.filter.qualifier_match = RowFilter::QualifierMatch::kExact;
  o.filter.qualifier = "banana";
  o.filter.timestamp_start = 35;
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "banana", 40, "4")));

  o = {};
  o.filter.value_range = ByteRange{"2", std::string("4"), false};
  EXPECT_THAT(Cells("r", o), ElementsAre(C("cf", "apricot", 20, "2"), C("cf", "banana", 30, "3")));

  o = {};
  o.filter.cells_per_column = 1;
  o.filter.strip_value = true;
  EXPECT_THAT(Cells("r", o),
              ElementsAre(C("cf", "apple", 10, ""), C("cf", "apricot", 20, ""),
                          C("cf", "banana", 40, ""), C("versions", "apple", 50, "")));
}

TEST_F(TabletTest, EdgeCasesBinaryKeysEmptyValuesExtremeTimestamps) {
  const std::string row1("\0\xff\0", 3), row2("\xff\xff", 2), row3("\0", 1);
  const std::string qual("\0q\xff", 3);
  Set(row1, "cf", qual, "", 0);
  Set(row1, "cf", qual, "max", kMaxTimestamp);
  Set(row2, "cf", "", "empty-qualifier", 7);
  Set(row3, "cf", "q", "zero", 1);
  EXPECT_THAT(Cells(row1), ElementsAre(C("cf", qual, kMaxTimestamp, "max"), C("cf", qual, 0, "")));
  std::vector<std::string> keys;
  for (const Row& r : Scan({})) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre(row3, row1, row2));
  ReadOptions at0;
  at0.read_timestamp = 0;
  EXPECT_THAT(Cells(row1, at0), ElementsAre(C("cf", qual, 0, "")));
  // An empty row (all cells deleted) is not returned.
  ASSERT_TRUE(tablet_->MutateRow(row3, {Mutation::DeleteRow()}).ok());
  auto r = tablet_->ReadRow(row3);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

TEST_F(TabletTest, OneMebibyteValuesAndThousandsOfVersions) {
  const std::string big(1 << 20, 'x');
  Set("big", "cf", "q", big, 1);
  auto cells = Cells("big");
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0].value, big);

  for (int64_t ts = 1; ts <= 3000; ++ts) Set("many", "cf", "q", std::to_string(ts), ts);
  EXPECT_EQ(Cells("many").size(), 3000u);
  ReadOptions o;
  o.filter.cells_per_column = 1;
  o.read_timestamp = 1500;
  EXPECT_THAT(Cells("many", o), ElementsAre(C("cf", "q", 1500, "1500")));
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  EXPECT_EQ(Cells("many").size(), 3000u);
}

TEST_F(TabletTest, BadInputIsRejectedWithAClearErrorAndNothingWritten) {
  auto expect = [&](absl::Status s, absl::StatusCode code, std::string_view text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(text)));
  };
  expect(tablet_->MutateRow("r", {Mutation::SetCell("cf", "q", "ok", 1),
                                  Mutation::SetCell("nosuch", "q", "v", 1)}),
         absl::StatusCode::kInvalidArgument, "mutation 1: unknown column family \"nosuch\"");
  expect(tablet_->MutateRow(std::string(4097, 'k'), {Mutation::SetCell("cf", "q", "v")}),
         absl::StatusCode::kInvalidArgument, "4097 bytes; the limit is 4096");
  expect(tablet_->MutateRow("", {Mutation::SetCell("cf", "q", "v")}),
         absl::StatusCode::kInvalidArgument, "must not be empty");
  expect(tablet_->MutateRow(
             "r", {Mutation::SetCell("cf", "q", std::string(kDefaultMaxValueBytes + 1, 'v'))}),
         absl::StatusCode::kInvalidArgument, "the limit is 10485760");
  expect(tablet_->MutateRow("r", {Mutation::SetCell("cf", "q", "v", -5)}),
         absl::StatusCode::kInvalidArgument, "is negative");
  expect(tablet_->MutateRow("r", {Mutation::DeleteCells("cf", "q", 10, 5)}),
         absl::StatusCode::kInvalidArgument, "malformed");
  expect(tablet_->MutateRow("r", {}), absl::StatusCode::kInvalidArgument, "at least one");

  ReadOptions bad;
  bad.filter.families = {"missing"};
  expect(tablet_->ReadRow("r", bad).status(), absl::StatusCode::kInvalidArgument,
         "unknown column family \"missing\"");
  bad = {};
  bad.filter.timestamp_start = 10;
  bad.filter.timestamp_end = 5;
  expect(tablet_->ReadRow("r", bad).status(), absl::StatusCode::kInvalidArgument,
         "timestamp range");
  bad = {};
  bad.filter.qualifier_match = RowFilter::QualifierMatch::kRange;
  bad.filter.qualifier_range = ByteRange{"z", std::string("a"), false};
  expect(tablet_->ReadRows({}, bad, [](Row&) { return true; }), absl::StatusCode::kInvalidArgument,
         "qualifier range is empty or inverted");
  bad = {};
  bad.filter.cells_per_column = -1;
  expect(tablet_->CheckAndMutateRow("r", bad.filter, {}, {}).status(),
         absl::StatusCode::kInvalidArgument, "negative");
  RowSet inverted;
  inverted.ranges = {RowRange{"b", "a"}};
  expect(tablet_->ReadRows(inverted, {}, [](Row&) { return true; }),
         absl::StatusCode::kInvalidArgument, "inverted");

  EXPECT_TRUE(Scan({}).empty());
}

TEST_F(TabletTest, ValueLimitIsConfigurable) {
  TabletOptions o;
  o.path = dir_.path() + "/small";
  o.max_value_bytes = 16;
  Open(o);
  EXPECT_TRUE(tablet_->MutateRow("r", {Mutation::SetCell("cf", "q", std::string(16, 'v'))}).ok());
  EXPECT_EQ(tablet_->MutateRow("r", {Mutation::SetCell("cf", "q", std::string(17, 'v'))}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TabletTest, InvalidSchemaIsRejected) {
  auto open = [&](const TableSchema& s) {
    TabletOptions o;
    o.path = dir_.path() + "/bad";
    return Tablet::Open(o, s, resources_.get(), &env_).status();
  };
  TableSchema s;
  s.add_families()->set_name("bad name");
  EXPECT_THAT(std::string(open(s).message()), HasSubstr("invalid column family name \"bad name\""));
  s.Clear();
  s.add_families()->set_name("f");
  s.add_families()->set_name("f");
  EXPECT_THAT(std::string(open(s).message()), HasSubstr("duplicate column family \"f\""));
  s.Clear();
  auto* f = s.add_families();
  f->set_name("f");
  f->set_locality_group("nowhere");
  EXPECT_THAT(std::string(open(s).message()), HasSubstr("unknown locality group \"nowhere\""));
  s.Clear();
  auto* lg = s.add_locality_groups();
  lg->set_name("g");
  lg->set_block_size(10);
  EXPECT_THAT(std::string(open(s).message()), HasSubstr("block_size 10"));
}

TEST_F(TabletTest, SchemaChangesAddFamiliesAndGroupsButRefuseRemovals) {
  TableSchema s = DefaultSchema();
  auto* lg = s.add_locality_groups();
  lg->set_name("new_group");
  lg->set_in_memory(true);
  auto* f = s.add_families();
  f->set_name("fresh");
  f->set_locality_group("new_group");
  ASSERT_TRUE(tablet_->UpdateSchema(s).ok());
  Set("r", "fresh", "q", "v", 1);
  EXPECT_THAT(Cells("r"), ElementsAre(C("fresh", "q", 1, "v")));

  TableSchema removed = s;
  removed.mutable_families()->RemoveLast();
  EXPECT_EQ(tablet_->UpdateSchema(removed).code(), absl::StatusCode::kFailedPrecondition);
  TableSchema moved = s;
  moved.mutable_families(0)->set_locality_group("side");
  EXPECT_EQ(tablet_->UpdateSchema(moved).code(), absl::StatusCode::kFailedPrecondition);
  // Deletes may start masking by timestamp, but not stop.
  TableSchema by_timestamp = s;
  by_timestamp.mutable_families(0)->set_timestamp_deletes(true);
  ASSERT_TRUE(tablet_->UpdateSchema(by_timestamp).ok());
  EXPECT_EQ(tablet_->UpdateSchema(s).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(tablet_->UpdateSchema(by_timestamp).ok());
  s = by_timestamp;

  // The new group survives a reopen with the new schema.
  TabletOptions o;
  o.path = tablet_->path();
  Open(o, s);
  EXPECT_THAT(Cells("r"), ElementsAre(C("fresh", "q", 1, "v")));
}

TEST_F(TabletTest, DataAndSequenceNumbersSurviveReopen) {
  Set("r", "cf", "q", "v", 10);
  TabletOptions o;
  o.path = tablet_->path();
  Open(o);
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 10, "v")));
  // A delete after reopening must still mask the earlier write: sequence
  // numbers continue, they do not restart.
  ASSERT_TRUE(tablet_->MutateRow("r", {Mutation::DeleteRow()}, 5).ok());
  EXPECT_TRUE(Cells("r").empty());
}

TEST_F(TabletTest, OpeningWithAnotherRangeFailsAndLosesNothing) {
  Set("a", "cf", "q", "kept", 1);
  ASSERT_TRUE(tablet_->Flush().ok());
  TabletOptions o;
  o.path = tablet_->path();
  o.start_row = "m";
  tablet_.reset();
  auto t = Tablet::Open(o, DefaultSchema(), resources_.get(), &env_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("serves rows [\"\", end of table)"));
  o.start_row = "";
  Open(o);
  EXPECT_THAT(Cells("a"), ElementsAre(C("cf", "q", 1, "kept")));
}

TEST_F(TabletTest, RowsOutsideTheRangeAreRefused) {
  TabletOptions o;
  o.path = dir_.path() + "/ranged";
  o.start_row = "b";
  o.end_row = "d";
  Open(o);
  EXPECT_EQ(tablet_->MutateRow("a", {Mutation::SetCell("cf", "q", "v")}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tablet_->ReadRow("d").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(tablet_->MutateRow("c", {Mutation::SetCell("cf", "q", "v")}).ok());
}

// The bytes of every file under `dir` (only those ending in `extension`, if
// given).
std::string ReadAllFiles(const std::string& dir, const std::string& extension = "") {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    if (!extension.empty() && e.path().extension() != extension) continue;
    std::ifstream in(e.path(), std::ios::binary);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

TEST_F(TabletTest, MajorCompactionLeavesNoDeletedOrExpiredDataOnDisk) {
  TabletOptions o;
  o.path = dir_.path() + "/secret";
  TableSchema s = DefaultSchema();
  // Uncompressed, so a leftover secret would be visible in the files.
  auto* lg = s.add_locality_groups();
  lg->set_name("default");
  lg->set_compression(LocalityGroup::NONE);
  Open(o, s);
  Set("r", "cf", "q", "SECRET-DELETED-0123456789", 10);
  Set("r", "versions", "q", "SECRET-OLD-VERSION-0123456789", 1);
  Set("r", "versions", "q", "keep-2", 2);
  Set("r", "versions", "q", "keep-3", 3);
  Set("r", "age", "q", "SECRET-EXPIRED-0123456789", kStart - 5000);
  Set("r", "aside", "q", "SECRET-ROW-DELETED-0123456789", 10);
  ASSERT_TRUE(tablet_->Flush().ok());
  ASSERT_TRUE(
      tablet_
          ->MutateRow("r", {Mutation::DeleteCells("cf", "q"), Mutation::DeleteFamily("aside")}, 20)
          .ok());
  ASSERT_TRUE(tablet_->Flush().ok());
  EXPECT_NE(ReadAllFiles(o.path).find("SECRET-DELETED"), std::string::npos);

  ASSERT_TRUE(tablet_->CompactTablet().ok());
  const std::string files = ReadAllFiles(o.path);
  EXPECT_EQ(files.find("SECRET"), std::string::npos);
  EXPECT_NE(files.find("keep-3"), std::string::npos);
  EXPECT_THAT(Cells("r"),
              ElementsAre(C("versions", "q", 3, "keep-3"), C("versions", "q", 2, "keep-2")));
  EXPECT_EQ(resources_->Stats().major_compactions, 1u);
}

TEST_F(TabletTest, SplitMakesTwoChildrenThatShareTheParentsFiles) {
  for (const std::string r : {"a", "b", "m", "n", "z"}) Set(r, "cf", "q", r, 1);
  Set("n", "aside", "q", "side", 1);
  const std::string left = dir_.path() + "/left", right = dir_.path() + "/right";
  ASSERT_TRUE(tablet_->Split("m", left, right).ok());
  EXPECT_EQ(tablet_->MutateRow("a", {Mutation::SetCell("cf", "q", "v")}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tablet_->Split("n", left + "2", right + "2").code(),
            absl::StatusCode::kFailedPrecondition);

  // SSTables are hard links shared with the parent.
  bool shared = false;
  for (const auto& e : std::filesystem::directory_iterator(left)) {
    struct stat st;
    if (e.path().extension() == ".sst" && ::stat(e.path().c_str(), &st) == 0 && st.st_nlink > 1) {
      shared = true;
    }
  }
  EXPECT_TRUE(shared);

  TabletOptions lo;
  lo.path = left;
  lo.end_row = "m";
  Open(lo);
  std::vector<std::string> keys;
  for (const Row& r : Scan({})) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre("a", "b"));
  EXPECT_EQ(tablet_->ReadRow("m").status().code(), absl::StatusCode::kOutOfRange);

  TabletOptions ro;
  ro.path = right;
  ro.start_row = "m";
  Open(ro);
  keys.clear();
  for (const Row& r : Scan({})) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre("m", "n", "z"));
  EXPECT_THAT(Cells("n"), ElementsAre(C("aside", "q", 1, "side"), C("cf", "q", 1, "n")));
  // Compaction rewrites the child's files without the other half.
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  const std::string files = ReadAllFiles(right, ".sst");
  EXPECT_EQ(files.find(std::string("a\0\x01", 3)), std::string::npos);
  Set("o", "cf", "q", "after-split", 2);
  EXPECT_EQ(Scan({}).size(), 4u);
}

TEST_F(TabletTest, ASplitChildsSizeCountsOnlyItsOwnRows) {
  // Its files are the parent's (hard links) until compacted; a child that
  // reported the parent's size would split again at once.
  Random rng(3);
  for (int i = 0; i < 400; ++i) {
    std::string value(1024, '\0');
    for (char& c : value) c = static_cast<char>(rng.Next());
    char row[16];
    std::snprintf(row, sizeof(row), "r%03d", i);
    Set(row, "cf", "q", value, 1);
  }
  ASSERT_TRUE(tablet_->Flush().ok());
  const uint64_t parent = tablet_->ApproximateSizeBytes();
  EXPECT_GT(parent, 300u << 10);
  const std::string left = dir_.path() + "/left", right = dir_.path() + "/right";
  ASSERT_TRUE(tablet_->Split("r100", left, right).ok());
  TabletOptions lo;
  lo.path = left;
  lo.end_row = "r100";
  Open(lo);
  const uint64_t child = tablet_->ApproximateSizeBytes();
  EXPECT_LT(child, parent / 2) << "a quarter of the rows";
  EXPECT_GT(child, parent / 8);
}

TEST_F(TabletTest, SplitRowMustBeInsideTheRange) {
  EXPECT_EQ(tablet_->Split("", dir_.path() + "/l", dir_.path() + "/r").code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::create_directories(dir_.path() + "/exists");
  EXPECT_EQ(tablet_->Split("m", dir_.path() + "/exists", dir_.path() + "/r").code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(TabletTest, RowCacheServesRepeatedReadsAndNeverAStaleRow) {
  TabletResourcesOptions ro;
  ro.row_cache_bytes = 1 << 20;
  tablet_.reset();
  resources_ = std::make_unique<TabletResources>(ro);
  TabletOptions o;
  o.path = dir_.path() + "/cached";
  Open(o);
  Set("r", "cf", "q", "v1", 1);
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 1, "v1")));
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 1, "v1")));
  EXPECT_GE(resources_->Stats().row_cache_hits, 1u);
  Set("r", "cf", "q", "v2", 2);
  EXPECT_THAT(Cells("r"), ElementsAre(C("cf", "q", 2, "v2"), C("cf", "q", 1, "v1")));
}

TEST_F(TabletTest, StatisticsCountReadsWritesAndBytes) {
  Set("r", "cf", "q", "value", 1);
  ASSERT_TRUE(tablet_->Flush().ok());
  Cells("r");
  Scan({});
  const TabletStats s = resources_->Stats();
  EXPECT_EQ(s.rows_mutated, 1u);
  EXPECT_GT(s.bytes_written, 5u);
  EXPECT_EQ(s.rows_read, 2u);
  EXPECT_EQ(s.cells_read, 2u);
  EXPECT_GE(s.bytes_read, 5u);
  EXPECT_GT(tablet_->ApproximateSizeBytes(), 0u);
  // A point read of a row that is not in the SSTable is answered by the bloom filter.
  Cells("absent");
  EXPECT_GE(resources_->Stats().bloom_useful, 1u);
}

TEST_F(TabletTest, EveryCompressionAndInMemoryGroupWorks) {
  TableSchema s;
  for (auto [name, c, mem] :
       {std::tuple{"z", LocalityGroup::ZSTD, false}, std::tuple{"l", LocalityGroup::LZ4, true},
        std::tuple{"n", LocalityGroup::NONE, false}}) {
    auto* lg = s.add_locality_groups();
    lg->set_name(name);
    lg->set_compression(c);
    lg->set_in_memory(mem);
    lg->set_block_size(4096);
    auto* f = s.add_families();
    f->set_name(std::string("f") + name);
    f->set_locality_group(name);
  }
  TabletOptions o;
  o.path = dir_.path() + "/compression";
  Open(o, s);
  for (int i = 0; i < 200; ++i) {
    const std::string row = "row" + std::to_string(i);
    ASSERT_TRUE(tablet_
                    ->MutateRow(row, {Mutation::SetCell("fz", "q", std::string(100, 'z'), 1),
                                      Mutation::SetCell("fl", "q", std::string(100, 'l'), 1),
                                      Mutation::SetCell("fn", "q", std::string(100, 'n'), 1)})
                    .ok());
  }
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  EXPECT_EQ(Scan({}).size(), 200u);
  EXPECT_EQ(Cells("row7").size(), 3u);
}

}  // namespace
}  // namespace megastore::storage

namespace megastore::storage {
namespace {

TEST_F(TabletTest, WritesAndReadsContinueDuringCompactionsAndFlushes) {
  RealEnv real(7);
  TabletOptions o;
  o.path = dir_.path() + "/busy";
  o.tuning.write_buffer_bytes = 64 << 10;
  tablet_.reset();
  auto t = Tablet::Open(o, DefaultSchema(), resources_.get(), &real);
  ASSERT_TRUE(t.ok()) << t.status();
  tablet_ = std::move(*t);

  std::atomic<bool> done{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 1500; ++i) {
        const std::string row = "w" + std::to_string(w) + "-" + std::to_string(i);
        if (!tablet_->MutateRow(row, {Mutation::SetCell("cf", "q", std::string(200, 'v'))}).ok()) {
          ++errors;
        }
        if (i % 7 == 0 && !tablet_->MutateRow(row, {Mutation::DeleteRow()}).ok()) ++errors;
      }
    });
  }
  std::thread reader([&] {
    while (!done) {
      if (!tablet_->ReadRows({}, {}, [](Row&) { return true; }).ok()) ++errors;
      if (!tablet_->ReadRow("w0-5").ok()) ++errors;
    }
  });
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(tablet_->CompactTablet().ok());
    EXPECT_TRUE(tablet_->Flush().ok());
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_TRUE(tablet_->CompactTablet().ok());
  // Every acknowledged write is there, every acknowledged delete took effect.
  size_t rows = 0;
  ASSERT_TRUE(tablet_->ReadRows({}, {}, [&](Row&) { return ++rows > 0; }).ok());
  EXPECT_EQ(rows, 2u * (1500 - (1500 + 6) / 7));
}

TEST_F(TabletTest, ReadsOfKeysOnlyAnswerAsScansOfTheSameRowsDo) {
  for (const std::string r : {"a", "b", "c", "d", "e"}) {
    Set(r, "cf", "q", r + "1", 10);
    Set(r, "aside", "q", r + "2", 10);
  }
  Set("f", "aside", "only", "x", 10);  // a row in the second locality group only
  RowSet keys;
  keys.keys = {"e", "a", "c", "a", "zzz", "f"};
  RowSet ranges;
  for (const char* k : {"a", "c", "e", "f", "zzz"}) ranges.ranges.push_back(RowRange::Prefix(k));
  // The same rows, cells and order, whatever the filter and limit.
  std::vector<ReadOptions> options(4);
  options[1].filter.families = {"aside"};
  options[2].rows_limit = 2;
  options[3].read_timestamp = 5;
  for (const ReadOptions& o : options) {
    std::vector<Row> by_key = Scan(keys, o), by_range = Scan(ranges, o);
    ASSERT_EQ(by_key.size(), by_range.size());
    for (size_t i = 0; i < by_key.size(); ++i) {
      EXPECT_EQ(by_key[i].key, by_range[i].key);
      EXPECT_EQ(by_key[i].cells, by_range[i].cells);
    }
  }
  std::vector<std::string> got;
  for (const Row& r : Scan(keys)) got.push_back(r.key);
  EXPECT_THAT(got, ElementsAre("a", "c", "e", "f"));
  EXPECT_TRUE(Scan(keys, options[3]).empty()) << "nothing was written at or before 5";
}

TEST_F(TabletTest, NonblockingReadsDeclineWhatTheyCannotDoInMemory) {
  for (int i = 0; i < 50; ++i) Set("k" + std::to_string(100 + i), "cf", "q", "v", 10);
  ReadOptions nonblocking;
  nonblocking.nonblocking_budget = 1000;
  RowSet all;
  // In the memtable: served.
  EXPECT_EQ(Scan(all, nonblocking).size(), 50u);
  auto row = tablet_->ReadRow("k120", nonblocking);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_TRUE(row->has_value());

  // More entries than the budget: declined, before or after delivering rows.
  ReadOptions small = nonblocking;
  small.nonblocking_budget = 10;
  absl::Status s = tablet_->ReadRows(all, small, [](Row&) { return true; });
  EXPECT_TRUE(IsWouldBlock(s)) << s;
  RowSet twenty;
  for (int i = 0; i < 20; ++i) twenty.keys.push_back("k" + std::to_string(100 + i));
  s = tablet_->ReadRows(twenty, small, [](Row&) { return true; });
  EXPECT_TRUE(IsWouldBlock(s)) << s;

  // Flushed and not yet in the block cache: declined; a blocking read
  // loads the blocks, and then the nonblocking one is served.
  ASSERT_TRUE(tablet_->Flush().ok());
  s = tablet_->ReadRows(all, nonblocking, [](Row&) { return true; });
  EXPECT_TRUE(IsWouldBlock(s)) << s;
  EXPECT_TRUE(IsWouldBlock(tablet_->ReadRow("k120", nonblocking).status()));
  EXPECT_EQ(Scan(all).size(), 50u);
  EXPECT_EQ(Scan(all, nonblocking).size(), 50u);
  row = tablet_->ReadRow("k120", nonblocking);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_TRUE(row->has_value());
}

}  // namespace
}  // namespace megastore::storage
