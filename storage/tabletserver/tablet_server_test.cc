#include "storage/tabletserver/tablet_server.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/synchronization/blocking_counter.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tablet/log_record.h"

namespace megastore::storage {
namespace {

using ::testing::HasSubstr;

TableSchema Schema(const std::string& name = "t") {
  TableSchema s;
  s.set_name(name);
  s.add_families()->set_name("cf");
  return s;
}

class TabletServerTest : public ::testing::Test {
 protected:
  TabletServerOptions Options() {
    TabletServerOptions o;
    o.data_dir = dir_.path() + "/data";
    o.maintenance_interval = absl::ZeroDuration();
    return o;
  }
  std::unique_ptr<TabletServer> Open(TabletServerOptions o) {
    auto s = TabletServer::Open(o, &env_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<TabletServer> Open() { return Open(Options()); }

  // The full-disk test's body, on a small filesystem mounted at `mnt`.
  void DiskFullScenario(const std::string& mnt);

  // Runs a write scenario of the crash_writer helper in a child process that
  // then exits without cleaning up, like a crash: memtables are lost, only
  // the commit log and SSTables remain.
  void InCrashingChild(const std::string& scenario) {
    const std::string data = Options().data_dir;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl(CRASH_WRITER, CRASH_WRITER, data.c_str(), scenario.c_str(), nullptr);
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
  }

  std::string Value(TabletServer& s, const std::string& table, const std::string& row) {
    auto r = s.ReadRow(table, row);
    if (!r.ok() || !r->has_value() || (*r)->cells.empty()) return "<none>";
    return (*r)->cells[0].value;
  }

  std::vector<std::string> LogSegments() {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/data/commitlog")) {
      out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  TestDir dir_;
  RealEnv env_{1};
};

// state.pb lists the tables and tablets; damage to it must never be taken
// for a smaller (or empty) state. Before, a flipped bit in a tablet's path
// served an empty new database in its place, and a deleted or empty file
// started the server empty.
TEST_F(TabletServerTest, ADamagedOrMissingStateFileIsRefusedNamingIt) {
  {
    auto server = Open();
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->CreateTable(Schema()).ok());
    ASSERT_TRUE(server->MutateRow("t", "r", {Mutation::SetCell("cf", "q", "v")}).ok());
  }
  const std::string state = Options().data_dir + "/state.pb";
  const std::string good = *ReadFileToString(state);
  const std::string payload = *ReadChecksummedFile(state);
  auto refused = [&](const std::string& why) {
    auto s = TabletServer::Open(Options(), &env_);
    EXPECT_FALSE(s.ok()) << why;
    if (!s.ok()) {
      EXPECT_TRUE(absl::IsDataLoss(s.status())) << why << ": " << s.status();
      EXPECT_NE(s.status().message().find("state.pb"), std::string_view::npos)
          << why << ": " << s.status();
    }
  };
  for (size_t at : {size_t{2}, size_t{9}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    ASSERT_TRUE(WriteFileAtomically(state, bad).ok());
    refused("bit flipped at byte " + std::to_string(at));
  }
  ASSERT_TRUE(WriteFileAtomically(state, "").ok());
  refused("emptied");
  std::filesystem::remove(state);
  refused("deleted");
  // Without a header it is taken for a file from before checksums only if
  // it describes the directory: two bytes of garbage parse as an empty
  // state, and once started the server empty.
  ASSERT_TRUE(WriteFileAtomically(state, "xx").ok());
  refused("garbage without a header");
  ASSERT_TRUE(WriteFileAtomically(state, payload).ok());
  {
    auto legacy = Open();  // a genuine headerless file: taken, rewritten with a header
    ASSERT_NE(legacy, nullptr);
    EXPECT_EQ(Value(*legacy, "t", "r"), "v");
  }
  EXPECT_EQ(*ReadFileToString(state), good);
  ASSERT_TRUE(WriteFileAtomically(state, good).ok());
  auto server = Open();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Value(*server, "t", "r"), "v");
}

// A lost state.pb is rebuilt from the tablets themselves: each table's
// schema kept beside its tablets, each tablet's rows in its own metadata.
// The rebuilt state serves every row again, the unflushed ones from the
// commit log included.
TEST_F(TabletServerTest, ALostStateFileIsRebuiltFromTheTablets) {
  const std::string data = Options().data_dir;
  std::string parent_copy, parent_id, right_id;
  {
    auto server = Open();
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->CreateTable(Schema()).ok());
    TableSchema other = Schema("u");
    ASSERT_TRUE(server->CreateTable(other).ok());
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(
          server->MutateRow("t", StrCat("row", 10 + i), {Mutation::SetCell("cf", "q", "v")}).ok());
    }
    ASSERT_TRUE(server->MutateRow("u", "x", {Mutation::SetCell("cf", "q", "in u")}).ok());
    // A copy of the parent as a crash after a split would leave it.
    parent_id = server->ListTablets("t").at(0).id();
    ASSERT_TRUE(server->CompactTablet(parent_id).ok());
    parent_copy = dir_.path() + "/parent-copy";
    std::filesystem::copy(Options().data_dir + "/tables/t/" + parent_id, parent_copy,
                          std::filesystem::copy_options::recursive);
    ASSERT_TRUE(server->SplitTablet(parent_id, "row30").ok());
    // And of the right child, split again in turn.
    for (const TabletEntry& e : server->ListTablets("t")) {
      if (e.start_row() == "row30") {
        right_id = e.id();
        ASSERT_TRUE(server->CompactTablet(right_id).ok());
        std::filesystem::copy(data + "/tables/t/" + right_id, dir_.path() + "/right-copy",
                              std::filesystem::copy_options::recursive);
        ASSERT_TRUE(server->SplitTablet(right_id, "row40").ok());
      }
    }
    ASSERT_EQ(server->ListTablets("t").size(), 3u);
    // Written after the splits and never flushed: only the log has them.
    ASSERT_TRUE(server->MutateRow("t", "row45", {Mutation::SetCell("cf", "q", "late")}).ok());
    ASSERT_TRUE(server->MutateRow("t", "row15", {Mutation::SetCell("cf", "q", "late")}).ok());
  }
  std::filesystem::rename(parent_copy, data + "/tables/t/" + parent_id);
  std::filesystem::rename(dir_.path() + "/right-copy", data + "/tables/t/" + right_id);
  std::filesystem::remove(data + "/state.pb");
  ASSERT_FALSE(TabletServer::Open(Options(), &env_).ok());

  absl::StatusOr<RebuiltState> rebuilt = RebuildStateFromTablets(data);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  ASSERT_EQ(rebuilt->state.tables_size(), 2);
  EXPECT_EQ(rebuilt->state.tablets_size(), 4);  // t: 3 after two splits; u: 1
  // Both split tablets, the right child and the parent, are left out.
  ASSERT_EQ(rebuilt->notes.size(), 2u);
  EXPECT_THAT(rebuilt->notes[0] + rebuilt->notes[1], HasSubstr(parent_id));
  EXPECT_THAT(rebuilt->notes[0] + rebuilt->notes[1], HasSubstr(right_id));
  EXPECT_THAT(rebuilt->notes[0], HasSubstr("its rows are split among"));
  ASSERT_TRUE(WriteChecksummedFile(data + "/state.pb", rebuilt->state.SerializeAsString()).ok());
  auto server = Open();
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(std::filesystem::exists(data + "/tables/t/" + parent_id))
      << "a finished split's parent goes at start";
  EXPECT_FALSE(std::filesystem::exists(data + "/tables/t/" + right_id));
  for (int i = 0; i < 40; ++i) {
    const std::string row = StrCat("row", 10 + i);
    EXPECT_EQ(Value(*server, "t", row), row == "row45" || row == "row15" ? "late" : "v") << row;
  }
  EXPECT_EQ(Value(*server, "u", "x"), "in u");
}

// A crash in the middle of a split leaves the children's directories
// while state.pb still names the parent: the next start moves them to
// leftovers/, so a rebuilt state could never take them for the parent's
// successors — unless a child holds writes the parent does not (state.pb
// restored from before the split): that one stays where it is.
TEST_F(TabletServerTest, AnUnfinishedSplitsChildrenAreMovedAsideAtStart) {
  const std::string data = Options().data_dir;
  std::string before_split, parent_id;
  std::vector<TabletEntry> children;
  {
    auto server = Open();
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->CreateTable(Schema()).ok());
    ASSERT_TRUE(server->MutateRow("t", "a", {Mutation::SetCell("cf", "q", "v")}).ok());
    parent_id = server->ListTablets("t").at(0).id();
    ASSERT_TRUE(server->CompactTablet(parent_id).ok());
    before_split = *ReadFileToString(data + "/state.pb");
    std::filesystem::copy(data + "/tables/t/" + parent_id, dir_.path() + "/parent",
                          std::filesystem::copy_options::recursive);
    auto split = server->SplitTablet(parent_id, "m");
    ASSERT_TRUE(split.ok()) << split.status();
    children = *split;
    // The right child takes a write: only its log records know it.
    ASSERT_TRUE(server->MutateRow("t", "x", {Mutation::SetCell("cf", "q", "after")}).ok());
  }
  // As if the crash came before the split was recorded.
  ASSERT_TRUE(WriteFileAtomically(data + "/state.pb", before_split).ok());
  std::filesystem::rename(dir_.path() + "/parent", data + "/tables/t/" + parent_id);
  auto server = Open();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Value(*server, "t", "a"), "v");
  EXPECT_FALSE(std::filesystem::exists(data + "/" + children[0].path())) << "moved aside";
  EXPECT_TRUE(std::filesystem::exists(data + "/" + children[1].path())) << "it holds a write: kept";
  bool in_leftovers = false;
  for (const auto& e : std::filesystem::directory_iterator(data + "/leftovers"))
    in_leftovers |= e.path().filename().string().ends_with(children[0].id());
  EXPECT_TRUE(in_leftovers);
  EXPECT_TRUE(std::filesystem::exists(data + "/tables/t/" + parent_id));
}

// A failed write of state.pb leaves a split undone, not half done: the
// parent serves on and a restart finds what was served. (Before, the
// children served while state.pb still named the parent, and their writes
// were skipped at the next start.)
TEST_F(TabletServerTest, ASplitThatCannotBeRecordedIsUndone) {
  const std::string data = Options().data_dir;
  auto server = Open();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->CreateTable(Schema()).ok());
  ASSERT_TRUE(server->MutateRow("t", "a", {Mutation::SetCell("cf", "q", "v")}).ok());
  const std::string parent_id = server->ListTablets("t").at(0).id();
  // state.pb cannot be replaced while a directory sits at its temporary name.
  const std::string blocker = data + "/state.pb.tmp";
  std::filesystem::create_directories(blocker + "/x");
  EXPECT_FALSE(server->SplitTablet(parent_id, "m").ok());
  EXPECT_FALSE(server->CreateTable(Schema("u")).ok());
  std::filesystem::remove_all(blocker);
  ASSERT_EQ(server->ListTablets("t").size(), 1u);
  ASSERT_TRUE(server->MutateRow("t", "z", {Mutation::SetCell("cf", "q", "w")}).ok());
  EXPECT_FALSE(server->GetTable("u").ok());
  server.reset();
  server = Open();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Value(*server, "t", "a"), "v");
  EXPECT_EQ(Value(*server, "t", "z"), "w");
  EXPECT_FALSE(std::filesystem::exists(data + "/tables/u"));
  ASSERT_TRUE(server->CreateTable(Schema("u")).ok());
}

// What cannot be rebuilt is named: a missing tablet (rows no tablet
// holds), a table without its schema.
TEST_F(TabletServerTest, RebuildingRefusesGapsAndNamesThem) {
  std::string right;
  {
    auto server = Open();
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->CreateTable(Schema()).ok());
    ASSERT_TRUE(server->MutateRow("t", "a", {Mutation::SetCell("cf", "q", "v")}).ok());
    auto children = server->SplitTablet(server->ListTablets("t").at(0).id(), "m");
    ASSERT_TRUE(children.ok()) << children.status();
    right = children->at(1).id();
    ASSERT_TRUE(server->CreateTable(Schema("u")).ok());
  }
  const std::string data = Options().data_dir;
  std::filesystem::rename(data + "/tables/t/" + right, dir_.path() + "/right");
  std::filesystem::remove(data + "/tables/u/schema.pb");
  absl::StatusOr<RebuiltState> rebuilt = RebuildStateFromTablets(data);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_THAT(rebuilt.status().message(),
              HasSubstr("table t: no tablet holds the rows from \"m\" to the end"));
  EXPECT_THAT(rebuilt.status().message(), HasSubstr("table u: its schema"));
  std::filesystem::rename(dir_.path() + "/right", data + "/tables/t/" + right);
  std::filesystem::remove_all(data + "/tables/u");
  rebuilt = RebuildStateFromTablets(data);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(rebuilt->state.tablets_size(), 2);
}

TEST_F(TabletServerTest, AMissingTabletDirectoryIsNotRecreatedEmpty) {
  {
    auto server = Open();
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->CreateTable(Schema()).ok());
  }
  std::filesystem::remove_all(Options().data_dir + "/tables/t");
  auto server = Open();
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(server->ReadRow("t", "r").ok()) << "the tablet is not served";
  EXPECT_FALSE(std::filesystem::exists(Options().data_dir + "/tables/t"));
}

// Moving the commit log aside (the remedy for a damaged one) used to restart
// LSNs at 1, below the tablets' redo points: the next acknowledged writes
// were skipped at replay and lost (100 of 100). Now it is refused as data
// loss, and with accept_log_loss LSNs continue past every redo point.
TEST_F(TabletServerTest, AMovedAsideLogIsDataLossAndAcceptingItLosesNoLaterWrite) {
  InCrashingChild("rows200");
  { ASSERT_NE(Open(), nullptr); }  // replays and flushes: redo points near LSN 200
  std::filesystem::rename(Options().data_dir + "/commitlog", dir_.path() + "/commitlog.damaged");
  auto refused = TabletServer::Open(Options(), &env_);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("redo point"), std::string_view::npos)
      << refused.status();
  InCrashingChild("late100");  // accept_log_loss, 100 writes, then a crash
  auto server = Open();
  ASSERT_NE(server, nullptr);
  int found = 0;
  for (int i = 0; i < 100; ++i) found += Value(*server, "t", "late" + std::to_string(i)) == "v";
  EXPECT_EQ(found, 100);
  EXPECT_EQ(Value(*server, "t", "row5"), "v5");
}

// Writes `text` to the /proc/self file `name`; false if it cannot.
bool WriteProcSelf(const char* name, const std::string& text) {
  const int fd = ::open((std::string("/proc/self/") + name).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Makes this (single-threaded) process root of a user and mount namespace
// of its own, where it may mount a tmpfs without being root outside.
bool EnterOwnMountNamespace() {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
  return WriteProcSelf("setgroups", "deny") &&
         WriteProcSelf("uid_map", "0 " + std::to_string(uid) + " 1") &&
         WriteProcSelf("gid_map", "0 " + std::to_string(gid) + " 1");
}

// Whether a child process may create a user namespace (unprivileged user
// namespaces are enabled): asked in a forked child, so this one stays as
// it is.
bool UserNamespacesWork() {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A full disk: writes fail with RESOURCE_EXHAUSTED naming the device, reads
// go on, nothing acknowledged is lost, and once space returns writes resume
// without a restart. Runs on a small tmpfs it mounts: as root directly,
// otherwise in a child process that is root of its own user namespace.
TEST_F(TabletServerTest, AFullDiskFailsWritesCleanlyAndWritesResumeWhenSpaceReturns) {
  const std::string mnt = dir_.path() + "/small";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=24m") == 0) {
    struct Unmount {
      std::string path;
      ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
    } unmount{mnt};
    DiskFullScenario(mnt);
    return;
  }
  const int mount_errno = errno;
  if (!UserNamespacesWork()) {
    GTEST_SKIP() << "cannot mount a small tmpfs (" << std::strerror(mount_errno)
                 << ") and user namespaces are disabled";
  }
  // The child re-runs this test alone from the start (single-threaded, as
  // unshare needs), enters its namespace, mounts and runs the scenario.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!EnterOwnMountNamespace()) {
          std::fprintf(stderr, "cannot enter a user namespace: %s\n", std::strerror(errno));
          _exit(2);
        }
        if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=24m") != 0) {
          std::fprintf(stderr, "cannot mount a tmpfs in the namespace: %s\n", std::strerror(errno));
          _exit(3);
        }
        DiskFullScenario(mnt);
        _exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

void TabletServerTest::DiskFullScenario(const std::string& mnt) {
  TabletServerOptions o = Options();
  o.data_dir = mnt + "/data";
  auto server = Open(o);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->CreateTable(Schema()).ok());
  // Most of the space goes to a filler file, so the disk fills fast.
  const std::string filler = mnt + "/filler", filler2 = mnt + "/filler2";
  auto fill = [&](const std::string& path, uint64_t leave) {
    struct statvfs fs;
    ASSERT_EQ(::statvfs(mnt.c_str(), &fs), 0);
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    std::ofstream f(path, std::ios::binary);
    const std::string chunk(4096, 'f');
    for (uint64_t left = free_bytes - std::min(free_bytes, leave); left >= chunk.size();
         left -= chunk.size())
      f << chunk;
  };
  fill(filler, 3 << 20);
  std::map<std::string, std::string> acked;
  absl::Status first_error;
  const std::string value(4096, 'v');
  for (int i = 0; i < 5000 && first_error.ok(); ++i) {
    const std::string row = "row" + std::to_string(i);
    absl::Status s = server->MutateRow("t", row, {Mutation::SetCell("cf", "q", value + row)});
    if (s.ok()) {
      acked[row] = value + row;
    } else {
      first_error = s;
    }
  }
  ASSERT_FALSE(first_error.ok()) << "the disk never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(first_error)) << first_error;
  EXPECT_NE(first_error.message().find("No space left"), std::string_view::npos) << first_error;
  // The log may still hold a zero-filled file made before the disk filled:
  // writes go on into it until it is used up, then fail the same way. (Any
  // space a failed zero-fill gave back is taken too.)
  fill(filler2, 0);
  absl::Status again;
  for (int i = 0; i < 5000 && again.ok(); ++i) {
    const std::string row = "reserve" + std::to_string(i);
    again = server->MutateRow("t", row, {Mutation::SetCell("cf", "q", value + row)});
    if (again.ok()) acked[row] = value + row;
  }
  EXPECT_TRUE(absl::IsResourceExhausted(again)) << again;
  // More writes fail; maintenance (flushes) fails without harm; reads go on.
  for (int i = 0; i < 20; ++i) {
    EXPECT_FALSE(
        server->MutateRow("t", "more" + std::to_string(i), {Mutation::SetCell("cf", "q", value)})
            .ok());
    (void)server->RunMaintenance();  // flushes fail on a full disk: harmless
  }
  for (const auto& [row, v] : acked) ASSERT_EQ(Value(*server, "t", row), v) << row;
  // Space returns: writes resume without a restart.
  std::filesystem::remove(filler);
  std::filesystem::remove(filler2);
  absl::Status resumed;
  for (int i = 0; i < 100; ++i) {
    resumed = server->MutateRow("t", "after", {Mutation::SetCell("cf", "q", "back")});
    if (resumed.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(resumed.ok()) << resumed;
  ASSERT_TRUE(server->RunMaintenance().ok());
  EXPECT_EQ(Value(*server, "t", "after"), "back");
  // And nothing acknowledged was lost across a restart.
  server.reset();
  server = Open(o);
  ASSERT_NE(server, nullptr);
  for (const auto& [row, v] : acked) ASSERT_EQ(Value(*server, "t", row), v) << row;
  EXPECT_EQ(Value(*server, "t", "after"), "back");
}

// Disk blocks allocated under `dir` (what `du` counts, preallocation
// included).
uint64_t AllocatedBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

TEST_F(TabletServerTest, AnEmptyTableCostsKilobytesOfDisk) {
  auto server = Open();
  ASSERT_NE(server, nullptr);
  const uint64_t before = AllocatedBytes(Options().data_dir);
  for (const char* name : {"t1", "t2", "t3"}) {
    absl::Status cs = server->CreateTable(Schema(name));
    ASSERT_TRUE(cs.ok()) << cs;
  }
  // Before: each table's tablet reserved ~76 MB (a preallocated RocksDB
  // WAL file and MANIFEST).
  const uint64_t grown = AllocatedBytes(Options().data_dir) - before;
  EXPECT_LT(grown, 3 * (256u << 10)) << grown << " bytes of disk for three empty tables";
  std::printf("three empty tables: %llu bytes of disk\n", static_cast<unsigned long long>(grown));
}

TEST_F(TabletServerTest, AcknowledgedWritesSurviveACrashThroughLogReplay) {
  InCrashingChild("rows200");
  auto server = Open();
  EXPECT_TRUE(server->load_errors().empty());
  EXPECT_EQ(Value(*server, "t", "row0"), "v0");
  EXPECT_EQ(Value(*server, "t", "row199"), "v199");
  EXPECT_EQ(Value(*server, "t", "row7"), "<none>");
  // Replay is idempotent: crash again right after recovery, recover again.
  server.reset();
  server = Open();
  EXPECT_EQ(Value(*server, "t", "row42"), "v42");
  EXPECT_EQ(Value(*server, "t", "row7"), "<none>");
}

// The bytes of a log segment up to its last non-zero one: what was written
// of a segment that a crash left with its zero-filled end.
uint64_t WrittenBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last = data.find_last_not_of('\0');
  return last == std::string::npos ? 0 : last + 1;
}

TEST_F(TabletServerTest, DamagedLogBeforeTheTailKeepsTheTabletUnloadedWithAReason) {
  InCrashingChild("big50");
  std::string seg;
  for (const std::string& s : LogSegments()) {
    if (WrittenBytes(s) > 0) seg = s;
  }
  ASSERT_FALSE(seg.empty());
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(WrittenBytes(seg) / 3));
    f.put('\x5a');
  }
  auto server = Open();
  const auto errors = server->load_errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors.begin()->second, HasSubstr("is damaged at offset"));
  auto r = server->ReadRow("t", "row1");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("is damaged"));
  // Loading it by hand still needs the damaged records: refused, not silent.
  const std::string id = errors.begin()->first;
  EXPECT_EQ(server->LoadTablet(id).code(), absl::StatusCode::kDataLoss);
  // And maintenance keeps every segment while a tablet waits for its records.
  const size_t segments = LogSegments().size();
  ASSERT_TRUE(server->RunMaintenance().ok());
  EXPECT_EQ(LogSegments().size(), segments);
}

TEST_F(TabletServerTest, TornLogTailIsCutAndEverythingBeforeItReplays) {
  InCrashingChild("rows20");
  std::string seg;
  for (const std::string& s : LogSegments()) {
    if (WrittenBytes(s) > 0) seg = s;
  }
  std::filesystem::resize_file(seg, WrittenBytes(seg) - 5);
  auto server = Open();
  EXPECT_TRUE(server->load_errors().empty());
  EXPECT_EQ(Value(*server, "t", "row18"), "v");
  EXPECT_EQ(Value(*server, "t", "row19"), "<none>");  // the torn record
}

TEST_F(TabletServerTest, TablesSplitsAndRoutingSurviveRestart) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  EXPECT_EQ(server->CreateTable(Schema()).code(), absl::StatusCode::kAlreadyExists);
  for (const std::string r : {"a", "f", "m", "x"}) {
    ASSERT_TRUE(server->MutateRow("t", r, {Mutation::SetCell("cf", "q", r)}).ok());
  }
  const auto tablets = server->ListTablets("t");
  ASSERT_EQ(tablets.size(), 1u);
  auto children = server->SplitTablet(tablets[0].id(), "g");
  ASSERT_TRUE(children.ok()) << children.status();
  ASSERT_TRUE(server->MutateRow("t", "b", {Mutation::SetCell("cf", "q", "b")}).ok());
  ASSERT_TRUE(server->MutateRow("t", "z", {Mutation::SetCell("cf", "q", "z")}).ok());
  server.reset();
  server = Open();
  EXPECT_EQ(server->ListTablets("t").size(), 2u);
  std::vector<std::string> keys;
  ASSERT_TRUE(server
                  ->ReadRows("t", {}, {},
                             [&](Row& r) {
                               keys.push_back(r.key);
                               return true;
                             })
                  .ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "f", "m", "x", "z"}));
  ReadOptions limited;
  limited.rows_limit = 3;
  keys.clear();
  ASSERT_TRUE(server
                  ->ReadRows("t", {}, limited,
                             [&](Row& r) {
                               keys.push_back(r.key);
                               return true;
                             })
                  .ok());
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_EQ(server->ReadRow("nope", "a").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TabletServerTest, SchemaChangesPersist) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  TableSchema s = Schema();
  auto* f = s.add_families();
  f->set_name("extra");
  f->mutable_gc_rule()->set_max_versions(1);
  ASSERT_TRUE(server->UpdateTable(s).ok());
  ASSERT_TRUE(server->MutateRow("t", "r", {Mutation::SetCell("extra", "q", "v")}).ok());
  server.reset();
  server = Open();
  auto t = server->GetTable("t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->families_size(), 2);
  EXPECT_EQ(Value(*server, "t", "r"), "v");
}

TEST_F(TabletServerTest, UnloadedTabletsAnswerUnavailableAndReloadIntact) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  ASSERT_TRUE(server->MutateRow("t", "r", {Mutation::SetCell("cf", "q", "v")}).ok());
  const std::string id = server->ListTablets("t")[0].id();
  ASSERT_TRUE(server->UnloadTablet(id).ok());
  EXPECT_EQ(server->ReadRow("t", "r").status().code(), absl::StatusCode::kUnavailable);
  server.reset();
  server = Open();
  EXPECT_EQ(server->ReadRow("t", "r").status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(server->LoadTablet(id).ok());
  EXPECT_EQ(Value(*server, "t", "r"), "v");
}

TEST_F(TabletServerTest, UnloadDuringWritesKeepsEveryAcknowledgedWrite) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  const std::string id = server->ListTablets("t")[0].id();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> acked;
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop; ++i) {
        const std::string row = "w" + std::to_string(w) + "-" + std::to_string(i);
        absl::Status s = server->MutateRow("t", row, {Mutation::SetCell("cf", "q", "v")});
        if (s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          acked.push_back(row);
        } else {
          EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          return;
        }
      }
    });
  }
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() >= 200) break;
    }
    std::this_thread::yield();
  }
  ASSERT_TRUE(server->UnloadTablet(id).ok());
  stop = true;
  for (auto& t : writers) t.join();
  // Restart without the log: an unloaded tablet is never replayed, so every
  // acknowledged write must already be in its SSTables.
  server.reset();
  std::filesystem::remove_all(dir_.path() + "/data/commitlog");
  server = Open();
  ASSERT_TRUE(server->LoadTablet(id).ok());
  for (const std::string& row : acked) ASSERT_EQ(Value(*server, "t", row), "v") << row;
}

// A flush makes a tablet's writes durable in SSTables whether or not the
// commit log has synced them; the log is synced first, so a lazy write of
// one tablet never becomes durable while an earlier lazy write of another
// can still be lost with the log's unsynced tail.
TEST_F(TabletServerTest, AFlushSyncsTheCommitLogFirst) {
  TabletServerOptions o = Options();
  o.lazy_sync_delay = absl::InfiniteDuration();  // only a flush or a durable write syncs
  auto server = Open(o);
  for (const char* table : {"t", "u"}) {
    absl::Status cs = server->CreateTable(Schema(table));
    ASSERT_TRUE(cs.ok()) << cs;
    // A tablet's first write reserves sequence numbers, with a flush.
    ASSERT_TRUE(server->MutateRow(table, "first", {Mutation::SetCell("cf", "q", "v")}).ok());
  }
  ASSERT_TRUE(server
                  ->MutateRow("u", "earlier", {Mutation::SetCell("cf", "q", "v")}, kServerTimestamp,
                              /*durable=*/false)
                  .ok());
  ASSERT_TRUE(server
                  ->MutateRow("t", "later", {Mutation::SetCell("cf", "q", "v")}, kServerTimestamp,
                              /*durable=*/false)
                  .ok());
  const uint64_t syncs = server->Stats().log.syncs;
  ASSERT_TRUE(server->UnloadTablet(server->ListTablets("t")[0].id()).ok());
  EXPECT_EQ(server->Stats().log.syncs, syncs + 1);
  // Nothing written since: the next flush needs no sync.
  ASSERT_TRUE(server->UnloadTablet(server->ListTablets("u")[0].id()).ok());
  EXPECT_EQ(server->Stats().log.syncs, syncs + 1);
}

TEST_F(TabletServerTest, MaintenanceFlushesOldWritesAndDeletesSegments) {
  TabletServerOptions o = Options();
  o.log_segment_bytes = 4096;
  o.flush_max_age = absl::ZeroDuration();
  auto server = Open(o);
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(server
                    ->MutateRow("t", "row" + std::to_string(i),
                                {Mutation::SetCell("cf", "q", std::string(100, 'v'))})
                    .ok());
  }
  const size_t before = LogSegments().size();
  EXPECT_GT(before, 3u);
  ASSERT_TRUE(server->RunMaintenance().ok());
  EXPECT_LE(LogSegments().size(), 2u);
  server.reset();
  server = Open(o);
  EXPECT_EQ(Value(*server, "t", "row150"), std::string(100, 'v'));
}

TEST_F(TabletServerTest, DeleteTableRemovesItsData) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  ASSERT_TRUE(server->MutateRow("t", "r", {Mutation::SetCell("cf", "q", "v")}).ok());
  ASSERT_TRUE(server->DeleteTable("t").ok());
  EXPECT_EQ(server->ReadRow("t", "r").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/data/tables/t"));
  EXPECT_EQ(server->DeleteTable("t").code(), absl::StatusCode::kNotFound);
  // Re-created, it starts empty even though the log still holds old records.
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  server.reset();
  server = Open();
  EXPECT_EQ(Value(*server, "t", "r"), "<none>");
}

TEST_F(TabletServerTest, ConcurrentWritersShareLogSyncs) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(server
                        ->MutateRow("t", "w" + std::to_string(t) + "-" + std::to_string(i),
                                    {Mutation::SetCell("cf", "q", "v")})
                        .ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  const TabletServerStats stats = server->Stats();
  EXPECT_GE(stats.log.records, 800u);
  EXPECT_LT(stats.log.syncs, stats.log.records);
}

// Asynchronous writes to one row apply in log order: live, and again when the
// log is replayed after a crash.
TEST_F(TabletServerTest, AsyncWritesToOneRowApplyInLogOrderLiveAndAfterReplay) {
  InCrashingChild("async-hot-row");
  auto server = Open();
  EXPECT_EQ(Value(*server, "t", "hot"), "v499");
}

// CheckAndMutateRow waits for the row's queued writes: each decision it makes
// holds for the state that the writes before it in the log produce.
TEST_F(TabletServerTest, CheckAndMutateAmidAsyncWritesDecidesOnTheLogOrderState) {
  {
    auto server = Open();
    {
      absl::Status cs = server->CreateTable(Schema());
      ASSERT_TRUE(cs.ok()) << cs;
    }
    std::thread cams([&] {
      RowFilter has_q;
      has_q.qualifier_match = RowFilter::QualifierMatch::kExact;
      has_q.qualifier = "q";
      for (int i = 0; i < 300; ++i) {
        auto r = server->CheckAndMutateRow("t", "hot", has_q, {Mutation::SetCell("cf", "m", "yes")},
                                           {Mutation::SetCell("cf", "m", "no")});
        ASSERT_TRUE(r.ok()) << r.status();
      }
    });
    absl::BlockingCounter pending(900);
    for (int i = 0; i < 900; ++i) {
      auto w = std::make_unique<Tablet::RowWrite>();
      w->row = "hot";
      w->mutations = {i % 3 == 0 ? Mutation::DeleteRow() : Mutation::SetCell("cf", "q", "v")};
      w->done = [&](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        pending.DecrementCount();
      };
      ASSERT_TRUE(server->MutateRowAsync("t", w).ok());
      // Spread the writes over the check-and-mutates' run.
      if (i % 3 == 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    pending.Wait();
    cams.join();
  }
  // Walk the log: q exists after a SetCell of q, not after a DeleteRow.
  commitlog::CommitLogOptions lo;
  lo.dir = Options().data_dir + "/commitlog";
  auto log = commitlog::CommitLog::Open(lo);
  ASSERT_TRUE(log.ok()) << log.status();
  bool q_exists = false;
  int cams = 0;
  absl::Status s = (*log)->Replay(0, [&](const commitlog::Record& r) -> absl::Status {
    MS_ASSIGN_OR_RETURN(LogRecord rec, DecodeLogRecord(r.payload));
    if (rec.row != "hot") return absl::OkStatus();
    const Mutation& m = rec.mutations.at(0);
    if (m.type == Mutation::Type::kDeleteRow) {
      q_exists = false;
    } else if (m.qualifier == "q") {
      q_exists = true;
    } else {
      ++cams;
      EXPECT_EQ(m.value, q_exists ? "yes" : "no") << "check-and-mutate at LSN " << r.lsn;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(cams, 300);
}

TEST_F(TabletServerTest, ReadModifyWriteAmidAsyncWritesOfTheSameRowLosesNothing) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  std::thread increments([&] {
    for (int i = 0; i < 200; ++i) {
      ReadModifyWriteRule rule;
      rule.type = ReadModifyWriteRule::Type::kIncrement;
      rule.family = "cf";
      rule.qualifier = "n";
      rule.increment = 1;
      auto r = server->ReadModifyWriteRow("t", "hot", {rule});
      ASSERT_TRUE(r.ok()) << r.status();
    }
  });
  absl::BlockingCounter pending(500);
  for (int i = 0; i < 500; ++i) {
    auto w = std::make_unique<Tablet::RowWrite>();
    w->row = "hot";
    w->mutations = {Mutation::SetCell("cf", "q", "v" + std::to_string(i), 1000)};
    w->done = [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      pending.DecrementCount();
    };
    ASSERT_TRUE(server->MutateRowAsync("t", w).ok());
  }
  pending.Wait();
  increments.join();
  ReadOptions o;
  o.filter.families = {"cf"};
  auto row = server->ReadRow("t", "hot", o);
  ASSERT_TRUE(row.ok() && row->has_value());
  std::map<std::string, std::string> latest;
  for (const Cell& c : (*row)->cells) latest.emplace(c.qualifier, c.value);
  ASSERT_EQ(latest["n"].size(), 8u);
  EXPECT_EQ(static_cast<uint8_t>(latest["n"][7]), 200);
  EXPECT_EQ(latest["q"], "v499");
}

// Non-blocking submissions (what the RPC I/O threads do) racing with splits
// and check-and-mutates: each is queued or told to retry blocking, and no
// acknowledged write is lost.
TEST_F(TabletServerTest, NonBlockingWritesRetriedBlockingLoseNothingDuringSplitsAndChecks) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  std::atomic<bool> stop{false};
  std::thread others([&] {
    RowFilter any;
    for (int i = 0; !stop; ++i) {
      ASSERT_TRUE(server
                      ->CheckAndMutateRow("t", "k" + std::to_string(i % 50), any, {},
                                          {Mutation::SetCell("cf", "c", "x")})
                      .ok());
      if (i % 40 == 39) {
        const auto tablets = server->ListTablets("t");
        for (const TabletEntry& e : tablets) {
          if (e.start_row() < "k25" && (e.end_row().empty() || e.end_row() > "k25")) {
            ASSERT_TRUE(server->SplitTablet(e.id(), "k25").ok());
          }
        }
      }
    }
  });
  int would_block = 0;
  absl::BlockingCounter pending(2000);
  for (int i = 0; i < 2000; ++i) {
    auto w = std::make_unique<Tablet::RowWrite>();
    w->row = "k" + std::to_string(i % 50);
    w->mutations = {Mutation::SetCell("cf", "q", "v" + std::to_string(i), 1000 + i)};
    w->done = [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      pending.DecrementCount();
    };
    absl::Status s = server->MutateRowAsync("t", w, /*may_block=*/false);
    if (IsWouldBlock(s)) {
      ++would_block;
      ASSERT_NE(w, nullptr);
      s = server->MutateRowAsync("t", w);
    }
    ASSERT_TRUE(s.ok()) << s;
  }
  pending.Wait();
  stop = true;
  others.join();
  for (int k = 0; k < 50; ++k) {
    ReadOptions o;
    o.filter.qualifier_match = RowFilter::QualifierMatch::kExact;
    o.filter.qualifier = "q";
    auto row = server->ReadRow("t", "k" + std::to_string(k), o);
    ASSERT_TRUE(row.ok() && row->has_value());
    EXPECT_EQ((*row)->cells.size(), 40u) << "row k" << k;
  }
  std::printf("non-blocking submissions that had to block: %d of 2000\n", would_block);
}

TEST_F(TabletServerTest, AsyncWritesRefusedUpFrontLeaveTheWriteToTheCaller) {
  auto server = Open();
  {
    absl::Status cs = server->CreateTable(Schema());
    ASSERT_TRUE(cs.ok()) << cs;
  }
  auto w = std::make_unique<Tablet::RowWrite>();
  w->row = "r";
  w->mutations = {Mutation::SetCell("nope", "q", "v")};
  bool called = false;
  w->done = [&](absl::Status) { called = true; };
  absl::Status s = server->MutateRowAsync("t", w);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->row, "r");
  EXPECT_TRUE(absl::IsNotFound(server->MutateRowAsync("missing", w)));
  ASSERT_NE(w, nullptr);
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace megastore::storage
