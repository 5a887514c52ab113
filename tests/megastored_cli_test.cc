// End-to-end: megastored as a process, driven by msadmin bt and plain HTTP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;

using testing::Result;
using testing::RunCommand;

std::string HttpGet(int port, const std::string& path) { return testing::Http(port, "GET", path); }

class MegastoredCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        server_.Start({MEGASTORED, "--roles=tablet", "--listen=127.0.0.1:0",
                       "--data=" + dir_.path() + "/d", "--http=127.0.0.1:0", "--log-level=warn"}));
    const std::string line = server_.ReadLine(30000);
    ASSERT_THAT(line, HasSubstr("listening on 127.0.0.1:"));
    const size_t at = line.find("127.0.0.1:");
    address_ = line.substr(at, line.find(' ', at) - at);
    const std::string http = server_.ReadLine(30000);
    ASSERT_THAT(http, HasSubstr("http://127.0.0.1:"));
    http_port_ = std::atoi(http.substr(http.rfind(':') + 1).c_str());
  }
  void TearDown() override { server_.Kill(SIGTERM); }

  Result Bt(const std::string& args) {
    return RunCommand(std::string(MSADMIN) + " bt --server=" + address_ + " " + args);
  }

  TestDir dir_;
  testing::Subprocess server_;
  std::string address_;
  int http_port_ = 0;
};

TEST_F(MegastoredCliTest, CbtStyleVerbsWorkEndToEnd) {
  EXPECT_EQ(Bt("createtable users \"families=info:maxversions=3,log:maxage=7d or maxversions=2\"")
                .exit_code,
            0);
  Result ls = Bt("ls users");
  EXPECT_EQ(ls.exit_code, 0);
  EXPECT_THAT(ls.out, HasSubstr("log                  maxversions=2 or maxage=168h"));
  EXPECT_EQ(Bt("set users alice info:name=Alice info:age=30@1700000000000000").exit_code, 0);
  EXPECT_EQ(Bt("set users bob info:name=Bob").exit_code, 0);
  Result lookup = Bt("lookup users alice columns=info:age");
  EXPECT_EQ(lookup.exit_code, 0);
  EXPECT_THAT(lookup.out, HasSubstr("alice\n  info:age"));
  EXPECT_THAT(lookup.out, HasSubstr("@ 2023/11/14-22:13:20.000000\n    \"30\""));
  EXPECT_THAT(lookup.out, ::testing::Not(HasSubstr("info:name")));
  EXPECT_EQ(Bt("count users").out, "2\n");
  Result read = Bt("read users prefix=b");
  EXPECT_THAT(read.out, HasSubstr("bob"));
  EXPECT_THAT(read.out, ::testing::Not(HasSubstr("alice")));
  EXPECT_EQ(Bt("createfamily users extra").exit_code, 0);
  EXPECT_EQ(Bt("setgcpolicy users extra maxversions=1").exit_code, 0);
  EXPECT_EQ(Bt("deletecolumn users alice info:age").exit_code, 0);
  EXPECT_THAT(Bt("lookup users alice").out, ::testing::Not(HasSubstr("info:age")));
  EXPECT_EQ(Bt("deleterow users bob").exit_code, 0);
  EXPECT_EQ(Bt("count users").out, "1\n");
  EXPECT_EQ(Bt("ls").out, "users\n");
  EXPECT_EQ(Bt("deletetable users").exit_code, 0);
  EXPECT_EQ(Bt("ls").out, "");
}

// Binary keys, qualifiers and values: given escaped or in hex, printed
// escaped (a NUL does not cut anything short), and as JSON lines.
TEST_F(MegastoredCliTest, BinaryBytesGoInEscapedOrHexAndComeOutEscaped) {
  EXPECT_EQ(Bt("createtable bin families=cf").exit_code, 0);
  EXPECT_EQ(Bt(R"(set bin 'a\x00b\xff' 'cf:q\x01=v\x00\x80"')").exit_code, 0);
  EXPECT_EQ(Bt("set bin hex:610062fe cf:q=second").exit_code, 0);
  Result lookup = Bt("lookup bin hex:610062ff");
  EXPECT_EQ(lookup.exit_code, 0) << lookup.out;
  EXPECT_THAT(lookup.out, HasSubstr(R"(a\x00b\xff
  cf:q\x01)"));
  EXPECT_THAT(lookup.out, HasSubstr(R"("v\x00\x80\"")"));
  Result read = Bt(R"(-o json read bin 'start=a\x00b\xfe')");
  EXPECT_EQ(read.exit_code, 0) << read.out;
  EXPECT_THAT(read.out,
              HasSubstr(R"({"key":"a\\x00b\\xfe","cells":[{"family":"cf","qualifier":"q")"));
  EXPECT_THAT(read.out, HasSubstr(R"("value":"v\\x00\\x80\\\"")")) << read.out;
  EXPECT_EQ(std::count(read.out.begin(), read.out.end(), '\n'), 2) << "one line per row";
  Result bad = Bt(R"(lookup bin 'a\q')");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("a backslash starts"));
  EXPECT_EQ(Bt("lookup bin hex:6").exit_code, 2);
  // Options may follow the verb; columns= takes escaped qualifiers.
  Result after = Bt(R"(lookup bin hex:610062ff 'columns=cf:q\x01' -o json)");
  EXPECT_EQ(after.exit_code, 0) << after.out;
  EXPECT_THAT(after.out, HasSubstr(R"("qualifier":"q\\x01")"));
  // Bytes that look like input syntax print so that they read back as
  // themselves: a leading "hex:" and '@'.
  EXPECT_EQ(Bt(R"(set bin 'hex\x3a41' 'cf:q=a\x40b')").exit_code, 0);
  Result literal = Bt(R"(lookup bin '\x68ex:41')");
  EXPECT_THAT(literal.out, HasSubstr(R"(\x68ex:41)")) << literal.out;
  EXPECT_THAT(literal.out, HasSubstr(R"("a\x40b")")) << literal.out;
}

TEST_F(MegastoredCliTest, ErrorsAreOneLineAndExitNonZero) {
  EXPECT_EQ(Bt("createtable t families=cf").exit_code, 0);
  Result bad_family = Bt("set t r nofam:q=1");
  EXPECT_EQ(bad_family.exit_code, 1);
  EXPECT_EQ(bad_family.out, "msadmin bt set: mutation 0: unknown column family \"nofam\"\n");
  Result missing = Bt("lookup nosuch r");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.out, HasSubstr("table nosuch does not exist"));
  Result usage = Bt("read t bogus=1");
  EXPECT_EQ(usage.exit_code, 2) << "a usage error";
  EXPECT_THAT(usage.out, HasSubstr("allowed: start= end= prefix= count="));
  Result unreachable = RunCommand(std::string(MSADMIN) + " bt --server=127.0.0.1:1 ls");
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.out, HasSubstr("cannot connect to 127.0.0.1:1"));
  EXPECT_EQ(RunCommand(std::string(MSADMIN) + " bt ls").exit_code, 2);  // --server missing
  EXPECT_EQ(RunCommand(std::string(MSADMIN) + " --help").exit_code, 0);
  EXPECT_EQ(RunCommand(std::string(MEGASTORED) + " --roles=master --data=/tmp/x").exit_code, 2);
  Result format = RunCommand(std::string(MEGASTORED) + " --log-format=xml --data=/tmp/x");
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_THAT(format.out, HasSubstr("--log-format=xml is not text or json"));
}

// A damaged state.pb: the server refuses to start naming it, and msadmin
// datadir rebuild-state rebuilds it from the tablets (offline), after
// which every row is served again.
TEST_F(MegastoredCliTest, ALostStateFileIsRebuiltByMsadmin) {
  ASSERT_EQ(Bt("createtable users families=info").exit_code, 0);
  ASSERT_EQ(Bt("createtable empty families=cf").exit_code, 0);
  ASSERT_EQ(Bt("set users alice info:name=Alice").exit_code, 0);
  ASSERT_EQ(Bt("set users bob info:name=Bob").exit_code, 0);
  server_.Kill(SIGTERM);
  const std::string data = dir_.path() + "/d";
  {
    FILE* f =
        std::fopen((data + "/state.pb").c_str(), "w");  // garbage that parses as an empty state
    ASSERT_NE(f, nullptr);
    std::fputs("xx", f);
    std::fclose(f);
  }
  Result refused =
      RunCommand(std::string(MEGASTORED) + " --roles=tablet --listen=127.0.0.1:0 --data=" + data);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.out, HasSubstr("state.pb is damaged"));
  const std::string rebuild = std::string(MSADMIN) + " datadir rebuild-state --data=" + data;
  Result dry = RunCommand(rebuild);
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.out, HasSubstr("2 tables, 2 tablets"));
  EXPECT_THAT(dry.out, HasSubstr("table users\n    tablet users-"));
  EXPECT_THAT(dry.out, HasSubstr("nothing written"));
  Result dry_json = RunCommand(rebuild + " -o json");
  EXPECT_EQ(dry_json.exit_code, 0) << dry_json.out;
  EXPECT_THAT(dry_json.out,
              HasSubstr("\"tables\":[{\"name\":\"empty\",\"tablets\":[{\"id\":\"empty-"));
  EXPECT_THAT(dry_json.out, HasSubstr("\"start\":\"\",\"end\":\"\"}]}"));
  EXPECT_THAT(dry_json.out, HasSubstr("\"written\":false,\"keptDamagedAs\":null}\n"));
  Result wrote = RunCommand(rebuild + " --yes -o json");
  EXPECT_EQ(wrote.exit_code, 0) << wrote.out;
  EXPECT_THAT(wrote.out,
              HasSubstr("\"written\":true,\"keptDamagedAs\":\"" + data + "/state.pb.damaged-"));
  Result again = RunCommand(rebuild + " --yes");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.out, HasSubstr("is intact"));
  EXPECT_EQ(RunCommand(std::string(MSADMIN) + " datadir rebuild-state").exit_code,
            2);  // --data missing
  SetUp();
  EXPECT_EQ(Bt("count users").out, "2\n");
  EXPECT_EQ(Bt("ls").out, "empty\nusers\n");
}

// msadmin certs: a CA, certificates it issues (that OpenSSL's own tool
// verifies), and clear refusals.
TEST(MsadminCertsTest, InitIssueShowAndRefusals) {
  TestDir dir;
  const std::string m = std::string(MSADMIN) + " certs ";
  const std::string ca = dir.path() + "/ca";
  Result init = RunCommand(m + "init -o json --dir=" + ca);
  ASSERT_EQ(init.exit_code, 0) << init.out;
  EXPECT_EQ(init.out, R"({"name":"megastore CA","certificate":")" + ca + R"(/ca.crt","key":")" +
                          ca + "/ca.key\"}\n");
  Result issue =
      RunCommand(m + "issue --dir=" + ca +
                 " dc-A --host=127.0.0.1 --host=dc-a.example --out=" + dir.path() + "/certs");
  ASSERT_EQ(issue.exit_code, 0) << issue.out;
  EXPECT_THAT(issue.out, HasSubstr("dc-A.key (owner-only): principal \"dc-A\", serving on"));
  Result issue_json = RunCommand(m + "issue -o json --dir=" + ca +
                                 " app --cn=photo-app --out=" + dir.path() + "/certs");
  ASSERT_EQ(issue_json.exit_code, 0) << issue_json.out;
  EXPECT_EQ(issue_json.out, R"({"certificate":")" + dir.path() + R"(/certs/app.crt","key":")" +
                                dir.path() +
                                R"(/certs/app.key","principal":"photo-app","hosts":[]})" + "\n");
  Result show = RunCommand(m + "show " + dir.path() + "/certs/dc-A.crt");
  EXPECT_EQ(show.exit_code, 0) << show.out;
  EXPECT_THAT(show.out, HasSubstr("principal  dc-A\n  issued by  megastore CA"));
  EXPECT_THAT(show.out, HasSubstr("hosts      127.0.0.1, dc-a.example"));
  Result show_json = RunCommand(m + "show -o json " + dir.path() + "/certs/dc-A.crt");
  EXPECT_EQ(show_json.exit_code, 0) << show_json.out;
  EXPECT_THAT(show_json.out, HasSubstr(R"("principal":"dc-A","issuer":"megastore CA")"));
  EXPECT_THAT(show_json.out, HasSubstr(R"("hosts":["127.0.0.1","dc-a.example"]})"));
  Result verify =
      RunCommand("openssl verify -CAfile " + ca + "/ca.crt " + dir.path() + "/certs/dc-A.crt");
  EXPECT_THAT(verify.out, HasSubstr(": OK")) << verify.out;
  EXPECT_EQ(RunCommand(m + "init --dir=" + ca).exit_code, 1);  // never replaced
  Result bad_host = RunCommand(m + "issue --dir=" + ca + " x --host='not a host'");
  EXPECT_EQ(bad_host.exit_code, 1);
  EXPECT_THAT(bad_host.out, HasSubstr("neither an IP address nor a host name"));
  EXPECT_EQ(RunCommand(m + "issue --dir=" + ca + " y --days=0").exit_code, 2);
  EXPECT_EQ(RunCommand(m + "issue x").exit_code, 2);  // --dir missing
}

// megastored and msadmin over mutual TLS: with certificates of the CA the
// tool's verbs work; without TLS, or with another CA's, they are refused.
TEST(MegastoredTlsTest, AToolNeedsACertificateOfTheCa) {
  TestDir dir;
  const std::string m = std::string(MSADMIN);
  const std::string c = dir.path() + "/certs";
  ASSERT_EQ(RunCommand(m + " certs init --dir=" + dir.path() + "/ca").exit_code, 0);
  ASSERT_EQ(RunCommand(m + " certs init --dir=" + dir.path() + "/other").exit_code, 0);
  ASSERT_EQ(
      RunCommand(m + " certs issue --dir=" + dir.path() + "/ca server --host=127.0.0.1 --out=" + c)
          .exit_code,
      0);
  ASSERT_EQ(RunCommand(m + " certs issue --dir=" + dir.path() + "/ca admin --out=" + c).exit_code,
            0);
  ASSERT_EQ(
      RunCommand(m + " certs issue --dir=" + dir.path() + "/other intruder --out=" + c).exit_code,
      0);
  auto tls = [&](const std::string& ca, const std::string& name) {
    return " --tls-ca=" + dir.path() + "/" + ca + "/ca.crt --tls-cert=" + c + "/" + name +
           ".crt --tls-key=" + c + "/" + name + ".key";
  };
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--roles=tablet", "--listen=127.0.0.1:0",
                            "--data=" + dir.path() + "/d", "--log-level=warn",
                            "--tls-ca=" + dir.path() + "/ca/ca.crt",
                            "--tls-cert=" + c + "/server.crt", "--tls-key=" + c + "/server.key"}));
  const std::string line = server.ReadLine(30000);
  ASSERT_THAT(line, HasSubstr("listening on 127.0.0.1:"));
  const size_t at = line.find("127.0.0.1:");
  const std::string address = line.substr(at, line.find(' ', at) - at);
  Result ok =
      RunCommand(m + tls("ca", "admin") + " bt --server=" + address + " createtable t families=cf");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(RunCommand(m + tls("ca", "admin") + " bt --server=" + address + " ls").out, "t\n");
  Result plain = RunCommand(m + " bt --server=" + address + " ls");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(plain.out, HasSubstr("does it require TLS?"));
  Result foreign = RunCommand(m + tls("other", "intruder") + " bt --server=" + address + " ls");
  EXPECT_EQ(foreign.exit_code, 1);
  EXPECT_THAT(foreign.out, HasSubstr("TLS handshake"));
  server.Kill(SIGTERM);
  Result wrong_key = RunCommand(std::string(MEGASTORED) + " --roles=tablet --data=" + dir.path() +
                                "/d" + " --tls-ca=" + dir.path() + "/ca/ca.crt --tls-cert=" + c +
                                "/server.crt --tls-key=" + c + "/admin.key");
  EXPECT_EQ(wrong_key.exit_code, 2);
  EXPECT_THAT(wrong_key.out, HasSubstr("is not the key of"));
}

// --log-format=json: every log line on stderr is one JSON object; stdout
// keeps the server's own lines.
TEST(MegastoredLogTest, JsonLogLinesGoToStderr) {
  TestDir dir;
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({"/bin/sh", "-c",
                            "exec " + std::string(MEGASTORED) + " --listen=127.0.0.1:0 --data=" +
                                dir.path() + "/d --log-format=json 2>" + dir.path() + "/log"}));
  EXPECT_THAT(server.ReadLine(30000), HasSubstr("listening on 127.0.0.1:"));
  server.Kill(SIGTERM);
  std::FILE* f = std::fopen((dir.path() + "/log").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char line[4096];
  int lines = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    ++lines;
    const std::string l = line;
    EXPECT_EQ(l.rfind("{\"time\":\"", 0), 0u) << l;
    EXPECT_THAT(l, HasSubstr("\"level\":\"info\""));
    EXPECT_EQ(l.substr(l.size() - 3), "\"}\n") << l;
  }
  std::fclose(f);
  EXPECT_GE(lines, 1) << "the shutdown is logged";
}

TEST_F(MegastoredCliTest, StatusAndMetricsPagesAreServed) {
  EXPECT_EQ(Bt("createtable t families=cf").exit_code, 0);
  EXPECT_EQ(Bt("set t r cf:q=v").exit_code, 0);
  const std::string status = HttpGet(http_port_, "/status");
  EXPECT_THAT(status, HasSubstr("200 OK"));
  EXPECT_THAT(status, HasSubstr("<td>t</td>"));
  EXPECT_THAT(status, HasSubstr("group commits"));
  const std::string metrics = HttpGet(http_port_, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("megastore_rpc_calls_total{method=\"tablet.MutateRow\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("megastore_commitlog_syncs_total"));
  EXPECT_THAT(metrics, HasSubstr("megastore_commitlog_appender_groups_total"));
  EXPECT_THAT(metrics, HasSubstr("megastore_tablet_size_bytes{table=\"t\""));
  EXPECT_THAT(HttpGet(http_port_, "/nope"), HasSubstr("404"));
}

}  // namespace
}  // namespace megastore
