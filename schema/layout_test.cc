#include "schema/layout.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "base/env.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"
#include "storage/tablet/tablet.h"

namespace megastore::schema {
namespace {

using ::testing::HasSubstr;

SchemaDescriptor Compile(const std::string& relative) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  CompileResult r = CompileSchema(s.str());
  EXPECT_TRUE(r.ok());
  return r.descriptor;
}

std::shared_ptr<const Entity> Msg(Entity e) { return std::make_shared<const Entity>(std::move(e)); }

// Applies BigtableWrites to real tablets, one per Bigtable table.
class Bigtable {
 public:
  void Apply(const std::vector<BigtableWrite>& writes) {
    for (const BigtableWrite& w : writes) {
      absl::Status s = Table(w.table)->MutateRow(w.row, w.mutations, w.timestamp);
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  std::vector<storage::Row> Rows(const std::string& table) {
    std::vector<storage::Row> rows;
    absl::Status s =
        Table(table)->ReadRows(storage::RowSet{}, storage::ReadOptions{}, [&](storage::Row& r) {
          rows.push_back(std::move(r));
          return true;
        });
    EXPECT_TRUE(s.ok()) << s;
    return rows;
  }
  storage::Tablet* Table(const std::string& name) {
    auto& t = tablets_[name];
    if (t == nullptr) {
      storage::TableSchema schema;
      schema.set_name("x");
      schema.add_families()->set_name(kEntityFamily);
      schema.add_families()->set_name(kIndexFamily);
      storage::TabletOptions o;
      o.path = dir_.path() + "/" + std::to_string(tablets_.size());
      auto opened = storage::Tablet::Open(o, schema, &resources_, &env_);
      EXPECT_TRUE(opened.ok()) << opened.status();
      t = std::move(*opened);
    }
    return t.get();
  }

 private:
  TestDir dir_;
  ManualEnv env_;
  storage::TabletResources resources_;
  std::map<std::string, std::unique_ptr<storage::Tablet>> tablets_;
};

class LayoutTest : public ::testing::Test {
 protected:
  LayoutTest() : layout_(*Layout::Create(Compile("examples/photoapp.msdl"))) {}

  static Entity User(int64_t id, std::string name) {
    Entity e;
    e.fields[1] = {id};
    e.fields[2] = {std::move(name)};
    return e;
  }
  static Entity Photo(int64_t user, int64_t photo, int64_t time, std::vector<std::string> tags,
                      std::string thumb = "") {
    Entity e;
    e.fields[1] = {user};
    e.fields[2] = {photo};
    e.fields[3] = {time};
    e.fields[4] = {std::string("http://full/") + std::to_string(photo)};
    if (!thumb.empty()) e.fields[5] = {thumb};
    for (auto& t : tags) e.fields[6].push_back(t);
    return e;
  }
  void Write(std::string_view table, const Entity* before, const Entity* after) {
    auto w = layout_.Mutations(table, before, after, ++ts_);
    ASSERT_TRUE(w.ok()) << w.status();
    bt_.Apply(*w);
  }

  Layout layout_;
  Bigtable bt_;
  int64_t ts_ = 1000;
};

TEST_F(LayoutTest, AnEntityGroupIsOneRowRangeWithItsRootFirst) {
  for (int64_t u : {6, 5}) {
    const Entity user = User(u, "user" + std::to_string(u));
    Write("User", nullptr, &user);
    for (int64_t p : {2, 1}) {
      const Entity photo = Photo(u, p, 100 + p, {"tag"});
      Write("Photo", nullptr, &photo);
    }
  }
  const auto rows = bt_.Rows("PhotoApp");
  // Per group: the root, two photos, two PhotosByTime entries.
  ASSERT_EQ(rows.size(), 10u);
  const SchemaIndex& s = layout_.schema();
  auto root5 = layout_.EntityRow(*s.FindTable("User"), {int64_t{5}});
  ASSERT_TRUE(root5.ok());
  EXPECT_EQ(rows[0].key, *root5);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rows[i].key.compare(0, root5->size(), *root5), 0) << i;
  auto photo51 = layout_.EntityFromRow(*s.FindTable("Photo"), rows[1]);
  ASSERT_TRUE(photo51.ok());
  const Entity want = Photo(5, 1, 101, {"tag"});
  EXPECT_TRUE(Equal(*photo51, want));
  auto user5 = layout_.EntityFromRow(*s.FindTable("User"), rows[0]);
  ASSERT_TRUE(user5.ok());
  const Entity want_user = User(5, "user5");
  EXPECT_TRUE(Equal(*user5, want_user));
}

TEST_F(LayoutTest, IndexEntriesFollowInsertsUpdatesAndDeletes) {
  const Entity v1 = Photo(7, 1, 50, {"cat", "dog", "cat"}, "thumb1");
  Write("Photo", nullptr, &v1);
  auto tag_rows = bt_.Rows("PhotoApp.PhotosByTag");
  ASSERT_EQ(tag_rows.size(), 2u);  // one entry per distinct element
  EXPECT_THAT(tag_rows[0].key, HasSubstr("cat"));
  ASSERT_EQ(tag_rows[0].cells.size(), 2u);  // marker and the stored thumbnail
  EXPECT_EQ(tag_rows[0].cells[1].qualifier, "Photo.thumbnail_url");
  EXPECT_EQ(tag_rows[0].cells[1].value, "thumb1");

  const Entity v2 = Photo(7, 1, 60, {"dog", "eel"});  // no thumbnail any more
  Write("Photo", &v1, &v2);
  tag_rows = bt_.Rows("PhotoApp.PhotosByTag");
  ASSERT_EQ(tag_rows.size(), 2u);
  EXPECT_THAT(tag_rows[0].key, HasSubstr("dog"));
  EXPECT_THAT(tag_rows[1].key, HasSubstr("eel"));
  for (const auto& r : tag_rows) EXPECT_EQ(r.cells.size(), 1u) << "stored thumbnail must be gone";
  auto all = bt_.Rows("PhotoApp");
  ASSERT_EQ(all.size(), 2u);  // the photo and its one PhotosByTime entry (time 60)
  auto photo = layout_.EntityFromRow(*layout_.schema().FindTable("Photo"), all[0]);
  ASSERT_TRUE(photo.ok());
  EXPECT_TRUE(Equal(*photo, v2));

  Write("Photo", &v2, nullptr);
  EXPECT_TRUE(bt_.Rows("PhotoApp.PhotosByTag").empty());
  EXPECT_TRUE(bt_.Rows("PhotoApp").empty());
}

TEST_F(LayoutTest, AnUnchangedUpdateWritesNothingAndBadChangesAreRefused) {
  const Entity v = Photo(1, 1, 5, {"a"});
  auto none = layout_.Mutations("Photo", &v, &v, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  const Entity moved = Photo(1, 2, 5, {"a"});
  EXPECT_THAT(std::string(layout_.Mutations("Photo", &v, &moved, 10).status().message()),
              HasSubstr("cannot change Photo's primary key"));
  Entity bad = v;
  bad.fields.erase(4);
  EXPECT_THAT(std::string(layout_.Mutations("Photo", nullptr, &bad, 10).status().message()),
              HasSubstr("Photo.full_url is required but not set"));
  EXPECT_TRUE(absl::IsNotFound(layout_.Mutations("Nope", nullptr, &v, 10).status()));
}

TEST(LayoutInlineTest, InlineIndexEntriesAreCellsOfTheParentEntity) {
  auto layout = Layout::Create(Compile("tests/schema/good/everything.msdl"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  Bigtable bt;
  Entity account;
  account.fields[1] = {uint64_t{9}};
  account.fields[2] = {std::string("k")};
  auto w = layout->Mutations("Account", nullptr, &account, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  bt.Apply(*w);
  Entity event;
  event.fields[1] = {uint64_t{9}};
  event.fields[2] = {int64_t{123}};
  event.fields[3] = {int64_t{1}};
  event.fields[5] = {std::string("x"), std::string("y")};
  Entity where;
  where.fields[1] = {1.5};
  where.fields[2] = {-2.5};
  Entity place;
  place.fields[2] = {Msg(where)};
  event.fields[4] = {Msg(place)};
  w = layout->Mutations("Event", nullptr, &event, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  bt.Apply(*w);
  const auto rows = bt.Rows("Everything");
  ASSERT_FALSE(rows.empty());
  int inline_cells = 0;
  for (const auto& c : rows[0].cells) inline_cells += c.qualifier.rfind("EventLabels:", 0) == 0;
  EXPECT_EQ(inline_cells, 2);  // in the account's row, one per label
  const TableDescriptor* t = layout->schema().FindTable("Event");
  bool found = false;
  for (const auto& r : rows) {
    auto e = layout->EntityFromRow(*t, r);
    if (e.ok() && !e->fields.empty()) found |= Equal(*e, event);
  }
  EXPECT_TRUE(found) << "the event with its nested message reads back exactly";
}

}  // namespace
}  // namespace megastore::schema
