#include "coordinator/advisory_locks.h"

#include <optional>

#include "coordinator/coordinator.pb.h"
#include "gtest/gtest.h"

namespace megastore::coordinator {
namespace {

class AdvisoryLocksTest : public ::testing::Test {
 protected:
  // Sends coord.Lock or coord.Unlock; the answer lands in the returned slot.
  std::shared_ptr<std::optional<absl::StatusOr<AdvisoryLockReply>>> Call(std::string_view method,
                                                                         std::string owner,
                                                                         int wait_ms = 1000,
                                                                         int lease_ms = 5000,
                                                                         std::string root = "g1") {
    AdvisoryLockRequest req;
    req.set_table("T");
    req.set_root(root);
    req.set_owner(std::move(owner));
    req.set_wait_ms(static_cast<uint64_t>(wait_ms));
    req.set_lease_ms(static_cast<uint64_t>(lease_ms));
    auto slot = std::make_shared<std::optional<absl::StatusOr<AdvisoryLockReply>>>();
    locks_.Serve(method, req.SerializeAsString(), [slot](absl::StatusOr<std::string> r) {
      if (!r.ok()) {
        *slot = r.status();
        return;
      }
      AdvisoryLockReply reply;
      EXPECT_TRUE(reply.ParseFromString(*r));
      *slot = reply;
    });
    return slot;
  }
  static bool Granted(const std::shared_ptr<std::optional<absl::StatusOr<AdvisoryLockReply>>>& s) {
    return s->has_value() && (*s)->ok() && (**s)->granted();
  }

  ManualEnv env_;
  AdvisoryLocks locks_{&env_};
};

TEST_F(AdvisoryLocksTest, WritersGetTheLockOneAfterAnotherInRequestOrder) {
  auto a = Call("coord.Lock", "a");
  ASSERT_TRUE(Granted(a)) << "a free lock is granted at once";
  auto b = Call("coord.Lock", "b");
  auto c = Call("coord.Lock", "c");
  EXPECT_FALSE(b->has_value()) << "b queues behind a";
  EXPECT_EQ(locks_.Waiting("T/g1"), 2u);
  auto other = Call("coord.Lock", "x", 1000, 5000, "g2");
  EXPECT_TRUE(Granted(other)) << "another group's lock is independent";

  EXPECT_TRUE(Granted(Call("coord.Unlock", "a")));
  EXPECT_TRUE(Granted(b)) << "b was first in line";
  EXPECT_FALSE(c->has_value());
  EXPECT_EQ(locks_.Holder("T/g1"), "b");
  EXPECT_TRUE(Granted(Call("coord.Lock", "b"))) << "a repeated request of the holder";
  EXPECT_FALSE(Granted(Call("coord.Unlock", "a"))) << "a no longer holds it";
  EXPECT_TRUE(Granted(Call("coord.Unlock", "b")));
  EXPECT_TRUE(Granted(c));
  EXPECT_TRUE(Granted(Call("coord.Unlock", "c")));
  EXPECT_EQ(locks_.Holder("T/g1"), "");
}

TEST_F(AdvisoryLocksTest, AWaiterGivesUpAfterItsWaitAndAHolderLosesTheLockAfterItsLease) {
  auto a = Call("coord.Lock", "a", 1000, /*lease_ms=*/2000);
  ASSERT_TRUE(Granted(a));
  auto impatient = Call("coord.Lock", "impatient", /*wait_ms=*/100);
  auto patient = Call("coord.Lock", "patient", /*wait_ms=*/10000);
  env_.Advance(absl::Milliseconds(99));
  EXPECT_FALSE(impatient->has_value());
  env_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(impatient->has_value());
  EXPECT_FALSE(Granted(impatient)) << "answered 'not granted' when its wait ran out";
  EXPECT_EQ(locks_.Waiting("T/g1"), 1u);

  env_.Advance(absl::Milliseconds(1899));
  EXPECT_FALSE(patient->has_value()) << "a's lease still runs";
  env_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(Granted(patient)) << "a died holding it: its lease freed it";
  EXPECT_FALSE(Granted(Call("coord.Unlock", "a"))) << "a's late unlock changes nothing";
  EXPECT_EQ(locks_.Holder("T/g1"), "patient");
}

TEST_F(AdvisoryLocksTest, ANoWaitRequestAndAnUnlockingWaiterLeaveTheQueue) {
  ASSERT_TRUE(Granted(Call("coord.Lock", "a")));
  auto now = Call("coord.Lock", "now", /*wait_ms=*/0);
  ASSERT_TRUE(now->has_value());
  EXPECT_FALSE(Granted(now));
  auto quitter = Call("coord.Lock", "quitter");
  EXPECT_FALSE(Granted(Call("coord.Unlock", "quitter")));
  ASSERT_TRUE(quitter->has_value()) << "its Lock is answered when it leaves";
  EXPECT_FALSE(Granted(quitter));
  EXPECT_EQ(locks_.Waiting("T/g1"), 0u);
}

TEST_F(AdvisoryLocksTest, MalformedRequestsAreRefused) {
  std::optional<absl::Status> r;
  locks_.Serve("coord.Lock", "\xff\xff garbage",
               [&](absl::StatusOr<std::string> x) { r = x.status(); });
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(absl::IsInvalidArgument(*r)) << *r;
  auto no_owner = Call("coord.Lock", "");
  EXPECT_TRUE(absl::IsInvalidArgument((*no_owner)->status()));
  auto no_lease = Call("coord.Lock", "a", 10, 0);
  EXPECT_TRUE(absl::IsInvalidArgument((*no_lease)->status()));
}

}  // namespace
}  // namespace megastore::coordinator
