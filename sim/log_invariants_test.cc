#include "sim/log_invariants.h"

#include "base/coding.h"
#include "gtest/gtest.h"
#include "replication/log_replica.h"
#include "replication/replication.pb.h"

namespace megastore::sim {
namespace {

std::string Column(uint64_t position, char kind) {
  std::string q = "L";
  AppendOrderedUint64(&q, position);
  q += kind;
  return q;
}

std::vector<storage::Mutation> Accept(uint64_t position, uint64_t round, const std::string& v) {
  replication::AcceptorRecord r;
  r.mutable_promised()->set_round(round);
  r.mutable_accepted()->set_round(round);
  r.mutable_accepted()->set_proposer(round == 0 ? 0 : 7);
  r.set_accepted_value(v);
  return {storage::Mutation::SetCell(replication::kLogFamily, Column(position, 'a'),
                                     r.SerializeAsString())};
}

std::vector<storage::Mutation> Learn(uint64_t position, const std::string& v) {
  return {storage::Mutation::SetCell(replication::kLogFamily, Column(position, 'l'), v)};
}

TEST(LogInvariantsTest, AnOrdinaryHistoryPasses) {
  LogInvariants inv({true, true, true});
  // A late accept of another value at a lower ballot, after the choice, is legal Paxos.
  inv.Observe(0, "t", "g", Accept(1, 2, "x"), 1);
  inv.Observe(1, "t", "g", Accept(1, 2, "x"), 2);
  inv.Observe(2, "t", "g", Accept(1, 1, "y"), 3);
  inv.Observe(0, "t", "g", Learn(1, "x"), 4);
  inv.Observe(2, "t", "g", Learn(1, "x"), 5);
  inv.Observe(2, "t", "g", Learn(1, "x"), 6);  // a repeated write
  // The same value, chosen again at a higher ballot.
  inv.Observe(2, "t", "g", Accept(1, 3, "x"), 7);
  inv.Observe(1, "t", "g", Accept(1, 3, "x"), 8);
  // Another group's position 1 is its own.
  inv.Observe(0, "t", "h", Accept(1, 0, "y"), 9);
  inv.Observe(0, "t", "h", Learn(1, "y"), 10);
  EXPECT_TRUE(inv.status().ok()) << inv.status();
  EXPECT_EQ(inv.checks(), 10u);
}

TEST(LogInvariantsTest, TwoChosenValuesAreCaughtWhenTheSecondMajorityForms) {
  LogInvariants inv({true, true, true});
  inv.Observe(0, "t", "g", Accept(4, 0, "x"), 1);
  inv.Observe(1, "t", "g", Accept(4, 0, "x"), 2);
  inv.Observe(1, "t", "g", Accept(4, 2, "y"), 3);
  EXPECT_TRUE(inv.status().ok());
  inv.Observe(2, "t", "g", Accept(4, 2, "y"), 4);
  EXPECT_FALSE(inv.status().ok());
  EXPECT_NE(inv.status().message().find("two values chosen"), std::string::npos) << inv.status();
}

TEST(LogInvariantsTest, LearnedValuesMustAgreeAndNeverChange) {
  LogInvariants a({true, true, true});
  a.Observe(0, "t", "g", Learn(2, "x"), 1);
  a.Observe(1, "t", "g", Learn(2, "y"), 2);
  EXPECT_NE(a.status().message().find("learned different values"), std::string::npos) << a.status();

  LogInvariants b({true, true, true});
  b.Observe(0, "t", "g", Learn(2, "x"), 1);
  b.Observe(0, "t", "g", Learn(2, "z"), 2);
  EXPECT_NE(b.status().message().find("second, different value"), std::string::npos) << b.status();

  LogInvariants c({true, true, true});
  c.Observe(0, "t", "g", Learn(2, "x"), 1);
  c.Observe(1, "t", "g", Accept(2, 1, "y"), 2);
  c.Observe(2, "t", "g", Accept(2, 1, "y"), 3);
  EXPECT_NE(c.status().message().find("majority did not choose"), std::string::npos) << c.status();
}

TEST(LogInvariantsTest, BallotZeroHasOneOwner) {
  LogInvariants inv({true, true, true});
  inv.Observe(0, "t", "g", Accept(3, 0, "x"), 1);
  inv.Observe(1, "t", "g", Accept(3, 0, "y"), 2);
  EXPECT_NE(inv.status().message().find("ballot 0"), std::string::npos) << inv.status();
}

TEST(LogInvariantsTest, AReplicaThatDoesNotVoteMustNotAccept) {
  LogInvariants inv({true, true, false});
  inv.Observe(2, "t", "g", Accept(1, 0, "x"), 1);
  EXPECT_NE(inv.status().message().find("does not vote"), std::string::npos) << inv.status();
}

}  // namespace
}  // namespace megastore::sim
