// The client API end to end: PhotoApp (the paper's example schema, through
// the classes msc generates) on three datacenters in this process, over TCP.
#include "api/database.h"

#include <thread>

#include "base/test_util.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "server/datacenter.h"
#include "txn/transaction.h"

namespace megastore {
namespace {

using photoapp::Photo;
using photoapp::User;

class DatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto layout = schema::Layout::Create(photoapp::Schema());
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto cluster = server::LocalCluster::Start(
        &env_, dir_.path(),
        {replication::ReplicaType::kFull, replication::ReplicaType::kFull,
         replication::ReplicaType::kWitness},
        txn::TablesFor(*layout), /*sync_log=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(cluster_->WaitUntilServing(absl::Seconds(5)));
  }

  std::unique_ptr<Database> Open(const std::string& local) {
    DatabaseOptions o;
    o.replicas = cluster_->replicas();
    o.local = local;
    o.schema = photoapp::Schema();
    auto db = Database::Open(o);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(*db) : nullptr;
  }

  // The index consistency checker over the given users' groups.
  static void ExpectIndexesConsistent(Database& db, std::vector<int64_t> users) {
    std::vector<std::pair<std::string, std::vector<schema::KeyValue>>> groups;
    for (int64_t u : users) groups.push_back({"User", {u}});
    absl::StatusOr<Database::IndexReport> report = db.CheckIndexes(groups);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->problems.empty()) << report->problems.front();
    EXPECT_GT(report->entities, 0);
  }

  static Photo MakePhoto(int64_t user, int32_t id, int64_t time, std::vector<std::string> tags) {
    Photo p;
    p.set_user_id(user);
    p.set_photo_id(id);
    p.set_time(time);
    p.set_full_url("https://photos.example/" + std::to_string(id));
    for (auto& t : tags) p.add_tag(std::move(t));
    return p;
  }

  RealEnv env_{7};
  TestDir dir_;
  std::unique_ptr<server::LocalCluster> cluster_;
};

TEST_F(DatabaseTest, PhotoAppWritesAtOneDatacenterAndQueriesAtAnother) {
  auto at_a = Open("A");
  auto at_b = Open("B");
  ASSERT_TRUE(at_a && at_b);
  absl::StatusOr<CommitInfo> created = at_a->Run<User>(User::Key{7}, [&](Transaction& t) {
    User u;
    u.set_user_id(7);
    u.set_name("Ada");
    absl::Status s = t.Put(u);
    for (int32_t id = 1; s.ok() && id <= 5; ++id)
      s = t.Put(MakePhoto(7, id, 1000 - id * 10, {id % 2 ? "beach" : "city"}));
    return s;
  });
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->wrote);

  auto t = at_b->Begin<User>(User::Key{7});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::optional<User>> ada = (*t)->Get<User>(User::Key{7});
  ASSERT_TRUE(ada.ok() && ada->has_value()) << ada.status();
  EXPECT_EQ((*ada)->name(), "Ada");
  absl::StatusOr<std::vector<Photo>> photos = (*t)->Query<Photo>({int64_t{7}});
  ASSERT_TRUE(photos.ok()) << photos.status();
  ASSERT_EQ(photos->size(), 5u);
  EXPECT_EQ((*photos)[0].photo_id(), 1);
  // PhotosByTime orders the group's photos by time: the newest id is oldest.
  absl::StatusOr<std::vector<Photo>> by_time =
      (*t)->IndexQuery<Photo>("PhotosByTime", {int64_t{7}});
  ASSERT_TRUE(by_time.ok()) << by_time.status();
  ASSERT_EQ(by_time->size(), 5u);
  EXPECT_EQ((*by_time)[0].photo_id(), 5);
  EXPECT_EQ((*by_time)[4].photo_id(), 1);
  // Typed paging keeps the cursor: two entities a page, in order, to the end.
  for (bool by_index : {false, true}) {
    std::vector<int32_t> seen;
    QueryOptions page;
    page.limit = 2;
    for (int pages = 0; pages < 10; ++pages) {
      absl::StatusOr<TypedPage<Photo>> p =
          by_index ? (*t)->IndexQueryPage<Photo>("PhotosByTime", {int64_t{7}}, page)
                   : (*t)->QueryPage<Photo>({int64_t{7}}, page);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_LE(p->entities.size(), 2u);
      for (const Photo& ph : p->entities) seen.push_back(ph.photo_id());
      if (p->cursor.empty()) break;
      page.cursor = p->cursor;
    }
    EXPECT_EQ(seen, by_index ? std::vector<int32_t>({5, 4, 3, 2, 1})
                             : std::vector<int32_t>({1, 2, 3, 4, 5}));
  }
  ExpectIndexesConsistent(*at_b, {7});
}

TEST_F(DatabaseTest, TheIndexCheckerFindsOrphanAndMissingEntriesAndTheRepairScanFixesThem) {
  auto db = Open("A");
  ASSERT_TRUE(db->Run<User>(User::Key{30}, [&](Transaction& t) {
                  User u;
                  u.set_user_id(30);
                  u.set_name("c");
                  absl::Status s = t.Put(u);
                  if (s.ok()) s = t.Put(MakePhoto(30, 1, 77, {"a"}));
                  return s;
                }).ok());
  ExpectIndexesConsistent(*db, {30});
  // Damage A's copy: an entry no entity has, and a lost one.
  const schema::Layout& layout = db->layout();
  const schema::IndexDescriptor* by_time = layout.schema().FindIndex("PhotosByTime");
  const std::string root = *layout.GroupRow(*layout.schema().FindTable("User"), {int64_t{30}});
  const std::string bogus =
      layout.LocalIndexRange(*by_time, root, {int64_t{30}, int64_t{99}})->start + "x";
  storage::TabletServer* a = cluster_->datacenter(0).tablets();
  ASSERT_TRUE(a->MutateRow("PhotoApp", bogus, {storage::Mutation::SetCell("i", "", "", 1)}).ok());
  Photo photo = MakePhoto(30, 1, 77, {"a"});
  const schema::IndexDescriptor* by_tag = layout.schema().FindIndex("PhotosByTag");
  const std::string tag_row = layout.IndexEntryRows(*by_tag, photo.ToEntity())->at(0);
  ASSERT_TRUE(a->MutateRow("PhotoApp.PhotosByTag", tag_row, {storage::Mutation::DeleteRow()}).ok());
  absl::StatusOr<Database::IndexReport> report = db->CheckIndexes({{"User", {int64_t{30}}}});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->problems.size(), 2u);
  EXPECT_NE(report->problems[0].find("PhotosByTime: entry"), std::string::npos)
      << report->problems[0];
  EXPECT_NE(report->problems[0].find("points to no entity"), std::string::npos)
      << report->problems[0];
  EXPECT_NE(report->problems[1].find("PhotosByTag: the entry of Photo"), std::string::npos)
      << report->problems[1];

  // The repair scan fixes both, through the log (so at every replica).
  absl::StatusOr<Database::IndexReport> repaired = db->RepairIndexes({{"User", {int64_t{30}}}});
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->repaired, 2);
  EXPECT_TRUE(repaired->problems.empty()) << repaired->problems.front();
  ExpectIndexesConsistent(*db, {30});
  absl::StatusOr<std::vector<Photo>> tagged =
      db->GlobalIndexQuery<Photo>("PhotosByTag", {std::string("a")});
  ASSERT_TRUE(tagged.ok()) << tagged.status();
  EXPECT_EQ(tagged->size(), 1u) << "the lost entry is back";
  absl::StatusOr<Database::IndexReport> again = db->RepairIndexes({{"User", {int64_t{30}}}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->repaired, 0) << "nothing left to repair";
}

TEST_F(DatabaseTest, AGlobalIndexFindsPhotosAcrossUsersAndFollowsUpdates) {
  auto at_a = Open("A");
  auto at_b = Open("B");
  for (int64_t user = 20; user < 23; ++user) {
    absl::StatusOr<CommitInfo> r = at_a->Run<User>(User::Key{user}, [&](Transaction& t) {
      User u;
      u.set_user_id(user);
      u.set_name("u");
      absl::Status s = t.Put(u);
      if (s.ok()) s = t.Put(MakePhoto(user, 1, 5, {"sunset", "tree"}));
      if (s.ok()) s = t.Put(MakePhoto(user, 2, 6, {"tree"}));
      return s;
    });
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // The entries are written as each commit is applied at B; wait for it.
  absl::StatusOr<std::vector<Photo>> sunsets;
  for (int i = 0; i < 200; ++i) {
    sunsets = at_b->GlobalIndexQuery<Photo>("PhotosByTag", {std::string("sunset")});
    ASSERT_TRUE(sunsets.ok()) << sunsets.status();
    if (sunsets->size() == 3) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(sunsets->size(), 3u);
  EXPECT_EQ((*sunsets)[0].user_id(), 20);
  EXPECT_EQ((*sunsets)[2].user_id(), 22);
  QueryOptions page;
  page.limit = 4;
  absl::StatusOr<txn::QueryResult> trees =
      at_a->GlobalIndexQuery("PhotosByTag", {std::string("tree")}, page);
  ASSERT_TRUE(trees.ok()) << trees.status();
  EXPECT_EQ(trees->entities.size(), 4u);
  EXPECT_FALSE(trees->cursor.empty());
  page.cursor = trees->cursor;
  trees = at_a->GlobalIndexQuery("PhotosByTag", {std::string("tree")}, page);
  ASSERT_TRUE(trees.ok());
  EXPECT_EQ(trees->entities.size(), 2u);

  // Retag user 21's photo: it leaves "sunset".
  ASSERT_TRUE(at_a->Run<User>(User::Key{21},
                              [&](Transaction& t) { return t.Put(MakePhoto(21, 1, 5, {"tree"})); })
                  .ok());
  for (int i = 0; i < 200; ++i) {
    sunsets = at_a->GlobalIndexQuery<Photo>("PhotosByTag", {std::string("sunset")});
    ASSERT_TRUE(sunsets.ok());
    if (sunsets->size() == 2) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(sunsets->size(), 2u);
  for (const Photo& p : *sunsets) EXPECT_NE(p.user_id(), 21);
  ExpectIndexesConsistent(*at_a, {20, 21, 22});
  EXPECT_EQ(at_a->GlobalIndexQuery("PhotosByTime", {int64_t{20}}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a local index";
}

TEST_F(DatabaseTest, ASchemaViolationNamesTheFieldAndCommitsNothing) {
  auto db = Open("A");
  Photo bad = MakePhoto(8, 1, 5, {});
  bad.clear_full_url();
  absl::StatusOr<CommitInfo> r = db->Run<User>(User::Key{8}, [&](Transaction& t) {
    User u;
    u.set_user_id(8);
    u.set_name("Bob");
    if (absl::Status s = t.Put(u); !s.ok()) return s;
    return t.Put(bad);
  });
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("full_url"), std::string::npos) << r.status();
  auto t = db->Begin<User>(User::Key{8});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::optional<User>> bob = (*t)->Get<User>(User::Key{8});
  ASSERT_TRUE(bob.ok());
  EXPECT_FALSE(bob->has_value()) << "nothing of the transaction committed";
}

TEST_F(DatabaseTest, ConcurrentTransactionsOnOneGroupRetryAndLoseNothing) {
  auto at_a = Open("A");
  auto at_b = Open("B");
  constexpr int kEach = 10;
  auto add_photos = [&](Database* db, int32_t first) {
    for (int32_t id = first; id < first + kEach; ++id) {
      absl::StatusOr<CommitInfo> r = db->Run<User>(User::Key{9}, [&](Transaction& t) {
        // Read-modify-write: the user's name counts the photos.
        absl::StatusOr<std::optional<User>> u = t.Get<User>(User::Key{9});
        if (!u.ok()) return u.status();
        User user = u->value_or(User());
        user.set_user_id(9);
        user.set_name(std::to_string(user.has_name() ? std::stoi(user.name()) + 1 : 1));
        if (absl::Status s = t.Put(user); !s.ok()) return s;
        return t.Put(MakePhoto(9, id, id, {"x"}));
      });
      EXPECT_TRUE(r.ok()) << r.status();
    }
  };
  std::thread a([&] { add_photos(at_a.get(), 100); });
  std::thread b([&] { add_photos(at_b.get(), 200); });
  a.join();
  b.join();
  auto t = at_a->Begin<User>(User::Key{9});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::vector<Photo>> photos = (*t)->Query<Photo>({int64_t{9}});
  ASSERT_TRUE(photos.ok());
  EXPECT_EQ(photos->size(), 2u * kEach);
  absl::StatusOr<std::optional<User>> user = (*t)->Get<User>(User::Key{9});
  ASSERT_TRUE(user.ok() && user->has_value());
  EXPECT_EQ((*user)->name(), std::to_string(2 * kEach)) << "no read-modify-write lost";
  ExpectIndexesConsistent(*at_b, {9});
  std::cout << "conflicts retried: " << at_a->retries() + at_b->retries() << "\n";
}

// With the other datacenters gone, a Run with a deadline ends with
// DeadlineExceeded (or Unavailable) near its deadline, well before the
// client's 10 s per-step default; nothing was committed.
TEST_F(DatabaseTest, ADeadlineEndsATransactionThatCannotReachAMajority) {
  auto db = Open("A");
  ASSERT_TRUE(db);
  cluster_->datacenter(1).Stop();
  cluster_->datacenter(2).Stop();
  TransactionOptions o;
  o.deadline = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  absl::StatusOr<CommitInfo> r = db->Run<User>(
      User::Key{9},
      [&](Transaction& t) {
        User u;
        u.set_user_id(9);
        u.set_name("Lost");
        return t.Put(u);
      },
      o);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status()))
      << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the deadline was not applied";
}

}  // namespace
}  // namespace megastore
