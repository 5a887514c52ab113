#include "base/tool_defaults.h"

#include <cstdlib>
#include <fstream>

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

class ToolDefaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"MEGASTORE_CONFIG", "MEGASTORE_TLS_CA", "MEGASTORE_TLS_CERT",
                          "MEGASTORE_TLS_KEY", "MEGASTORE_OUTPUT"})
      ::unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  std::string Rc(const std::string& text) {
    const std::string path = dir_.path() + "/rc";
    std::ofstream(path) << text;
    return path;
  }
  TestDir dir_;
};

TEST_F(ToolDefaultsTest, TheFileFillsWhatTheEnvironmentLeavesOut) {
  ::setenv("MEGASTORE_TLS_CA", "/from/env/ca.crt", 1);
  const std::string rc =
      Rc("# my cluster\n"
         "config = clusters/prod.textproto\n"
         "tls-ca = /etc/ms/ca.crt   # the environment's wins\n"
         "  tls-cert=/etc/ms/admin.crt\n"
         "\n"
         "output = json\n");
  ASSERT_TRUE(LoadToolDefaults(rc).ok());
  EXPECT_STREQ(std::getenv("MEGASTORE_CONFIG"), (dir_.path() + "/clusters/prod.textproto").c_str())
      << "relative to the file's directory";
  EXPECT_STREQ(std::getenv("MEGASTORE_TLS_CA"), "/from/env/ca.crt");
  EXPECT_STREQ(std::getenv("MEGASTORE_TLS_CERT"), "/etc/ms/admin.crt");
  EXPECT_EQ(std::getenv("MEGASTORE_TLS_KEY"), nullptr);
  EXPECT_STREQ(std::getenv("MEGASTORE_OUTPUT"), "json");
}

TEST_F(ToolDefaultsTest, NoFileIsFineAndMistakesAreNamedByLine) {
  EXPECT_TRUE(LoadToolDefaults(dir_.path() + "/none").ok());
  EXPECT_TRUE(LoadToolDefaults("").ok());
  for (const auto& [text, line] : std::vector<std::pair<std::string, std::string>>{
           {"config = a\ncolour = red\n", ":2:"},
           {"config\n", ":1:"},
           {"\n\ntls-key =\n", ":3: tls-key is empty"},
           {"output = yaml\n", ":1: output is text or json"}}) {
    absl::Status s = LoadToolDefaults(Rc(text));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << text;
    EXPECT_NE(s.message().find(line), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(LoadToolDefaults(Rc(std::string(70000, '#')))));
}

TEST_F(ToolDefaultsTest, TheRcPathFollowsTheEnvironment) {
  ::setenv("MEGASTORE_RC", "/x/rc", 1);
  EXPECT_EQ(ToolRcPath(), "/x/rc");
  ::unsetenv("MEGASTORE_RC");
  ::setenv("XDG_CONFIG_HOME", "/cfg", 1);
  EXPECT_EQ(ToolRcPath(), "/cfg/megastore/rc");
  ::unsetenv("XDG_CONFIG_HOME");
}

}  // namespace
}  // namespace megastore
