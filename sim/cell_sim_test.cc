#include "sim/cell_sim.h"

#include "gtest/gtest.h"

namespace megastore::sim {
namespace {

TEST(CellSimTest, ACellWithoutFaultsServesEveryWriteAndSplitsNothingByItself) {
  CellSimOptions o;
  o.seed = 1;
  o.faults = false;
  o.ops_per_client = 20;
  const CellSimResult r = RunCellSimulation(o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_GT(r.stats.ops_ok, 40);
  EXPECT_EQ(r.stats.ops_unknown, 0);
  EXPECT_GT(r.stats.reads_checked, 10);
  EXPECT_EQ(r.stats.tablets, 4);  // the table's four initial tablets
  EXPECT_GT(r.stats.owner_checks, 0);
}

TEST(CellSimTest, SeedsWithFaultsKeepEveryAcknowledgedWriteAndOneOwnerPerRow) {
  int kills = 0, reshapes = 0;
  for (uint64_t seed = 11; seed < 14; ++seed) {
    CellSimOptions o;
    o.seed = seed;
    const CellSimResult r = RunCellSimulation(o);
    ASSERT_TRUE(r.status.ok()) << "seed " << seed << ": " << r.status;
    kills += r.stats.server_kills + r.stats.master_kills;
    reshapes += r.stats.splits + r.stats.moves;
  }
  EXPECT_GT(kills, 0);
  EXPECT_GT(reshapes, 0);
}

TEST(CellSimTest, TheSameSeedReplaysTheSameRun) {
  CellSimOptions o;
  o.seed = 21;
  o.trace = true;
  o.fault_period = absl::Seconds(8);
  const CellSimResult a = RunCellSimulation(o);
  const CellSimResult b = RunCellSimulation(o);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_FALSE(a.trace.empty());
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_EQ(a.stats.ops_ok, b.stats.ops_ok);
  EXPECT_EQ(a.stats.virtual_micros, b.stats.virtual_micros);
}

}  // namespace
}  // namespace megastore::sim
