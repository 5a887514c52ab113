// msc as a user runs it: exit codes, messages, and the files it writes.
#include <filesystem>
#include <fstream>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;

const std::string kMsc = MSC;
const std::string kPhotoApp = std::string(MS_SOURCE_DIR) + "/examples/photoapp.msdl";

TEST(MscCliTest, ValidSchemaChecksAndWritesDescriptorAndCode) {
  EXPECT_EQ(RunCommand(kMsc + " --check " + kPhotoApp).exit_code, 0);
  TestDir dir;
  const auto r = RunCommand(kMsc + " " + kPhotoApp + " --out=" + dir.path() + "/gen");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("schema PhotoApp (2 tables, 2 indexes)"));
  for (const char* f : {"PhotoApp.schema.pb", "PhotoApp.schema.textproto", "PhotoApp.schema.h",
                        "PhotoApp.schema.cc"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/gen/" + f)) << f;
  }
  const auto printed = RunCommand(kMsc + " --print " + kPhotoApp);
  EXPECT_EQ(printed.exit_code, 0);
  EXPECT_THAT(printed.out,
              HasSubstr("CREATE GLOBAL INDEX PhotosByTag ON Photo(tag) STORING (thumbnail_url);"));
}

TEST(MscCliTest, SchemaErrorsExitOneWithEveryErrorListed) {
  TestDir dir;
  const std::string bad = dir.path() + "/bad.msdl";
  std::ofstream(bad) << "CREATE SCHEMA S;\nCREATE TABLE T {\n  required strin a;\n  optional int64 "
                        "a;\n} ENTITY GROUP ROOT;\n";
  const auto r = RunCommand(kMsc + " --check " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr(bad + ":2:14: error: table T has no PRIMARY KEY"));
  EXPECT_THAT(r.out, HasSubstr(bad + ":3:12: error: unknown type \"strin\""));
  EXPECT_THAT(r.out, HasSubstr("msc: 2 errors in " + bad));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out"));
  EXPECT_EQ(RunCommand(kMsc + " " + bad + " --out=" + dir.path() + "/out").exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out/S.schema.pb"));
}

TEST(MscCliTest, PreviousDescriptorRefusesIncompatibleChanges) {
  TestDir dir;
  ASSERT_EQ(RunCommand(kMsc + " " + kPhotoApp + " --out=" + dir.path()).exit_code, 0);
  const std::string next = dir.path() + "/next.msdl";
  {
    std::ifstream in(kPhotoApp);
    std::ofstream out(next);
    out << in.rdbuf() << "ALTER TABLE Photo ADD optional string caption;\n";
  }
  EXPECT_EQ(
      RunCommand(kMsc + " --check " + next + " --previous=" + dir.path() + "/PhotoApp.schema.pb")
          .exit_code,
      0);
  EXPECT_EQ(RunCommand(kMsc + " --check " + next + " --previous=" + dir.path() +
                       "/PhotoApp.schema.textproto")
                .exit_code,
            0);
  std::ofstream(next, std::ios::app)
      << "ALTER TABLE Photo ADD repeated string caption2;\nDROP INDEX PhotosByTime;\n"
      << "CREATE LOCAL INDEX PhotosByTime ON Photo(time);\n";
  const auto r =
      RunCommand(kMsc + " --check " + next + " --previous=" + dir.path() + "/PhotoApp.schema.pb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("error: incompatible with " + dir.path() +
                               "/PhotoApp.schema.pb: index PhotosByTime changed"));
  EXPECT_EQ(RunCommand(kMsc + " --check " + next + " --previous=" + kPhotoApp).exit_code,
            2);  // not a descriptor
}

TEST(MscCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCommand(kMsc).exit_code, 2);                    // no file
  EXPECT_EQ(RunCommand(kMsc + " " + kPhotoApp).exit_code, 2);  // neither --out nor --check
  EXPECT_EQ(RunCommand(kMsc + " --check /no/such/file.msdl").exit_code, 2);  // unreadable
  EXPECT_EQ(RunCommand(kMsc + " --check --out=/tmp/x " + kPhotoApp).exit_code, 2);
  EXPECT_EQ(RunCommand(kMsc + " --bogus " + kPhotoApp).exit_code, 2);
  const auto help = RunCommand(kMsc + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Exit status: 0"));
}

}  // namespace
}  // namespace megastore
