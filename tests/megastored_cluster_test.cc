// megastored's cluster modes as processes: the embedded default (--local=3)
// with the JSON gateway, and three datacenters as separate processes from
// one config (one of them split by role), one killed with SIGKILL and
// restarted.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_split.h"
#include "api/database.h"
#include "base/file.h"
#include "base/rpc/rpc.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "base/tls/certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "schema/compiler.h"
#include "server/cluster.h"
#include "tests/https_client.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::UntilReady;

// The value of the sample named exactly `series` (name and labels), or
// -1 if there is none.
double MetricValue(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.compare(0, series.size() + 1, series + " ") == 0)
      return std::atof(line.c_str() + series.size() + 1);
  return -1;
}

// What is wrong with Prometheus text: a family typed twice, or its samples
// not in one block after its # TYPE line. "" when nothing is.
std::string PrometheusProblems(const std::string& text) {
  std::set<std::string> typed, finished;
  std::string current;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string family = line.substr(7, line.find(' ', 7) - 7);
      if (!typed.insert(family).second) return "typed twice: " + family;
      if (!current.empty()) finished.insert(current);
      current = family;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (!typed.count(name) && name.size() > sfx.size() &&
          name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0)
        name = name.substr(0, name.size() - sfx.size());
    }
    if (name != current) return "sample outside its family's block: " + line;
    if (finished.count(name)) return "family split: " + name;
  }
  return "";
}

std::string WriteSchema(const std::string& dir) {
  const std::string path = dir + "/PhotoApp.schema.pb";
  std::ofstream(path, std::ios::binary) << photoapp::Schema().SerializeAsString();
  return path;
}

// A user's photos written and read through the client API at one
// datacenter of `config`, remembering which commits were acknowledged.
class PhotoAlbum {
 public:
  PhotoAlbum(const server::ClusterConfig& config, const std::string& local, int64_t user)
      : user_(user) {
    DatabaseOptions o;
    o.replicas = server::ReplicasOf(config);
    o.local = local;
    o.schema = photoapp::Schema();
    o.queue_sweep_interval = absl::ZeroDuration();
    auto db = Database::Open(o);
    EXPECT_TRUE(db.ok()) << db.status();
    if (db.ok()) db_ = std::move(*db);
  }
  absl::Status Add(int32_t id) {
    absl::StatusOr<CommitInfo> r =
        db_->Run<photoapp::User>(photoapp::User::Key{user_}, [&](Transaction& t) {
          photoapp::Photo p;
          p.set_user_id(user_);
          p.set_photo_id(id);
          p.set_time(id);
          p.set_full_url(StrCat("u", id));
          return t.Put(p);
        });
    if (r.ok()) acked_.push_back(id);
    return r.status();
  }
  // The photo ids a current read finds.
  absl::StatusOr<std::set<int32_t>> Read() {
    std::set<int32_t> seen;
    absl::StatusOr<CommitInfo> read =
        db_->Run<photoapp::User>(photoapp::User::Key{user_}, [&](Transaction& t) {
          auto photos = t.Query<photoapp::Photo>({user_});
          if (!photos.ok()) return photos.status();
          for (const auto& p : *photos) seen.insert(p.photo_id());
          return absl::OkStatus();
        });
    if (!read.ok()) return read.status();
    return seen;
  }
  const std::vector<int32_t>& acked() const { return acked_; }

 private:
  const int64_t user_;
  std::unique_ptr<Database> db_;
  std::vector<int32_t> acked_;
};

TEST(MegastoredClusterTest, TheEmbeddedDefaultServesTheGatewayAndWritesItsConfig) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=3", "--data=" + dir.path() + "/data",
                            "--schema=" + schema, "--gateway=127.0.0.1:0", "--http=127.0.0.1:0",
                            "--no-sync", "--log-level=warn"}));
  const std::string out = UntilReady(server);
  ASSERT_THAT(out, HasSubstr("megastored: ready")) << out;
  EXPECT_THAT(out, HasSubstr("WAN A-C: 30 ms one way"));
  // TLS is on by default, with throwaway certificates in DATA/tls; the
  // written config names them for tools.
  EXPECT_THAT(out, HasSubstr("TLS on, with throwaway certificates in"));
  const std::string data = dir.path() + "/data";
  const tls::TlsFiles admin = testing::LocalAdminTls(data);
  auto Http = [&](int port, const std::string& method, const std::string& path,
                  const std::string& body = "") {
    return testing::Https(port, admin, method, path, body);
  };
  const size_t at = out.find("gateway at https://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << out;
  const int port =
      std::atoi(out.c_str() + at + std::string("gateway at https://127.0.0.1:").size());
  EXPECT_THAT(testing::Http(port, "POST", "/v1/get", R"({"table": "User", "key": [4]})"),
              HasSubstr("speaks HTTPS"));

  const std::string put = Http(
      port, "POST", "/v1/commit",
      R"({"rootTable": "User", "rootKey": ["4"], "mutations": [{"table": "User", "put": {"user_id": "4", "name": "Ada"}}]})");
  EXPECT_THAT(put, HasSubstr("200 OK"));
  const std::string got = Http(port, "POST", "/v1/get", R"({"table": "User", "key": [4]})");
  EXPECT_THAT(got, HasSubstr("\"name\":\"Ada\""));

  testing::Result check =
      testing::RunCommand(StrCat(MSADMIN, " index check --config=", dir.path(),
                                 "/data/cluster.textproto --local=B --schema=", schema, " User:4"));
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_THAT(check.out, HasSubstr("1 entities"));

  // Status pages.
  const size_t st = out.find("status at https://127.0.0.1:");
  ASSERT_NE(st, std::string::npos) << out;
  const int http = std::atoi(out.c_str() + st + std::string("status at https://127.0.0.1:").size());
  EXPECT_THAT(Http(http, "GET", "/status"), HasSubstr("<td>serving"));
  const std::string metrics = Http(http, "GET", "/metrics");
  EXPECT_THAT(metrics, HasSubstr("megastore_coordinator_serving{datacenter=\"C\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("megastore_client_commits_total{outcome=\"committed\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("megastore_client_commit_seconds_count 1"));
  EXPECT_THAT(metrics,
              HasSubstr("megastore_client_current_read_position_seconds_bucket{le=\"+Inf\"} "));
  const std::string page = Http(http, "GET", "/status");
  EXPECT_THAT(page, HasSubstr("hottest entity groups by commits"));
  EXPECT_THAT(page, HasSubstr("Recent warnings and errors"));
  EXPECT_THAT(page, HasSubstr("(principal megastore-local): expires"));
  EXPECT_THAT(metrics, HasSubstr("megastore_tls_certificate_expiry_timestamp_seconds{path="));
  // Without a certificate of the cluster's CA, nothing answers: not the
  // status pages, not RPC.
  tls::TlsFiles stranger = admin;
  stranger.cert = stranger.key = "";
  EXPECT_EQ(testing::Https(http, stranger, "GET", "/status"), "");
  const std::string other = dir.path() + "/other-ca";
  ASSERT_EQ(testing::RunCommand(StrCat(MSADMIN, " certs init --dir=", other)).exit_code, 0);
  ASSERT_EQ(
      testing::RunCommand(StrCat(MSADMIN, " certs issue --dir=", other, " admin --out=", other))
          .exit_code,
      0);
  testing::Result intruder = testing::RunCommand(StrCat(
      MSADMIN, " --tls-ca=", other, "/ca.crt --tls-cert=", other, "/admin.crt --tls-key=", other,
      "/admin.key cluster status --config=", dir.path(), "/data/cluster.textproto"));
  EXPECT_THAT(intruder.out, HasSubstr("TLS handshake")) << intruder.out;
  EXPECT_THAT(intruder.out, Not(HasSubstr("serving"))) << intruder.out;

  // The example application against it (what ./ms demo runs).
  testing::Result demo = testing::RunCommand(
      StrCat(PHOTOAPP_DEMO, " --config=", dir.path(), "/data/cluster.textproto"));
  EXPECT_EQ(demo.exit_code, 0) << demo.out;
  EXPECT_THAT(demo.out, HasSubstr("stored the shared photo as his photo 101"));
  EXPECT_THAT(demo.out, HasSubstr("0 problems"));

  // The servers' side of it: log entries, measured round trips (the
  // emulated A-C link is 30 ms each way), coordinators, in well-formed
  // Prometheus text.
  std::string after = Http(http, "GET", "/metrics");
  after = after.substr(after.find("\r\n\r\n") + 4);
  EXPECT_EQ(PrometheusProblems(after), "");
  EXPECT_GT(MetricValue(after, "megastore_log_entries_total{datacenter=\"B\"}"), 5);
  EXPECT_GT(MetricValue(after, "megastore_log_bytes_total{datacenter=\"C\"}"), 1000);
  EXPECT_GE(MetricValue(after, "megastore_datacenter_rtt_seconds{from=\"A\",to=\"C\"}"), 0.059);
  // (A first probe's round trip includes its connection's TLS handshake,
  // which a loaded machine can stretch: compared, not bounded.)
  EXPECT_LT(MetricValue(after, "megastore_datacenter_rtt_seconds{from=\"A\",to=\"B\"}"),
            MetricValue(after, "megastore_datacenter_rtt_seconds{from=\"A\",to=\"C\"}"));
  EXPECT_GT(
      MetricValue(after, "megastore_coordinator_checks_total{datacenter=\"A\",answer=\"valid\"}"),
      0);
  EXPECT_GT(MetricValue(after, "megastore_replication_paxos_seconds_count{datacenter=\"A\"}"), 0);
  const std::string page_after = Http(http, "GET", "/status");
  for (const char* section :
       {"Inter-datacenter round trips", "Replication server of A",
        "Hottest entity groups by writes", "Coordinator of C", "Cluster config", "one_way_ms: 30"})
    EXPECT_THAT(page_after, HasSubstr(section));

  ::kill(server.pid(), SIGTERM);
  const int status = server.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(MegastoredClusterTest, BadClusterFlagsAreOneLineErrors) {
  TestDir dir;
  const std::string bad = dir.path() + "/bad.textproto";
  std::ofstream(bad) << "datacenters { name: \"A\" type: \"huge\" address: \"127.0.0.1:1\" }\n";
  testing::Result r = testing::RunCommand(
      StrCat(MEGASTORED, " --config=", bad, " --datacenter=A --data=", dir.path()));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("type \"huge\" is not full, witness or read-only"));
  std::ofstream(bad) << "datacenters { name: \"A\" address: \"127.0.0.1:1\" \n";
  r = testing::RunCommand(
      StrCat(MEGASTORED, " --config=", bad, " --datacenter=A --data=", dir.path()));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("bad.textproto:2:")) << "the position of the syntax error";
  r = testing::RunCommand(
      StrCat(MEGASTORED, " --local=3 --gateway=127.0.0.1:0 --data=", dir.path()));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--gateway needs --schema"));

  // Roles: unknown names, roles a replica type has not, roles the config
  // puts on different addresses, a role without an address.
  std::ofstream(bad) << "datacenters { name: \"A\" address: \"127.0.0.1:1\" roles { replication: "
                        "\"127.0.0.1:2\" } }\n"
                        "datacenters { name: \"W\" type: \"witness\" address: \"127.0.0.1:3\" }\n";
  const std::string dc_a =
      StrCat(MEGASTORED, " --config=", bad, " --datacenter=A --data=", dir.path());
  r = testing::RunCommand(dc_a + " --roles=tablet,paxos");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unknown role \"paxos\""));
  r = testing::RunCommand(dc_a + " --roles=tablet,replication");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("run one megastored per address"));
  r = testing::RunCommand(dc_a);
  EXPECT_EQ(r.exit_code, 2) << r.out
                            << "without --roles every role runs here, but the config splits them";
  r = testing::RunCommand(
      StrCat(MEGASTORED, " --config=", bad, " --datacenter=W --roles=coordinator"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("only full replicas have a coordinator"));
  r = testing::RunCommand(
      StrCat(MEGASTORED, " --config=", bad, " --datacenter=A --roles=tablet,lock,coordinator"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--data=DIR is required"));
  std::ofstream(bad) << "datacenters { name: \"A\" roles { tablet: \"127.0.0.1:1\" } }\n";
  r = testing::RunCommand(dc_a + " --roles=tablet");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(
      r.out, HasSubstr("datacenter A: address is missing (HOST:PORT where the lock role listens)"));
}

// A gateway in a witness datacenter (no data of its own) reads at the
// datacenter with data nearest to it by measured round trip, and a
// request's "nearest" is the same measurement.
TEST(MegastoredClusterTest, AGatewayInAWitnessDatacenterReadsAtTheNearestWithData) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  server::ClusterConfig config;
  for (const char* name : {"A", "B", "W"}) {
    server::DatacenterConfig* dc = config.add_datacenters();
    dc->set_name(name);
    dc->set_type(std::string(name) == "W" ? "witness" : "full");
    dc->set_address(StrCat("127.0.0.1:", testing::FreePort()));
  }
  // W is far from A (40 ms one way) and near B (2 ms).
  for (const auto& [a, b, ms] : {std::tuple{"A", "B", 10}, {"A", "W", 40}, {"B", "W", 2}}) {
    server::Link* l = config.add_links();
    l->set_a(a);
    l->set_b(b);
    l->set_one_way_ms(ms);
  }
  const std::string config_path = dir.path() + "/cluster.textproto";
  std::ofstream(config_path) << server::ToText(config);
  std::vector<std::unique_ptr<testing::Subprocess>> procs;
  std::string gateway_out;
  for (const char* dc : {"A", "B", "W"}) {
    auto p = std::make_unique<testing::Subprocess>();
    ASSERT_TRUE(p->Start({MEGASTORED, "--config=" + config_path, StrCat("--datacenter=", dc),
                          StrCat("--data=", dir.path(), "/", dc), "--schema=" + schema, "--no-sync",
                          "--log-level=warn"}));
    const std::string out = UntilReady(*p);
    ASSERT_THAT(out, HasSubstr("megastored: ready")) << dc << ": " << out;
    procs.push_back(std::move(p));
  }
  const int port = testing::FreePort();
  auto gw = std::make_unique<testing::Subprocess>();
  ASSERT_TRUE(
      gw->Start({MEGASTORED, "--config=" + config_path, "--datacenter=W", "--roles=gateway",
                 StrCat("--gateway=127.0.0.1:", port), "--schema=" + schema, "--log-level=warn"}));
  gateway_out = UntilReady(*gw);
  ASSERT_THAT(gateway_out, HasSubstr("megastored: ready")) << gateway_out;
  EXPECT_THAT(gateway_out, HasSubstr("the gateway's datacenter W is a witness; it reads at B "
                                     "(the nearest by round trip)"))
      << gateway_out;
  std::string put;
  for (int i = 0; i < 50; ++i) {  // until every coordinator holds its locks
    put = testing::Http(port, "POST", "/v1/commit", R"({"rootTable": "User", "rootKey": ["5"],
        "mutations": [{"table": "User", "put": {"user_id": "5", "name": "Wes"}}]})");
    if (put.find(R"("wrote":true)") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_THAT(put, HasSubstr(R"("wrote":true)")) << put;
  for (const char* replica : {"", "local", "nearest"}) {
    const std::string got =
        testing::Http(port, "POST", "/v1/get",
                      StrCat(R"({"table": "User", "key": ["5"], "replica": ")", replica, "\"}"));
    EXPECT_THAT(got, HasSubstr("\"Wes\"")) << replica << ": " << got;
    EXPECT_THAT(got, HasSubstr(R"("replica":"B")")) << replica << ": " << got;
  }
  const std::string at_a =
      testing::Http(port, "POST", "/v1/get", R"({"table": "User", "key": ["5"], "replica": "A"})");
  EXPECT_THAT(at_a, HasSubstr(R"("replica":"A")")) << at_a;
  const std::string at_w =
      testing::Http(port, "POST", "/v1/get", R"({"table": "User", "key": ["5"], "replica": "W"})");
  EXPECT_THAT(at_w, HasSubstr("W is a witness")) << at_w;
}

// megastored --schema records the schema; a later start with a schema the
// recorded one cannot become (the data written under it would not read
// back) is refused, as msadmin schema apply refuses it.
TEST(MegastoredClusterTest, AStartWithAnIncompatibleSchemaIsRefused) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  const std::string data = "--data=" + dir.path() + "/data";
  {
    testing::Subprocess server;
    ASSERT_TRUE(server.Start(
        {MEGASTORED, "--local=1", data, "--schema=" + schema, "--no-sync", "--log-level=warn"}));
    ASSERT_THAT(UntilReady(server), HasSubstr("megastored: ready"));
    ::kill(server.pid(), SIGTERM);
    server.Wait();
  }
  schema::CompileResult changed = schema::CompileSchema(
      "CREATE SCHEMA PhotoApp\nCREATE TABLE User {\n  required int64 user_id;\n  required int64 "
      "name;\n}"
      " PRIMARY KEY(user_id), ENTITY GROUP ROOT;\n");
  ASSERT_TRUE(changed.ok());
  const std::string changed_path = dir.path() + "/changed.schema.pb";
  std::ofstream(changed_path, std::ios::binary) << changed.descriptor.SerializeAsString();
  testing::Result refused = testing::RunCommand(StrCat(
      MEGASTORED, " --local=1 ", data, " --schema=", changed_path, " --no-sync --log-level=warn"));
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("PhotoApp differs incompatibly from the schema recorded"));
  EXPECT_THAT(refused.out, HasSubstr("name")) << "the problem names the column";
  // The recorded schema again: accepted.
  testing::Subprocess again;
  ASSERT_TRUE(again.Start(
      {MEGASTORED, "--local=1", data, "--schema=" + schema, "--no-sync", "--log-level=warn"}));
  EXPECT_THAT(UntilReady(again), HasSubstr("megastored: ready"));
  ::kill(again.pid(), SIGTERM);
  again.Wait();
}

// Three datacenters on loopback as processes: A and B one process each, C
// split by role into three (tablet server and lock service; coordinator;
// replication server, which reaches C's Bigtable over RPC). The example app
// runs against it and reads at C. Then every process of C is killed with
// SIGKILL while A commits; A and B go on committing; C restarts on its data;
// the example app runs again from B, reading at C; every acknowledged write
// is there, read at C.
TEST(MegastoredClusterTest, ThreeDatacentersAsProcessesSurviveOneKilledAndItCatchesUp) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  server::ClusterConfig config;
  for (const char* name : {"A", "B", "C"}) {
    server::DatacenterConfig* dc = config.add_datacenters();
    dc->set_name(name);
    dc->set_type("full");
    dc->set_address(StrCat("127.0.0.1:", testing::FreePort()));
  }
  // A's process runs its JSON gateway too (the config gives it an
  // address); B's is a process of its own (--roles=gateway).
  const int gateway_a = testing::FreePort(), gateway_b = testing::FreePort();
  config.mutable_datacenters(0)->mutable_roles()->set_gateway(StrCat("127.0.0.1:", gateway_a));
  server::RoleAddresses* c_roles = config.mutable_datacenters(2)->mutable_roles();
  c_roles->set_coordinator(StrCat("127.0.0.1:", testing::FreePort()));
  c_roles->set_replication(StrCat("127.0.0.1:", testing::FreePort()));
  // Mutual TLS between every process, from the config: a certificate per
  // datacenter, one for the tools and the app (paths relative to the config).
  ASSERT_TRUE(tls::CreateCa(dir.path() + "/certs", "test CA").ok());
  for (const char* name : {"dc-A", "dc-B", "dc-C", "app"}) {
    tls::CertificateRequest r;
    r.common_name = name;
    if (std::string(name) != "app") r.hosts = {"127.0.0.1"};
    ASSERT_TRUE(tls::IssueCertificate(dir.path() + "/certs", dir.path() + "/certs", name, r).ok());
  }
  config.mutable_tls()->set_ca("certs/ca.crt");
  for (server::DatacenterConfig& dc : *config.mutable_datacenters()) {
    dc.mutable_tls()->set_cert(StrCat("certs/dc-", dc.name(), ".crt"));
    dc.mutable_tls()->set_key(StrCat("certs/dc-", dc.name(), ".key"));
  }
  config.mutable_client_tls()->set_cert("certs/app.crt");
  config.mutable_client_tls()->set_key("certs/app.key");
  const std::string config_path = dir.path() + "/cluster.textproto";
  std::ofstream(config_path) << server::ToText(config);
  ASSERT_TRUE(server::LoadClusterConfigForClient(config_path)
                  .ok());  // this process's RPC: the app's certificate
  ASSERT_TRUE(tls::DefaultTls().enabled());
  // Process name ("A", "C/replication", ...) -> its process.
  std::map<std::string, std::unique_ptr<testing::Subprocess>> procs;
  auto start = [&](const std::string& name, const std::string& roles) {
    const std::string dc = name.substr(0, 1);
    std::vector<std::string> args = {MEGASTORED, "--config=" + config_path, "--datacenter=" + dc,
                                     "--no-sync", "--log-level=warn"};
    if (roles.empty() || roles.find("tablet") != std::string::npos) {
      args.push_back("--data=" + dir.path() + "/" + dc);
      args.push_back("--schema=" + schema);
    }
    if (roles == "gateway") {
      args.push_back("--schema=" + schema);
      args.push_back(StrCat("--gateway=127.0.0.1:", gateway_b));
    }
    if (!roles.empty()) args.push_back("--roles=" + roles);
    auto p = std::make_unique<testing::Subprocess>();
    ASSERT_TRUE(p->Start(args));
    const std::string out = UntilReady(*p);
    ASSERT_THAT(out, HasSubstr("megastored: ready")) << name << ": " << out;
    procs[name] = std::move(p);
  };
  auto start_c = [&] {
    start("C/tablet,lock", "tablet,lock");
    start("C/coordinator", "coordinator");
    start("C/replication", "replication");
  };
  start("A", "");
  start("B", "");
  start("B/gateway", "gateway");
  start_c();

  // Healthy once every coordinator holds its locks.
  testing::Result status;
  for (int i = 0; i < 100; ++i) {
    status = testing::RunCommand(StrCat(MSADMIN, " cluster status --config=", config_path));
    if (status.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr("3 processes")) << status.out;
  EXPECT_THAT(status.out, HasSubstr("tablet,lock")) << status.out;

  // The gateways: a commit through A's, read back through B's at B and,
  // asked for, at C's replica.
  const tls::TlsFiles app_tls{dir.path() + "/certs/ca.crt", dir.path() + "/certs/app.crt",
                              dir.path() + "/certs/app.key"};
  const std::string put = testing::Https(gateway_a, app_tls, "POST", "/v1/commit",
                                         R"({"rootTable": "User", "rootKey": ["900"],
      "mutations": [{"table": "User", "put": {"user_id": "900", "name": "Gia"}}]})");
  EXPECT_THAT(put, HasSubstr(R"("wrote":true)")) << put;
  for (const char* replica : {"B", "C"}) {
    const std::string got =
        testing::Https(gateway_b, app_tls, "POST", "/v1/get",
                       StrCat(R"({"table": "User", "key": ["900"], "replica": ")", replica, "\"}"));
    EXPECT_THAT(got, HasSubstr("\"Gia\"")) << got;
    EXPECT_THAT(got, HasSubstr(StrCat(R"("replica":")", replica, "\""))) << got;
  }
  EXPECT_THAT(testing::Https(gateway_b, app_tls, "GET", "/readyz"), HasSubstr("200 OK"));

  // The example app at A; it reads at C (the last datacenter).
  testing::Result demo =
      testing::RunCommand(StrCat(PHOTOAPP_DEMO, " --config=", config_path, " --local=A"));
  ASSERT_EQ(demo.exit_code, 0) << demo.out;
  EXPECT_THAT(demo.out, HasSubstr("4. Reading at datacenter C")) << demo.out;

  PhotoAlbum album(config, "A", 100);
  for (int32_t id = 1; id <= 10; ++id)
    album.Add(id).IgnoreError();  // acked() remembers which committed
  ASSERT_EQ(album.acked().size(), 10u);
  for (const char* name : {"C/tablet,lock", "C/coordinator", "C/replication"})
    procs[name]->Kill(SIGKILL);
  for (int32_t id = 11; id <= 30; ++id)
    album.Add(id).IgnoreError();  // acked() remembers which committed
  EXPECT_GE(album.acked().size(), 25u) << "A and B are a majority: commits go on without C";
  start_c();
  for (int32_t id = 31; id <= 35; ++id)
    album.Add(id).IgnoreError();  // acked() remembers which committed

  // The example app again, from B: it reads at C too.
  demo = testing::RunCommand(StrCat(PHOTOAPP_DEMO, " --config=", config_path, " --local=B"));
  ASSERT_EQ(demo.exit_code, 0) << demo.out;
  EXPECT_THAT(demo.out, HasSubstr("4. Reading at datacenter C")) << demo.out;

  // Read everything at C (a current read catches C up first).
  PhotoAlbum at_c(config, "C", 100);
  absl::StatusOr<std::set<int32_t>> seen = at_c.Read();
  ASSERT_TRUE(seen.ok()) << seen.status();
  for (int32_t id : album.acked())
    EXPECT_TRUE(seen->count(id)) << "acknowledged photo " << id << " is missing at C";
  for (auto& [name, p] : procs) p->Kill(SIGTERM);
}

// Datacenter A's Bigtable is a cell of its own processes (a lock service,
// a master, two tablet servers); B and C are single processes. The example
// app runs at A; one of A's tablet servers is SIGKILLed and A keeps
// committing and reading locally through the cell's client library; every
// acknowledged write is read back at A.
TEST(MegastoredClusterTest, ADatacenterWhoseBigtableIsACellLosesATabletServer) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  const std::string lock = StrCat("127.0.0.1:", testing::FreePort());
  std::map<std::string, std::unique_ptr<testing::Subprocess>> procs;
  auto run = [&](const std::string& name, std::vector<std::string> args, const std::string& ready) {
    args.insert(args.begin(), MEGASTORED);
    args.push_back("--log-level=warn");
    auto p = std::make_unique<testing::Subprocess>();
    ASSERT_TRUE(p->Start(args));
    std::string out;
    for (int i = 0; i < 40 && out.find(ready) == std::string::npos; ++i) {
      const std::string line = p->ReadLine(30000);
      if (line.empty()) break;
      out += line + "\n";
    }
    ASSERT_THAT(out, HasSubstr(ready)) << name;
    procs[name] = std::move(p);
  };
  const std::string cell_flags = "--cell=a";
  run("lock", {"--roles=lock", "--listen=" + lock, "--data=" + dir.path() + "/a-lock"},
      "lock service listening");
  run("master",
      {"--roles=master", StrCat("--listen=127.0.0.1:", testing::FreePort()),
       "--data=" + dir.path() + "/a-root", cell_flags, "--lock-service=" + lock,
       "--session-ttl=2s"},
      "campaigning");
  std::vector<std::string> tablet_servers;  // addresses; also their names in `procs`
  for (int i = 0; i < 2; ++i) {
    const std::string address = StrCat("127.0.0.1:", testing::FreePort());
    run(address,
        {"--listen=" + address, "--data=" + dir.path() + "/a-root", cell_flags,
         "--lock-service=" + lock, "--session-ttl=2s", "--no-sync"},
        "registered in cell a");
    tablet_servers.push_back(address);
  }
  server::ClusterConfig config;
  for (const char* name : {"A", "B", "C"}) {
    server::DatacenterConfig* dc = config.add_datacenters();
    dc->set_name(name);
    dc->set_type("full");
    dc->set_address(StrCat("127.0.0.1:", testing::FreePort()));
  }
  config.mutable_datacenters(0)->mutable_bigtable_cell()->set_name("a");
  config.mutable_datacenters(0)->mutable_bigtable_cell()->set_lock_service(lock);
  const std::string config_path = dir.path() + "/cluster.textproto";
  std::ofstream(config_path) << server::ToText(config);
  for (const char* dc : {"A", "B", "C"}) {
    std::vector<std::string> args = {"--config=" + config_path, StrCat("--datacenter=", dc),
                                     "--no-sync", "--schema=" + schema};
    // A's tables are in the cell; its own directory holds only the lock
    // role's state.
    args.push_back(StrCat("--data=", dir.path(), "/", dc));
    run(dc, args, "megastored: ready");
  }
  testing::Result tablets =
      testing::RunCommand(StrCat(MSADMIN, " tablet ls --lock-service=", lock, " --cell=a"));
  EXPECT_THAT(tablets.out, HasSubstr("PhotoApp"))
      << "the schema's tables were created in the cell: " << tablets.out;
  testing::Result status =
      testing::RunCommand(StrCat(MSADMIN, " cluster status --config=", config_path));
  for (int i = 0; i < 100 && status.exit_code != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    status = testing::RunCommand(StrCat(MSADMIN, " cluster status --config=", config_path));
  }
  EXPECT_EQ(status.exit_code, 0) << status.out;

  testing::Result demo =
      testing::RunCommand(StrCat(PHOTOAPP_DEMO, " --config=", config_path, " --local=A"));
  ASSERT_EQ(demo.exit_code, 0) << demo.out;

  PhotoAlbum album(config, "A", 200);
  for (int32_t id = 1; id <= 10; ++id)
    album.Add(id).IgnoreError();  // acked() remembers which committed
  ASSERT_EQ(album.acked().size(), 10u);
  // The server of the tablet holding PhotoApp's rows goes.
  tablets = testing::RunCommand(
      StrCat(MSADMIN, " tablet ls --json --lock-service=", lock, " --cell=a --table=PhotoApp"));
  std::string victim;
  for (const std::string& ts : tablet_servers)
    if (tablets.out.find(StrCat("\"server\":\"", ts, "\"")) != std::string::npos) victim = ts;
  ASSERT_FALSE(victim.empty()) << tablets.out;
  procs[victim]->Kill(SIGKILL);
  for (int32_t id = 11; id <= 30; ++id)
    album.Add(id).IgnoreError();  // acked() remembers which committed
  EXPECT_GE(album.acked().size(), 25u) << "commits go on: B and C accept, A's cell recovers";
  // A's cell serves PhotoApp again, elsewhere.
  bool moved = false;
  for (int i = 0; i < 200 && !moved; ++i) {
    tablets = testing::RunCommand(
        StrCat(MSADMIN, " tablet ls --json --lock-service=", lock, " --cell=a --table=PhotoApp"));
    moved = tablets.exit_code == 0 && tablets.out.find(victim) == std::string::npos &&
            tablets.out.find("\"serving\":true") != std::string::npos;
    if (!moved) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(moved) << tablets.out
                     << testing::RunCommand(
                            StrCat(MSADMIN, " cell status --lock-service=", lock, " --cell=a"))
                            .out;

  // A current read at A: through A's cell, whatever moved.
  absl::StatusOr<std::set<int32_t>> seen = album.Read();
  ASSERT_TRUE(seen.ok()) << seen.status();
  for (int32_t id : album.acked())
    EXPECT_TRUE(seen->count(id)) << "acknowledged photo " << id << " is missing at A";
  testing::Result bt =
      testing::RunCommand(StrCat(MSADMIN, " bt --config=", config_path, " --datacenter=A ls"));
  EXPECT_THAT(bt.out, HasSubstr("PhotoApp")) << bt.out;
  // The cell's master guards Megastore's tables as tablet servers do.
  testing::Result drop = testing::RunCommand(
      StrCat(MSADMIN, " bt --config=", config_path, " --datacenter=A deletetable PhotoApp"));
  EXPECT_EQ(drop.exit_code, 1) << drop.out;
  EXPECT_THAT(drop.out, HasSubstr("is replicated by Megastore")) << drop.out;
  testing::Result raw = testing::RunCommand(
      StrCat(MSADMIN, " bt --config=", config_path, " --datacenter=A set PhotoApp r e:x=1"));
  EXPECT_THAT(raw.out, HasSubstr("is replicated by Megastore")) << raw.out;
  // The datacenters first, then A's cell.
  for (const char* dc : {"A", "B", "C"}) procs[dc]->Kill(SIGTERM);
  for (auto& [name, p] : procs) p->Kill(SIGTERM);
}

// Who may do what: a policy set with msadmin applies to every kind of
// caller at once, without a restart, and every refusal names the caller,
// the action and the object.
TEST(MegastoredClusterTest, AnAccessPolicyAppliesLiveToEveryKindOfCaller) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  const std::string data = dir.path() + "/data";
  // A bearer token for the gateway, standing for "app".
  testing::Result made =
      testing::RunCommand(StrCat(MSADMIN, " acl token app --file=", dir.path(), "/tokens"));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  std::string token;  // the one line of 64 hex digits (the rest is stderr's explanation)
  for (absl::string_view line : absl::StrSplit(made.out, '\n'))
    if (line.size() == 64 && line.find_first_not_of("0123456789abcdef") == absl::string_view::npos)
      token = std::string(line);
  ASSERT_EQ(token.size(), 64u) << made.out;
  testing::Result made_json = testing::RunCommand(
      StrCat(MSADMIN, " acl token reporter -o json --file=", dir.path(), "/tokens"));
  EXPECT_THAT(made_json.out, ::testing::ContainsRegex(StrCat(
                                 R"(\{"token":"[0-9a-f]{64}","principal":"reporter","file":")",
                                 dir.path(), "/tokens\"\\}\n")))
      << made_json.out;
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=3", "--data=" + data, "--schema=" + schema,
                            "--http=127.0.0.1:0", "--gateway=127.0.0.1:0",
                            "--gateway-tokens-file=" + dir.path() + "/tokens", "--no-sync",
                            "--log-level=warn"}));
  const std::string out = UntilReady(server);
  ASSERT_THAT(out, HasSubstr("megastored: ready")) << out;
  const size_t gw = out.find("gateway at https://127.0.0.1:");
  ASSERT_NE(gw, std::string::npos) << out;
  const int gateway =
      std::atoi(out.c_str() + gw + std::string("gateway at https://127.0.0.1:").size());
  const size_t st = out.find("status at https://127.0.0.1:");
  ASSERT_NE(st, std::string::npos) << out;
  const int http = std::atoi(out.c_str() + st + std::string("status at https://127.0.0.1:").size());
  const std::string config_flag = StrCat(" --config=", data, "/cluster.textproto");
  absl::StatusOr<server::ClusterConfig> config =
      server::LoadClusterConfig(data + "/cluster.textproto");
  ASSERT_TRUE(config.ok()) << config.status();

  // An application server with its own certificate of the cluster's CA.
  ASSERT_EQ(testing::RunCommand(
                StrCat(MSADMIN, " certs issue --dir=", data, "/tls app --out=", dir.path()))
                .exit_code,
            0);
  const tls::TlsFiles app{data + "/tls/ca.crt", dir.path() + "/app.crt", dir.path() + "/app.key"};
  tls::SetDefaultTls(app);
  PhotoAlbum album(*config, "A", 7);
  ASSERT_TRUE(album.Add(1).ok()) << "no policy yet: every certificate of the CA may do everything";

  std::ofstream(dir.path() + "/policy.textproto")
      << "members { principal: \"megastore-local\" roles: \"replica\" }\n"
         "members { principal: \"admin\" roles: \"admin\" }\n"
         "members { principal: \"app\" grants { object: \"PhotoApp\" "
         "read: true } }\n";
  testing::Result set = testing::RunCommand(
      StrCat(MSADMIN, " acl set", config_flag, " ", dir.path(), "/policy.textproto"));
  ASSERT_EQ(set.exit_code, 0) << set.out;
  EXPECT_THAT(set.out, HasSubstr("C: policy version 1 installed"));

  // Reads are granted, writes are not.
  absl::StatusOr<std::set<int32_t>> seen = album.Read();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->count(1), 1u);
  absl::Status denied = album.Add(2);
  EXPECT_TRUE(absl::IsPermissionDenied(denied)) << denied;
  EXPECT_THAT(denied.message(), HasSubstr("\"app\" may not write \"PhotoApp\" (repl.Paxos)"));
  // The cluster's own methods and an operator's are refused too.
  rpc::ClientOptions co;
  co.server = config->datacenters(1).address();
  co.tls = app;
  rpc::RpcClient to_b(co);
  absl::StatusOr<std::string> lock = to_b.Call("lock.Acquire", "", absl::Seconds(5));
  EXPECT_TRUE(absl::IsPermissionDenied(lock.status())) << lock.status();
  EXPECT_THAT(lock.status().message(),
              HasSubstr("\"app\" may not call the replica method lock.Acquire"));
  absl::StatusOr<std::string> off = to_b.Call("dc.Replica", "", absl::Seconds(5));
  EXPECT_THAT(off.status().message(), HasSubstr("may not call the admin method dc.Replica"));
  EXPECT_TRUE(to_b.Call("dc.Status", "", absl::Seconds(5)).ok()) << "status is anyone's";
  // The admin's tools go on working; the refusals are counted.
  testing::Result status = testing::RunCommand(StrCat(MSADMIN, " cluster status", config_flag));
  EXPECT_EQ(status.exit_code, 0) << status.out;
  const std::string metrics = testing::Https(http, testing::LocalAdminTls(data), "GET", "/metrics");
  EXPECT_GE(
      MetricValue(metrics,
                  "megastore_access_refusals_total{datacenter=\"B\",method=\"lock.Acquire\"}"),
      1);
  EXPECT_GE(MetricValue(metrics, "megastore_access_policy_version{datacenter=\"A\"}"), 1);

  // The gateway: a bearer token acts as its principal; an unknown one is
  // 401; without one, the TLS certificate's principal (here the admin).
  const tls::TlsFiles admin_tls = testing::LocalAdminTls(data);
  const std::string bearer = "Authorization: Bearer " + token + "\r\n";
  const std::string get = R"({"table": "User", "key": [7]})";
  const std::string put =
      R"({"rootTable": "User", "rootKey": ["7"], "mutations": [{"table": "User", "put": {"user_id": "7", "name": "Ada"}}]})";
  EXPECT_THAT(testing::Https(gateway, admin_tls, "POST", "/v1/get", get, bearer),
              HasSubstr("200 OK"))
      << "reads are granted";
  const std::string forbidden =
      testing::Https(gateway, admin_tls, "POST", "/v1/commit", put, bearer);
  EXPECT_THAT(forbidden, HasSubstr(" 403 "));
  EXPECT_THAT(forbidden, HasSubstr("may not write"));
  EXPECT_THAT(forbidden, HasSubstr("(gateway commit)"));
  const std::string unknown =
      testing::Https(gateway, admin_tls, "POST", "/v1/get", get, "Authorization: Bearer nope\r\n");
  EXPECT_THAT(unknown, HasSubstr(" 401 "));
  EXPECT_THAT(unknown, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(testing::Https(gateway, admin_tls, "POST", "/v1/commit", put), HasSubstr("200 OK"));

  // A grant takes effect without a restart.
  testing::Result grant =
      testing::RunCommand(StrCat(MSADMIN, " acl grant", config_flag, " app --write=PhotoApp"));
  ASSERT_EQ(grant.exit_code, 0) << grant.out;
  EXPECT_TRUE(album.Add(3).ok());
  testing::Result show = testing::RunCommand(StrCat(MSADMIN, " acl show", config_flag));
  EXPECT_THAT(show.out, HasSubstr("A: version 2"));
  testing::Result show_json =
      testing::RunCommand(StrCat(MSADMIN, " acl show -o json", config_flag));
  EXPECT_THAT(show_json.out, HasSubstr(R"({"datacenters":[{"datacenter":"A","version":"2"},)"))
      << show_json.out;
  EXPECT_THAT(show_json.out, HasSubstr(R"("policy":{"version":"2")")) << show_json.out;
  // A policy that would lock the cluster out is refused before it is sent.
  testing::Result lockout =
      testing::RunCommand(StrCat(MSADMIN, " acl revoke", config_flag, " megastore-local"));
  EXPECT_EQ(lockout.exit_code, 2) << lockout.out;
  EXPECT_THAT(lockout.out, HasSubstr("names no replica"));
  tls::SetDefaultTls({});
  ::kill(server.pid(), SIGTERM);
  server.Wait();
}

// An operator's session with msadmin against the embedded default: apply
// a schema, check the cluster, run the example app, look at a group's log,
// switch a coordinator off and on; refusals say what to do.
TEST(MegastoredClusterTest, MsadminOperatesTheEmbeddedCluster) {
  TestDir dir;
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=3", "--data=" + dir.path() + "/data", "--no-sync",
                            "--log-level=warn"}));
  ASSERT_THAT(UntilReady(server), HasSubstr("megastored: ready"));
  const std::string msadmin = StrCat(MSADMIN, " ");
  const std::string config = StrCat(" --config=", dir.path(), "/data/cluster.textproto ");
  auto run = [&](const std::string& args) { return testing::RunCommand(msadmin + args); };

  testing::Result status = run("cluster status" + config);
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr("tablet,lock,coordinator,replication  serving (epoch"));
  testing::Result applied = run("schema apply" + config + MS_SOURCE_DIR "/examples/photoapp.msdl");
  EXPECT_EQ(applied.exit_code, 0) << applied.out;
  EXPECT_THAT(applied.out, HasSubstr("schema PhotoApp applied to 3 datacenter(s)"));
  EXPECT_THAT(run("schema show" + config).out, HasSubstr("CREATE TABLE Photo"));
  testing::Result tables = run("bt" + config + "--datacenter=B ls");
  EXPECT_EQ(tables.exit_code, 0) << tables.out;
  EXPECT_THAT(tables.out, HasSubstr("PhotoApp.PhotosByTag"));
  EXPECT_EQ(run("bt" + config + "--datacenter=Q ls").exit_code, 2);

  // An incompatible change is refused, naming the problem.
  const std::string changed = dir.path() + "/changed.msdl";
  std::ofstream(changed)
      << "CREATE SCHEMA PhotoApp\nCREATE TABLE User {\n  required int64 user_id;\n"
         "  required int64 name;\n} PRIMARY KEY(user_id), ENTITY GROUP ROOT;\n";
  testing::Result refused = run("schema apply" + config + changed);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("incompatible"));

  testing::Result demo = testing::RunCommand(StrCat(PHOTOAPP_DEMO, config));
  ASSERT_EQ(demo.exit_code, 0) << demo.out;
  testing::Result log = run("group log" + config + "PhotoApp User:2");
  EXPECT_EQ(log.exit_code, 0) << log.out;
  EXPECT_THAT(log.out, HasSubstr("A: applied up to position"));
  EXPECT_THAT(log.out, HasSubstr("A,B,C"));
  testing::Result json_log = run("group log --json" + config + "PhotoApp User:2 --last=2");
  EXPECT_EQ(json_log.exit_code, 0) << json_log.out;
  EXPECT_THAT(json_log.out, HasSubstr("\"knownAt\":[\"A\",\"B\",\"C\"]"));
  // Raw Bigtable rows of the entity table, decoded with the schema.
  testing::Result decoded =
      run("bt" + config + "--datacenter=A --schema=" + WriteSchema(dir.path()) +
          " lookup PhotoApp hex:8000000000000002");
  EXPECT_EQ(decoded.exit_code, 0) << decoded.out;
  EXPECT_THAT(decoded.out, HasSubstr("\\x80\\x00\\x00\\x00\\x00\\x00\\x00\\x02\n"));
  EXPECT_THAT(decoded.out, HasSubstr("  = User {")) << decoded.out;
  EXPECT_THAT(decoded.out, HasSubstr("\"name\":\"Bob\"")) << decoded.out;
  // Text shows the commit time as a date.
  EXPECT_THAT(log.out, HasSubstr("time (UTC)"));
  EXPECT_THAT(log.out,
              ::testing::ContainsRegex("20[0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9:]+\\.[0-9]{6}"));
  // The config and the output format from an rc file (or the environment):
  // no --config, -o json.
  {
    const std::string rc = dir.path() + "/rc";
    std::ofstream(rc) << "# this cluster\nconfig = data/cluster.textproto\noutput = json\n";
    testing::Result from_rc =
        testing::RunCommand(StrCat("env -u MEGASTORE_CONFIG MEGASTORE_RC=", rc, " ", msadmin,
                                   "group log PhotoApp User:2 --last=1"));
    EXPECT_EQ(from_rc.exit_code, 0) << from_rc.out;
    EXPECT_THAT(from_rc.out, HasSubstr("\"knownAt\""));
    testing::Result text = testing::RunCommand(
        StrCat("MEGASTORE_RC=", rc, " ", msadmin, "group log -o text PhotoApp User:2 --last=1"));
    EXPECT_THAT(text.out, HasSubstr("time (UTC)")) << "a flag wins over the file";
    std::ofstream(rc) << "colour = blue\n";
    testing::Result bad =
        testing::RunCommand(StrCat("MEGASTORE_RC=", rc, " ", msadmin, "group log PhotoApp User:2"));
    EXPECT_EQ(bad.exit_code, 2) << bad.out;
    EXPECT_THAT(bad.out, HasSubstr(rc + ":1:"));
  }

  EXPECT_EQ(run("coordinator disable" + config + "C").exit_code, 0);
  testing::Result disabled = run("cluster status --json" + config);
  EXPECT_THAT(disabled.out, HasSubstr("\"coordinatorDisabled\":true"));
  testing::Result enabled = run("coordinator enable --json" + config + "C");
  EXPECT_EQ(enabled.exit_code, 0) << enabled.out;
  EXPECT_EQ(enabled.out, "{\"datacenter\":\"C\",\"switch\":\"coordinator\",\"enabled\":true}\n");

  // A replica out for maintenance: A and B still commit; taking B too is refused.
  testing::Result out = run("replica disable" + config + "C");
  EXPECT_EQ(out.exit_code, 0) << out.out;
  EXPECT_THAT(run("cluster status" + config).out, HasSubstr("disabled"));
  testing::Result too_many = run("replica disable" + config + "B");
  EXPECT_EQ(too_many.exit_code, 1) << too_many.out;
  EXPECT_THAT(too_many.out, HasSubstr("fewer than a majority"));
  testing::Result during = testing::RunCommand(StrCat(PHOTOAPP_DEMO, config, " --local=A"));
  EXPECT_EQ(during.exit_code, 0) << "A and B are a majority without C: " << during.out;
  EXPECT_EQ(run("replica enable" + config + "C").exit_code, 0);
  testing::Result caught = run("group catchup" + config + "PhotoApp User:2 --datacenter=C");
  EXPECT_EQ(caught.exit_code, 0) << caught.out;
  EXPECT_THAT(caught.out, HasSubstr("C: applied up to position"));
  testing::Result caught_json =
      run("group catchup --json" + config + "PhotoApp User:2 --datacenter=C");
  EXPECT_THAT(caught_json.out, HasSubstr("{\"datacenter\":\"C\",\"applied\":\""))
      << caught_json.out;
  testing::Result after = run("group log" + config + "PhotoApp User:2");
  EXPECT_THAT(after.out, HasSubstr("C: applied up to position"));
  testing::Result healthy = run("group repair" + config + "PhotoApp User:2 --yes");
  EXPECT_EQ(healthy.exit_code, 0) << healthy.out;
  EXPECT_THAT(healthy.out, HasSubstr("nothing to repair")) << healthy.out;
  testing::Result healthy_json = run("group repair -o json" + config + "PhotoApp User:2");
  EXPECT_EQ(healthy_json.exit_code, 0) << healthy_json.out;
  EXPECT_THAT(healthy_json.out,
              ::testing::ContainsRegex("\\{\"top\":\"[0-9]+\",\"applied\":\"[0-9]+\","
                                       "\"keepThrough\":\"[0-9]+\",\"repaired\":"
                                       "false,\"replicas\":\\[\\],\"chosen\":\\[\\],"
                                       "\"savedEntries\":null\\}\n"))
      << healthy_json.out;
  testing::Result nowhere = run("coordinator disable" + config + "Z");
  EXPECT_EQ(nowhere.exit_code, 2) << nowhere.out;
  EXPECT_THAT(nowhere.out, HasSubstr("no datacenter Z"));
  testing::Result no_config = run("cluster status --config=/nonexistent");
  EXPECT_EQ(no_config.exit_code, 2) << no_config.out;
  EXPECT_THAT(no_config.out, HasSubstr("cannot read cluster config /nonexistent"));
}

// Every byte of every file under `dir`.
std::string AllFiles(const std::string& dir) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    all += std::string(std::istreambuf_iterator<char>(in), {});
  }
  return all;
}

// An ENCRYPTED schema on the embedded default: what the gateway writes is
// read back in the clear and found in no file of the data directory; the
// keys survive a restart; msadmin rotates them and crypto-shreds a group.
TEST(MegastoredClusterTest, AnEncryptedSchemaIsStoredSealedAndCanBeShredded) {
  TestDir dir;
  std::ifstream ddl(MS_SOURCE_DIR "/tests/schema/good/encrypted.msdl");
  schema::CompileResult compiled =
      schema::CompileSchema(std::string(std::istreambuf_iterator<char>(ddl), {}));
  ASSERT_TRUE(compiled.ok());
  const std::string schema = dir.path() + "/Clinic.schema.pb";
  std::ofstream(schema, std::ios::binary) << compiled.descriptor.SerializeAsString();
  const std::string data = dir.path() + "/data";
  const std::vector<std::string> args = {MEGASTORED,
                                         "--local=3",
                                         "--data=" + data,
                                         "--schema=" + schema,
                                         "--gateway=127.0.0.1:0",
                                         "--no-sync",
                                         "--log-level=warn"};
  auto start = [&](testing::Subprocess& server) {
    EXPECT_TRUE(server.Start(args));
    const std::string out = UntilReady(server);
    EXPECT_THAT(out, HasSubstr("megastored: ready"));
    const size_t at = out.find("gateway at https://127.0.0.1:");
    EXPECT_NE(at, std::string::npos) << out;
    return at == std::string::npos
               ? 0
               : std::atoi(out.c_str() + at + std::string("gateway at https://127.0.0.1:").size());
  };
  auto stop = [](testing::Subprocess& server) {
    ::kill(server.pid(), SIGTERM);
    server.Wait();
  };
  const tls::TlsFiles admin = testing::LocalAdminTls(data);
  const std::string config = StrCat(" --config=", data, "/cluster.textproto ");
  auto msadmin = [&](const std::string& args) {
    return testing::RunCommand(StrCat(MSADMIN, " ", args));
  };

  auto server = std::make_unique<testing::Subprocess>();
  int port = start(*server);
  auto Http = [&](const std::string& path, const std::string& body) {
    return testing::Https(port, admin, "POST", path, body);
  };
  const std::string put =
      Http("/v1/commit", R"({"rootTable": "Patient", "rootKey": ["7"], "mutations": [
      {"table": "Patient", "put": {"patient_id": "7", "name": "Okapi-Name-1187", "notes": "Okapi-Notes-5521"}},
      {"table": "Visit", "put": {"patient_id": "7", "visit_id": "1", "diagnosis": "Okapi-Flu-3390",
                                 "tags": ["Okapi-Tag-2209"]}}]})");
  ASSERT_THAT(put, HasSubstr("200 OK")) << put;
  EXPECT_THAT(Http("/v1/get", R"({"table": "Patient", "key": [7]})"),
              HasSubstr("Okapi-Notes-5521"));
  const std::string by_diagnosis = Http("/v1/query", R"({"rootTable": "Patient", "rootKey": ["7"],
      "index": "VisitsByDiagnosis", "values": ["7", "Okapi-Flu-3390"]})");
  EXPECT_THAT(by_diagnosis, HasSubstr("\"visit_id\":\"1\"")) << by_diagnosis;
  testing::Result keys = msadmin("keys status" + config);
  EXPECT_EQ(keys.exit_code, 0) << keys.out;
  EXPECT_THAT(keys.out, HasSubstr("/keys/C: key file")) << keys.out;
  EXPECT_THAT(keys.out, HasSubstr("key-encryption key 1 (of 1), 1 group keys, 0 destroyed"))
      << keys.out;
  testing::Result rotated = msadmin("keys rotate" + config + "--datacenter=B");
  EXPECT_EQ(rotated.exit_code, 0) << rotated.out;
  EXPECT_THAT(rotated.out, HasSubstr("B: now key-encryption key 2; 1 group keys re-wrapped"))
      << rotated.out;
  stop(*server);

  // Nothing of it in any file: tablets, commit logs, state, keys.
  const std::string files = AllFiles(data);
  for (const char* secret :
       {"Okapi-Name-1187", "Okapi-Notes-5521", "Okapi-Flu-3390", "Okapi-Tag-2209"})
    EXPECT_EQ(files.find(secret), std::string::npos) << secret << " is in a file of " << data;
  EXPECT_NE(files.find("VisitsByDiagnosis"), std::string::npos)
      << "the schema itself is not secret";

  // A restart reads it again with the keys kept (B's re-wrapped ones too).
  server = std::make_unique<testing::Subprocess>();
  port = start(*server);
  EXPECT_THAT(testing::Https(port, admin, "POST", "/v1/get", R"({"table": "Patient", "key": [7]})"),
              HasSubstr("Okapi-Notes-5521"));
  // Crypto-shredding: a dry run first, then for real in every datacenter.
  testing::Result dry = msadmin("group destroy-key" + config + "Clinic Patient:7");
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.out, HasSubstr("Run again with --yes"));
  EXPECT_THAT(testing::Https(port, admin, "POST", "/v1/get", R"({"table": "Patient", "key": [7]})"),
              HasSubstr("Okapi-Notes-5521"));
  testing::Result shredded = msadmin("group destroy-key" + config + "Clinic Patient:7 --yes");
  EXPECT_EQ(shredded.exit_code, 0) << shredded.out;
  EXPECT_THAT(shredded.out, HasSubstr("C: key destroyed"));
  const std::string gone =
      testing::Https(port, admin, "POST", "/v1/get", R"({"table": "Patient", "key": [7]})");
  EXPECT_THAT(gone, Not(HasSubstr("Okapi-Notes-5521")));
  EXPECT_THAT(gone, HasSubstr("destroyed")) << gone;
  // Another patient is untouched.
  EXPECT_THAT(testing::Https(port, admin, "POST", "/v1/commit",
                             R"({"rootTable": "Patient", "rootKey": ["8"],
      "mutations": [{"table": "Patient", "put": {"patient_id": "8", "notes": "fine"}}]})"),
              HasSubstr("200 OK"));
  EXPECT_THAT(msadmin("keys status" + config).out, HasSubstr("1 group keys, 1 destroyed"));
  stop(*server);
}

// Raw Bigtable verbs on a table Megastore replicates are refused unless an
// admin forces them; a datacenter whose tables are gone shows as broken.
TEST(MegastoredClusterTest, RawVerbsOnReplicatedTablesNeedForceAndABrokenReplicaShows) {
  TestDir dir;
  const std::string schema = WriteSchema(dir.path());
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=3", "--data=" + dir.path() + "/data",
                            "--schema=" + schema, "--no-sync", "--log-level=warn"}));
  ASSERT_THAT(UntilReady(server), HasSubstr("megastored: ready"));
  const std::string bt =
      StrCat(MSADMIN, " bt --config=", dir.path(), "/data/cluster.textproto --datacenter=C ");
  for (const std::string verb :
       {"deletetable PhotoApp", "set PhotoApp row1 e:x=1", "deleterow PhotoApp.outboxes r"}) {
    testing::Result r = testing::RunCommand(bt + verb);
    EXPECT_EQ(r.exit_code, 1) << verb << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("is replicated by Megastore")) << verb;
    EXPECT_THAT(r.out, HasSubstr("--force")) << verb;
  }
  // Reads, and tables Megastore does not replicate, are anyone's business.
  EXPECT_EQ(testing::RunCommand(bt + "count PhotoApp").exit_code, 0);
  EXPECT_EQ(testing::RunCommand(bt + "createtable scratch families=f").exit_code, 0);
  EXPECT_EQ(testing::RunCommand(bt + "set scratch r f:c=v").exit_code, 0);
  EXPECT_EQ(testing::RunCommand(bt + "deletetable scratch").exit_code, 0);

  const std::string status =
      StrCat(MSADMIN, " cluster status --config=", dir.path(), "/data/cluster.textproto");
  ASSERT_EQ(testing::RunCommand(status).exit_code, 0);
  testing::Result forced =
      testing::RunCommand(StrCat(MSADMIN, " bt --force --config=", dir.path(),
                                 "/data/cluster.textproto --datacenter=C deletetable PhotoApp"));
  ASSERT_EQ(forced.exit_code, 0) << forced.out;
  testing::Result broken = testing::RunCommand(status);
  EXPECT_EQ(broken.exit_code, 1) << broken.out;
  EXPECT_THAT(broken.out, HasSubstr("BROKEN"));
  EXPECT_THAT(broken.out, HasSubstr("C: its Bigtable lacks PhotoApp"));
  ::kill(server.pid(), SIGTERM);
  server.Wait();
}

// A renewed certificate, renamed into place, is taken on SIGHUP; a broken
// one is refused and the one in use stays.
TEST(MegastoredClusterTest, SighupReloadsTheCertificates) {
  TestDir dir;
  const std::string data = dir.path() + "/data";
  testing::Subprocess server;
  ASSERT_TRUE(server.Start({MEGASTORED, "--local=1", "--data=" + data, "--http=127.0.0.1:0",
                            "--no-sync", "--log-level=warn"}));
  const std::string out = UntilReady(server);
  const size_t st = out.find("status at https://127.0.0.1:");
  ASSERT_NE(st, std::string::npos) << out;
  const int http = std::atoi(out.c_str() + st + std::string("status at https://127.0.0.1:").size());
  const tls::TlsFiles admin = testing::LocalAdminTls(data);
  EXPECT_THAT(testing::Https(http, admin, "GET", "/status"),
              HasSubstr("(principal megastore-local): expires"));

  ASSERT_EQ(testing::RunCommand(StrCat(MSADMIN, " certs issue --dir=", data,
                                       "/tls renewed --cn=megastore-renewed ",
                                       "--host=127.0.0.1 --out=", dir.path()))
                .exit_code,
            0);
  for (const char* ext : {".crt", ".key"})
    ASSERT_EQ(std::rename((dir.path() + "/renewed" + ext).c_str(),
                          (data + "/tls/megastore-local" + ext).c_str()),
              0);
  ::kill(server.pid(), SIGHUP);
  std::string page;
  for (int i = 0; i < 50; ++i) {
    page = testing::Https(http, admin, "GET", "/status");
    if (page.find("megastore-renewed") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(page, HasSubstr("(principal megastore-renewed): expires"));
  EXPECT_THAT(page, HasSubstr(": ok"));
  // A key that is not the certificate's: refused, the renewed one stays.
  ASSERT_TRUE(WriteFileAtomically(data + "/tls/megastore-local.key",
                                  *ReadFileToString(data + "/tls/admin.key"), 0600)
                  .ok());
  ::kill(server.pid(), SIGHUP);
  std::string metrics;
  for (int i = 0; i < 50; ++i) {
    metrics = testing::Https(http, admin, "GET", "/metrics");
    if (MetricValue(metrics, "megastore_tls_reloads_total{result=\"failed\"}") >= 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(MetricValue(metrics, "megastore_tls_reloads_total{result=\"failed\"}"), 1);
  EXPECT_EQ(MetricValue(metrics, "megastore_tls_reloads_total{result=\"ok\"}"), 1);
  EXPECT_THAT(testing::Https(http, admin, "GET", "/status"),
              HasSubstr("FAILED, kept the certificates in use"));
  ::kill(server.pid(), SIGTERM);
  const int status = server.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace megastore
