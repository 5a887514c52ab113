#include "server/cluster.h"

#include "base/file.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::server {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& text, bool local_mode = false) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(text, "f.textproto", local_mode);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ClusterConfigTest, EveryShippedClusterConfigLoads) {
  for (const char* name : {"local", "three-processes", "two-full-and-witness", "with-read-only",
                           "split-roles", "cell"}) {
    const std::string path = StrCat(MS_SOURCE_DIR "/conf/", name, ".textproto");
    absl::StatusOr<ClusterConfig> c = LoadClusterConfig(path, std::string_view(name) == "local");
    EXPECT_TRUE(c.ok()) << path << ": " << c.status();
  }
}

TEST(ClusterConfigTest, MistakesAreNamedWithWhereTheyAre) {
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\"\n"), HasSubstr("f.textproto:2:"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("no datacenters"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" bigtable_cell { name: \"a\" } }"),
              HasSubstr("bigtable_cell needs both name and lock_service"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:0\" bigtable_cell { name: \"a\" "
                      "lock_service: \"h:2\" } }",
                      /*local_mode=*/true),
              HasSubstr("not --local"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" } datacenters { name: \"A\" "
                      "address: \"h:2\" }"),
              HasSubstr("datacenter A is named twice"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" type: \"witness\" address: \"h:1\" }"),
              HasSubstr("no full replica"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"nowhere\" }"),
              HasSubstr("datacenter A: address \"nowhere\" is not HOST:PORT"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:0\" }"),
              HasSubstr("port 0 only works in local mode"));
  EXPECT_EQ(ErrorOf("datacenters { name: \"A\" address: \"h:0\" }", /*local_mode=*/true), "");
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" roles { coordinator: \"h\" } }"),
              HasSubstr("datacenter A: roles.coordinator \"h\" is not HOST:PORT"));
  EXPECT_THAT(
      ErrorOf("datacenters { name: \"A\" address: \"h:0\" roles { coordinator: \"h:5\" } }", true),
      HasSubstr("roles { } is for separate processes"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" } links { a: \"A\" b: \"Z\" }"),
              HasSubstr("link A-Z names no datacenter Z"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" } datacenters { name: \"B\" "
                      "address: \"h:2\" } "
                      "links { a: \"A\" b: \"B\" one_way_ms: 4000000000 }"),
              HasSubstr("one_way_ms 4000000000 is more than 10000"));
  EXPECT_THAT(ErrorOf("datacenters { name: \"A\" address: \"h:1\" } max_clock_skew_ms: 7200000"),
              HasSubstr("max_clock_skew_ms 7200000 is more than an hour"));
  const std::string two =
      "datacenters { name: \"A\" address: \"h:1\" } datacenters { name: \"W\" "
      "type: \"witness\" address: \"h:2\" } ";
  EXPECT_THAT(ErrorOf(two + "backup { }"), HasSubstr("backup needs dir"));
  EXPECT_THAT(ErrorOf(two + "backup { dir: \"/b\" datacenter: \"Z\" }"),
              HasSubstr("backup datacenter Z is not in the config"));
  EXPECT_THAT(ErrorOf(two + "backup { dir: \"/b\" datacenter: \"W\" }"),
              HasSubstr("backup datacenter W is a witness"));
  EXPECT_THAT(ErrorOf(two + "backup { dir: \"/b\" log_interval_seconds: 99999999 }"),
              HasSubstr("backup intervals"));
  EXPECT_EQ(ErrorOf(two + "backup { dir: \"/b\" schemas: \"S\" retention_seconds: 86400 }"), "");
}

TEST(ClusterConfigTest, TlsFilesAreCompletePerDatacenterAndRelativeToTheConfig) {
  const std::string two =
      "datacenters { name: \"A\" address: \"h:1\" tls { cert: \"a.crt\" key: \"a.key\" } } "
      "datacenters { name: \"B\" address: \"h:2\" } ";
  EXPECT_THAT(ErrorOf(two + "tls { ca: \"ca.crt\" }"), HasSubstr("datacenter B has no tls.cert"));
  EXPECT_THAT(ErrorOf(two), HasSubstr("datacenter A has no tls.ca"));
  EXPECT_EQ(ErrorOf(two + "tls { ca: \"ca.crt\" cert: \"all.crt\" key: \"all.key\" }"), "");
  EXPECT_THAT(
      ErrorOf(two + "tls { ca: \"ca.crt\" cert: \"x\" key: \"y\" } client_tls { cert: \"c.crt\" }"),
      HasSubstr("client_tls needs cert and key"));

  TestDir dir;
  const std::string path = dir.path() + "/c.textproto";
  ASSERT_TRUE(WriteFileAtomically(
                  path, two + "tls { ca: \"ca.crt\" cert: \"/abs/all.crt\" key: \"all.key\" } "
                              "client_tls { cert: \"c.crt\" key: \"c.key\" }")
                  .ok());
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  const tls::TlsFiles a = ServerTlsOf(*c, c->datacenters(0)),
                      b = ServerTlsOf(*c, c->datacenters(1));
  EXPECT_EQ(a.ca, dir.path() + "/ca.crt");
  EXPECT_EQ(a.cert, dir.path() + "/a.crt");
  EXPECT_EQ(b.cert, "/abs/all.crt");
  EXPECT_EQ(b.key, dir.path() + "/all.key");
  const tls::TlsFiles client = ClientTlsOf(*c);
  EXPECT_EQ(client.ca, dir.path() + "/ca.crt");
  EXPECT_EQ(client.key, dir.path() + "/c.key");
  // The files do not exist: a client loading the config is told which.
  absl::StatusOr<ClusterConfig> for_client = LoadClusterConfigForClient(path);
  EXPECT_THAT(std::string(for_client.status().message()), HasSubstr("client_tls"));
}

TEST(ClusterConfigTest, AnEndlessOrHugeConfigFileIsRefusedNotRead) {
  absl::StatusOr<ClusterConfig> endless = LoadClusterConfig("/dev/zero");
  ASSERT_FALSE(endless.ok());
  EXPECT_THAT(std::string(endless.status().message()), HasSubstr("holds more than"));
}

TEST(ClusterConfigTest, RolesListenOnTheirOwnAddressOrTheDatacenters) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "datacenters { name: \"A\" address: \"h:1\" roles { replication: \"h:2\" coordinator: "
      "\"h:3\" } }\n"
      "datacenters { name: \"W\" type: \"witness\" address: \"h:4\" }\n",
      "f");
  ASSERT_TRUE(c.ok()) << c.status();
  const DatacenterConfig& a = c->datacenters(0);
  EXPECT_EQ(AddressOf(a, Role::kTablet), "h:1");
  EXPECT_EQ(AddressOf(a, Role::kLock), "h:1");
  EXPECT_EQ(AddressOf(a, Role::kReplication), "h:2");
  auto processes = ProcessesOf(a);
  ASSERT_EQ(processes.size(), 3u);
  EXPECT_EQ(processes[0].first, "h:1");
  EXPECT_EQ(processes[0].second, (std::vector<Role>{Role::kTablet, Role::kLock}));
  EXPECT_EQ(processes[1].second, (std::vector<Role>{Role::kCoordinator}));
  // A witness has no coordinator.
  auto witness = ProcessesOf(c->datacenters(1));
  ASSERT_EQ(witness.size(), 1u);
  EXPECT_EQ(witness[0].second, (std::vector<Role>{Role::kTablet, Role::kLock, Role::kReplication}));

  std::vector<replication::ReplicaInfo> replicas = ReplicasOf(*c);
  EXPECT_EQ(replicas[0].replication, "h:2");
  EXPECT_EQ(replicas[0].coordinator, "h:3");
  EXPECT_EQ(replicas[0].lock_service, "h:1");
  EXPECT_EQ(replicas[1].coordinator, "");
}

TEST(ClusterConfigTest, RoleListsParse) {
  auto all = ParseRoles("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
  auto two = ParseRoles("replication,tablet,tablet");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<Role>{Role::kReplication, Role::kTablet}));
  EXPECT_THAT(std::string(ParseRoles("tablet,,lock").status().message()),
              HasSubstr("unknown role \"\""));
  EXPECT_THAT(std::string(ParseRoles("chubby").status().message()),
              HasSubstr("unknown role \"chubby\""));
  auto master = ParseRoles("master");  // a cell's master (megastored --cell), not one of "all"
  ASSERT_TRUE(master.ok());
  EXPECT_EQ(*master, (std::vector<Role>{Role::kMaster}));
}

TEST(ClusterConfigTest, TheEmulatedWanDelaysMessagesToEveryRoleOfADatacenter) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "datacenters { name: \"A\" address: \"h:1\" }\n"
      "datacenters { name: \"B\" address: \"h:2\" roles { replication: \"h:3\" } }\n"
      "links { a: \"A\" b: \"B\" one_way_ms: 7 }\n",
      "f");
  ASSERT_TRUE(c.ok()) << c.status();
  auto from_a = OneWayFrom(*c, "A");
  EXPECT_EQ(from_a("h:2"), absl::Milliseconds(7));
  EXPECT_EQ(from_a("h:3"), absl::Milliseconds(7));
  EXPECT_EQ(from_a("h:1"), absl::ZeroDuration());
  EXPECT_EQ(from_a("elsewhere:9"), absl::ZeroDuration());
}

}  // namespace
}  // namespace megastore::server
