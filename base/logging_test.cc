#include "base/logging.h"

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

}  // namespace
}  // namespace megastore
