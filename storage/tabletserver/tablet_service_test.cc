#include "storage/tabletserver/tablet_service.h"

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage {
namespace {

using ::testing::HasSubstr;

class TabletServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TabletServerOptions o;
    o.data_dir = dir_.path() + "/data";
    o.maintenance_interval = absl::ZeroDuration();
    auto s = TabletServer::Open(o, &env_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    rpc::ServerOptions ro;
    ro.worker_threads = 8;
    rpc_ = std::make_unique<rpc::RpcServer>(ro);
    RegisterTabletService(server_.get(), rpc_.get(), &metrics_);
    ASSERT_TRUE(rpc_->Start().ok());
    client_ = std::make_unique<TabletClient>("127.0.0.1:" + std::to_string(rpc_->port()));
    TableSchema schema;
    schema.set_name("t");
    schema.add_families()->set_name("cf");
    ASSERT_TRUE(client_->CreateTable(schema).ok());
  }
  void TearDown() override {
    client_.reset();
    rpc_.reset();
    server_.reset();
  }

  TestDir dir_;
  RealEnv env_{1};
  ServiceMetrics metrics_;
  std::unique_ptr<TabletServer> server_;
  std::unique_ptr<rpc::RpcServer> rpc_;
  std::unique_ptr<TabletClient> client_;
};

TEST_F(TabletServiceTest, EveryDataOperationWorksOverRpc) {
  ASSERT_TRUE(client_->MutateRow("t", "r1", {Mutation::SetCell("cf", "q", "v1", 10)}).ok());
  auto statuses = client_->MutateRows("t", {{"r2", {Mutation::SetCell("cf", "q", "v2", 10)}},
                                            {"r3", {Mutation::SetCell("nope", "q", "x")}}});
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 2u);
  EXPECT_TRUE((*statuses)[0].ok());
  EXPECT_EQ((*statuses)[1].code(), absl::StatusCode::kInvalidArgument);

  auto row = client_->ReadRow("t", "r1");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->cells[0], (Cell{"cf", "q", 10, "v1"}));

  RowFilter p;
  p.value_range = ByteRange{"v1", std::string("v1"), true};
  auto matched =
      client_->CheckAndMutateRow("t", "r1", p, {Mutation::SetCell("cf", "ok", "yes")}, {});
  ASSERT_TRUE(matched.ok());
  EXPECT_TRUE(*matched);

  auto rmw = client_->ReadModifyWriteRow(
      "t", "r1", {ReadModifyWriteRule{ReadModifyWriteRule::Type::kAppend, "cf", "log", "abc", 0}});
  ASSERT_TRUE(rmw.ok()) << rmw.status();
  EXPECT_EQ(rmw->cells[0].value, "abc");

  ReadOptions asof;
  asof.read_timestamp = 5;
  auto old = client_->ReadRow("t", "r1", asof);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->has_value());
}

TEST_F(TabletServiceTest, LargeScansStreamInChunks) {
  const std::string big(100 * 1024, 'x');
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        client_
            ->MutateRow("t", "row" + std::to_string(100 + i), {Mutation::SetCell("cf", "q", big)})
            .ok());
  }
  int rows = 0;
  ASSERT_TRUE(client_
                  ->ReadRows("t", {}, {},
                             [&](Row& r) {
                               EXPECT_EQ(r.cells[0].value.size(), big.size());
                               ++rows;
                               return true;
                             })
                  .ok());
  EXPECT_EQ(rows, 40);
  rows = 0;
  ASSERT_TRUE(client_->ReadRows("t", {}, {}, [&](Row&) { return ++rows < 5; }).ok());
  EXPECT_EQ(rows, 5);
}

// Reads start on the I/O thread and move to a worker when the data is on
// disk or the read is long: either way the answer is the same.
TEST_F(TabletServiceTest, ReadsOfDataOnDiskAndLongScansAnswerInFull) {
  for (int i = 0; i < 1500; ++i) {
    ASSERT_TRUE(client_
                    ->MutateRow("t", "row" + std::to_string(10000 + i),
                                {Mutation::SetCell("cf", "q", std::to_string(i))})
                    .ok());
  }
  auto count = [&](const RowSet& set) {
    int rows = 0;
    absl::Status s = client_->ReadRows("t", set, {}, [&](Row&) { return ++rows > 0; });
    EXPECT_TRUE(s.ok()) << s;
    return rows;
  };
  RowSet keys;
  for (int i = 0; i < 1500; i += 7) keys.keys.push_back("row" + std::to_string(10000 + i));
  EXPECT_EQ(count({}), 1500);
  EXPECT_EQ(count(keys), static_cast<int>(keys.keys.size()));
  auto tablets = client_->ListTablets("t");
  ASSERT_TRUE(tablets.ok() && tablets->size() == 1u);
  ASSERT_TRUE(client_->CompactTablet((*tablets)[0].entry.id()).ok());  // now only on disk
  auto row = client_->ReadRow("t", "row10042");
  ASSERT_TRUE(row.ok() && row->has_value()) << row.status();
  EXPECT_EQ((*row)->cells[0].value, "42");
  EXPECT_EQ(count(keys), static_cast<int>(keys.keys.size()));
  EXPECT_EQ(count({}), 1500);
}

TEST_F(TabletServiceTest, ErrorsCarryTheirCodeAndMessage) {
  auto r = client_->ReadRow("missing", "r");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table missing does not exist"));
  absl::Status s =
      client_->MutateRow("t", std::string(5000, 'k'), {Mutation::SetCell("cf", "q", "v")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("the limit is 4096"));
  TableSchema dup;
  dup.set_name("t");
  EXPECT_EQ(client_->CreateTable(dup).code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(TabletServiceTest, TabletAdministrationOverRpc) {
  ASSERT_TRUE(client_->MutateRow("t", "a", {Mutation::SetCell("cf", "q", "v")}).ok());
  ASSERT_TRUE(client_->MutateRow("t", "z", {Mutation::SetCell("cf", "q", "v")}).ok());
  auto tablets = client_->ListTablets("t");
  ASSERT_TRUE(tablets.ok());
  ASSERT_EQ(tablets->size(), 1u);
  auto children = client_->SplitTablet((*tablets)[0].entry.id(), "m");
  ASSERT_TRUE(children.ok()) << children.status();
  ASSERT_EQ(children->size(), 2u);
  ASSERT_TRUE(client_->CompactTablet((*children)[1].id()).ok());
  int rows = 0;
  ASSERT_TRUE(client_->ReadRows("t", {}, {}, [&](Row&) { return ++rows > 0; }).ok());
  EXPECT_EQ(rows, 2);
  auto tables = client_->ListTables();
  ASSERT_TRUE(tables.ok());
  EXPECT_EQ(tables->size(), 1u);
  EXPECT_THAT(metrics_.PrometheusText(),
              HasSubstr("megastore_rpc_calls_total{method=\"tablet.MutateRow\"} 2"));
}

}  // namespace
}  // namespace megastore::storage
