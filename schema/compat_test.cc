#include "schema/compat.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"

namespace megastore::schema {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string PhotoApp() {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/examples/photoapp.msdl");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

SchemaDescriptor Compile(const std::string& source) {
  CompileResult r = CompileSchema(source);
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].message);
  return r.descriptor;
}

TEST(CompatTest, AddingOptionalFieldsIndexesAndTablesIsAllowed) {
  const SchemaDescriptor before = Compile(PhotoApp());
  const SchemaDescriptor after =
      Compile(PhotoApp() +
              "ALTER TABLE Photo ADD optional string caption;\n"
              "DROP INDEX PhotosByTag;\n"
              "ALTER TABLE Photo DROP thumbnail_url;\n"
              "CREATE GLOBAL INDEX PhotosByCaption ON Photo(caption);\n"
              "CREATE TABLE Album { required int64 user_id; required int64 album_id; }"
              " PRIMARY KEY(user_id, album_id), ENTITY GROUP KEY(user_id) REFERENCES User;\n");
  EXPECT_THAT(CheckCompatible(before, after), IsEmpty());
}

TEST(CompatTest, BreakingChangesAreEachNamed) {
  const SchemaDescriptor before = Compile(PhotoApp());
  std::string edited = PhotoApp();
  // Photo's key loses photo_id's place, thumbnail_url vanishes unreserved,
  // tag becomes an int64, a required field appears, an index changes.
  auto replace = [&](const std::string& a, const std::string& b) {
    edited.replace(edited.find(a), a.size(), b);
  };
  replace("PRIMARY KEY(user_id, photo_id)", "PRIMARY KEY(user_id, photo_id DESC)");
  replace("  optional string thumbnail_url;\n", "");
  replace("repeated string tag;", "repeated int64 tag;");
  replace("ON Photo(user_id, time)", "ON Photo(user_id, time DESC)");
  replace("STORING (thumbnail_url)", "");
  const auto errors = CheckCompatible(before, Compile(edited));
  std::string all;
  for (const auto& e : errors) all += e + "\n";
  EXPECT_THAT(all, HasSubstr("table Photo changed its primary key"));
  EXPECT_THAT(all, HasSubstr("field number 5 was thumbnail_url and is now tag"));
  EXPECT_THAT(all, HasSubstr("index PhotosByTime changed"));
  EXPECT_THAT(all, HasSubstr("Photo.tag was removed without reserving its number 6"));
  std::string with_required = PhotoApp();
  with_required.replace(with_required.find("repeated string tag;"), 20,
                        "repeated string tag; required bool hidden;");
  EXPECT_THAT(
      CheckCompatible(before, Compile(with_required)),
      ElementsAre("Photo.hidden is a new required field; existing data has no value for it"));
  EXPECT_THAT(CheckCompatible(before, Compile("CREATE SCHEMA PhotoApp;")),
              ElementsAre("table User was removed", "table Photo was removed"));
}

TEST(CompatTest, EncryptionCannotBeTurnedOnOrOff) {
  const std::string plain =
      "CREATE SCHEMA S;\nCREATE TABLE R {\n  required int64 id;\n} PRIMARY KEY(id), ENTITY GROUP "
      "ROOT;\n";
  std::string sealed = plain;
  sealed.replace(sealed.find("ENTITY GROUP ROOT;"), 18, "ENTITY GROUP ROOT, ENCRYPTED;");
  EXPECT_THAT(CheckCompatible(Compile(plain), Compile(sealed)),
              ElementsAre(HasSubstr(
                  "table R became ENCRYPTED; existing groups keep how they were written")));
  EXPECT_THAT(CheckCompatible(Compile(sealed), Compile(plain)),
              ElementsAre(HasSubstr("table R is no longer ENCRYPTED")));
  EXPECT_THAT(CheckCompatible(Compile(sealed), Compile(sealed)), ElementsAre());
}

}  // namespace
}  // namespace megastore::schema
