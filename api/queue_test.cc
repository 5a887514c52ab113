// Queues between entity groups (seed 004 §3.4) through the client API:
// money moved between branches by messages is conserved once the queues
// drain, and each message is delivered exactly once.
#include "api/database.h"

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"
#include "tools/megastored/datacenter.h"

namespace megastore {
namespace {

constexpr char kBank[] = R"(
CREATE SCHEMA Bank
CREATE TABLE Branch { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE Account {
  required int64 branch;
  required int64 id;
  required int64 balance;
} PRIMARY KEY(branch, id), ENTITY GROUP KEY(branch) REFERENCES Branch;
)";

class QueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema::CompileResult compiled = schema::CompileSchema(kBank);
    ASSERT_TRUE(compiled.ok());
    auto layout = schema::Layout::Create(compiled.descriptor);
    ASSERT_TRUE(layout.ok());
    auto cluster = server::LocalCluster::Start(
        &env_, dir_.path(),
        {replication::ReplicaType::kFull, replication::ReplicaType::kFull, replication::ReplicaType::kFull},
        txn::TablesFor(*layout), /*sync_log=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(cluster_->WaitUntilServing(absl::Seconds(5)));
    DatabaseOptions o;
    o.replicas = cluster_->replicas();
    o.local = "A";
    o.schema = compiled.descriptor;
    auto db = Database::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    for (int64_t branch : {1, 2}) {
      ASSERT_TRUE(db_->Run("Branch", {branch}, [&](Transaction& t) {
                       return t.Put("Account", Account(branch, 1, 1000));
                     }).ok());
    }
  }

  schema::Entity Account(int64_t branch, int64_t id, int64_t balance) {
    schema::Entity e;
    for (const auto& f : db_->layout().schema().FindTable("Account")->fields()) {
      if (f.name() == "branch") e.fields[f.number()] = {branch};
      if (f.name() == "id") e.fields[f.number()] = {id};
      if (f.name() == "balance") e.fields[f.number()] = {balance};
    }
    return e;
  }

  int64_t BalanceIn(Transaction& t, int64_t branch) {
    auto e = t.Get("Account", {branch, int64_t{1}});
    EXPECT_TRUE(e.ok() && e->has_value());
    for (const auto& f : db_->layout().schema().FindTable("Account")->fields())
      if (f.name() == "balance") return std::get<int64_t>((*e)->fields.at(f.number()).at(0));
    return -1;
  }

  int64_t Balance(int64_t branch) {
    auto t = db_->Begin("Branch", {branch});
    EXPECT_TRUE(t.ok());
    return BalanceIn(**t, branch);
  }

  // Branch 1 pays `amount` to branch 2 through branch 2's "credits" queue.
  absl::Status Pay(int64_t amount) {
    return db_->Run("Branch", {int64_t{1}}, [&](Transaction& t) {
                 const int64_t b = BalanceIn(t, 1);
                 if (absl::Status s = t.Put("Account", Account(1, 1, b - amount)); !s.ok()) return s;
                 return t.Send("Branch", {int64_t{2}}, "credits", std::to_string(amount));
               }).status();
  }

  // Branch 2 credits every waiting payment; returns how many it took.
  int Collect() {
    int taken = 0;
    absl::StatusOr<CommitInfo> r = db_->Run("Branch", {int64_t{2}}, [&](Transaction& t) {
      taken = 0;
      auto messages = t.ReadQueue("credits");
      if (!messages.ok()) return messages.status();
      int64_t b = BalanceIn(t, 2);
      for (const txn::QueueMessage& m : *messages) {
        b += std::stoll(m.body);
        if (absl::Status s = t.Consume(m); !s.ok()) return s;
        ++taken;
      }
      return t.Put("Account", Account(2, 1, b));
    });
    EXPECT_TRUE(r.ok()) << r.status();
    return taken;
  }

  RealEnv env_{3};
  TestDir dir_;
  std::unique_ptr<server::LocalCluster> cluster_;
  std::unique_ptr<Database> db_;
};

TEST_F(QueueTest, PaymentsThroughAQueueConserveMoneyOnceItDrains) {
  for (int i = 1; i <= 10; ++i) ASSERT_TRUE(Pay(i).ok());
  EXPECT_EQ(Balance(1), 1000 - 55);
  EXPECT_EQ(Balance(2), 1000) << "not yet collected";
  EXPECT_EQ(Collect(), 10);
  EXPECT_EQ(Balance(2), 1000 + 55);
  EXPECT_EQ(Collect(), 0) << "consumed messages are gone";
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 0) << "Run delivered them already";
}

TEST_F(QueueTest, AnInterruptedDeliveryIsFinishedExactlyOnce) {
  // A sender that committed but crashed before delivering: Commit without Run.
  {
    auto t = db_->Begin("Branch", {int64_t{1}});
    ASSERT_TRUE(t.ok());
    const int64_t b = BalanceIn(**t, 1);
    ASSERT_TRUE((*t)->Put("Account", Account(1, 1, b - 100)).ok());
    ASSERT_TRUE((*t)->Send("Branch", {int64_t{2}}, "credits", "100").ok());
    ASSERT_TRUE((*t)->Commit().ok());
  }
  EXPECT_EQ(Collect(), 0) << "still in branch 1's outbox";
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 1);
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 0);
  EXPECT_EQ(Collect(), 1);
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 0) << "a consumed message is not redelivered";
  EXPECT_EQ(Collect(), 0);
  EXPECT_EQ(Balance(1) + Balance(2), 2000);
}

TEST_F(QueueTest, SendingChecksItsArguments) {
  auto t = db_->Begin("Branch", {int64_t{1}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Send("Branch", {int64_t{2}}, "", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Send("Nope", {int64_t{2}}, "q", "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*t)->Send("Branch", {}, "q", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(db_->DeliverQueues("Nope", {int64_t{1}}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace megastore
