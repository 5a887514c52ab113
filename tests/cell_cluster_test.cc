// A Bigtable cell of processes under load: a real etcd, two
// masters (one standing by) and three tablet servers on one shared data
// root, written to by the client library in this process.
//   * the table splits into many tablets by itself;
//   * a tablet server SIGKILLed mid-load: its tablets are served elsewhere
//     (the time to recovery is printed) and no acknowledged write is lost;
//   * the master SIGKILLed: the standby takes over, assignments unchanged;
//   * a tablet server frozen (SIGSTOP) past the master's timeout is removed
//     from the cell; when it wakes it exits (status 3) without serving, and
//     its tablets move (not before: its RocksDB LOCK files fence them while
//     its process lives, see docs/cell.md);
//   * msadmin tablet ls|split|move and msadmin bt --cell on the cell.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "absl/time/clock.h"
#include "base/random.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "tests/etcd_process.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using storage::cell::CellClient;
using storage::cell::CellState;
using storage::cell::FindMaster;
using storage::cell::MasterClient;
using ::testing::HasSubstr;

constexpr char kCell[] = "c1";

class CellCluster {
 public:
  explicit CellCluster(const std::string& dir) : dir_(dir) {}

  std::string Start() {
    if (std::string e = etcd_.Start(dir_); !e.empty()) return e;
    lock_spec_ = "etcd:" + etcd_.endpoint();
    auto lock = storage::cell::ConnectLockService(lock_spec_);
    if (!lock.ok()) return std::string(lock.status().message());
    lock_ = std::move(*lock);
    for (int i = 0; i < 2; ++i) {
      if (std::string e = StartMaster(); !e.empty()) return e;
    }
    for (int i = 0; i < 3; ++i) {
      if (std::string e = StartServer(); !e.empty()) return e;
    }
    storage::cell::CellClientOptions o;
    o.cell = kCell;
    o.retry_for = absl::Seconds(60);
    client_ = std::make_unique<CellClient>(lock_.get(), Env::Default(), o);
    return "";
  }

  std::string StartMaster() {
    const int port = testing::FreePort();
    auto p = std::make_unique<testing::Subprocess>();
    if (!p->Start({MEGASTORED, "--roles=master", StrCat("--listen=127.0.0.1:", port),
                   "--data=" + dir_ + "/root", StrCat("--cell=", kCell),
                   "--lock-service=" + lock_spec_, "--session-ttl=2s", "--server-timeout=3s",
                   "--log-level=warn"}))
      return "cannot start a master";
    if (p->ReadLine(30000).find("campaigning") == std::string::npos)
      return "a master did not start";
    masters_[StrCat("127.0.0.1:", port)] = std::move(p);
    return "";
  }

  std::string StartServer() {
    const int port = testing::FreePort();
    auto p = std::make_unique<testing::Subprocess>();
    if (!p->Start({MEGASTORED, StrCat("--listen=127.0.0.1:", port), "--data=" + dir_ + "/root",
                   StrCat("--cell=", kCell), "--lock-service=" + lock_spec_, "--session-ttl=2s",
                   "--split-threshold-mb=1", "--log-level=warn"}))
      return "cannot start a tablet server";
    if (p->ReadLine(30000).find("registered in cell") == std::string::npos)
      return "a tablet server did not register";
    servers_[StrCat("127.0.0.1:", port)] = std::move(p);
    return "";
  }

  absl::StatusOr<CellState> State() {
    auto m = FindMaster(lock_.get(), kCell);
    if (!m.ok()) return m.status();
    return MasterClient(*m, absl::Seconds(5)).State();
  }

  // Until every tablet the master knows is served, none by `not_on`.
  bool WaitAllServed(const std::string& not_on, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      auto s = State();
      if (s.ok() && s->tablets_size() > 0) {
        bool ok = true;
        for (const auto& t : s->tablets()) ok &= t.serving() && t.server() != not_on;
        if (ok) return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // msadmin COMMAND --lock-service=... --cell=c1 ARGS
  std::string Msadmin(const std::string& command, const std::string& args = "") {
    return testing::RunCommand(StrCat(MSADMIN, " ", command, " --lock-service=", lock_spec_,
                                      " --cell=", kCell, " ", args))
        .out;
  }

  // Until seven looks a second apart find the same assignments: no split
  // (the servers' maintenance looks every 5 s) and no balancing move.
  bool WaitSettled(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::map<std::string, std::string> last;
    int same = 0;
    while (absl::Now() < deadline) {
      auto s = State();
      std::map<std::string, std::string> now;
      if (s.ok()) {
        for (const auto& t : s->tablets()) now[t.id()] = t.serving() ? t.server() : "";
      }
      same = s.ok() && now == last ? same + 1 : 0;
      if (same >= 6) return true;
      last = std::move(now);
      absl::SleepFor(absl::Seconds(1));
    }
    return false;
  }

  CellClient& client() { return *client_; }
  storage::lock::LockService* lock() { return lock_.get(); }
  std::map<std::string, std::unique_ptr<testing::Subprocess>>& servers() { return servers_; }
  std::map<std::string, std::unique_ptr<testing::Subprocess>>& masters() { return masters_; }

 private:
  const std::string dir_;
  testing::EtcdProcess etcd_;
  std::string lock_spec_;
  std::unique_ptr<storage::lock::LockService> lock_;
  std::map<std::string, std::unique_ptr<testing::Subprocess>> masters_, servers_;
  std::unique_ptr<CellClient> client_;
};

storage::TableSchema Table() {
  storage::TableSchema s;
  s.set_name("t");
  s.add_families()->set_name("f");
  return s;
}

// Writers of incompressible 512-byte rows, remembering what was acknowledged.
class Load {
 public:
  Load(CellClient* client, int writers) {
    for (int w = 0; w < writers; ++w) {
      threads_.emplace_back([this, client, w] {
        Random rng(static_cast<uint64_t>(w) + 1);
        for (int i = 0; !stop_.load(); ++i) {
          const std::string key = StrCat("k", (rng.Next() % 1000000) + 1000000, "-", w, "-", i);
          std::string value(512, '\0');
          for (char& c : value) c = static_cast<char>(rng.Next());
          absl::Status s =
              client->MutateRow("t", key, {storage::Mutation::SetCell("f", "v", value)});
          absl::SleepFor(absl::Milliseconds(2));  // ~500 rows/s a writer: megabytes, not gigabytes
          std::lock_guard<std::mutex> lock(mu_);
          if (s.ok()) {
            acked_[key] = std::move(value);
          } else {
            ++failed_;
          }
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  size_t acked() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_.size();
  }
  std::map<std::string, std::string> snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }
  int failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<std::string, std::string> acked_;
  int failed_ = 0;
};

// Every acknowledged row is in the cell with its value.
void ExpectAllThere(CellClient& client, const std::map<std::string, std::string>& acked) {
  std::map<std::string, std::string> found;
  absl::Status s = client.ReadRows("t", storage::RowRange::All(), {}, [&](storage::Row& r) {
    if (!r.cells.empty()) found[r.key] = r.cells[0].value;
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  size_t missing = 0, wrong = 0;
  for (const auto& [k, v] : acked) {
    auto it = found.find(k);
    if (it == found.end()) {
      ++missing;
    } else if (it->second != v) {
      ++wrong;
    }
  }
  EXPECT_EQ(missing, 0u) << "acknowledged writes lost, of " << acked.size();
  EXPECT_EQ(wrong, 0u);
}

TEST(CellClusterTest, ACellOfProcessesSplitsSurvivesKillsAndFailsOver) {
  TestDir dir;
  CellCluster cell(dir.path());
  ASSERT_EQ(cell.Start(), "");
  absl::StatusOr<std::string> master = FindMaster(cell.lock(), kCell);
  for (int i = 0; i < 100 && !master.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    master = FindMaster(cell.lock(), kCell);
  }
  ASSERT_TRUE(master.ok()) << master.status();
  absl::Status created = absl::UnavailableError("not tried");
  for (int i = 0; i < 100 && !created.ok(); ++i) {  // until the master has the METADATA up
    created = MasterClient(*master).CreateTable(Table());
    if (!created.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(created.ok()) << created;

  // 1. Under load, t splits by itself (1 MiB threshold).
  auto load = std::make_unique<Load>(&cell.client(), 4);
  auto user_tablets = [&] {
    auto s = cell.State();
    int n = 0;
    if (s.ok())
      for (const auto& t : s->tablets()) n += t.table() == "t";
    return n;
  };
  for (int i = 0; i < 900 && user_tablets() < 6; ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_GE(user_tablets(), 6) << "t split into many tablets by itself (" << load->acked()
                               << " rows written)";

  // 2. The tablet server with the most tablets is killed mid-load.
  auto state = cell.State();
  ASSERT_TRUE(state.ok());
  std::string victim;
  int most = -1;
  for (const auto& s : state->servers()) {
    if (s.tablets() > most) {
      most = s.tablets();
      victim = s.address();
    }
  }
  const size_t before_kill = load->acked();
  const absl::Time killed = absl::Now();
  cell.servers()[victim]->Kill(SIGKILL);
  ASSERT_TRUE(cell.WaitAllServed(victim, absl::Seconds(60)))
      << "the dead server's tablets are served elsewhere";
  const absl::Duration recovery = absl::Now() - killed;
  std::printf(
      "[cell] %d tablets of a SIGKILLed server served elsewhere after %lld ms (session ttl 2 s)\n",
      most, static_cast<long long>(absl::ToInt64Milliseconds(recovery)));
  ::testing::Test::RecordProperty("recovery_ms",
                                  std::to_string(absl::ToInt64Milliseconds(recovery)));
  for (int i = 0; i < 100 && load->acked() < before_kill + 200; ++i)
    absl::SleepFor(absl::Milliseconds(100));
  load->Stop();
  EXPECT_GT(load->acked(), before_kill) << "writes continue after the recovery";
  EXPECT_EQ(load->failed(), 0) << "the client library retried through the recovery";
  const auto acked = load->snapshot();
  ExpectAllThere(cell.client(), acked);
  cell.servers().erase(victim);
  ASSERT_EQ(cell.StartServer(), "");  // a replacement joins

  // 3. The master is killed: the standby takes over without moving anything
  // (once the replacement got its share and splits are over).
  ASSERT_TRUE(cell.WaitAllServed("", absl::Seconds(30)));
  if (!cell.WaitSettled(absl::Seconds(60))) {
    auto s = cell.State();
    if (s.ok())
      for (const auto& e : s->events()) std::printf("master: %s\n", e.c_str());
    FAIL() << "the cell did not settle";
  }
  auto before = cell.State();
  ASSERT_TRUE(before.ok());
  std::map<std::string, std::string> assignment;
  for (const auto& t : before->tablets()) assignment[t.id()] = t.server();
  const std::string old_master = before->master();
  cell.masters()[old_master]->Kill(SIGKILL);
  absl::StatusOr<CellState> after = absl::UnavailableError("");
  for (int i = 0; i < 200; ++i) {
    after = cell.State();
    if (after.ok() && after->master() != old_master && after->reconciles() > 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_NE(after->master(), old_master);
  // Splits still running may have replaced some tablets meanwhile; every
  // tablet both masters know stays where it was.
  int common = 0;
  for (const auto& t : after->tablets()) {
    auto it = assignment.find(t.id());
    if (it == assignment.end()) continue;
    ++common;
    EXPECT_EQ(it->second, t.server()) << t.id();
  }
  EXPECT_GT(common, after->tablets_size() / 2);
  if (::testing::Test::HasFailure()) {
    for (const auto& e : before->events()) std::printf("old master: %s\n", e.c_str());
    for (const auto& e : after->events()) std::printf("new master: %s\n", e.c_str());
  }
  ExpectAllThere(cell.client(), acked);

  // 4. A tablet server frozen past the master's timeout loses its tablets
  // and, when it wakes, stops without serving.
  std::string frozen;
  for (const auto& s : after->servers()) {
    if (s.tablets() > 0 && cell.servers().contains(s.address())) frozen = s.address();
  }
  ASSERT_FALSE(frozen.empty());
  ::kill(cell.servers()[frozen]->pid(), SIGSTOP);
  bool removed = false;
  for (int i = 0; i < 300 && !removed; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    // (--json: the servers only, not the master's events, which may name it)
    removed = cell.Msadmin("cell status", "--json").find(frozen) == std::string::npos;
  }
  ASSERT_TRUE(removed) << "the master deleted the frozen server's file";
  absl::SleepFor(absl::Seconds(1));
  ::kill(cell.servers()[frozen]->pid(), SIGCONT);
  const int status = cell.servers()[frozen]->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3)
      << "it stops serving on waking: " << status;
  cell.servers().erase(frozen);
  ASSERT_TRUE(cell.WaitAllServed(frozen, absl::Seconds(60))) << "its tablets move";
  ExpectAllThere(cell.client(), acked);

  // 5. The operator's view and hands.
  const std::string ls = cell.Msadmin("tablet ls");
  EXPECT_THAT(ls, HasSubstr("METADATA-root"));
  EXPECT_THAT(ls, HasSubstr(" t-"));
  EXPECT_EQ(cell.Msadmin("bt", "count t"), StrCat(acked.size(), "\n"));
  auto now = cell.State();
  ASSERT_TRUE(now.ok());
  std::string some_tablet, other_server;
  for (const auto& t : now->tablets()) {
    if (t.table() == "t") some_tablet = t.id();
  }
  for (const auto& s : now->servers()) {
    if (s.reachable()) other_server = s.address();
  }
  for (const auto& t : now->tablets()) {
    if (t.id() == some_tablet && t.server() == other_server) {
      for (const auto& s : now->servers())
        if (s.address() != other_server && s.reachable()) other_server = s.address();
    }
  }
  EXPECT_THAT(cell.Msadmin("tablet move", StrCat(some_tablet, " ", other_server)),
              HasSubstr("now served by"));
  const std::string split = cell.Msadmin("tablet split -o json", some_tablet);
  EXPECT_EQ(std::count(split.begin(), split.end(), '\n'), 2) << split;
  EXPECT_THAT(split, HasSubstr("{\"tablet\":\"t-")) << "one JSON object per child";
  EXPECT_THAT(cell.Msadmin("tablet split", "no-such-tablet"),
              HasSubstr("no tablet no-such-tablet"));
  EXPECT_THAT(cell.Msadmin("cell status"), HasSubstr("tablets"));
  ExpectAllThere(cell.client(), acked);
}

}  // namespace
}  // namespace megastore
