#include "storage/commitlog/commit_log.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::storage::commitlog {
namespace {

using ::testing::HasSubstr;

struct Seen {
  uint64_t lsn;
  std::string tablet;
  std::string payload;
};

std::vector<Seen> ReplayAll(const CommitLog& log, uint64_t after = 0) {
  std::vector<Seen> out;
  absl::Status s = log.Replay(after, [&](const Record& r) {
    out.push_back(Seen{r.lsn, std::string(r.tablet_id), std::string(r.payload)});
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

class CommitLogTest : public ::testing::Test {
 protected:
  // Most tests place damage by where records are: those run without
  // zero-filled segments, whose rotation depends on timing; the tests of
  // preallocation turn it on. Lazy records stay unsynced until a durable
  // one comes (no timed sync), so tests can see them so.
  std::unique_ptr<CommitLog> Open(uint64_t segment_bytes = 64 << 20, bool preallocate = false) {
    CommitLogOptions o;
    o.dir = dir_.path() + "/log";
    o.segment_bytes = segment_bytes;
    o.preallocate = preallocate;
    o.lazy_sync_delay = absl::InfiniteDuration();
    auto log = CommitLog::Open(o);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  TestDir dir_;
};

TEST_F(CommitLogTest, AppendsReplayInOrderAcrossReopen) {
  auto log = Open();
  for (int i = 0; i < 10; ++i) {
    auto lsn =
        log->Append("t" + std::to_string(i % 3), std::string("payload\0", 8) + std::to_string(i));
    ASSERT_TRUE(lsn.ok());
    EXPECT_EQ(*lsn, static_cast<uint64_t>(i + 1));
  }
  log.reset();
  log = Open();
  EXPECT_EQ(log->last_lsn(), 10u);
  EXPECT_TRUE(log->recovery_note().empty());
  auto all = ReplayAll(*log);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all[4].lsn, 5u);
  EXPECT_EQ(all[4].tablet, "t1");
  EXPECT_EQ(all[4].payload, std::string("payload\0", 8) + "4");
  EXPECT_EQ(ReplayAll(*log, 7).size(), 3u);
  EXPECT_EQ(*log->Append("t", "x"), 11u);
}

// A power cut right after a sync: the disk holds the log as it was then
// (simulated by copying its files at that moment), whatever lazy records
// were written after it. Reopened, the log replays every record up to the
// last durable one — the lazy records before it included, which that sync
// made durable — with no gap and no error, from plain and zero-filled
// segments alike, and new appends take the LSNs after it.
TEST_F(CommitLogTest, APowerCutAfterLazyAppendsRecoversTheLogAsOfItsLastSync) {
  namespace fs = std::filesystem;
  for (const bool preallocate : {false, true}) {
    SCOPED_TRACE(preallocate ? "zero-filled segments" : "plain segments");
    const fs::path root = fs::path(dir_.path()) / (preallocate ? "zeros" : "plain");
    CommitLogOptions o;
    o.dir = (root / "log").string();
    o.preallocate = preallocate;
    o.lazy_sync_delay = absl::InfiniteDuration();  // the cut comes before any timed sync
    auto log = CommitLog::Open(o);
    ASSERT_TRUE(log.ok()) << log.status();
    if (preallocate) {
      // Let the first zero-filled file get ready, so records land in one.
      for (int i = 0; i < 2000 && (*log)->stats().preallocated_segments == 0; ++i) {
        ASSERT_TRUE((*log)->Append("t", "warm-up").ok());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_GT((*log)->stats().preallocated_segments, 0u);
    }
    const uint64_t base = (*log)->last_lsn();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*log)->Append("t", "lazy-before", false).ok());
    auto durable = (*log)->Append("t", "durable");
    ASSERT_TRUE(durable.ok()) << durable.status();
    EXPECT_EQ(*durable, base + 4);
    EXPECT_EQ((*log)->synced_lsn(), base + 4);
    // The power goes: what is on disk now is all that will be.
    fs::copy(o.dir, root / "on-disk", fs::copy_options::recursive);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*log)->Append("t", "lazy-after", false).ok());
    EXPECT_LT((*log)->synced_lsn(), (*log)->last_lsn());
    log->reset();
    fs::remove_all(o.dir);
    fs::rename(root / "on-disk", o.dir);

    auto reopened = CommitLog::Open(o);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    EXPECT_TRUE((*reopened)->gaps().empty());
    const std::vector<Seen> all = ReplayAll(**reopened);
    ASSERT_EQ(all.size(), base + 4);
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].lsn, i + 1);
    EXPECT_EQ(all[base].payload, "lazy-before");
    EXPECT_EQ(all[base + 3].payload, "durable");
    auto next = (*reopened)->Append("t", "after the cut");
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, base + 5);
  }
}

TEST_F(CommitLogTest, InlineWritesAreDurableAndCalledBackBeforeAppendReturns) {
  CommitLogOptions o;
  o.dir = dir_.path() + "/inline";
  o.inline_writes = true;
  o.segment_bytes = 256;  // segments roll over inline too
  auto log = CommitLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  const std::thread::id me = std::this_thread::get_id();
  std::vector<uint64_t> called;
  for (int i = 0; i < 20; ++i) {
    bool done = false;
    absl::StatusOr<uint64_t> lsn =
        (*log)->AppendAsync("t", "payload-" + std::to_string(i), [&](absl::Status s, uint64_t l) {
          EXPECT_TRUE(s.ok()) << s;
          EXPECT_EQ(std::this_thread::get_id(), me);  // no thread of the log's own
          called.push_back(l);
          // An append from a callback is written by the same call.
          if (l == 5) {
            absl::StatusOr<uint64_t> nested =
                (*log)->AppendAsync("t", "nested", [&](absl::Status s2, uint64_t l2) {
                  EXPECT_TRUE(s2.ok());
                  called.push_back(l2);
                });
            EXPECT_TRUE(nested.ok());
          }
          done = true;
        });
    ASSERT_TRUE(lsn.ok()) << lsn.status();
    EXPECT_TRUE(done) << "the callback ran before AppendAsync returned";
  }
  ASSERT_TRUE((*log)->Append("t", "last").ok());
  ASSERT_EQ(called.size(), 21u);
  for (size_t i = 0; i < called.size(); ++i) EXPECT_EQ(called[i], i + 1);  // LSN order
  EXPECT_GT((*log)->stats().segments, 1u);
  log->reset();
  auto log2 = CommitLog::Open(o);
  ASSERT_TRUE(log2.ok());
  const std::vector<Seen> all = ReplayAll(**log2);
  ASSERT_EQ(all.size(), 22u);
  EXPECT_EQ(all[5].payload, "nested");
  EXPECT_EQ(all.back().payload, "last");
}

TEST_F(CommitLogTest, AsyncAppendsCallBackInLsnOrderAndCloseDrainsTheQueue) {
  std::vector<uint64_t> returned, called;
  std::mutex mu;
  {
    auto log = Open();
    for (int i = 0; i < 1000; ++i) {
      auto lsn =
          log->AppendAsync("t", "record" + std::to_string(i), [&](absl::Status s, uint64_t lsn) {
            EXPECT_TRUE(s.ok()) << s;
            std::lock_guard<std::mutex> lock(mu);
            called.push_back(lsn);
          });
      ASSERT_TRUE(lsn.ok()) << lsn.status();
      returned.push_back(*lsn);
    }
    // Closing right away still writes, syncs and acknowledges all of them.
  }
  ASSERT_EQ(called.size(), 1000u);
  EXPECT_EQ(called, returned);
  EXPECT_TRUE(std::is_sorted(called.begin(), called.end()));
  auto log = Open();
  const auto seen = ReplayAll(*log);
  ASSERT_EQ(seen.size(), 1000u);
  EXPECT_EQ(seen.back().payload, "record999");
}

TEST_F(CommitLogTest, AsyncCallbackRunsOnlyOnceItsRecordIsDurable) {
  auto log = Open();
  absl::Notification done;
  uint64_t syncs_seen = 0;
  ASSERT_TRUE(log->AppendAsync("t", "x",
                               [&](absl::Status s, uint64_t) {
                                 EXPECT_TRUE(s.ok());
                                 syncs_seen = log->stats().syncs;
                                 done.Notify();
                               })
                  .ok());
  done.WaitForNotification();
  EXPECT_EQ(syncs_seen, 1u);
  EXPECT_EQ(ReplayAll(*log).size(), 1u);
}

// A lazy record that no durable record follows is synced by the writer
// thread once lazy_sync_delay has passed, so it is not left unsynced for
// as long as the server is idle.
TEST_F(CommitLogTest, ALazyRecordNothingFollowsIsSyncedAfterTheDelay) {
  CommitLogOptions o;
  o.dir = dir_.path() + "/log";
  o.preallocate = false;
  o.lazy_sync_delay = absl::Milliseconds(20);
  auto log = CommitLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<uint64_t> lsn = (*log)->Append("t", "lazy alone", /*durable=*/false);
  ASSERT_TRUE(lsn.ok()) << lsn.status();
  while ((*log)->synced_lsn() < *lsn &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ((*log)->synced_lsn(), *lsn);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20))
      << "not before the delay";
  EXPECT_EQ((*log)->stats().syncs, 1u);
  // Idle with nothing lazy left: no more syncs.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ((*log)->stats().syncs, 1u);
}

// Lazy records that keep coming do not put their sync off: it comes the
// delay after the first of them, not after the last.
TEST_F(CommitLogTest, LazyRecordsKeepComingAndAreSyncedAfterTheDelayAnyway) {
  CommitLogOptions o;
  o.dir = dir_.path() + "/log";
  o.preallocate = false;
  o.lazy_sync_delay = absl::Milliseconds(50);
  auto log = CommitLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  absl::StatusOr<uint64_t> first = (*log)->Append("t", "lazy", /*durable=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  // One every 5 ms (well inside the delay) for up to 10 s, queued for the
  // writer thread (which then writes each as a group of its own).
  const auto start = std::chrono::steady_clock::now();
  while ((*log)->synced_lsn() < *first &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    ASSERT_TRUE((*log)
                    ->AppendAsync(
                        "t", "lazy", [](absl::Status, uint64_t) {}, false)
                    .ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE((*log)->synced_lsn(), *first);
}

// SyncWritten makes every written record durable with one sync of its own,
// and none when nothing written is unsynced.
TEST_F(CommitLogTest, SyncWrittenMakesLazyRecordsDurable) {
  auto log = Open(/*segment_bytes=*/256);  // small: the records span segments
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(log->Append("t", "lazy record " + std::to_string(i), false).ok());
  EXPECT_LT(log->synced_lsn(), log->last_lsn());
  const uint64_t syncs = log->stats().syncs;
  ASSERT_TRUE(log->SyncWritten().ok());
  EXPECT_EQ(log->synced_lsn(), log->last_lsn());
  EXPECT_EQ(log->stats().syncs, syncs + 1);
  ASSERT_TRUE(log->SyncWritten().ok());
  EXPECT_EQ(log->stats().syncs, syncs + 1);
  // The records are all there, in order, after a reopen.
  const uint64_t last = log->last_lsn();
  log.reset();
  log = Open(256);
  ASSERT_NE(log, nullptr);
  const std::vector<Seen> all = ReplayAll(*log);
  ASSERT_EQ(all.size(), last);
  EXPECT_EQ(all.back().payload, "lazy record 19");
}

// A lazy record is done once written, without a sync of its own; a
// durable record after it syncs both; callbacks stay in LSN order.
TEST_F(CommitLogTest, LazyRecordsAreNotSyncedOnTheirOwnAndKeepLsnOrder) {
  auto log = Open();
  ASSERT_TRUE(log->Append("t", "lazy alone", /*durable=*/false).ok());
  EXPECT_EQ(log->stats().syncs, 0u) << "a group of lazy records only is not synced";
  EXPECT_EQ(log->stats().records, 1u);
  EXPECT_EQ(log->synced_lsn(), 0u) << "nothing is known durable yet";
  EXPECT_EQ(log->last_lsn(), 1u);
  ASSERT_TRUE(log->Append("t", "durable").ok());
  EXPECT_EQ(log->stats().syncs, 1u);
  EXPECT_EQ(log->synced_lsn(), 2u) << "the durable record's sync covers the lazy one";

  // Queued together: lazy, durable, lazy. Called back 1, 2, 3.
  std::mutex mu;
  std::vector<uint64_t> called;
  absl::Notification all;
  auto record = [&](absl::Status s, uint64_t lsn) {
    EXPECT_TRUE(s.ok()) << s;
    std::lock_guard<std::mutex> lock(mu);
    called.push_back(lsn);
    if (called.size() == 300) all.Notify();
  };
  std::vector<uint64_t> lsns;
  for (int i = 0; i < 100; ++i) {
    for (bool durable : {false, true, false}) {
      auto lsn = log->AppendAsync("t", durable ? "d" : "l", record, durable);
      ASSERT_TRUE(lsn.ok()) << lsn.status();
      lsns.push_back(*lsn);
    }
  }
  all.WaitForNotification();
  EXPECT_EQ(called, lsns);
  const uint64_t syncs = log->stats().syncs;
  EXPECT_GE(syncs, 2u);
  EXPECT_LE(syncs, 101u) << "one sync per group at most";
  log.reset();
  log = Open();
  EXPECT_EQ(ReplayAll(*log).size(), 302u) << "lazy records are in the log like the others";
}

TEST_F(CommitLogTest, ConcurrentAppendsShareSyncs) {
  auto log = Open();
  std::vector<std::thread> threads;
  std::vector<std::vector<uint64_t>> lsns(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        auto lsn = log->Append("tablet", std::to_string(t));
        ASSERT_TRUE(lsn.ok());
        lsns[t].push_back(*lsn);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<uint64_t> all;
  for (const auto& v : lsns) {
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), 800u);
  EXPECT_EQ(*all.rbegin(), 800u);
  const CommitLogStats stats = log->stats();
  EXPECT_EQ(stats.records, 800u);
  // Eight writers' records pile up while the writer thread syncs a group.
  EXPECT_LT(stats.syncs, stats.records);
  EXPECT_GT(stats.max_batch_records, 1u);
}

// An Append that finds nobody writing writes its group itself; callbacks
// stay in LSN order whichever thread writes, and nothing is lost or
// written twice when appenders and the writer thread take turns.
TEST_F(CommitLogTest, AnIdleLogIsWrittenByTheAppenderAndCallbacksKeepLsnOrder) {
  auto log = Open();
  ASSERT_TRUE(log->Append("t", "alone").ok());
  EXPECT_EQ(log->stats().appender_groups, 1u);
  EXPECT_EQ(log->stats().syncs, 1u);
  EXPECT_EQ(log->synced_lsn(), 1u);

  std::mutex mu;
  std::vector<uint64_t> called;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const bool durable = i % 3 != 0;
        if (t % 2 == 0) {
          auto lsn = log->Append("t", std::to_string(t), durable);
          ASSERT_TRUE(lsn.ok()) << lsn.status();
          std::lock_guard<std::mutex> lock(mu);
          EXPECT_TRUE(std::find(called.begin(), called.end(), *lsn) == called.end());
        } else {
          auto lsn = log->AppendAsync(
              "t", std::to_string(t),
              [&](absl::Status s, uint64_t lsn) {
                EXPECT_TRUE(s.ok()) << s;
                std::lock_guard<std::mutex> lock(mu);
                called.push_back(lsn);
              },
              durable);
          ASSERT_TRUE(lsn.ok()) << lsn.status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  log.reset();  // drains the async appends
  ASSERT_EQ(called.size(), 600u);
  EXPECT_TRUE(std::is_sorted(called.begin(), called.end())) << "callbacks ran out of LSN order";
  log = Open();
  const auto seen = ReplayAll(*log);
  ASSERT_EQ(seen.size(), 1201u);
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].lsn, i + 1);
}

TEST_F(CommitLogTest, SegmentsRollAndFlushedOnesAreDeleted) {
  auto log = Open(/*segment_bytes=*/200);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(log->Append("t", std::string(50, 'x')).ok());
  EXPECT_GT(Segments(dir_.path() + "/log").size(), 5u);
  ASSERT_TRUE(log->DeleteSegmentsThrough(20).ok());
  // Records after 20 are all still there; none at or below it is required.
  auto rest = ReplayAll(*log, 20);
  ASSERT_EQ(rest.size(), 10u);
  EXPECT_EQ(rest.front().lsn, 21u);
  log.reset();
  log = Open(200);
  EXPECT_EQ(log->last_lsn(), 30u);
  EXPECT_EQ(ReplayAll(*log, 20).size(), 10u);
}

void Truncate(const std::string& path, uint64_t by) {
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - by);
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

std::string NonEmptyLastSegment(const std::string& dir) {
  std::string last;
  for (const std::string& s : Segments(dir)) {
    if (std::filesystem::file_size(s) > 0) last = s;
  }
  return last;
}

TEST_F(CommitLogTest, TornTailIsTruncatedAndLogged) {
  auto log = Open();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(log->Append("t", "record" + std::to_string(i)).ok());
  log.reset();
  const std::string seg = NonEmptyLastSegment(dir_.path() + "/log");
  const uint64_t size = std::filesystem::file_size(seg);
  Truncate(seg, 3);
  log = Open();
  EXPECT_THAT(log->recovery_note(), HasSubstr("torn tail"));
  EXPECT_THAT(log->recovery_note(), HasSubstr("LSN 4"));
  EXPECT_TRUE(log->gaps().empty());
  EXPECT_EQ(log->last_lsn(), 4u);
  EXPECT_EQ(ReplayAll(*log).size(), 4u);
  EXPECT_LT(std::filesystem::file_size(seg), size - 3);
  EXPECT_EQ(*log->Append("t", "after"), 5u);
  log.reset();
  log = Open();
  auto all = ReplayAll(*log);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.back().payload, "after");
}

// A complete last record with a bad checksum is not a torn write (that
// leaves the record incomplete, or zeros): it is kept, and reported as a
// gap that tablets needing it do not replay across. Before, it was cut off
// like a torn tail, silently losing an acknowledged write.
TEST_F(CommitLogTest, ACompleteTailRecordWithABadChecksumIsCorruptionNotATornWrite) {
  auto log = Open();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(log->Append("t", "record" + std::to_string(i)).ok());
  log.reset();
  const std::string seg = NonEmptyLastSegment(dir_.path() + "/log");
  const uint64_t size = std::filesystem::file_size(seg);
  FlipByte(seg, size - 2);
  log = Open();
  EXPECT_THAT(log->recovery_note(), HasSubstr("corrupt record"));
  EXPECT_EQ(std::filesystem::file_size(seg), size) << "kept for inspection";
  ASSERT_EQ(log->gaps().size(), 1u);
  EXPECT_EQ(log->gaps()[0].last_good_lsn, 4u);
  EXPECT_EQ(log->gaps()[0].next_good_lsn, 6u) << "the damaged record is LSN 5";
  EXPECT_EQ(log->Replay(0, [](const Record&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kDataLoss);
  // New records never reuse the damaged record's LSN, and the damage is
  // still a gap after more restarts (it used to vanish on the second).
  EXPECT_EQ(*log->Append("t", "after"), 6u);
  for (int restart = 0; restart < 2; ++restart) {
    log.reset();
    log = Open();
    ASSERT_EQ(log->gaps().size(), 1u) << "restart " << restart;
    EXPECT_EQ(log->gaps()[0].next_good_lsn, 6u);
    EXPECT_EQ(std::filesystem::file_size(seg), size);
  }
  auto rest = ReplayAll(*log, 5);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].payload, "after");
}

TEST_F(CommitLogTest, AZeroFilledTailIsATornWrite) {
  auto log = Open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append("t", "record" + std::to_string(i)).ok());
  log.reset();
  const std::string seg = NonEmptyLastSegment(dir_.path() + "/log");
  {
    std::ofstream f(seg, std::ios::binary | std::ios::app);
    f << std::string(4096, '\0');
  }
  log = Open();
  EXPECT_THAT(log->recovery_note(), HasSubstr("unwritten space"));
  EXPECT_TRUE(log->gaps().empty());
  EXPECT_EQ(ReplayAll(*log).size(), 3u);
}

// Appends until the log writes into a zero-filled segment (the preparer
// makes one in the background); false if none came within seconds.
bool AppendUntilPreallocated(CommitLog& log, int* appended) {
  for (int tries = 0; tries < 500; ++tries) {
    if (!log.Append("t", "record" + std::to_string(*appended)).ok()) return false;
    ++*appended;
    if (log.stats().preallocated_segments > 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

uint64_t FileSize(const std::string& path) { return std::filesystem::file_size(path); }

TEST_F(CommitLogTest, SegmentsGoToZeroFilledFilesAndAreCutToTheirRecords) {
  constexpr uint64_t kSegment = 64 << 10;
  auto log = Open(kSegment, /*preallocate=*/true);
  int appended = 0;
  ASSERT_TRUE(AppendUntilPreallocated(*log, &appended));
  const std::string live = NonEmptyLastSegment(dir_.path() + "/log");
  EXPECT_EQ(FileSize(live), kSegment) << "written into zeros, not appended";
  // Through several segments, each moving to a prepared file.
  // Through many segments, each moving to a prepared file as soon as one
  // is ready: every record must come back whole.
  const int small = appended;
  for (int i = 0; i < 400; ++i, ++appended)
    ASSERT_TRUE(log->Append("t", std::string(3000, static_cast<char>('a' + i % 26))).ok());
  EXPECT_GT(log->stats().preallocated_segments, 1u);
  log.reset();
  for (const std::string& f : Segments(dir_.path() + "/log")) {
    std::ifstream in(f, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(data.empty() || data.back() != '\0') << f << " still ends in zeros";
  }
  log = Open(kSegment, /*preallocate=*/true);
  EXPECT_TRUE(log->recovery_note().empty()) << log->recovery_note();
  EXPECT_TRUE(log->gaps().empty());
  const auto all = ReplayAll(*log);
  ASSERT_EQ(all.size(), static_cast<size_t>(appended));
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].lsn, i + 1);
    const int big = static_cast<int>(i) - small;
    if (big >= 0) {
      EXPECT_EQ(all[i].payload, std::string(3000, static_cast<char>('a' + big % 26)));
    }
  }
}

// A crash leaves the last segment with its zeros: recovery cuts them and
// loses nothing acknowledged. (The copy of an open log is what a crash
// leaves behind, page cache and all.)
TEST_F(CommitLogTest, ACrashInAZeroFilledSegmentLosesNothingAcknowledged) {
  auto log = Open(1 << 20, /*preallocate=*/true);
  int appended = 0;
  ASSERT_TRUE(AppendUntilPreallocated(*log, &appended));
  const std::string copy = dir_.path() + "/copy";
  std::filesystem::copy(dir_.path() + "/log", copy);
  log.reset();
  CommitLogOptions o;
  o.dir = copy;
  auto recovered = CommitLog::Open(o);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  EXPECT_THAT((*recovered)->recovery_note(), HasSubstr("unwritten space"));
  EXPECT_TRUE((*recovered)->gaps().empty());
  EXPECT_EQ(ReplayAll(**recovered).size(), static_cast<size_t>(appended));
}

// In a zero-filled segment a crash can cut the last record anywhere with
// zeros rather than with the end of the file: a damaged record with a part
// of a sector all zeros and nothing readable after it is torn. With a
// readable record after it, it is damage, never skipped silently.
TEST_F(CommitLogTest, ARecordCutByZerosEndsTheLastSegmentOnlyWhenNothingFollows) {
  for (const bool record_after : {false, true}) {
    SCOPED_TRACE(record_after ? "a record follows" : "only zeros follow");
    TestDir dir;
    CommitLogOptions o;
    o.dir = dir.path() + "/log";
    o.preallocate = false;  // the zeros are written by hand below
    auto log = CommitLog::Open(o);
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*log)->Append("t", "record" + std::to_string(i)).ok());
    log->reset();
    const std::string seg = NonEmptyLastSegment(o.dir);
    const uint64_t good = FileSize(seg);
    std::string write;
    AppendRecord(&write, 4, "t", std::string(3000, 'y'));
    const size_t second = write.size();
    if (record_after) AppendRecord(&write, 5, "t", "whole");
    // The record at LSN 4 lost a 512-byte sector's worth in its middle.
    const size_t hole = (good + 1024) / 512 * 512 - good;
    ASSERT_LT(hole + 512, second);
    std::fill(write.begin() + static_cast<ptrdiff_t>(hole),
              write.begin() + static_cast<ptrdiff_t>(hole + 512), '\0');
    {
      std::ofstream f(seg, std::ios::binary | std::ios::app);
      f << write << std::string(8192, '\0');
    }
    log = CommitLog::Open(o);
    ASSERT_TRUE(log.ok()) << log.status();
    if (record_after) {
      ASSERT_EQ((*log)->gaps().size(), 1u);
      EXPECT_EQ((*log)->gaps()[0].last_good_lsn, 3u);
      EXPECT_EQ((*log)->gaps()[0].next_good_lsn, 5u);
    } else {
      EXPECT_THAT((*log)->recovery_note(), HasSubstr("torn tail"));
      EXPECT_TRUE((*log)->gaps().empty());
      EXPECT_EQ(ReplayAll(**log).size(), 3u);
      EXPECT_EQ(FileSize(seg), good);
      EXPECT_EQ(*(*log)->Append("t", "next"), 4u);
    }
  }
}

// Every record flushed and its segments deleted: the last segment holds
// none, and its name says where the log goes on.
TEST_F(CommitLogTest, LsnsGoOnAfterEveryRecordWasDeleted) {
  auto log = Open();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(log->Append("t", "r").ok());
  log.reset();
  log = Open();  // starts an empty segment at LSN 6
  ASSERT_TRUE(log->DeleteSegmentsThrough(5).ok());
  log.reset();
  log = Open();
  EXPECT_EQ(log->last_lsn(), 5u);
  EXPECT_TRUE(log->gaps().empty());
  EXPECT_EQ(*log->Append("t", "next"), 6u);
}

// A segment whose zeros a crash left uncut, the next going on right after
// its last record: nothing is missing, so it is no gap.
TEST_F(CommitLogTest, AnUncutSegmentFollowedByTheNextLsnIsNoGap) {
  auto log = Open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append("t", "a").ok());
  log.reset();
  const std::string first = NonEmptyLastSegment(dir_.path() + "/log");
  {
    std::ofstream f(first, std::ios::binary | std::ios::app);
    f << std::string(4096, '\0');
  }
  {
    std::string next;
    AppendRecord(&next, 4, "t", "b");
    std::ofstream f(dir_.path() + "/log/" + SegmentFileName(4), std::ios::binary);
    f << next;
  }
  log = Open();
  EXPECT_TRUE(log->gaps().empty());
  EXPECT_EQ(ReplayAll(*log).size(), 4u);
}

TEST_F(CommitLogTest, AdvancingPastAMissingRangeLeavesNoGapAndLsnsNeverGoBack) {
  auto log = Open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append("t", "r").ok());
  log.reset();
  log = Open();
  ASSERT_TRUE(log->AdvanceTo(100).ok());
  EXPECT_EQ(*log->Append("t", "hundred"), 100u);
  EXPECT_EQ(log->AdvanceTo(200).code(), absl::StatusCode::kFailedPrecondition)
      << "only before appends";
  log.reset();
  log = Open();
  EXPECT_TRUE(log->gaps().empty()) << "the skipped range is recorded";
  auto all = ReplayAll(*log);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.back().lsn, 100u);
  EXPECT_EQ(*log->Append("t", "next"), 101u);
}

TEST_F(CommitLogTest, CorruptionBeforeTheTailRefusesReplayThatNeedsIt) {
  auto log = Open();
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(log->Append("t", "record-number-" + std::to_string(i)).ok());
  log.reset();
  const std::string seg = NonEmptyLastSegment(dir_.path() + "/log");
  FlipByte(seg, std::filesystem::file_size(seg) / 2);  // some record in the middle
  log = Open();
  ASSERT_EQ(log->gaps().size(), 1u);
  const LogGap gap = log->gaps()[0];
  EXPECT_GT(gap.next_good_lsn, gap.last_good_lsn + 1);
  EXPECT_EQ(log->last_lsn(), 10u);  // nothing after the damage was cut off

  absl::Status s = log->Replay(0, [](const Record&) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(seg));
  EXPECT_THAT(std::string(s.message()), HasSubstr("damaged at offset"));
  // A tablet that flushed past the damage replays fine.
  auto rest = ReplayAll(*log, gap.next_good_lsn - 1);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().lsn, gap.next_good_lsn);
  EXPECT_EQ(rest.back().lsn, 10u);
}

TEST_F(CommitLogTest, GarbageSegmentIsAGapNotACrash) {
  std::filesystem::create_directories(dir_.path() + "/log");
  {
    std::ofstream f(dir_.path() + "/log/" + SegmentFileName(1), std::ios::binary);
    f << std::string("\xff\xff\xff\xff\x10\x00\x00\x00garbage garbage garbage", 32);
  }
  {
    std::ofstream f(dir_.path() + "/log/" + SegmentFileName(7), std::ios::binary);
    std::string rec;
    AppendRecord(&rec, 7, "t", "seven");
    f << rec;
  }
  auto log = Open();
  ASSERT_EQ(log->gaps().size(), 1u);
  EXPECT_EQ(log->gaps()[0].next_good_lsn, 7u);
  EXPECT_EQ(log->last_lsn(), 7u);
  EXPECT_EQ(log->Replay(0, [](const Record&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kDataLoss);
  auto rest = ReplayAll(*log, 6);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].payload, "seven");
}

TEST(LogFormatTest, RecordsRoundTripAndRejectDamage) {
  std::string buf;
  AppendRecord(&buf, 42, std::string("tab\0let", 7), "payload");
  Record r;
  size_t n;
  ASSERT_EQ(ParseRecord(buf, &r, &n), ParseResult::kOk);
  EXPECT_EQ(n, buf.size());
  EXPECT_EQ(r.lsn, 42u);
  EXPECT_EQ(r.tablet_id, std::string("tab\0let", 7));
  EXPECT_EQ(r.payload, "payload");
  EXPECT_EQ(ParseRecord(std::string_view(buf).substr(0, buf.size() - 1), &r, &n),
            ParseResult::kTruncated);
  std::string bad = buf;
  bad[10] ^= 1;
  EXPECT_EQ(ParseRecord(bad, &r, &n), ParseResult::kCorrupt);
  std::string huge = buf;
  huge[7] = '\x7f';  // length far beyond the limit
  EXPECT_EQ(ParseRecord(huge, &r, &n), ParseResult::kCorrupt);
  uint64_t lsn;
  EXPECT_TRUE(ParseSegmentFileName(SegmentFileName(123), &lsn));
  EXPECT_EQ(lsn, 123u);
  EXPECT_FALSE(ParseSegmentFileName("123.log", &lsn));
}

}  // namespace
}  // namespace megastore::storage::commitlog
