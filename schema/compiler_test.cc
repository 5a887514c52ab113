#include "schema/compiler.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/printer.h"

namespace megastore::schema {
namespace {

using ::testing::HasSubstr;

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Errors(const CompileResult& r) {
  std::string out;
  for (const Diagnostic& d : r.errors) out += FormatDiagnostic("f.msdl", d) + "\n";
  return out;
}

TEST(CompilerTest, ThePapersPhotoAppCompilesVerbatim) {
  const CompileResult r = CompileSchema(ReadSource("examples/photoapp.msdl"));
  ASSERT_TRUE(r.ok()) << Errors(r);
  const SchemaDescriptor& d = r.descriptor;
  EXPECT_EQ(d.name(), "PhotoApp");
  ASSERT_EQ(d.tables_size(), 2);
  EXPECT_TRUE(d.tables(0).entity_group_root());
  const TableDescriptor& photo = d.tables(1);
  EXPECT_EQ(photo.name(), "Photo");
  EXPECT_EQ(photo.root_table(), "User");
  EXPECT_EQ(photo.in_table(), "User");  // written "IN TABLE user": names ignore case
  ASSERT_EQ(photo.primary_key_size(), 2);
  EXPECT_EQ(photo.primary_key(1).field(), "photo_id");
  EXPECT_EQ(photo.fields(5).label(), REPEATED);
  ASSERT_EQ(d.indexes_size(), 2);
  EXPECT_EQ(d.indexes(0).scope(), IndexDescriptor::LOCAL);
  EXPECT_EQ(d.indexes(1).scope(), IndexDescriptor::GLOBAL);
  EXPECT_EQ(d.indexes(1).storing(0), "thumbnail_url");
}

TEST(CompilerTest, ReportsEveryErrorWithPositionAndHint) {
  const CompileResult r = CompileSchema(
      "CREATE SCHEMA S;\n"
      "CREATE TABLE A {\n"
      "  required int64 id;\n"
      "  required strin name;\n"
      "  optional int64 id;\n"
      "} PRIMARY KEY(id, nope), ENTITY GROUP ROOT;\n"
      "CREATE GLOBAL INDEX I ON A(missing);\n");
  ASSERT_FALSE(r.ok());
  const std::string e = Errors(r);
  EXPECT_THAT(e, HasSubstr("f.msdl:4:12: error: unknown type \"strin\""));
  EXPECT_THAT(e, HasSubstr("f.msdl:5:18: error: duplicate field \"id\" in table A"));
  EXPECT_THAT(
      e, HasSubstr("f.msdl:6:19: error: primary key column \"nope\" is not a field of table A"));
  EXPECT_THAT(e, HasSubstr("f.msdl:7:28: error: index I is on unknown column \"missing\""));
  EXPECT_THAT(e, HasSubstr("  hint: "));
}

TEST(CompilerTest, KeywordsAsNamesNeedQuotes) {
  CompileResult r = CompileSchema(
      "CREATE SCHEMA S; CREATE TABLE T { required int64 key; } PRIMARY KEY(key), ENTITY GROUP "
      "ROOT;");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Errors(r),
              HasSubstr("\"key\" is a keyword and cannot be used as a field name without quoting"));
  r = CompileSchema(
      "CREATE SCHEMA S; CREATE TABLE T { required int64 `key`; } PRIMARY KEY(`key`), ENTITY GROUP "
      "ROOT;");
  EXPECT_TRUE(r.ok()) << Errors(r);
}

TEST(CompilerTest, AlterAddsOptionalFieldsAndRefusesIncompatibleChanges) {
  const std::string base = ReadSource("examples/photoapp.msdl");
  CompileResult r = CompileSchema(base +
                                  "ALTER TABLE Photo ADD optional string caption;\n"
                                  "DROP INDEX PhotosByTag;\n"
                                  "ALTER TABLE Photo DROP thumbnail_url;\n");
  ASSERT_TRUE(r.ok()) << Errors(r);
  const TableDescriptor& photo = r.descriptor.tables(1);
  EXPECT_EQ(photo.fields(photo.fields_size() - 1).name(), "caption");
  EXPECT_EQ(photo.fields(photo.fields_size() - 1).number(), 7);
  EXPECT_THAT(photo.reserved_numbers(), ::testing::ElementsAre(5));
  r = CompileSchema(base +
                    "ALTER TABLE Photo ADD required string caption;\n"
                    "ALTER TABLE Photo DROP photo_id;\n"
                    "ALTER TABLE Photo DROP thumbnail_url;\n");
  const std::string e = Errors(r);
  EXPECT_THAT(e, HasSubstr("ADD of a required field"));
  EXPECT_THAT(e, HasSubstr("part of Photo's primary key"));
  EXPECT_THAT(e, HasSubstr("index PhotosByTag uses it"));
}

// The .msdl files of a directory under tests/schema, by name.
std::map<std::string, std::string> SchemaFiles(const std::string& subdir) {
  std::map<std::string, std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(MS_SOURCE_DIR) / subdir)) {
    if (e.path().extension() == ".msdl")
      out[e.path().filename().string()] = ReadSource(subdir + "/" + e.path().filename().string());
  }
  return out;
}

// tests/schema/bad/*.msdl: each starts with "-- expect: LINE:COL: TEXT"; one
// of its errors must be at LINE:COL and contain TEXT.
TEST(CompilerTest, EveryBadSchemaFailsWhereItsFirstLineSays) {
  const auto files = SchemaFiles("tests/schema/bad");
  EXPECT_GE(files.size(), 40u);
  for (const auto& [name, source] : files) {
    const std::string prefix = "-- expect: ";
    ASSERT_EQ(source.compare(0, prefix.size(), prefix), 0) << name << " lacks its expect line";
    const std::string expect = source.substr(prefix.size(), source.find('\n') - prefix.size());
    const size_t colon = expect.find(": ");
    const CompileResult r = CompileSchema(source);
    ASSERT_FALSE(r.ok()) << name << " compiled";
    bool found = false;
    for (const Diagnostic& d : r.errors) {
      const std::string shown =
          std::to_string(d.pos.line) + ":" + std::to_string(d.pos.column) + ": " + d.message;
      found |= shown.compare(0, colon + 2, expect, 0, colon + 2) == 0 &&
               shown.find(expect.substr(colon + 2)) != std::string::npos;
    }
    EXPECT_TRUE(found) << name << ": expected " << expect << "\n got:\n" << Errors(r);
  }
}

// Every good schema compiles, and its descriptor printed as DDL compiles
// back to the same descriptor.
TEST(CompilerTest, EveryGoodSchemaCompilesAndRoundTripsThroughPrintedDdl) {
  auto files = SchemaFiles("tests/schema/good");
  EXPECT_GE(files.size(), 1u);
  files["examples/photoapp.msdl"] = ReadSource("examples/photoapp.msdl");
  for (const auto& [name, source] : files) {
    const CompileResult r = CompileSchema(source);
    ASSERT_TRUE(r.ok()) << name << ":\n" << Errors(r);
    const std::string printed = PrintSchema(r.descriptor);
    const CompileResult again = CompileSchema(printed);
    ASSERT_TRUE(again.ok()) << name << " printed as:\n" << printed << "\n" << Errors(again);
    EXPECT_EQ(again.descriptor.SerializeAsString(), r.descriptor.SerializeAsString())
        << name << " printed as:\n"
        << printed << "\nfirst:\n"
        << r.descriptor.DebugString() << "\nagain:\n"
        << again.descriptor.DebugString();
  }
}

TEST(CompilerTest, ExplicitAndReservedFieldNumbers) {
  CompileResult r = CompileSchema(
      "CREATE SCHEMA S; CREATE TABLE T { RESERVED 2; required int64 id; optional string a; "
      "optional bool b = 9;"
      " optional bool c; } PRIMARY KEY(id), ENTITY GROUP ROOT;");
  ASSERT_TRUE(r.ok()) << Errors(r);
  const TableDescriptor& t = r.descriptor.tables(0);
  EXPECT_EQ(t.fields(0).number(), 1);
  EXPECT_EQ(t.fields(1).number(), 3);  // 2 is reserved
  EXPECT_EQ(t.fields(2).number(), 9);
  EXPECT_EQ(t.fields(3).number(), 10);
  r = CompileSchema(
      "CREATE SCHEMA S; CREATE TABLE T { RESERVED 2; required int64 id; optional string a = 2;"
      " optional bool b = 1; } PRIMARY KEY(id), ENTITY GROUP ROOT;");
  const std::string e = Errors(r);
  EXPECT_THAT(e, HasSubstr("uses number 2, which table T reserves"));
  EXPECT_THAT(e, HasSubstr("gets number 1, already used in table T"));
}

}  // namespace
}  // namespace megastore::schema
