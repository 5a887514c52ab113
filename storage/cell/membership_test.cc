// The cell's membership protocols on the embedded lock service, on virtual
// time: tablet servers joining and leaving, a partitioned server giving up
// before the master could see it gone, and master election with a standby.
#include "storage/cell/membership.h"

#include <vector>

#include "base/await.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/partitionable_lock_service.h"

namespace megastore::storage::cell {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(3);

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = lock::EmbeddedLockService::Open(&env_, "");
    ASSERT_TRUE(s.ok());
    service_ = std::move(*s);
  }

  // Lets `d` pass in 100 ms steps (timers run at their deadlines).
  void Pass(absl::Duration d) {
    for (absl::Duration t; t < d; t += absl::Milliseconds(100))
      env_.Advance(absl::Milliseconds(100));
  }

  absl::Status Register(ServerRegistration& r) {
    return Await<bool>([&](auto cb) {
             r.Start([cb = std::move(cb)](absl::Status s) mutable {
               if (s.ok()) return cb(true);
               cb(s);
             });
           })
        .status();
  }

  ManualEnv env_;
  std::unique_ptr<lock::EmbeddedLockService> service_;
  std::vector<std::string> events_;
};

TEST_F(MembershipTest, TheMasterSeesServersJoinAndLeave) {
  LiveServers live(
      service_.get(), &env_, "c", [&](const std::string& s) { events_.push_back("+" + s); },
      [&](const std::string& s) { events_.push_back("-" + s); });
  auto ts1 = std::make_unique<ServerRegistration>(
      service_.get(), &env_, "c", "ts1:1", kTtl, [](const absl::Status& s) { ADD_FAILURE() << s; });
  ASSERT_TRUE(Register(*ts1).ok());
  live.Start();  // ts1 is there before the master looks
  ServerRegistration ts2(service_.get(), &env_, "c", "ts2:1", kTtl,
                         [](const absl::Status& s) { ADD_FAILURE() << s; });
  ASSERT_TRUE(Register(ts2).ok());
  Pass(kTtl * 3);  // renewals keep both
  EXPECT_EQ(live.servers(), (std::set<std::string>{"ts1:1", "ts2:1"}));
  ts1.reset();  // leaves (its session closes)
  EXPECT_EQ(events_, (std::vector<std::string>{"+ts1:1", "+ts2:1", "-ts1:1"}));
  EXPECT_TRUE(ts2.registered());

  // A second server claiming ts2's address while ts2's session lives is refused.
  ServerRegistration impostor(service_.get(), &env_, "c", "ts2:1", kTtl,
                              [](const absl::Status&) {});
  absl::Status s = Register(impostor);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
}

// Never two servers for one tablet: a tablet server cut off from the lock
// service stops serving no later than its file disappears — which is when
// the master may give its tablets to someone else.
TEST_F(MembershipTest, APartitionedServerStopsServingBeforeTheMasterSeesItGone) {
  int64_t stopped_at = 0, gone_at = 0;
  LiveServers live(
      service_.get(), &env_, "c", [](const std::string&) {},
      [&](const std::string&) { gone_at = env_.MonotonicMicros(); });
  live.Start();
  lock::Partitionable link(service_.get());
  ServerRegistration ts(&link, &env_, "c", "ts1:1", kTtl,
                        [&](const absl::Status&) { stopped_at = env_.MonotonicMicros(); });
  ASSERT_TRUE(Register(ts).ok());
  Pass(kTtl * 2);
  ASSERT_EQ(live.servers().size(), 1u);
  link.cut = true;
  Pass(kTtl * 2);
  ASSERT_NE(gone_at, 0);
  ASSERT_NE(stopped_at, 0);
  EXPECT_LE(stopped_at, gone_at);
  EXPECT_FALSE(ts.registered());
}

TEST_F(MembershipTest, AStandbyMasterTakesOverWhenTheMasterGoes) {
  std::vector<std::string> elected;
  auto a = std::make_unique<MasterElection>(
      service_.get(), &env_, "c", "A", kTtl, [&] { elected.push_back("A"); },
      [](const absl::Status& s) { ADD_FAILURE() << s; });
  a->Start();
  MasterElection b(
      service_.get(), &env_, "c", "B", kTtl, [&] { elected.push_back("B"); },
      [](const absl::Status& s) { ADD_FAILURE() << s; });
  b.Start();
  Pass(kTtl * 2);
  EXPECT_EQ(elected, (std::vector<std::string>{"A"}));
  EXPECT_TRUE(a->is_master());
  EXPECT_FALSE(b.is_master());
  EXPECT_EQ(b.master(), "A");
  a.reset();  // the master exits: its lock goes
  Pass(absl::Milliseconds(100));
  EXPECT_EQ(elected, (std::vector<std::string>{"A", "B"}));
  EXPECT_TRUE(b.is_master());
}

// Never two masters: a master cut off from the lock service gives up no
// later than the standby can take the lock.
TEST_F(MembershipTest, APartitionedMasterGivesUpBeforeTheStandbyTakesOver) {
  int64_t a_lost = 0, b_elected = 0;
  lock::Partitionable link(service_.get());
  MasterElection a(
      &link, &env_, "c", "A", kTtl, [] {},
      [&](const absl::Status&) { a_lost = env_.MonotonicMicros(); });
  a.Start();
  Pass(absl::Milliseconds(100));
  ASSERT_TRUE(a.is_master());
  MasterElection b(
      service_.get(), &env_, "c", "B", kTtl, [&] { b_elected = env_.MonotonicMicros(); },
      [](const absl::Status& s) { ADD_FAILURE() << s; });
  b.Start();
  Pass(kTtl);
  link.cut = true;
  Pass(kTtl * 2);
  ASSERT_NE(a_lost, 0);
  ASSERT_NE(b_elected, 0);
  EXPECT_LE(a_lost, b_elected);
  EXPECT_FALSE(a.is_master());
  EXPECT_TRUE(b.is_master());
  EXPECT_EQ(b.master(), "B");
}

}  // namespace
}  // namespace megastore::storage::cell
