// A whole cell in one process, on loopback RPC and real time: the embedded
// lock service, tablet servers in cell mode sharing one data root, the
// master (and a standby), and the client library. The multi-process and
// SIGKILL scenarios are in tests/cell_process_test.cc.
#include "storage/cell/master.h"

#include <functional>
#include <memory>
#include <vector>

#include "storage/cell/test_cell.h"

namespace megastore::storage::cell {
namespace {

TEST_F(CellTest, ANewCellGetsItsRootAndMetadataTabletsAndServesATable) {
  for (int i = 0; i < 3; ++i) StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(WaitFor([&] { return client_->ReadRoot().ok() && client_->ReadRoot()->assigned(); }));
  ASSERT_TRUE(master.CreateTable(TestTable("t"), {RowKey(100), RowKey(200)}).ok());
  WriteRows(0, 300);
  EXPECT_EQ(ReadAll(*client_).size(), 300u);
  auto row = client_->ReadRow("t", RowKey(150));
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->cells[0].value, "v150");

  auto tablets = client_->Tablets();
  ASSERT_TRUE(tablets.ok()) << tablets.status();
  // The root, one METADATA tablet, three of t: all assigned, ranges contiguous.
  ASSERT_EQ(tablets->size(), 5u);
  EXPECT_EQ((*tablets)[0].location.tablet_id, kRootTabletId);
  EXPECT_EQ((*tablets)[1].location.table, kMetadataTable);
  std::string at;
  for (size_t i = 2; i < tablets->size(); ++i) {
    EXPECT_TRUE((*tablets)[i].assigned());
    EXPECT_EQ((*tablets)[i].location.start_row, at);
    at = (*tablets)[i].location.end_row;
  }
  EXPECT_EQ(at, "");
  // Spread over the servers (balance margin 1).
  ASSERT_TRUE(WaitFor([&] {
    auto st = master.State();
    if (!st.ok()) return false;
    int lo = 100, hi = 0;
    for (const auto& s : st->servers()) {
      lo = std::min(lo, s.tablets());
      hi = std::max(hi, s.tablets());
    }
    return hi - lo <= 1;
  }));
}

TEST_F(CellTest, CreateTableRefusesBadRequests) {
  StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  EXPECT_TRUE(absl::IsInvalidArgument(master.CreateTable(TestTable("bad name"), {})));
  EXPECT_TRUE(absl::IsInvalidArgument(master.CreateTable(TestTable(kMetadataTable), {})));
  EXPECT_TRUE(absl::IsInvalidArgument(master.CreateTable(TestTable("t"), {"b", "a"})));
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {})));
  EXPECT_TRUE(absl::IsAlreadyExists(master.CreateTable(TestTable("t"), {})));
  EXPECT_TRUE(absl::IsNotFound(master.DeleteTable("nope")));
  EXPECT_TRUE(absl::IsNotFound(client_->ReadRow("nope", "r").status()));
}

TEST_F(CellTest, TablesSplitByThemselvesAndClientsFollowTheSplits) {
  for (int i = 0; i < 2; ++i) StartServer(64 << 10);
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {})));
  // Incompressible values: the split threshold counts compressed bytes.
  Random rng(7);
  for (int i = 0; i < 1500; ++i) {
    std::string value(400, '\0');
    for (char& c : value) c = static_cast<char>(rng.Next());
    ASSERT_TRUE(client_->MutateRow("t", RowKey(i), {Mutation::SetCell("f", "q", value)}).ok()) << i;
  }
  ASSERT_TRUE(WaitFor([&] { return UserTablets("t") >= 4; })) << UserTablets("t");
  // A client that knew nothing, and the one whose cache went stale.
  CellClient fresh(lock_.get(), env_, client_->options());
  EXPECT_EQ(ReadAll(fresh).size(), 1500u);
  EXPECT_EQ(ReadAll(*client_).size(), 1500u);
  for (int i = 0; i < 1500; i += 97) {
    auto r = client_->ReadRow("t", RowKey(i));
    ASSERT_TRUE(r.ok() && r->has_value()) << i;
  }
}

TEST_F(CellTest, ADeadServersTabletsAreServedElsewhereWithEveryWrite) {
  balance_margin_ = 0;
  for (int i = 0; i < 3; ++i) StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(master.CreateTable(TestTable("t"), {RowKey(100), RowKey(200), RowKey(300)}).ok());
  WriteRows(0, 400);
  // The server with the most user tablets goes away.
  auto tablets = client_->Tablets("t");
  ASSERT_TRUE(tablets.ok());
  std::map<std::string, int> per;
  for (const auto& t : *tablets) per[t.location.server] += t.location.table == "t";
  Server* victim = nullptr;
  for (auto& s : servers_) {
    if (victim == nullptr || per[s->address] > per[victim->address]) victim = s.get();
  }
  ASSERT_GT(per[victim->address], 0);
  const std::string gone = victim->address;
  Stop(*victim);
  WriteRows(400, 450);  // retried until their tablets are back
  ASSERT_TRUE(WaitFor([&] {
    auto t = client_->Tablets();
    if (!t.ok()) return false;
    for (const auto& r : *t) {
      if (r.location.server == gone) return false;
    }
    return true;
  }));
  EXPECT_EQ(ReadAll(*client_).size(), 450u);
  for (int i = 0; i < 450; i += 7) {
    auto r = client_->ReadRow("t", RowKey(i));
    ASSERT_TRUE(r.ok() && r->has_value()) << i;
    EXPECT_EQ((*r)->cells[0].value, StrCat("v", i));
  }
}

TEST_F(CellTest, AStandbyMasterTakesOverWithoutChangingAssignments) {
  for (int i = 0; i < 3; ++i) StartServer();
  StartMaster();
  Master& first = ElectedMaster();
  StartMaster();
  ASSERT_TRUE(first.CreateTable(TestTable("t"), {RowKey(50), RowKey(100), RowKey(150)}).ok());
  WriteRows(0, 200);
  ASSERT_TRUE(first.ReconcileNow().ok());
  auto before = client_->Tablets();
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(masters_[1]->master->CreateTable(TestTable("u"), {})));
  masters_.erase(masters_.begin());  // the master exits; its session closes
  Master& second = ElectedMaster();
  ASSERT_TRUE(second.ReconcileNow().ok());
  ASSERT_TRUE(second.ReconcileNow().ok());
  auto after = client_->Tablets();
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(before->size(), after->size());
  for (size_t i = 0; i < before->size(); ++i) {
    EXPECT_EQ((*before)[i].location.tablet_id, (*after)[i].location.tablet_id);
    EXPECT_EQ((*before)[i].location.server, (*after)[i].location.server);
  }
  EXPECT_EQ(ReadAll(*client_).size(), 200u);
}

TEST_F(CellTest, MovesAndSplitsOnRequestAndStaleCachesRecover) {
  balance_margin_ = 0;
  for (int i = 0; i < 2; ++i) StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {})));
  WriteRows(0, 100);
  EXPECT_EQ(ReadAll(*client_).size(), 100u);  // the client caches t's tablet
  auto t = client_->Tablets("t");
  ASSERT_TRUE(t.ok());
  const TabletRecord tablet = t->back();
  const std::string other =
      servers_[0]->address == tablet.location.server ? servers_[1]->address : servers_[0]->address;
  ASSERT_TRUE(master.MoveTablet(tablet.location.tablet_id, other).ok());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(master.MoveTablet(tablet.location.tablet_id, "127.0.0.1:1")));
  EXPECT_TRUE(absl::IsNotFound(master.MoveTablet("no-such-tablet", other)));
  const uint64_t retries = client_->stats().retries;
  EXPECT_EQ(ReadAll(*client_).size(), 100u);  // the stale entry is found out and looked up again
  EXPECT_GT(client_->stats().retries, retries);
  auto children = master.SplitTablet(tablet.location.tablet_id, RowKey(40));
  ASSERT_TRUE(children.ok()) << children.status();
  ASSERT_EQ(children->size(), 2u);
  EXPECT_EQ(UserTablets("t"), 2);
  EXPECT_EQ(ReadAll(*client_).size(), 100u);
  WriteRows(100, 120);
  EXPECT_EQ(ReadAll(*client_).size(), 120u);
  EXPECT_TRUE(absl::IsInvalidArgument(master.SplitTablet(kRootTabletId, "x").status()));
}

TEST_F(CellTest, TheMasterCompletesASplitWhoseServerStoppedHalfway) {
  balance_margin_ = 0;
  StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {})));
  WriteRows(0, 100);
  // Only the first METADATA write of the split happens (the server "died"
  // right after it): the right child owns the parent's row, marked.
  commit_split_hook_ = [this](const std::string& server, const std::string& log,
                              const TabletEntry& parent,
                              const std::vector<TabletEntry>& children) -> absl::Status {
    TabletRecord right;
    right.location = TabletLocation{"t", children[1].start_row(), children[1].end_row(),
                                    children[1].id(), server};
    right.log = log;
    right.split_left = children[0].id();
    auto ok = client_->CheckAndMutateRow(
        kMetadataTable, RowKeyOf("t", parent.end_row()), IdIs(parent.id()),
        RecordMutations(right, "test: half a split", env_->NowMicros()), {});
    return ok.ok() && *ok ? absl::OkStatus() : absl::InternalError("test split failed");
  };
  auto t = client_->Tablets("t");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(servers_[0]->tablets->SplitTablet(t->back().location.tablet_id, RowKey(50)).ok());
  ASSERT_TRUE(master.ReconcileNow().ok());
  auto after = client_->Tablets("t");
  ASSERT_TRUE(after.ok());
  std::vector<TabletRecord> user;
  for (const auto& r : *after) {
    if (r.location.table == "t") user.push_back(r);
  }
  ASSERT_EQ(user.size(), 2u);
  EXPECT_EQ(user[0].location.start_row, "");
  EXPECT_EQ(user[0].location.end_row, RowKey(50));
  EXPECT_EQ(user[1].location.start_row, RowKey(50));
  EXPECT_TRUE(user[1].split_left.empty());
  EXPECT_EQ(ReadAll(*client_).size(), 100u);
}

TEST_F(CellTest, AnUnreachableServerIsRemovedAndStopsBeforeItsTabletsMove) {
  balance_margin_ = 0;
  for (int i = 0; i < 2; ++i) StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(master.CreateTable(TestTable("t"), {RowKey(50)}).ok());
  WriteRows(0, 100);
  auto t = client_->Tablets("t");
  ASSERT_TRUE(t.ok());
  Server* victim = nullptr;
  for (auto& s : servers_) {
    if (s->address == t->back().location.server) victim = s.get();
  }
  ASSERT_NE(victim, nullptr);
  const std::string gone = victim->address;
  // It stops answering RPCs but keeps its lock-service session.
  victim->rpc->Stop();
  ASSERT_TRUE(WaitFor([&] { return victim->lost.load(); }, absl::Seconds(20)));
  // What megastored does then: exit (here: close its tablets).
  Stop(*victim);
  // Its tablets move only after it was told (its file deleted) and its ttl passed.
  ASSERT_TRUE(WaitFor([&] {
    auto now = client_->Tablets("t");
    if (!now.ok()) return false;
    for (const auto& r : *now) {
      if (r.location.server == gone) return false;
    }
    return true;
  }));
  EXPECT_EQ(ReadAll(*client_).size(), 100u);
}

TEST_F(CellTest, SmallNeighboursAreMergedKeepingEveryVersionAndDeletion) {
  merge_after_ = absl::ZeroDuration();
  for (int i = 0; i < 2; ++i) StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {RowKey(25), RowKey(50), RowKey(75)})));
  WriteRows(0, 100);
  // A deletion, and an old version a snapshot read still sees.
  const int64_t before = env_->NowMicros();
  absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(client_->MutateRow("t", RowKey(30), {Mutation::DeleteRow()}).ok());
  ASSERT_TRUE(client_->MutateRow("t", RowKey(60), {Mutation::SetCell("f", "q", "new60")}).ok());
  ASSERT_TRUE(WaitFor([&] { return UserTablets("t") == 1; })) << "four small tablets become one";
  EXPECT_EQ(ReadAll(*client_).size(), 99u);
  auto deleted = client_->ReadRow("t", RowKey(30));
  ASSERT_TRUE(deleted.ok());
  EXPECT_FALSE(deleted->has_value()) << "the deletion survives the merge";
  ReadOptions then;
  then.read_timestamp = before;
  auto old30 = client_->ReadRow("t", RowKey(30), then);
  ASSERT_TRUE(old30.ok() && old30->has_value());
  EXPECT_EQ((*old30)->cells[0].value, "v30") << "a read as of before the deletion";
  auto old60 = client_->ReadRow("t", RowKey(60), then);
  ASSERT_TRUE(old60.ok() && old60->has_value());
  EXPECT_EQ((*old60)->cells[0].value, "v60");
  auto new60 = client_->ReadRow("t", RowKey(60));
  ASSERT_TRUE(new60.ok() && new60->has_value());
  EXPECT_EQ((*new60)->cells[0].value, "new60");
  WriteRows(100, 110);
  EXPECT_EQ(ReadAll(*client_).size(), 109u);
}

TEST_F(CellTest, GarbageCollectionDeletesDirectoriesNothingReferences) {
  StartServer();
  StartMaster();
  Master& master = ElectedMaster();
  ASSERT_TRUE(Ok(master.CreateTable(TestTable("t"), {})));
  WriteRows(0, 10);
  const std::string orphan = root_ + "/tablets/t-orphan";
  std::filesystem::create_directories(orphan);
  ASSERT_TRUE(master.DeleteTable("t").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->ReadRow("t", RowKey(1)).status()));
  // Passes run every 100 ms; garbage collection every tenth.
  ASSERT_TRUE(WaitFor([&] {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "/tablets")) {
      (void)e;
      ++n;
    }
    return !std::filesystem::exists(orphan) && n == 2;  // the root and the METADATA tablet
  }));
}

}  // namespace
}  // namespace megastore::storage::cell
