#include "base/logging.h"

#include <google/protobuf/struct.pb.h>

#include <algorithm>

#include "base/init.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(LoggingTest, TheLastWarningsAndErrorsAreKeptForStatusPages) {
  SetLogLevel("info");
  KeepRecentErrors(3);
  MS_LOG_INFO("not kept");
  MS_LOG_WARN("first {}", 1);
  MS_LOG_ERROR("second");
  MS_LOG_WARN("third");
  MS_LOG_WARN("fourth");
  const std::vector<std::string> kept = RecentErrors();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_NE(kept[0].find("second"), std::string::npos) << kept[0];
  EXPECT_NE(kept[0].find("error"), std::string::npos) << kept[0];
  EXPECT_NE(kept[2].find("fourth"), std::string::npos) << kept[2];
  SetLogLevel("warn");
}

// A peer can make protobuf complain once per message it sends: those
// lines are rate-limited like the project's own.
TEST(LoggingTest, ProtobufMessagesAreRateLimited) {
  LogToStderr();
  SetLogLevel("warn");
  RouteProtobufLogs();
  // A string field holding bytes that are not UTF-8 (as in a garbage RPC
  // frame's method name).
  google::protobuf::Value v;
  const std::string bad = std::string("\x1a\x02") + "\xff\xfe";  // string_value (3): 0xff 0xfe
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) (void)v.ParseFromString(bad);
  const std::string out = ::testing::internal::GetCapturedStderr();
  const auto lines = std::count(out.begin(), out.end(), '\n');
  EXPECT_GE(lines, 1) << out;
  EXPECT_LE(lines, 25) << "1000 malformed messages, " << lines << " lines";
  EXPECT_NE(out.find("protobuf: String field"), std::string::npos) << out.substr(0, 500);
}

TEST(LoggingTest, JsonLinesEscapeTheMessage) {
  LogToStderr();
  SetLogLevel("info");
  ASSERT_TRUE(SetLogFormat("json"));
  ::testing::internal::CaptureStderr();
  MS_LOG_WARN("a \"quoted\" {}\nsecond line", "word");
  const std::string out = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(SetLogFormat("text"));
  SetLogLevel("warn");
  EXPECT_EQ(out.front(), '{') << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line per message: " << out;
  EXPECT_NE(out.find(R"("level":"warning")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"("msg":"a \"quoted\" word\nsecond line"})"), std::string::npos) << out;
  EXPECT_NE(out.find(R"("time":"20)"), std::string::npos) << out;
  EXPECT_FALSE(SetLogFormat("xml"));
}

}  // namespace
}  // namespace megastore
