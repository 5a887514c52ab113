// The blocking client API on the simulator's one thread: Env::Wait runs the
// simulation while a call waits and Env::SleepFor advances virtual time, so
// Database::Run and its retries work on virtual time, exactly replayable.
#include <memory>

#include "api/database.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "sim/deployment.h"
#include "txn/transaction.h"

namespace megastore {
namespace {

using photoapp::User;

class DatabaseSimTest : public ::testing::Test {
 protected:
  std::unique_ptr<Database> Open(uint64_t seed, int dc) {
    if (!cluster_) {
      sim::SimOptions o;
      o.seed = seed;
      cluster_ = std::make_unique<sim::Cluster>(o);
      auto layout = schema::Layout::Create(photoapp::Schema());
      EXPECT_TRUE(layout.ok()) << layout.status();
      EXPECT_TRUE(cluster_->Open(txn::TablesFor(*layout)).ok());
    }
    const std::string node = StrCat("app", dc);
    cluster_->net().AddNode(node, dc);
    DatabaseOptions d;
    d.replicas = cluster_->ClientOptions(dc).replicas;
    d.local = d.replicas[static_cast<size_t>(dc)].name;
    d.schema = photoapp::Schema();
    d.transport = cluster_->net().TransportFor(node);
    d.env = &cluster_->env();
    d.queue_sweep_interval = absl::ZeroDuration();  // no real-time thread in a simulation
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(d);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(*db) : nullptr;
  }

  std::unique_ptr<sim::Cluster> cluster_;
};

TEST_F(DatabaseSimTest, BlockingCallsRunOnVirtualTime) {
  auto at_a = Open(7, 0);
  auto at_b = Open(7, 1);
  ASSERT_TRUE(at_a && at_b);
  const int64_t start = cluster_->env().now();
  absl::StatusOr<CommitInfo> created = at_a->Run<User>(User::Key{7}, [&](Transaction& t) {
    User u;
    u.set_user_id(7);
    u.set_name("Ada");
    return t.Put(u);
  });
  ASSERT_TRUE(created.ok()) << created.status();
  // A commit crosses the emulated WAN: virtual time moved, the test's
  // thread drove it.
  EXPECT_GT(cluster_->env().now(), start);

  auto t = at_b->Begin<User>(User::Key{7});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::optional<User>> ada = (*t)->Get<User>(User::Key{7});
  ASSERT_TRUE(ada.ok() && ada->has_value()) << ada.status();
  EXPECT_EQ((*ada)->name(), "Ada");
}

TEST_F(DatabaseSimTest, ConflictingRunsRetryOnVirtualTime) {
  auto at_a = Open(11, 0);
  auto at_c = Open(11, 2);
  ASSERT_TRUE(at_a && at_c);
  // Each body reads (which fixes its position), then commits another
  // writer's transaction, so its own commit loses the position and Run
  // retries after a pause slept on the simulator's clock.
  int tries = 0;
  absl::StatusOr<CommitInfo> r = at_a->Run<User>(User::Key{9}, [&](Transaction& t) {
    if (absl::Status read = t.Get<User>(User::Key{9}).status(); !read.ok()) return read;
    if (++tries < 3) {
      absl::StatusOr<CommitInfo> other = at_c->Run<User>(User::Key{9}, [&](Transaction& o) {
        User u;
        u.set_user_id(9);
        u.set_name(
            StrCat("other ", tries));  // a change each time (an unchanged put commits nothing)
        return o.Put(u);
      });
      if (!other.ok()) return other.status();
      EXPECT_GT(other->position, t.position().position);  // it took the position after ours
    }
    User u;
    u.set_user_id(9);
    u.set_name("mine");
    return t.Put(u);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->attempts, 3);
  EXPECT_EQ(tries, 3);
}

}  // namespace
}  // namespace megastore
