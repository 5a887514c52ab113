#include "storage/lock/lock_table.h"

#include "gtest/gtest.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {
namespace {

TEST(LockTableTest, ALeaseIsExclusiveUntilItExpires) {
  ManualEnv env;
  LockTable locks(&env);
  LockTable::Holder h = locks.Acquire("coordinator/A", "a#1", absl::Seconds(2));
  EXPECT_TRUE(h.held);
  EXPECT_EQ(h.owner, "a#1");
  EXPECT_EQ(h.remaining, absl::Seconds(2));

  h = locks.Acquire("coordinator/A", "a#2", absl::Seconds(2));
  EXPECT_EQ(h.owner, "a#1") << "another owner must not take a held lock";

  env.Advance(absl::Seconds(1));
  h = locks.Acquire("coordinator/A", "a#1", absl::Seconds(2));  // renewal
  EXPECT_EQ(h.remaining, absl::Seconds(2));
  env.Advance(absl::Milliseconds(1999));
  EXPECT_TRUE(locks.Query("coordinator/A").held);
  env.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(locks.Query("coordinator/A").held) << "expires exactly at the lease's end";
  h = locks.Acquire("coordinator/A", "a#2", absl::Seconds(2));
  EXPECT_EQ(h.owner, "a#2");
}

TEST(LockTableTest, OnlyTheHolderReleases) {
  ManualEnv env;
  LockTable locks(&env);
  locks.Acquire("l", "x", absl::Seconds(5));
  locks.Release("l", "y");
  EXPECT_TRUE(locks.Query("l").held);
  locks.Release("l", "x");
  EXPECT_FALSE(locks.Query("l").held);
}

absl::StatusOr<LockReply> Call(LockTable& locks, std::string_view method, const std::string& req) {
  absl::StatusOr<std::string> out = absl::UnknownError("no answer");
  locks.Serve(method, req, [&](absl::StatusOr<std::string> r) { out = std::move(r); });
  if (!out.ok()) return out.status();
  LockReply reply;
  if (!reply.ParseFromString(*out)) return absl::DataLossError("bad reply");
  return reply;
}

TEST(LockTableTest, ServesItsMethodsAndRefusesMalformedRequests) {
  ManualEnv env;
  LockTable locks(&env);
  AcquireRequest a;
  a.set_name("l");
  a.set_owner("me");
  a.set_lease_micros(1000);
  absl::StatusOr<LockReply> r = Call(locks, "lock.Acquire", a.SerializeAsString());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->granted());
  LockRequest q;
  q.set_name("l");
  r = Call(locks, "lock.Query", q.SerializeAsString());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->held());
  EXPECT_EQ(r->holder(), "me");
  EXPECT_EQ(r->remaining_micros(), 1000);

  a.set_lease_micros(0);
  EXPECT_EQ(Call(locks, "lock.Acquire", a.SerializeAsString()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Call(locks, "lock.Query", "\xff\xff garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Call(locks, "lock.Steal", "").status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace megastore::storage::lock
