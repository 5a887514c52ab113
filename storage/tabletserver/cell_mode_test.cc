// The tablet server in a cell: tablets assigned by the master on a shared
// data root, dead servers' log pieces replayed, "not serving" answers.
#include <filesystem>

#include "base/file.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/commitlog/log_format.h"
#include "storage/tablet/log_record.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TableSchema Schema() {
  TableSchema s;
  s.set_name("t");
  s.add_families()->set_name("cf");
  return s;
}

TabletEntry Entry(const std::string& id, const std::string& start = "",
                  const std::string& end = "") {
  TabletEntry e;
  e.set_table("t");
  e.set_id(id);
  e.set_start_row(start);
  e.set_end_row(end);
  return e;
}

class CellModeTest : public ::testing::Test {
 protected:
  std::unique_ptr<TabletServer> Open(const std::string& log_name) {
    TabletServerOptions o;
    o.data_dir = dir_.path();
    o.cell_log_name = log_name;
    o.maintenance_interval = absl::ZeroDuration();
    o.sync_log = false;
    auto s = TabletServer::Open(o, &env_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string Value(TabletServer& s, const std::string& row) {
    auto r = s.ReadRow("t", row);
    if (!r.ok() || !r->has_value() || (*r)->cells.empty()) return "<none>";
    return (*r)->cells[0].value;
  }

  // A piece of log `log` for tablet `id` (what the master's log split
  // writes): one record per (lsn, row, value).
  void WritePiece(const std::string& id, const std::string& log,
                  const std::vector<std::tuple<uint64_t, std::string, std::string>>& records) {
    std::string data;
    for (const auto& [lsn, row, value] : records) {
      std::string payload;
      EncodeLogRecord(&payload, row, 1000 + static_cast<int64_t>(lsn),
                      {Mutation::SetCell("cf", "q", value)});
      commitlog::AppendRecord(&data, lsn, id, payload);
    }
    fs::create_directories(dir_.path() + "/recovered/" + id);
    ASSERT_TRUE(WriteFileAtomically(dir_.path() + "/recovered/" + id + "/" + log, data).ok());
  }

  TestDir dir_;
  RealEnv env_{1};
};

TEST_F(CellModeTest, AnAssignedTabletReplaysTheDeadServersPieceAndIgnoresOlderLogs) {
  auto a = Open("a-1");
  ASSERT_TRUE(a->AssignTablet(Entry("t-1"), Schema(), /*create=*/true).ok());
  ASSERT_TRUE(a->MutateRow("t", "r1", {Mutation::SetCell("cf", "q", "one")}).ok());
  a.reset();  // closes (and flushes) t-1: its redo point counts in log a-1
  // What a-1 held unflushed when it "died", as the master split it out;
  // record 1 is the flushed one, replayed again harmlessly; and a stale
  // piece of an older log that must not be applied.
  WritePiece("t-1", "a-1", {{1, "r1", "one"}, {2, "r2", "two"}, {3, "r3", "three"}});
  WritePiece("t-1", "z-0", {{7, "r9", "stale"}});
  auto b = Open("b-1");
  ASSERT_TRUE(b->AssignTablet(Entry("t-1"), Schema(), /*create=*/false).ok());
  EXPECT_EQ(Value(*b, "r1"), "one");
  EXPECT_EQ(Value(*b, "r2"), "two");
  EXPECT_EQ(Value(*b, "r3"), "three");
  EXPECT_EQ(Value(*b, "r9"), "<none>");
  EXPECT_FALSE(fs::exists(dir_.path() + "/recovered/t-1")) << "pieces go once adopted";
  // Assigning it again (the master re-sending) is a no-op.
  EXPECT_TRUE(b->AssignTablet(Entry("t-1"), Schema(), false).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b->AssignTablet(Entry("t-1", "", "m"), Schema(), false)));
}

TEST_F(CellModeTest, AnAssignmentForAnEarlierIncarnationIsRefused) {
  // The master recorded the tablet for the server at this address when its
  // log was "ts-old"; the restarted server (log "ts-new") must not load it,
  // or it would serve rows the master then gives to another server.
  auto s = Open("ts-new");
  absl::Status refused = s->AssignTablet(Entry("t-1"), Schema(), true, "ts-old");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("ts-old"), std::string::npos) << refused;
  EXPECT_TRUE(s->ListTablets("t").empty());
  EXPECT_TRUE(s->AssignTablet(Entry("t-1"), Schema(), true, "ts-new").ok());
  // Likewise an unload meant for the earlier incarnation: refused, not
  // "not loaded" (which would say nothing was left to flush).
  EXPECT_TRUE(absl::IsFailedPrecondition(s->UnloadTablet("t-2", "ts-old")));
  EXPECT_TRUE(absl::IsNotFound(s->UnloadTablet("t-2", "ts-new")));
  EXPECT_TRUE(s->UnloadTablet("t-1", "ts-new").ok());
}

TEST_F(CellModeTest, RowsNotServedHereAnswerNotServing) {
  auto a = Open("a-1");
  EXPECT_TRUE(IsNotServing(a->ReadRow("t", "r").status())) << "no tablet of t at all";
  ASSERT_TRUE(a->AssignTablet(Entry("t-1", "", "m"), Schema(), true).ok());
  ASSERT_TRUE(a->MutateRow("t", "b", {Mutation::SetCell("cf", "q", "x")}).ok());
  absl::Status s = a->MutateRow("t", "x", {Mutation::SetCell("cf", "q", "x")});
  EXPECT_TRUE(IsNotServing(s)) << s;
  RowSet rows;
  rows.ranges.push_back(RowRange{"a", "z"});
  s = a->ReadRows("t", rows, {}, [](Row&) { return true; });
  EXPECT_TRUE(IsNotServing(s)) << "a range it serves only part of: " << s;
  rows.ranges = {RowRange{"a", "c"}};
  EXPECT_TRUE(a->ReadRows("t", rows, {}, [](Row&) { return true; }).ok());
  EXPECT_FALSE(IsNotServing(absl::UnavailableError("tablet t-1 is not loaded")));
}

TEST_F(CellModeTest, BadAssignmentsAndLogsAreRefused) {
  auto a = Open("a-1");
  absl::Status missing = a->AssignTablet(Entry("t-404"), Schema(), /*create=*/false);
  EXPECT_TRUE(absl::IsDataLoss(missing)) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("has no data"));
  EXPECT_TRUE(absl::IsInvalidArgument(a->AssignTablet(Entry("../evil"), Schema(), true)));
  EXPECT_TRUE(absl::IsFailedPrecondition(a->CreateTable(Schema())));
  EXPECT_TRUE(absl::IsFailedPrecondition(a->LoadTablet("t-1")));
  // A damaged piece keeps the tablet unloaded, naming the file.
  ASSERT_TRUE(a->AssignTablet(Entry("t-1"), Schema(), true).ok());
  ASSERT_TRUE(a->UnloadTablet("t-1").ok());
  fs::create_directories(dir_.path() + "/recovered/t-1");
  ASSERT_TRUE(WriteFileAtomically(dir_.path() + "/recovered/t-1/a-1", "garbage, not records").ok());
  absl::Status damaged = a->AssignTablet(Entry("t-1"), Schema(), false);
  EXPECT_TRUE(absl::IsDataLoss(damaged)) << damaged;
  EXPECT_THAT(std::string(damaged.message()), HasSubstr("recovered/t-1/a-1"));
  // Each incarnation needs a log of its own.
  TabletServerOptions o;
  o.data_dir = dir_.path();
  o.cell_log_name = "a-1";
  o.maintenance_interval = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsAlreadyExists(TabletServer::Open(o, &env_).status()));
}

TEST_F(CellModeTest, AFailedSplitCommitLeavesTheParentServingAndWritable) {
  TabletServerOptions o;
  o.data_dir = dir_.path();
  o.cell_log_name = "a-1";
  o.maintenance_interval = absl::ZeroDuration();
  o.commit_split = [](const TabletEntry&, const std::vector<TabletEntry>&) {
    return absl::UnavailableError("METADATA unreachable");
  };
  o.may_split = [](const TabletEntry& e) { return e.id() != "t-root"; };
  auto opened = TabletServer::Open(o, &env_);
  ASSERT_TRUE(opened.ok());
  auto& a = *opened;
  ASSERT_TRUE(a->AssignTablet(Entry("t-1"), Schema(), true).ok());
  for (const char* r : {"a", "b", "c", "d"})
    ASSERT_TRUE(a->MutateRow("t", r, {Mutation::SetCell("cf", "q", r)}).ok());
  EXPECT_TRUE(absl::IsUnavailable(a->SplitTablet("t-1", "").status()));
  EXPECT_TRUE(a->MutateRow("t", "e", {Mutation::SetCell("cf", "q", "e")}).ok());
  EXPECT_EQ(Value(*a, "e"), "e");
  ASSERT_EQ(a->ListTablets("t").size(), 1u);
  size_t dirs = 0;
  for (const auto& d : fs::directory_iterator(dir_.path() + "/tablets")) dirs += d.is_directory();
  EXPECT_EQ(dirs, 1u) << "the children's directories were removed";
  ASSERT_TRUE(a->AssignTablet(
                   Entry("t-root", "", ""),
                   [] {
                     TableSchema s = Schema();
                     s.set_name("root");
                     return s;
                   }(),
                   true)
                  .ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(a->SplitTablet("t-root", "x").status()));
}

TEST_F(CellModeTest, ASplitOfUnknownOutcomeServesNeitherSideAndKeepsBoth) {
  TabletServerOptions o;
  o.data_dir = dir_.path();
  o.cell_log_name = "a-1";
  o.maintenance_interval = absl::ZeroDuration();
  o.commit_split = [](const TabletEntry&, const std::vector<TabletEntry>&) {
    return absl::UnknownError("the reply was lost and the row could not be read back");
  };
  auto opened = TabletServer::Open(o, &env_);
  ASSERT_TRUE(opened.ok());
  auto& a = *opened;
  ASSERT_TRUE(a->AssignTablet(Entry("t-1"), Schema(), true).ok());
  for (const char* r : {"a", "b", "c", "d"})
    ASSERT_TRUE(a->MutateRow("t", r, {Mutation::SetCell("cf", "q", r)}).ok());
  auto split = a->SplitTablet("t-1", "c");
  EXPECT_TRUE(absl::IsUnknown(split.status())) << split.status();
  EXPECT_TRUE(IsNotServing(a->ReadRow("t", "a").status())) << "the parent no longer serves";
  EXPECT_TRUE(a->ListTablets("t").empty());
  size_t dirs = 0;
  for (const auto& d : fs::directory_iterator(dir_.path() + "/tablets")) dirs += d.is_directory();
  EXPECT_EQ(dirs, 3u) << "the parent's and both children's directories stay";
  // Whichever METADATA names can be served again: here, the parent.
  ASSERT_TRUE(a->AssignTablet(Entry("t-1"), Schema(), false).ok());
  EXPECT_EQ(Value(*a, "d"), "d");
}

TEST_F(CellModeTest, MergingNeighboursKeepsEveryRowVersionAndDeletion) {
  TabletServerOptions o;
  o.data_dir = dir_.path();
  o.cell_log_name = "a-1";
  o.maintenance_interval = absl::ZeroDuration();
  bool commit_ok = false;
  o.commit_merge = [&](const TabletEntry&, const TabletEntry&, const TabletEntry&) {
    return commit_ok ? absl::OkStatus() : absl::UnavailableError("METADATA unreachable");
  };
  auto opened = TabletServer::Open(o, &env_);
  ASSERT_TRUE(opened.ok());
  auto& a = *opened;
  ASSERT_TRUE(a->AssignTablet(Entry("t-1", "", "m"), Schema(), true).ok());
  ASSERT_TRUE(a->AssignTablet(Entry("t-2", "m", ""), Schema(), true).ok());
  for (const char* r : {"a", "b", "c", "m", "n", "z"}) {
    ASSERT_TRUE(
        a->MutateRow("t", r, {Mutation::SetCell("cf", "q", std::string("v") + r, 100)}).ok());
  }
  ASSERT_TRUE(a->MutateRow("t", "b", {Mutation::DeleteRow()}, 200).ok());
  ASSERT_TRUE(a->MutateRow("t", "n", {Mutation::SetCell("cf", "q", "new-n", 300)}).ok());
  // Not committed: both keep serving, writable.
  EXPECT_TRUE(absl::IsUnavailable(a->MergeTablets("t-1", "t-2").status()));
  EXPECT_TRUE(a->MutateRow("t", "c", {Mutation::SetCell("cf", "q", "vc2", 150)}).ok());
  EXPECT_EQ(a->ListTablets("t").size(), 2u);
  EXPECT_TRUE(absl::IsInvalidArgument(a->MergeTablets("t-2", "t-1").status())) << "not in order";
  commit_ok = true;
  auto merged = a->MergeTablets("t-1", "t-2");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->start_row(), "");
  EXPECT_EQ(merged->end_row(), "");
  ASSERT_EQ(a->ListTablets("t").size(), 1u);
  std::vector<std::string> rows;
  ASSERT_TRUE(a->ReadRows("t", {}, {}, [&](Row& r) {
                 rows.push_back(r.key);
                 return true;
               }).ok());
  EXPECT_THAT(rows, ::testing::ElementsAre("a", "c", "m", "n", "z"));
  ReadOptions then;
  then.read_timestamp = 150;
  auto b = a->ReadRow("t", "b", then);
  ASSERT_TRUE(b.ok() && b->has_value()) << "a read before the deletion still sees b";
  EXPECT_EQ((*b)->cells[0].value, "vb");
  EXPECT_EQ(Value(*a, "n"), "new-n");
  auto n_then = a->ReadRow("t", "n", then);
  ASSERT_TRUE(n_then.ok() && n_then->has_value());
  EXPECT_EQ((*n_then)->cells[0].value, "vn");
  EXPECT_EQ(Value(*a, "c"), "vc2");
  ASSERT_TRUE(a->MutateRow("t", "d", {Mutation::SetCell("cf", "q", "vd")}).ok());
  EXPECT_EQ(Value(*a, "d"), "vd");

  // Split children hard-link their parent's files: merging them back must
  // not bring back what one of them deleted and compacted away.
  auto children = a->SplitTablet(merged->id(), "n");
  ASSERT_TRUE(children.ok()) << children.status();
  ASSERT_TRUE(a->MutateRow("t", "z", {Mutation::DeleteRow()}).ok());
  ASSERT_TRUE(a->CompactTablet((*children)[1].id()).ok());
  auto again = a->MergeTablets((*children)[0].id(), (*children)[1].id());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Value(*a, "z"), "<none>");
  EXPECT_EQ(Value(*a, "m"), "vm");
}

}  // namespace
}  // namespace megastore::storage
