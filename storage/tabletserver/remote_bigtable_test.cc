#include "storage/tabletserver/remote_bigtable.h"

#include "absl/synchronization/notification.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::storage {
namespace {

using ::testing::HasSubstr;

// Runs one asynchronous call and waits for its callback.
template <typename T, typename Start>
T Wait(Start start) {
  absl::Notification done;
  std::optional<T> result;
  start([&](T r) {
    result.emplace(std::move(r));
    done.Notify();
  });
  done.WaitForNotification();
  return std::move(*result);
}

class RemoteBigtableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TabletServerOptions o;
    o.data_dir = dir_.path() + "/data";
    o.maintenance_interval = absl::ZeroDuration();
    auto s = TabletServer::Open(o, &env_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    rpc_ = std::make_unique<rpc::RpcServer>(rpc::ServerOptions{});
    RegisterTabletService(server_.get(), rpc_.get(), &metrics_);
    ASSERT_TRUE(rpc_->Start().ok());
    TableSchema schema;
    schema.set_name("t");
    schema.add_families()->set_name("cf");
    ASSERT_TRUE(server_->CreateTable(schema).ok());
    remote_ = std::make_unique<RemoteBigtable>("127.0.0.1:" + std::to_string(rpc_->port()));
    local_ = std::make_unique<InProcessBigtable>(server_.get());
  }

  absl::Status Mutate(BigtableClient& bt, std::string row, std::vector<Mutation> ms, int64_t ts) {
    return Wait<absl::Status>([&](auto cb) { bt.MutateRow("t", row, ms, ts, std::move(cb)); });
  }
  absl::StatusOr<std::optional<Row>> Read(BigtableClient& bt, std::string row, ReadOptions o = {}) {
    return Wait<absl::StatusOr<std::optional<Row>>>(
        [&](auto cb) { bt.ReadRow("t", row, o, std::move(cb)); });
  }
  absl::StatusOr<std::vector<Row>> Scan(BigtableClient& bt, RowRange range, ReadOptions o = {}) {
    return Wait<absl::StatusOr<std::vector<Row>>>(
        [&](auto cb) { bt.ReadRows("t", range, o, std::move(cb)); });
  }
  absl::StatusOr<bool> Cas(BigtableClient& bt, std::string row, RowFilter p,
                           std::vector<Mutation> yes, std::vector<Mutation> no) {
    return Wait<absl::StatusOr<bool>>(
        [&](auto cb) { bt.CheckAndMutateRow("t", row, p, yes, no, std::move(cb)); });
  }

  TestDir dir_;
  RealEnv env_{1};
  ServiceMetrics metrics_;
  std::unique_ptr<TabletServer> server_;
  std::unique_ptr<rpc::RpcServer> rpc_;
  std::unique_ptr<RemoteBigtable> remote_;
  std::unique_ptr<InProcessBigtable> local_;
};

TEST_F(RemoteBigtableTest, AnswersWhatTheInProcessClientAnswers) {
  ASSERT_TRUE(Mutate(*remote_, "a", {Mutation::SetCell("cf", "q", "v1")}, 10).ok());
  ASSERT_TRUE(Mutate(*remote_, "a", {Mutation::SetCell("cf", "q", "v2")}, 20).ok());
  ASSERT_TRUE(Mutate(*remote_, "b", {Mutation::SetCell("cf", "q", "w")}, 10).ok());
  ASSERT_TRUE(Mutate(*local_, "c", {Mutation::SetCell("cf", "q", "x")}, 10).ok());

  ReadOptions old;
  old.read_timestamp = 15;
  for (const ReadOptions& o : {ReadOptions{}, old}) {
    auto r = Read(*remote_, "a", o);
    auto l = Read(*local_, "a", o);
    ASSERT_TRUE(r.ok() && l.ok()) << r.status() << l.status();
    ASSERT_TRUE(r->has_value());
    EXPECT_EQ((*r)->cells, (*l)->cells);
  }
  auto missing = Read(*remote_, "zz");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  auto all = Scan(*remote_, RowRange::All());
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[2].key, "c");
  ReadOptions two;
  two.rows_limit = 2;
  auto limited = Scan(*remote_, RowRange{"b", ""}, two);
  ASSERT_TRUE(limited.ok());
  ASSERT_EQ(limited->size(), 2u);
  EXPECT_EQ((*limited)[0].key, "b");

  RowFilter is_w;
  is_w.cells_per_column = 1;
  is_w.value_range = ByteRange{"w", "w", true};
  auto matched = Cas(*remote_, "b", is_w, {Mutation::SetCell("cf", "q", "w2", 30)}, {});
  ASSERT_TRUE(matched.ok());
  EXPECT_TRUE(*matched);
  auto again = Cas(*remote_, "b", is_w, {Mutation::SetCell("cf", "q", "w3", 40)}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  auto b = Read(*local_, "b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->cells.front().value, "w2");
}

TEST_F(RemoteBigtableTest, ErrorsKeepTheServersCodeAndMessage) {
  absl::Status s = Wait<absl::Status>([&](auto cb) {
    remote_->MutateRow("nope", "r", {Mutation::SetCell("cf", "q", "v")}, 1, std::move(cb));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("nope"));
  auto read = Wait<absl::StatusOr<std::optional<Row>>>(
      [&](auto cb) { remote_->ReadRow("nope", "r", {}, std::move(cb)); });
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
}

TEST_F(RemoteBigtableTest, AnUnreachableServerIsUnavailable) {
  rpc_->Stop();
  auto read = Read(*remote_, "a");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
}

}  // namespace
}  // namespace megastore::storage
