// mssim as a user runs it: exit codes, replay, the history file.
#include <fstream>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;

const std::string kMssim = MSSIM;

TEST(MssimCliTest, RunsSeedsAndSaysSo) {
  const auto r = RunCommand(kMssim + " --seeds=3 --first=40");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("mssim: 3 seeds passed (40..42)"));
}

TEST(MssimCliTest, OneSeedReplaysTheSameTrace) {
  const auto a = RunCommand(kMssim + " --seed=9 --trace --ops=8");
  const auto b = RunCommand(kMssim + " --seed=9 --trace --ops=8");
  ASSERT_EQ(a.exit_code, 0) << a.out.substr(a.out.size() > 2000 ? a.out.size() - 2000 : 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_THAT(a.out, HasSubstr(" send #1 "));
  EXPECT_THAT(a.out, HasSubstr("history {\"process\":"));
}

TEST(MssimCliTest, WritesTheHistoryAsJsonLines) {
  TestDir dir;
  const std::string file = dir.path() + "/h.jsonl";
  const auto r = RunCommand(kMssim + " --seed=4 --history=" + file);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(file);
  std::string line;
  int lines = 0, invokes = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    EXPECT_THAT(line, HasSubstr("\"process\":"));
    EXPECT_THAT(line, HasSubstr("\"time\":"));
    invokes += line.find("\"type\":\"invoke\"") != std::string::npos;
  }
  EXPECT_EQ(lines, 2 * invokes) << "every invocation completes";
  EXPECT_EQ(invokes, 4 * 25);
}

TEST(MssimCliTest, BadFlagsExitTwoWithTheReason) {
  auto r = RunCommand(kMssim);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--seeds=N or --seed=S"));
  r = RunCommand(kMssim + " --seed=1 --replicas=full,bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("unknown replica type 'bogus'"));
  r = RunCommand(kMssim + " --seeds=2 --trace");
  EXPECT_EQ(r.exit_code, 2);
  r = RunCommand(kMssim + " --seeds=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(RunCommand(kMssim + " --help").exit_code, 0);
}

}  // namespace
}  // namespace megastore
