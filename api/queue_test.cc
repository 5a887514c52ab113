// Transactions across entity groups through the client API: queues (seed
// 004 §3.4) — money moved between branches by messages is conserved once
// the queues drain, each message delivered exactly once — and two-phase
// commit, including the in-doubt transactions a dead client leaves.
#include <thread>

#include "absl/synchronization/notification.h"
#include "api/database.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"
#include "server/datacenter.h"
#include "txn/transaction.h"

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
        {replication::ReplicaType::kFull, replication::ReplicaType::kFull,
         replication::ReplicaType::kFull},
        txn::TablesFor(*layout), /*sync_log=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(cluster_->WaitUntilServing(absl::Seconds(5)));
    DatabaseOptions o;
    o.replicas = cluster_->replicas();
    o.local = "A";
    o.schema = compiled.descriptor;
    o.queue_sweep_interval = sweep_interval_;
    auto db = Database::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    for (int64_t branch : {1, 2}) {
      ASSERT_TRUE(
          db_->Run("Branch", {branch},
                   [&](Transaction& t) { return t.Put("Account", Account(branch, 1, 1000)); })
              .ok());
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
    return db_
        ->Run("Branch", {int64_t{1}},
              [&](Transaction& t) {
                const int64_t b = BalanceIn(t, 1);
                if (absl::Status s = t.Put("Account", Account(1, 1, b - amount)); !s.ok()) return s;
                return t.Send("Branch", {int64_t{2}}, "credits", std::to_string(amount));
              })
        .status();
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

  absl::Duration sweep_interval_ =
      absl::ZeroDuration();  // no background sweeps unless a test wants them
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
  EXPECT_EQ(*db_->SweepQueues(), 1) << "the sweeper finds the outbox";
  EXPECT_EQ(*db_->SweepQueues(), 0) << "and delivers once";
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 0);
  EXPECT_EQ(Collect(), 1);
  EXPECT_EQ(*db_->DeliverQueues("Branch", {int64_t{1}}), 0)
      << "a consumed message is not redelivered";
  EXPECT_EQ(Collect(), 0);
  EXPECT_EQ(Balance(1) + Balance(2), 2000);
}

// A sender that died before delivering: the background sweeper of an app
// server delivers its message anyway.
class SweptQueueTest : public QueueTest {
 protected:
  SweptQueueTest() { sweep_interval_ = absl::Milliseconds(100); }
};

TEST_F(SweptQueueTest, TheBackgroundSweeperDeliversWhatADeadSenderLeft) {
  {
    auto t = db_->Begin("Branch", {int64_t{1}});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Put("Account", Account(1, 1, BalanceIn(**t, 1) - 40)).ok());
    ASSERT_TRUE((*t)->Send("Branch", {int64_t{2}}, "credits", "40").ok());
    ASSERT_TRUE((*t)->Commit().ok());
  }
  int collected = 0;
  for (int i = 0; i < 200 && collected == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    collected = Collect();
  }
  EXPECT_EQ(collected, 1) << "the sweeper delivered it";
  EXPECT_EQ(Balance(1) + Balance(2), 2000);
  EXPECT_EQ(*db_->SweepQueues(), 0) << "nothing left, and the group is off the list";
}

TEST_F(QueueTest, SendingChecksItsArguments) {
  auto t = db_->Begin("Branch", {int64_t{1}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Send("Branch", {int64_t{2}}, "", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Send("Nope", {int64_t{2}}, "q", "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*t)->Send("Branch", {}, "q", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(db_->DeliverQueues("Nope", {int64_t{1}}).status().code(), absl::StatusCode::kNotFound);
}

using TwoPhaseTest = QueueTest;

TEST_F(TwoPhaseTest, TransfersAcrossGroupsAreAtomic) {
  for (int i = 1; i <= 5; ++i) {
    absl::StatusOr<CommitInfo> r = db_->RunAcross([&](MultiTransaction& m) {
      auto from = m.In("Branch", {int64_t{1}});
      auto to = m.In("Branch", {int64_t{2}});
      if (!from.ok()) return from.status();
      if (!to.ok()) return to.status();
      absl::Status s = (*from)->Put("Account", Account(1, 1, BalanceIn(**from, 1) - i));
      if (s.ok()) s = (*to)->Put("Account", Account(2, 1, BalanceIn(**to, 2) + i));
      return s;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->wrote);
  }
  EXPECT_EQ(Balance(1), 1000 - 15);
  EXPECT_EQ(Balance(2), 1000 + 15);
}

TEST_F(TwoPhaseTest, ConcurrentTransfersAndLocalWritesConserveMoney) {
  auto transfer = [&](int64_t from, int64_t to, int n) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<CommitInfo> r = db_->RunAcross(
          [&](MultiTransaction& m) {
            auto a = m.In("Branch", {from});
            auto b = m.In("Branch", {to});
            if (!a.ok()) return a.status();
            if (!b.ok()) return b.status();
            absl::Status s = (*a)->Put("Account", Account(from, 1, BalanceIn(**a, from) - 3));
            if (s.ok()) s = (*b)->Put("Account", Account(to, 1, BalanceIn(**b, to) + 3));
            return s;
          },
          TransactionOptions{replication::ReadLevel::kCurrent, 50, absl::Milliseconds(20)});
      EXPECT_TRUE(r.ok()) << r.status();
    }
  };
  std::thread one([&] { transfer(1, 2, 8); });
  std::thread two([&] { transfer(2, 1, 8); });
  // Single-group writes in between: they must wait for (or settle) any
  // prepared transaction, never overwrite its effect.
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<CommitInfo> r = db_->Run(
        "Branch", {int64_t{1}}, [&](Transaction& t) { return t.Put("Account", Account(1, 2, i)); },
        TransactionOptions{replication::ReadLevel::kCurrent, 50, absl::Milliseconds(20)});
    EXPECT_TRUE(r.ok()) << r.status();
  }
  one.join();
  two.join();
  EXPECT_EQ(Balance(1) + Balance(2), 2000);
  EXPECT_EQ(Balance(1), 1000);
}

TEST_F(TwoPhaseTest, InDoubtTransactionsOfADeadClientAreSettled) {
  txn::Context ctx = db_->context();
  const schema::Layout& layout = db_->layout();
  const schema::TableDescriptor* branch = layout.schema().FindTable("Branch");
  const std::string g1 = *layout.GroupRow(*branch, {int64_t{1}});
  const std::string g2 = *layout.GroupRow(*branch, {int64_t{2}});
  // A client prepares a transfer in both groups and dies before deciding.
  auto prepare = [&](const std::string& root, int64_t b, int64_t balance, const std::string& txid) {
    absl::Notification n;
    absl::Status status;
    txn::Transaction::BeginAtRow(ctx, root, {},
                                 [&](absl::StatusOr<std::shared_ptr<txn::Transaction>> t) {
                                   if (!t.ok()) {
                                     status = t.status();
                                     return n.Notify();
                                   }
                                   auto txn = *t;
                                   status = txn->Put("Account", Account(b, 1, balance));
                                   if (!status.ok()) return n.Notify();
                                   txn->Prepare(txid, g1, [&, txn](absl::StatusOr<CommitInfo> r) {
                                     status = r.status();
                                     n.Notify();
                                   });
                                 });
    n.WaitForNotification();
    return status;
  };
  ASSERT_TRUE(prepare(g1, 1, 900, "dead1").ok());
  ASSERT_TRUE(prepare(g2, 2, 1100, "dead1").ok());
  // Before the timeout, writers of the group cannot commit past it.
  TransactionOptions impatient;
  impatient.max_attempts = 3;
  absl::StatusOr<CommitInfo> blocked = db_->Run(
      "Branch", {int64_t{1}}, [&](Transaction& t) { return t.Put("Account", Account(1, 3, 1)); },
      impatient);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kAborted) << blocked.status();
  // After it, the next writer decides "abort" and goes on.
  absl::SleepFor(txn::kPreparedTimeout + absl::Milliseconds(200));
  absl::StatusOr<CommitInfo> after = db_->Run(
      "Branch", {int64_t{1}}, [&](Transaction& t) { return t.Put("Account", Account(1, 3, 1)); });
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_TRUE(db_->Run("Branch", {int64_t{2}},
                       [&](Transaction& t) { return t.Put("Account", Account(2, 3, 1)); })
                  .ok());
  EXPECT_EQ(Balance(1), 1000) << "the in-doubt transfer was aborted";
  EXPECT_EQ(Balance(2), 1000);

  // A client that recorded "commit" and died before phase two: its
  // decision holds, and the next writer of each group applies it at once.
  ASSERT_TRUE(prepare(g1, 1, 950, "dead2").ok());
  ASSERT_TRUE(prepare(g2, 2, 1050, "dead2").ok());
  absl::Notification n;
  txn::Decide(ctx, g1, "dead2", true, [&](absl::StatusOr<std::optional<bool>> d) {
    EXPECT_TRUE(d.ok() && d->value_or(false));
    n.Notify();
  });
  n.WaitForNotification();
  for (int64_t b : {1, 2})
    ASSERT_TRUE(
        db_->Run("Branch", {b}, [&](Transaction& t) { return t.Put("Account", Account(b, 4, 1)); })
            .ok());
  EXPECT_EQ(Balance(1), 950);
  EXPECT_EQ(Balance(2), 1050);
}

}  // namespace
}  // namespace megastore
