// `msadmin index check|repair` against three datacenters in this process:
// a damaged index is reported (exit 1), repaired, and then checks clean.
#include <fstream>

#include "api/database.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "server/datacenter.h"
#include "tests/subprocess.h"
#include "txn/transaction.h"

namespace megastore {
namespace {

using testing::RunCommand;

photoapp::Photo EvesPhoto() {
  photoapp::Photo p;
  p.set_user_id(5);
  p.set_photo_id(1);
  p.set_time(10);
  p.set_full_url("u");
  p.add_tag("x");
  return p;
}

TEST(MsadminIndexTest, ChecksRepairsAndRefusesBadArguments) {
  RealEnv env(5);
  TestDir dir;
  auto layout = schema::Layout::Create(photoapp::Schema());
  ASSERT_TRUE(layout.ok());
  auto cluster =
      server::LocalCluster::Start(&env, dir.path(),
                                  {replication::ReplicaType::kFull, replication::ReplicaType::kFull,
                                   replication::ReplicaType::kWitness},
                                  txn::TablesFor(*layout), /*sync_log=*/false);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->WaitUntilServing(absl::Seconds(5)));
  std::string replicas;
  for (const auto& r : (*cluster)->replicas())
    replicas += StrCat(replicas.empty() ? "" : ",", r.name, "=",
                       r.type == replication::ReplicaType::kWitness ? "witness" : "full", "@",
                       r.replication);
  const std::string schema_path = dir.path() + "/PhotoApp.schema.pb";
  std::ofstream(schema_path, std::ios::binary) << photoapp::Schema().SerializeAsString();

  DatabaseOptions o;
  o.replicas = (*cluster)->replicas();
  o.local = "A";
  o.schema = photoapp::Schema();
  auto db = Database::Open(o);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)
                  ->Run<photoapp::User>(photoapp::User::Key{5},
                                        [](Transaction& t) {
                                          photoapp::User u;
                                          u.set_user_id(5);
                                          u.set_name("Eve");
                                          absl::Status s = t.Put(u);
                                          if (s.ok()) s = t.Put(EvesPhoto());
                                          return s;
                                        })
                  .ok());

  const std::string base =
      StrCat(MSADMIN, " index %s --replicas=", replicas, " --local=A --schema=", schema_path);
  auto run = [&](const std::string& verb, const std::string& rest) {
    std::string cmd = base;
    cmd.replace(cmd.find("%s"), 2, verb);
    return RunCommand(cmd + " " + rest);
  };
  testing::Result clean = run("check", "User:5");
  EXPECT_EQ(clean.exit_code, 0) << clean.out;
  EXPECT_NE(clean.out.find("1 group(s): 2 entities"), std::string::npos) << clean.out;
  EXPECT_NE(clean.out.find("0 problem(s)"), std::string::npos) << clean.out;

  // Lose A's copy of the photo's PhotosByTag entry.
  const schema::IndexDescriptor* by_tag = layout->schema().FindIndex("PhotosByTag");
  const std::string tag_row = layout->IndexEntryRows(*by_tag, EvesPhoto().ToEntity())->at(0);
  ASSERT_TRUE((*cluster)
                  ->datacenter(0)
                  .tablets()
                  ->MutateRow("PhotoApp.PhotosByTag", tag_row, {storage::Mutation::DeleteRow()})
                  .ok());
  testing::Result damaged = run("check", "User:5");
  EXPECT_EQ(damaged.exit_code, 1) << damaged.out;
  EXPECT_NE(damaged.out.find("PhotosByTag: the entry of Photo"), std::string::npos) << damaged.out;
  testing::Result as_json = run("check", "--json User:5");
  EXPECT_EQ(as_json.exit_code, 1) << as_json.out;
  EXPECT_NE(as_json.out.find("{\"groups\":\"1\",\"entities\":\"2\","), std::string::npos)
      << as_json.out;
  EXPECT_NE(as_json.out.find("\"problems\":[\"index PhotosByTag: the entry of Photo"),
            std::string::npos)
      << as_json.out;
  EXPECT_NE(as_json.out.find("\"consistent\":false}"), std::string::npos) << as_json.out;
  testing::Result repaired = run("repair", "User:5");
  EXPECT_EQ(repaired.exit_code, 0) << repaired.out;
  EXPECT_NE(repaired.out.find("repaired 1 index entries"), std::string::npos) << repaired.out;
  testing::Result again = run("check", "--json User:5");
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find("\"problems\":[],\"consistent\":true}"), std::string::npos) << again.out;

  // Bad arguments: exit 2 and one line naming what is wrong.
  testing::Result no_table = run("check", "Nope:1");
  EXPECT_EQ(no_table.exit_code, 2) << no_table.out;
  EXPECT_NE(no_table.out.find("no table Nope"), std::string::npos) << no_table.out;
  testing::Result bad_key = run("check", "User:five");
  EXPECT_EQ(bad_key.exit_code, 2) << bad_key.out;
  EXPECT_NE(bad_key.out.find("not an integer"), std::string::npos) << bad_key.out;
  testing::Result child = run("check", "Photo:5,1");
  EXPECT_EQ(child.exit_code, 2) << child.out;
  testing::Result bad_replicas = RunCommand(
      StrCat(MSADMIN, " index check --replicas=A@x --local=A --schema=", schema_path, " User:5"));
  EXPECT_EQ(bad_replicas.exit_code, 2) << bad_replicas.out;
  EXPECT_NE(bad_replicas.out.find("NAME=TYPE@HOST:PORT"), std::string::npos) << bad_replicas.out;
  testing::Result bad_schema = RunCommand(StrCat(MSADMIN, " index check --replicas=", replicas,
                                                 " --local=A --schema=/nonexistent User:5"));
  EXPECT_EQ(bad_schema.exit_code, 2) << bad_schema.out;
  testing::Result missing = RunCommand(StrCat(MSADMIN, " index check User:5"));
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
}

}  // namespace
}  // namespace megastore
