#include "coordinator/coordinator.h"

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "coordinator/coordinator.pb.h"
#include "gtest/gtest.h"
#include "storage/lock/lock.pb.h"
#include "storage/lock/lock_table.h"

namespace megastore::coordinator {
namespace {

// Delivers calls at once to lock tables by node name; nodes in `down` do
// not answer (the caller sees a timeout).
class LockNetwork : public Transport {
 public:
  explicit LockNetwork(Env* env) : env_(env) {}
  void Add(const std::string& node) {
    tables_[node] = std::make_unique<storage::lock::LockTable>(env_);
  }
  // The lock service restarts and forgets every lease (with no quiet
  // period: the old lock role's behaviour, for a lapse the coordinator's own
  // accounting cannot see).
  void Forget(const std::string& node) { Add(node); }
  void Call(std::string_view to, std::string_view method, std::string request, absl::Duration,
            ReplyCallback done) override {
    auto it = tables_.find(std::string(to));
    if (it == tables_.end() || down.count(std::string(to))) {
      done(absl::DeadlineExceededError("no answer"));
      return;
    }
    it->second->Serve(method, std::move(request), std::move(done));
  }
  storage::lock::LockTable& table(const std::string& node) { return *tables_.at(node); }
  std::set<std::string> down;

 private:
  Env* const env_;
  std::map<std::string, std::unique_ptr<storage::lock::LockTable>> tables_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : net_(&env_) {
    net_.Add("B/lock");
    net_.Add("C/lock");
  }

  std::unique_ptr<Coordinator> Make(std::vector<std::string> lock_services = {"B/lock", "C/lock"}) {
    CoordinatorOptions o;
    o.name = "A";
    o.lock_services = std::move(lock_services);
    o.lease = absl::Seconds(2);
    o.renew_interval = absl::Milliseconds(500);
    return std::make_unique<Coordinator>(&env_, &net_, o);
  }

  static CoordinatorReply Ask(Coordinator& c, std::string_view method, uint64_t position = 0,
                              uint64_t epoch = 0, const std::string& root = "g1") {
    CoordinatorRequest r;
    r.set_table("t");
    r.set_root(root);
    r.set_position(position);
    r.set_epoch(epoch);
    CoordinatorReply reply;
    bool answered = false;
    c.Serve(method, r.SerializeAsString(),
            [&](absl::StatusOr<std::string> s) { answered = s.ok() && reply.ParseFromString(*s); });
    EXPECT_TRUE(answered) << method;
    return reply;
  }

  // Makes group g1 valid at `position` the way a reader does.
  static void Validate(Coordinator& c, uint64_t position) {
    const uint64_t epoch = Ask(c, "coord.Check").epoch();
    ASSERT_TRUE(Ask(c, "coord.Validate", position, epoch).applied());
  }

  ManualEnv env_;
  LockNetwork net_;
};

TEST_F(CoordinatorTest, ANewCoordinatorKnowsNoGroupAndServesOnlyWithItsLocks) {
  auto c = Make();
  EXPECT_FALSE(c->serving()) << "not started: holds no lock";
  EXPECT_FALSE(Ask(*c, "coord.Validate", 5, c->epoch()).applied());
  c->Start();
  EXPECT_TRUE(c->serving());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid())
      << "a new coordinator starts with every group invalid";
  Validate(*c, 5);
  EXPECT_TRUE(Ask(*c, "coord.Check").valid());
  EXPECT_FALSE(Ask(*c, "coord.Check", 0, 0, "g2").valid()) << "validity is per group";
}

TEST_F(CoordinatorTest, TheOnlyDatacenterNeedsNoLocksToServe) {
  CoordinatorOptions o;
  o.name = "A";
  Coordinator alone(&env_, &net_, o);
  EXPECT_FALSE(alone.serving()) << "not started";
  alone.Start();
  EXPECT_TRUE(alone.serving());
  env_.Advance(absl::Seconds(60));
  EXPECT_TRUE(alone.serving()) << "no lease to run out";
  Validate(alone, 3);
  EXPECT_TRUE(Ask(alone, "coord.Check").valid());
  alone.Stop();
  EXPECT_FALSE(alone.serving());
}

TEST_F(CoordinatorTest, AValidateWithAnOldEpochIsRefused) {
  auto c = Make();
  c->Start();
  const uint64_t epoch = Ask(*c, "coord.Check").epoch();
  EXPECT_FALSE(Ask(*c, "coord.Validate", 5, epoch + 1).applied());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
  EXPECT_TRUE(Ask(*c, "coord.Validate", 5, epoch).applied());
}

TEST_F(CoordinatorTest, AnInvalidateBeatsAValidateOfALowerPositionInEitherOrder) {
  auto c = Make();
  c->Start();
  Validate(*c, 5);
  ASSERT_TRUE(Ask(*c, "coord.Invalidate", 6).applied());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());

  // A reader that caught up to 5 (before position 6 was chosen) arrives late.
  const uint64_t epoch = Ask(*c, "coord.Check").epoch();
  EXPECT_FALSE(Ask(*c, "coord.Validate", 5, epoch).applied());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
  // One that caught up to 6 or later may validate.
  EXPECT_TRUE(Ask(*c, "coord.Validate", 6, epoch).applied());
  EXPECT_TRUE(Ask(*c, "coord.Check").valid());
  // Invalidations of old positions still invalidate (always safe).
  ASSERT_TRUE(Ask(*c, "coord.Invalidate", 3).applied());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
}

TEST_F(CoordinatorTest, LosingTheLockMajorityForgetsEveryGroupAndChangesTheEpoch) {
  auto c = Make();
  c->Start();
  Validate(*c, 5);
  const uint64_t epoch = c->epoch();
  net_.down.insert("C/lock");  // renewals reach only one of two
  env_.Advance(absl::Milliseconds(1900));
  EXPECT_TRUE(c->serving()) << "the lease taken at time 0 still runs";
  EXPECT_TRUE(Ask(*c, "coord.Check").valid());
  env_.Advance(absl::Milliseconds(100));
  EXPECT_FALSE(c->serving()) << "a majority of 2 is 2";
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
  EXPECT_NE(c->epoch(), epoch);
  // The lock service agrees the lease is over.
  EXPECT_FALSE(net_.table("C/lock").Query(LockName("A")).held);

  net_.down.clear();
  env_.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(c->serving()) << "renewals got both locks back";
  EXPECT_FALSE(Ask(*c, "coord.Check").valid()) << "but everything is stale until validated";
  EXPECT_FALSE(Ask(*c, "coord.Validate", 9, epoch).applied()) << "a validate from before the loss";
  Validate(*c, 9);
  EXPECT_TRUE(Ask(*c, "coord.Check").valid());
}

// A reader asks while the coordinator is not serving (and gets its epoch),
// reads the log at a majority, and validates after the coordinator got its
// locks back. A write acknowledged meanwhile on a lock survey that found the
// lock free, whose invalidation never arrived, must not be missed.
TEST_F(CoordinatorTest, AReaderThatCheckedWhileNotServingCannotValidateAfterTheLocksComeBack) {
  auto c = Make();
  c->Start();
  net_.down.insert("C/lock");
  env_.Advance(absl::Seconds(2));
  ASSERT_FALSE(c->serving());
  const uint64_t epoch = Ask(*c, "coord.Check").epoch();  // the reader's check
  ASSERT_FALSE(net_.table("C/lock").Query(LockName("A")).held) << "a writer's survey sees it free";
  net_.down.clear();
  env_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(c->serving());
  EXPECT_FALSE(Ask(*c, "coord.Validate", 4, epoch).applied())
      << "the reader's catch-up may predate the write that skipped this coordinator";
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
}

// Both lock services restart and forget the lease between two renewals: a
// writer finds the lock free at both and skips this coordinator, while the
// coordinator's own count of its leases never lapsed.
TEST_F(CoordinatorTest, ALapseOnlyTheLockServicesSawStillForgetsEveryGroup) {
  auto c = Make();
  c->Start();
  Validate(*c, 5);
  const uint64_t epoch = c->epoch();
  net_.Forget("B/lock");
  net_.Forget("C/lock");
  ASSERT_FALSE(net_.table("B/lock").Query(LockName("A")).held);
  ASSERT_FALSE(net_.table("C/lock").Query(LockName("A")).held);
  env_.Advance(absl::Milliseconds(500));  // the next renewal takes them again
  ASSERT_TRUE(c->serving());
  EXPECT_FALSE(Ask(*c, "coord.Check").valid()) << "a write at 6 may have skipped it";
  EXPECT_NE(c->epoch(), epoch);
}

// Five datacenters: the coordinator holds three of its four locks at every
// instant, but a writer's survey saw E free (before the coordinator took it)
// and later B free (after it let B go): two free, so it skipped the
// coordinator. Taking E — a lock that was free — must forget every group.
TEST_F(CoordinatorTest, ASurveyThatSawLocksFreeAtDifferentInstantsIsNeverContradicted) {
  for (const char* n : {"D/lock", "E/lock"}) net_.Add(n);
  auto c = Make({"B/lock", "C/lock", "D/lock", "E/lock"});
  net_.down.insert("E/lock");
  c->Start();
  ASSERT_TRUE(c->serving()) << "three of four";
  Validate(*c, 5);
  ASSERT_FALSE(net_.table("E/lock").Query(LockName("A")).held);  // the survey's first answer
  net_.down = {"B/lock"};
  env_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(c->serving()) << "C, D and E now";
  env_.Advance(absl::Seconds(2));
  ASSERT_TRUE(c->serving());
  ASSERT_FALSE(net_.table("B/lock").Query(LockName("A")).held);  // the second answer
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
}

// An older lock service grants without ids: it cannot say whether the lock
// was free meanwhile, so its grants count for nothing.
TEST(CoordinatorGrantIdTest, AGrantWithoutAnIdIsNotCounted) {
  struct OldLockService : Transport {
    void Call(std::string_view, std::string_view, std::string, absl::Duration,
              ReplyCallback done) override {
      storage::lock::LockReply r;
      r.set_granted(true);
      r.set_held(true);
      done(r.SerializeAsString());
    }
  } old;
  ManualEnv env;
  CoordinatorOptions o;
  o.name = "A";
  o.lock_services = {"B/lock"};
  o.lease = absl::Seconds(2);
  o.renew_interval = absl::Milliseconds(500);
  Coordinator c(&env, &old, o);
  c.Start();
  env.Advance(absl::Seconds(1));
  EXPECT_FALSE(c.serving());
}

// A lock service's answer that arrives after the coordinator is gone (the
// datacenter's transport outlives it) does nothing. (Touching the freed
// coordinator is what AddressSanitizer builds catch here.)
TEST(CoordinatorLifetimeTest, AnAnswerAfterTheCoordinatorIsGoneDoesNothing) {
  struct SlowLockService : Transport {
    void Call(std::string_view, std::string_view, std::string, absl::Duration,
              ReplyCallback done) override {
      parked.push_back(std::move(done));
    }
    std::vector<Transport::ReplyCallback> parked;
  } slow;
  ManualEnv env;
  CoordinatorOptions o;
  o.name = "A";
  o.lock_services = {"B/lock", "C/lock"};
  o.lease = absl::Seconds(2);
  o.renew_interval = absl::Milliseconds(500);
  auto c = std::make_unique<Coordinator>(&env, &slow, o);
  c->Start();
  ASSERT_EQ(slow.parked.size(), 2u);
  c.reset();
  for (Transport::ReplyCallback& done : slow.parked) {
    storage::lock::LockReply r;
    r.set_granted(true);
    r.set_held(true);
    r.set_grant(7);
    done(r.SerializeAsString());
  }
  env.Advance(absl::Seconds(1));  // and no renewal is left scheduled
  EXPECT_EQ(slow.parked.size(), 2u);
}

TEST(CoordinatorOptionsTest, ALeaseThatCannotOutlastARenewalIsRefused) {
  CoordinatorOptions o;
  o.lease = absl::Seconds(2);
  o.renew_interval = absl::Milliseconds(1500);
  o.rpc_timeout = absl::Milliseconds(500);
  absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("does not outlast a renew interval of 1.5s plus an RPC timeout of 500ms"),
      std::string::npos)
      << s;
  o.rpc_timeout = absl::Milliseconds(400);
  EXPECT_TRUE(o.Validate().ok());
  o.max_clock_drift = 0.5;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_TRUE(CoordinatorOptions{}.Validate().ok()) << "the defaults";
}

TEST_F(CoordinatorTest, PausedRenewalsLetTheLocksExpire) {
  auto c = Make();
  c->Start();
  Validate(*c, 1);
  c->PauseRenewals(absl::Seconds(3));
  env_.Advance(absl::Milliseconds(2500));
  EXPECT_FALSE(c->serving());
  EXPECT_FALSE(net_.table("B/lock").Query(LockName("A")).held);
  EXPECT_FALSE(Ask(*c, "coord.Check").valid());
}

TEST_F(CoordinatorTest, ARestartedCoordinatorWaitsForItsPredecessorsLocksAndKnowsNothing) {
  auto first = Make();
  first->Start();
  Validate(*first, 4);
  first.reset();  // a crash: its leases stay until they expire
  auto second = Make();
  second->Start();
  EXPECT_FALSE(second->serving()) << "the old incarnation still holds the locks";
  env_.Advance(absl::Milliseconds(2500));
  EXPECT_TRUE(second->serving());
  EXPECT_FALSE(Ask(*second, "coord.Check").valid());
}

TEST_F(CoordinatorTest, MalformedRequestsAreRefused) {
  auto c = Make();
  c->Start();
  absl::Status status;
  c->Serve("coord.Check", "\x0a\xff garbage",
           [&](absl::StatusOr<std::string> r) { status = r.status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  c->Serve("coord.Check", "", [&](absl::StatusOr<std::string> r) { status = r.status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "no table, no root";
  CoordinatorRequest r;
  r.set_table("t");
  r.set_root("g");
  c->Serve("coord.Frobnicate", r.SerializeAsString(),
           [&](absl::StatusOr<std::string> s) { status = s.status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace megastore::coordinator
