// The status console in a real browser: a three-datacenter megastored with
// traffic from the example app, its /console loaded by headless Chromium
// (Debian's chromium), which must run the page's script and draw every
// chart with data. A screenshot lands in the build directory
// (build/console.png) for a person to look at.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/time/clock.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;

// Chromium from Debian's package, or "" if it is not installed.
std::string Chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(path)) return path;
  return "";
}

using testing::UntilReady;

TEST(ConsoleBrowserTest, ChromiumDrawsEveryChartWithData) {
  const std::string chromium = Chromium();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (./ms deps installs Debian's chromium where the "
                    "package archive has it): the console's browser test cannot run";
  TestDir dir;
  const std::string schema = dir.path() + "/PhotoApp.schema.pb";
  std::ofstream(schema, std::ios::binary) << photoapp::Schema().SerializeAsString();
  const int http = testing::FreePort();
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=3", "--data=" + dir.path() + "/data",
                            "--schema=" + schema, "--no-tls", "--no-sync", "--log-level=warn",
                            StrCat("--http=127.0.0.1:", http), "--console-sample-seconds=1"}));
  const std::string out = UntilReady(server);
  ASSERT_THAT(out, HasSubstr("megastored: ready")) << out;
  // Traffic: the example app's commits, queries and reads at C.
  testing::Result demo = testing::RunCommand(
      StrCat(PHOTOAPP_DEMO, " --config=", dir.path(), "/data/cluster.textproto --local=A"));
  ASSERT_EQ(demo.exit_code, 0) << demo.out;
  // Until every chart has a point (a rate needs two samples after the
  // traffic), at most 30 s.
  auto every_chart_has_data = [&] {
    const std::string json = testing::Http(http, "GET", "/console/charts.json");
    int charts = 0;
    for (size_t at = json.find("{\"title\":"); at != std::string::npos; ++charts) {
      const size_t next = json.find("{\"title\":", at + 1);
      if (json.substr(at, next - at).find("\"points\":[[") == std::string::npos) return false;
      at = next;
    }
    return charts > 0;
  };
  for (int i = 0; i < 300 && !every_chart_has_data(); ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(every_chart_has_data()) << testing::Http(http, "GET", "/console/charts.json");

  const std::string url = StrCat("http://127.0.0.1:", http, "/console");
  const std::string flags =
      StrCat(chromium,
             " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars"
             " --no-first-run --user-data-dir=",
             dir.path(), "/chromium --virtual-time-budget=5000");
  testing::Result dom = testing::RunCommand(StrCat("timeout 90 ", flags, " --dump-dom ", url));
  ASSERT_EQ(dom.exit_code, 0) << dom.out;
  // The script ran and replaced the placeholder with one card per chart.
  EXPECT_THAT(dom.out, HasSubstr(R"(id="charts" class="grid" data-loaded="yes")")) << dom.out;
  const std::regex card(R"re(<div class="card chart" data-points="(\d+)"><h3>([^<]+))re");
  int charts = 0;
  for (std::sregex_iterator it(dom.out.begin(), dom.out.end(), card), end; it != end; ++it) {
    ++charts;
    EXPECT_GT(std::stoi((*it)[1]), 0) << "chart \"" << (*it)[2] << "\" has no data";
  }
  EXPECT_EQ(charts, 7) << dom.out;
  size_t lines = 0;
  for (size_t at = dom.out.find("<polyline class=\"series\""); at != std::string::npos;
       at = dom.out.find("<polyline class=\"series\"", at + 1))
    ++lines;
  EXPECT_GE(lines, 7u) << "every chart draws at least one line";
  EXPECT_THAT(dom.out, HasSubstr("Round trips between datacenters"));
  EXPECT_THAT(dom.out, HasSubstr("A→C")) << "a line per pair of datacenters";
  EXPECT_THAT(dom.out, HasSubstr("/console/group?table=PhotoApp&amp;root=")) << dom.out;

  // The screenshot, for people.
  const std::string png = StrCat(MS_BINARY_DIR, "/console.png");
  std::filesystem::remove(png);
  testing::Result shot = testing::RunCommand(
      StrCat("timeout 90 ", flags, " --window-size=1400,1100 --screenshot=", png, " ", url));
  EXPECT_EQ(shot.exit_code, 0) << shot.out;
  EXPECT_TRUE(std::filesystem::exists(png)) << shot.out;
  if (std::filesystem::exists(png)) {
    EXPECT_GT(std::filesystem::file_size(png), 10000u);
  }

  // The other pages answer.
  EXPECT_THAT(testing::Http(http, "GET", "/console/tablets"), HasSubstr("tablet server at"));
  EXPECT_THAT(testing::Http(http, "GET", "/console/group?table=PhotoApp&root=8000000000000001"),
              HasSubstr("Log positions at each replica"));
  EXPECT_THAT(testing::Http(http, "GET", "/console/group?table=PhotoApp&root=zz"),
              HasSubstr("400 Bad Request"));
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace megastore
