// Whole simulations: determinism, replica topologies, and the latency
// properties docs/replication.md reports. The many-seed run is the ctest
// `mssim_seeds` (sim/CMakeLists.txt).
#include "gtest/gtest.h"
#include "sim/cluster.h"

namespace megastore::sim {
namespace {

using replication::ReplicaType;

TEST(SimulationTest, ASeedReplaysExactly) {
  SimOptions o;
  o.seed = 11;
  o.trace = true;
  o.ops_per_client = 10;
  SimResult a = RunSimulation(o);
  SimResult b = RunSimulation(o);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_GT(a.trace.size(), 100u);
  EXPECT_EQ(a.trace, b.trace);
  o.seed = 12;
  EXPECT_NE(RunSimulation(o).trace, a.trace);
}

TEST(SimulationTest, EveryClientFinishesAndSomeOperationsSucceedUnderFaults) {
  SimOptions o;
  o.seed = 5;
  SimResult r = RunSimulation(o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.stats.ops_ok + r.stats.ops_failed + r.stats.ops_unknown,
            o.clients * o.ops_per_client);
  EXPECT_GT(r.stats.ops_ok, o.clients * o.ops_per_client / 2);
  EXPECT_GT(r.stats.faults, 3);
  EXPECT_GT(r.stats.dropped, 0u);
}

TEST(SimulationTest, TwoFullReplicasAndAWitnessStayCorrect) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SimOptions o;
    o.seed = seed;
    o.replicas = {ReplicaType::kFull, ReplicaType::kFull, ReplicaType::kWitness};
    SimResult r = RunSimulation(o);
    ASSERT_TRUE(r.status.ok()) << "seed " << seed << ": " << r.status;
  }
}

TEST(SimulationTest, AReadOnlyReplicaServesReadsWithoutVoting) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SimOptions o;
    o.seed = seed;
    o.replicas = {ReplicaType::kFull, ReplicaType::kFull, ReplicaType::kFull,
                  ReplicaType::kReadOnly};
    o.clients = 4;  // one at the read-only replica
    SimResult r = RunSimulation(o);
    ASSERT_TRUE(r.status.ok()) << "seed " << seed << ": " << r.status;
  }
}

TEST(SimulationTest, FiveReplicasWithContendedGroups) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SimOptions o;
    o.seed = seed;
    o.replicas.assign(5, ReplicaType::kFull);
    o.clients = 6;
    o.groups = 1;
    SimResult r = RunSimulation(o);
    ASSERT_TRUE(r.status.ok()) << "seed " << seed << ": " << r.status;
  }
}

// App servers running several operations at once share one GroupClient:
// their writes to a group combine into shared log entries, and the history
// check (each compare-and-set against the members ahead of it) holds.
TEST(SimulationTest, WritesOfOneAppServerCombineIntoSharedEntriesAndStayCorrect) {
  uint64_t combined = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SimOptions o;
    o.seed = seed;
    o.sessions = 4;
    o.groups = 1;
    SimResult r = RunSimulation(o);
    ASSERT_TRUE(r.status.ok()) << "seed " << seed << ": " << r.status;
    EXPECT_LT(r.stats.entries, r.stats.commits) << "seed " << seed;
    combined += r.stats.combined;
  }
  EXPECT_GT(combined, 20u);
}

TEST(MeasurementsTest, ReportCoversEveryScenario) {
  const std::string report = RunMeasurements(1, 5);
  for (const char* row : {"commit, uncontended", "current read, group valid at A",
                          "nominated leader (B) down", "A's coordinator down", "C down"}) {
    EXPECT_NE(report.find(row), std::string::npos) << row << "\n" << report;
  }
  EXPECT_EQ(report.find("no successful operation"), std::string::npos) << report;
  // A valid current read sends nothing between datacenters.
  EXPECT_NE(report.find("| current read, group valid at A | "), std::string::npos);
  const size_t row = report.find("| current read, group valid at A |");
  const std::string line = report.substr(row, report.find('\n', row) - row);
  EXPECT_EQ(line.substr(line.rfind("| ", line.size() - 3)), "| 0.0 |") << line;
}

}  // namespace
}  // namespace megastore::sim
