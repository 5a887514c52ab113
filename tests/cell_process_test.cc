// A cell's processes and its lock service: tablet servers registered with
// `megastored --cell`, seen by `msadmin cell status`; a tablet server cut
// off from the lock service (the lock process stopped with SIGSTOP) stops
// serving — exits with status 3 — within its session ttl; the same against
// a real etcd, where a SIGKILLed server's registration goes with its lease.
#include <signal.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/etcd_process.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Status(const std::string& lock_service) {
  return testing::RunCommand(
             StrCat(MSADMIN, " cell status --lock-service=", lock_service, " --cell=c1"))
      .out;
}

// Waits (up to 10 s) until the cell lists `n` tablet servers.
bool WaitForServers(const std::string& lock_service, int n) {
  const std::string want = StrCat("tablet servers: ", n, "\n");
  for (int i = 0; i < 100; ++i) {
    if (Status(lock_service).find(want) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

// Starts a tablet server of cell c1; ASSERTs it registered.
void StartServer(testing::Subprocess& p, const std::string& dir, int port,
                 const std::string& lock_service) {
  ASSERT_TRUE(p.Start({MEGASTORED, StrCat("--listen=127.0.0.1:", port), "--data=" + dir,
                       "--cell=c1", "--lock-service=" + lock_service, "--session-ttl=2s",
                       "--no-sync", "--log-level=warn"}));
  ASSERT_THAT(p.ReadLine(30000), HasSubstr("registered in cell c1"));
}

TEST(CellProcessTest, ATabletServerCutOffFromTheLockServiceStopsServing) {
  TestDir dir;
  const int lock_port = testing::FreePort();
  const std::string lock = StrCat("127.0.0.1:", lock_port);
  testing::Subprocess lock_process;
  ASSERT_TRUE(lock_process.Start({MEGASTORED, "--roles=lock", "--listen=" + lock,
                                  "--data=" + dir.path() + "/lock", "--log-level=warn"}));
  ASSERT_THAT(lock_process.ReadLine(30000), HasSubstr("lock service listening on"));

  const int p1 = testing::FreePort(), p2 = testing::FreePort();
  testing::Subprocess ts1, ts2;
  StartServer(ts1, dir.path() + "/ts1", p1, lock);
  StartServer(ts2, dir.path() + "/ts2", p2, lock);
  std::string status = Status(lock);
  EXPECT_THAT(status, HasSubstr("tablet servers: 2"));
  EXPECT_THAT(status, HasSubstr(StrCat("127.0.0.1:", p1)));

  // ts2 crashes and comes straight back on its address: its previous
  // incarnation's session has not expired, so the new one is refused (it
  // could otherwise be mistaken for a server still holding tablets); once
  // the old session expires it joins.
  ts2.Kill(SIGKILL);
  testing::Result early = testing::RunCommand(StrCat(
      MEGASTORED, " --listen=127.0.0.1:", p2, " --data=", dir.path(),
      "/ts2 --cell=c1 --lock-service=", lock, " --session-ttl=2s --no-sync --log-level=warn"));
  EXPECT_EQ(early.exit_code, 1) << early.out;
  EXPECT_THAT(early.out, HasSubstr("an earlier incarnation of this server still holds it"));
  ASSERT_TRUE(WaitForServers(lock, 1)) << "the crashed incarnation's session expires";
  testing::Subprocess ts2b;
  StartServer(ts2b, dir.path() + "/ts2", p2, lock);

  // A partition: the lock service stops answering. Both servers stop
  // serving within their 2 s ttl (exit status 3).
  ::kill(lock_process.pid(), SIGSTOP);
  const absl::Time cut = absl::Now();
  const int s1 = ts1.Wait(), s2 = ts2b.Wait();
  const absl::Duration took = absl::Now() - cut;
  ::kill(lock_process.pid(), SIGCONT);
  EXPECT_TRUE(WIFEXITED(s1) && WEXITSTATUS(s1) == 3) << s1;
  EXPECT_TRUE(WIFEXITED(s2) && WEXITSTATUS(s2) == 3) << s2;
  EXPECT_LT(took, absl::Seconds(10)) << "gone within the ttl (plus slack for a loaded machine)";

  // The lock service expired their sessions; a restarted server joins again.
  EXPECT_TRUE(WaitForServers(lock, 0));
  testing::Subprocess again;
  StartServer(again, dir.path() + "/ts1", p1, lock);
  EXPECT_THAT(Status(lock), HasSubstr("tablet servers: 1"));
  again.Kill(SIGTERM);
  EXPECT_THAT(Status(lock), HasSubstr("tablet servers: 0"))
      << "a clean shutdown leaves the cell at once";
  lock_process.Kill(SIGTERM);
}

TEST(CellProcessTest, TabletServersRegisterInARealEtcd) {
  TestDir dir;
  testing::EtcdProcess etcd;
  ASSERT_EQ(etcd.Start(dir.path()), "");
  const std::string lock = "etcd:" + etcd.endpoint();
  const int port = testing::FreePort();
  testing::Subprocess ts;
  StartServer(ts, dir.path() + "/ts", port, lock);
  testing::Result json = testing::RunCommand(
      StrCat(MSADMIN, " cell status --json --lock-service=", lock, " --cell=c1"));
  EXPECT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(
      json.out,
      StrCat("{\"cell\":\"c1\",\"master\":null,\"tabletServers\":[\"127.0.0.1:", port, "\"]}\n"));
  // Killed without a word: its lease runs out and the registration goes.
  ts.Kill(SIGKILL);
  EXPECT_TRUE(WaitForServers(lock, 0)) << "its lease runs out";
}

TEST(CellProcessTest, BadCellFlagsAreOneLineErrors) {
  testing::Result no_lock = testing::RunCommand(StrCat(MEGASTORED, " --data=/tmp/x --cell=c1"));
  EXPECT_EQ(no_lock.exit_code, 2);
  EXPECT_THAT(no_lock.out, HasSubstr("needs --lock-service"));
  testing::Result bad =
      testing::RunCommand(StrCat(MEGASTORED, " --data=/tmp/x --cell=c1 --lock-service=nowhere"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("is neither HOST:PORT"));
  testing::Result lock_only =
      testing::RunCommand(StrCat(MEGASTORED, " --roles=lock --data=/tmp/x --cell=c1"));
  EXPECT_EQ(lock_only.exit_code, 2);
  EXPECT_THAT(lock_only.out, HasSubstr("needs the tablet or master role"));
  testing::Result unreachable =
      testing::RunCommand(StrCat(MSADMIN, " cell status --lock-service=127.0.0.1:1 --cell=c1"));
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.out, HasSubstr("cannot read the lock service"));
}

}  // namespace
}  // namespace megastore
