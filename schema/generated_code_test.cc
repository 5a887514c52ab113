// Uses the classes msc generated for examples/photoapp.msdl and the good
// test schemas (see CMakeLists.txt): they compile, build entities, and feed
// the layout's mutations.
#include <cmath>

#include "blog/Blog.schema.h"
#include "everything/Everything.schema.h"
#include "example_photoapp/PhotoApp.schema.h"
#include "gtest/gtest.h"
#include "minimal/minimal.schema.h"
#include "schema/layout.h"

namespace megastore::schema {
namespace {

TEST(GeneratedCodeTest, PhotoAppClassesRoundTripThroughEntitiesAndProduceMutations) {
  photoapp::Photo p;
  EXPECT_FALSE(p.has_thumbnail_url());
  EXPECT_EQ(p.thumbnail_url(), "");
  p.set_user_id(5);
  p.set_photo_id(7);
  p.set_time(1234);
  p.set_full_url("http://x/7");
  p.add_tag("beach");
  p.add_tag("sunset");
  EXPECT_EQ(p.tag_size(), 2);
  EXPECT_EQ(p.tag(1), "sunset");
  EXPECT_EQ(p.key().user_id, 5);
  EXPECT_EQ(p.key().photo_id, 7);
  EXPECT_EQ(std::string(photoapp::Photo::kTable), "Photo");

  const Entity e = p.ToEntity();
  auto back = photoapp::Photo::FromEntity(e);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(Equal(back->ToEntity(), e));

  auto layout = Layout::Create(photoapp::Schema());
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto writes = layout->Mutations(photoapp::Photo::kTable, nullptr, &e, 100);
  ASSERT_TRUE(writes.ok()) << writes.status();
  // The photo row, one PhotosByTime entry, two PhotosByTag entries.
  EXPECT_EQ(writes->size(), 4u);
  auto row = layout->EntityRow(*layout->schema().FindTable("Photo"), p.key().Values());
  ASSERT_TRUE(row.ok());
  EXPECT_EQ((*writes)[0].row, *row);

  p.clear_tag();
  EXPECT_EQ(p.tag_size(), 0);
  photoapp::Photo missing;  // required fields unset
  const Entity incomplete = missing.ToEntity();
  EXPECT_TRUE(
      absl::IsInvalidArgument(layout->Mutations("Photo", nullptr, &incomplete, 1).status()));
}

TEST(GeneratedCodeTest, NestedMessagesQuotedNamesAndRepeatedMessages) {
  everything::Event ev;
  ev.set_account_id(9);
  ev.set_at(-5);
  ev.set_seq(3);
  everything::Place* place = ev.mutable_place();
  place->set_name("harbour");
  place->mutable_where()->set_lat(-0.0);
  place->mutable_where()->set_lng(NAN);
  place->add_nearby()->set_name("pier");
  EXPECT_TRUE(ev.has_place());
  EXPECT_EQ(ev.place().nearby_size(), 1);
  EXPECT_EQ(ev.place().nearby(0).name(), "pier");

  everything::Account a;
  a.set_account_id(9);
  a.set_key_("k");  // the field `key` clashes with key(): it becomes key_
  EXPECT_EQ(a.key_(), "k");
  EXPECT_EQ(a.key().account_id, 9u);

  auto back = everything::Event::FromEntity(ev.ToEntity());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(Equal(back->ToEntity(), ev.ToEntity()));
  EXPECT_TRUE(std::signbit(back->place().where().lat()));
  EXPECT_TRUE(std::isnan(back->place().where().lng()));
  auto layout = Layout::Create(everything::Schema());
  ASSERT_TRUE(layout.ok());
  const Entity e = ev.ToEntity();
  EXPECT_TRUE(layout->Mutations(everything::Event::kTable, nullptr, &e, 1).ok());

  everything::Marker marker;  // its field `Point` would hide class Point: it is Point_
  marker.set_id(1);
  marker.mutable_Point_()->set_lat(2.0);
  EXPECT_EQ(marker.Point_().lat(), 2.0);

  Entity wrong = ev.ToEntity();
  wrong.fields[3] = {std::string("not a number")};
  EXPECT_TRUE(absl::IsInvalidArgument(everything::Event::FromEntity(wrong).status()));
}

TEST(GeneratedCodeTest, EveryKeyTypeAndLowerCaseSchemas) {
  blog::Comment c;
  c.set_site_id(std::string("s\0x", 3));
  c.set_comment_id(77);
  c.set_post_id(5);
  c.set_approved(true);
  c.set_score(-1.5);
  const blog::Comment::Key k = c.key();
  EXPECT_EQ(k.site_id, std::string("s\0x", 3));
  EXPECT_EQ(k.comment_id, 77u);
  EXPECT_TRUE(k.approved);
  EXPECT_EQ(k.score, -1.5);
  auto layout = Layout::Create(blog::Schema());
  ASSERT_TRUE(layout.ok());
  const Entity e = c.ToEntity();
  auto writes = layout->Mutations(blog::Comment::kTable, nullptr, &e, 1);
  ASSERT_TRUE(writes.ok()) << writes.status();
  EXPECT_EQ(writes->size(), 2u);  // the comment and its CommentsByPost entry

  minimal::counter n;
  n.set_id(1);
  n.set_value(2);
  EXPECT_EQ(minimal::Schema().name(), "minimal");
  EXPECT_TRUE(minimal::counter::FromEntity(n.ToEntity()).ok());
}

}  // namespace
}  // namespace megastore::schema
