#include "storage/model/schema.h"

#include <fstream>
#include <sstream>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace megastore::storage {
namespace {

TEST(SchemaTest, DefaultLocalityGroupIsImplicit) {
  TableSchema s;
  s.add_families()->set_name("f");
  auto c = CompiledSchema::Compile(s);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ((*c)->locality_groups().size(), 1u);
  EXPECT_EQ((*c)->locality_groups()[0].name(), "default");
  EXPECT_EQ((*c)->FindFamily("f")->locality_group, 0);
  EXPECT_EQ((*c)->FindFamily("g"), nullptr);
}

TEST(SchemaTest, NamesFollowBigtableRules) {
  EXPECT_TRUE(ValidateName("a-b.c_9", "family").ok());
  EXPECT_TRUE(ValidateName("_x", "family").ok());
  EXPECT_FALSE(ValidateName("", "family").ok());
  EXPECT_FALSE(ValidateName("-x", "family").ok());
  EXPECT_FALSE(ValidateName("a:b", "family").ok());
  EXPECT_FALSE(ValidateName(std::string(65, 'a'), "family").ok());
}

TEST(SchemaTest, NegativeGcLimitsAreRejected) {
  TableSchema s;
  auto* f = s.add_families();
  f->set_name("f");
  f->mutable_gc_rule()->set_max_versions(-1);
  EXPECT_EQ(CompiledSchema::Compile(s).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchemaTest, ChangingGroupOptionsOnAnOpenTabletIsRefused) {
  TableSchema a;
  auto* lg = a.add_locality_groups();
  lg->set_name("g");
  TableSchema b = a;
  b.mutable_locality_groups(0)->set_in_memory(true);
  auto ca = *CompiledSchema::Compile(a);
  auto cb = *CompiledSchema::Compile(b);
  EXPECT_EQ(CompiledSchema::CheckChange(*ca, *cb).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CompiledSchema::CheckChange(*ca, *ca).ok());
}

TEST(SchemaTest, ExampleConfigParsesAndCompiles) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/conf/table_schema.textproto");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  TableSchema schema;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &schema));
  auto compiled = CompiledSchema::Compile(schema);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->families().size(), 3u);
  EXPECT_EQ((*compiled)->locality_groups().size(), 2u);
}

}  // namespace
}  // namespace megastore::storage
