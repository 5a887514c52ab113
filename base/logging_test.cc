#include "base/logging.h"

#include <algorithm>

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
