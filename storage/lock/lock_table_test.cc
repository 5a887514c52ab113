#include "storage/lock/lock_table.h"

#include <fstream>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {
namespace {

TEST(LockTableTest, ALeaseIsExclusiveUntilItExpires) {
  ManualEnv env;
  LockTable locks(&env);
  LockTable::Holder h = *locks.Acquire("coordinator/A", "a#1", absl::Seconds(2));
  EXPECT_TRUE(h.held);
  EXPECT_EQ(h.owner, "a#1");
  EXPECT_EQ(h.remaining, absl::Seconds(2));

  h = *locks.Acquire("coordinator/A", "a#2", absl::Seconds(2));
  EXPECT_EQ(h.owner, "a#1") << "another owner must not take a held lock";

  env.Advance(absl::Seconds(1));
  h = *locks.Acquire("coordinator/A", "a#1", absl::Seconds(2));  // renewal
  EXPECT_EQ(h.remaining, absl::Seconds(2));
  env.Advance(absl::Milliseconds(1999));
  EXPECT_TRUE(locks.Query("coordinator/A").held);
  env.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(locks.Query("coordinator/A").held) << "expires exactly at the lease's end";
  h = *locks.Acquire("coordinator/A", "a#2", absl::Seconds(2));
  EXPECT_EQ(h.owner, "a#2");
}

TEST(LockTableTest, OnlyTheHolderReleases) {
  ManualEnv env;
  LockTable locks(&env);
  ASSERT_TRUE(locks.Acquire("l", "x", absl::Seconds(5)).ok());
  locks.Release("l", "y");
  EXPECT_TRUE(locks.Query("l").held);
  locks.Release("l", "x");
  EXPECT_FALSE(locks.Query("l").held);
}

TEST(LockTableTest, ARenewalKeepsTheGrantAndATakeoverOfAFreeLockGetsANewOne) {
  ManualEnv env;
  LockTable locks(&env);
  const uint64_t first = locks.Acquire("l", "x", absl::Seconds(2))->grant;
  EXPECT_NE(first, 0u);
  env.Advance(absl::Seconds(1));
  EXPECT_EQ(locks.Acquire("l", "x", absl::Seconds(2))->grant, first) << "a renewal";
  env.Advance(absl::Seconds(2));  // expired: a writer may have found it free
  const uint64_t second = locks.Acquire("l", "x", absl::Seconds(2))->grant;
  EXPECT_NE(second, first) << "the same owner, but the lock was free meanwhile";
  locks.Release("l", "x");
  EXPECT_NE(locks.Acquire("l", "x", absl::Seconds(2))->grant, second);
}

TEST(LockTableTest, LeasesLongerThanTheMaximumAreRefused) {
  ManualEnv env;
  LockTableOptions o;
  o.max_lease = absl::Seconds(10);
  auto locks = LockTable::Open(&env, o);
  ASSERT_TRUE(locks.ok());
  absl::StatusOr<LockTable::Holder> h = (*locks)->Acquire("l", "x", absl::Seconds(11));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(std::string(h.status().message()), ::testing::HasSubstr("11s is outside (0, 10s]"));
  EXPECT_FALSE((*locks)->Query("l").held);
}

// A restart forgets every lease; it must not let anyone take or find free a
// lock that its previous incarnation granted until that lease is over.
TEST(LockTableTest, ARestartedTableStaysQuietForTheLongestLeaseItEverGranted) {
  ManualEnv env;
  TestDir dir;
  LockTableOptions o;
  o.state_file = dir.path() + "/locks.state";
  {
    LockTableOptions first = o;
    first.new_directory = true;
    auto fresh = LockTable::Open(&env, first);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    EXPECT_FALSE((*fresh)->Query("coordinator/A").held) << "a first start in a new directory";
    ASSERT_TRUE((*fresh)->Acquire("coordinator/A", "a#1", absl::Seconds(3)).ok());
    ASSERT_TRUE((*fresh)->Acquire("coordinator/B", "b#1", absl::Seconds(2)).ok());
  }
  auto restarted = LockTable::Open(&env, o);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  LockTable& t = **restarted;
  EXPECT_TRUE(t.Query("coordinator/A").held);
  EXPECT_TRUE(t.Query("coordinator/never-taken").held) << "it cannot know which locks were held";
  absl::StatusOr<LockTable::Holder> c = t.Acquire("coordinator/C", "c#1", absl::Seconds(2));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->quiet);
  EXPECT_NE(c->owner, "c#1") << "nothing is granted while quiet";
  env.Advance(absl::Seconds(3));
  EXPECT_TRUE(t.Query("coordinator/A").held) << "the drift margin is not over yet";
  env.Advance(QuietPeriod(absl::Seconds(3), o.max_clock_drift) - absl::Seconds(3));
  EXPECT_FALSE(t.Query("coordinator/A").held);
  EXPECT_EQ(t.Acquire("coordinator/A", "a#2", absl::Seconds(2))->owner, "a#2");
}

// An upgrade from a lock role that kept no file, or a lost file: it may
// have granted any lease it allows.
TEST(LockTableTest, AMissingStateFileInAUsedDirectoryMeansTheLongestLeaseAllowed) {
  ManualEnv env;
  TestDir dir;
  LockTableOptions o;
  o.state_file = dir.path() + "/locks.state";
  o.max_lease = absl::Seconds(10);
  auto t = LockTable::Open(&env, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->Query("coordinator/A").held);
  env.Advance(absl::Seconds(10));
  EXPECT_TRUE((*t)->Query("coordinator/A").held);
  env.Advance(QuietPeriod(absl::Seconds(10), o.max_clock_drift) - absl::Seconds(10));
  EXPECT_FALSE((*t)->Query("coordinator/A").held);
}

TEST(LockTableTest, ADamagedStateFileIsReportedNotGuessed) {
  ManualEnv env;
  TestDir dir;
  LockTableOptions o;
  o.state_file = dir.path() + "/locks.state";
  std::ofstream(o.state_file) << "not a state file";
  auto t = LockTable::Open(&env, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr("locks.state is damaged"));
}

TEST(LockTableTest, TheHolderCountsItsLeaseShorterThanTheTable) {
  EXPECT_LT(HolderLease(absl::Seconds(2), kDefaultMaxClockDrift),
            absl::Seconds(2) * (1 - kDefaultMaxClockDrift));
  EXPECT_GT(QuietPeriod(absl::Seconds(2), kDefaultMaxClockDrift),
            absl::Seconds(2) * (1 + kDefaultMaxClockDrift));
  EXPECT_EQ(QuietPeriod(absl::ZeroDuration(), kDefaultMaxClockDrift), absl::ZeroDuration());
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
  EXPECT_NE(r->grant(), 0u);
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
