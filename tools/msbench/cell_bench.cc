#include "tools/msbench/cell_bench.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/random.h"
#include "base/rpc/rpc.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/msbench/child_process.h"
#include "tools/msbench/stats.h"

namespace megastore::tools {
namespace {

constexpr char kCell[] = "bench";
constexpr char kTable[] = "usertable";

// megastored beside this binary.
std::string Megastored() { return BesideThisBinary("megastored"); }

using Process = ChildProcess;

// A cell: lock service, master, tablet servers, and a client.
class Cell {
 public:
  Cell(const CellBenchOptions& o, std::string dir) : o_(o), dir_(std::move(dir)) {}

  std::string Start(int servers) {
    std::filesystem::create_directories(dir_);
    const int lock_port = FreePort();
    lock_address_ = StrCat("127.0.0.1:", lock_port);
    if (!lock_.Start({Megastored(), "--roles=lock", "--listen=" + lock_address_,
                      "--data=" + dir_ + "/lock", "--log-level=warn"},
                     dir_ + "/lock.log", "lock service listening"))
      return "the lock service did not start";
    if (!master_.Start({Megastored(), "--roles=master", StrCat("--listen=127.0.0.1:", FreePort()),
                        "--data=" + dir_ + "/root", StrCat("--cell=", kCell),
                        "--lock-service=" + lock_address_, "--session-ttl=" + o_.session_ttl,
                        "--balance-delay=0s", "--log-level=warn"},
                       dir_ + "/master.log", "campaigning"))
      return "the master did not start";
    for (int i = 0; i < servers; ++i) {
      if (std::string e = AddServer(); !e.empty()) return e;
    }
    auto lock = storage::cell::ConnectLockService(lock_address_);
    if (!lock.ok()) return std::string(lock.status().message());
    lock_client_ = std::move(*lock);
    storage::cell::CellClientOptions co;
    co.cell = kCell;
    co.retry_for = absl::Seconds(120);
    client_ = std::make_unique<storage::cell::CellClient>(lock_client_.get(), Env::Default(), co);
    return "";
  }

  std::string AddServer() {
    const std::string address = StrCat("127.0.0.1:", FreePort());
    auto p = std::make_unique<Process>();
    std::vector<std::string> argv = {Megastored(),
                                     "--listen=" + address,
                                     "--data=" + dir_ + "/root",
                                     StrCat("--cell=", kCell),
                                     "--lock-service=" + lock_address_,
                                     "--session-ttl=" + o_.session_ttl,
                                     "--split-threshold-mb=100000",
                                     "--flush-max-age=1h",
                                     "--log-level=warn"};
    if (!o_.sync) argv.push_back("--no-sync");
    if (!p->Start(argv, dir_ + "/servers.log", "registered in cell"))
      return "a tablet server did not start";
    servers_[address] = std::move(p);
    return "";
  }

  absl::StatusOr<storage::cell::CellState> State() {
    MS_ASSIGN_OR_RETURN(std::string m, storage::cell::FindMaster(lock_client_.get(), kCell));
    return storage::cell::MasterClient(m, absl::Seconds(10)).State();
  }

  absl::Status CreateTable(const std::vector<std::string>& splits) {
    storage::TableSchema s;
    s.set_name(kTable);
    s.add_families()->set_name("f");
    absl::Status last = absl::UnavailableError("no master yet");
    for (int i = 0; i < 300; ++i) {
      absl::StatusOr<std::string> m = storage::cell::FindMaster(lock_client_.get(), kCell);
      if (m.ok()) {
        last = storage::cell::MasterClient(*m, absl::Seconds(30)).CreateTable(s, splits);
        if (last.ok() || absl::IsAlreadyExists(last)) return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return last;
  }

  // Until every tablet is served and the servers' counts stay put.
  bool WaitBalanced(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::string last;
    int same = 0;
    while (absl::Now() < deadline) {
      auto s = State();
      if (s.ok()) {
        bool served = true;
        std::string shape;
        for (const auto& t : s->tablets()) {
          served &= t.serving();
          shape += t.id() + "@" + t.server() + ";";
        }
        same = served && shape == last ? same + 1 : 0;
        last = shape;
        if (same >= 4) return true;
      }
      absl::SleepFor(absl::Milliseconds(500));
    }
    return false;
  }

  storage::cell::CellClient& client() { return *client_; }
  std::map<std::string, std::unique_ptr<Process>>& servers() { return servers_; }

 private:
  const CellBenchOptions& o_;
  const std::string dir_;
  std::string lock_address_;
  Process lock_, master_;
  std::map<std::string, std::unique_ptr<Process>> servers_;
  std::unique_ptr<storage::lock::LockService> lock_client_;
  std::unique_ptr<storage::cell::CellClient> client_;
};

std::string Key(uint64_t i) {
  uint64_t h = i * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 31;
  char buf[24];
  std::snprintf(buf, sizeof(buf), "user%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string RandomValue(Random& rng, int64_t size) {
  std::string v(static_cast<size_t>(size), '\0');
  for (char& c : v) c = static_cast<char>(rng.Next());
  return v;
}

// `o.runs` rounds of `o.seconds` of writes to new keys, then of point reads
// of written keys, through `client` (a TabletClient or a CellClient: the
// same calls); the median writes/s and reads/s.
template <typename Client>
absl::StatusOr<std::pair<double, double>> WritesThenReads(const CellBenchOptions& o,
                                                          Client& client) {
  std::vector<double> writes, reads;
  std::atomic<uint64_t> written{0};
  for (int run = 0; run < o.runs; ++run) {
    std::vector<Random> rngs;
    for (int t = 0; t < o.clients; ++t)
      rngs.emplace_back(static_cast<uint64_t>(run * 1000 + t + 1));
    auto w = Timed(o.clients, o.seconds, Env::Default(), [&](int t, uint64_t) {
      return client.MutateRow(
          kTable, Key(written.fetch_add(1)),
          {storage::Mutation::SetCell("f", "v", RandomValue(rngs[t], o.value_size))});
    });
    if (!w.ok()) return absl::Status(w.status().code(), StrCat("writes: ", w.status().message()));
    writes.push_back(*w);
    auto r = Timed(o.clients, o.seconds, Env::Default(), [&](int t, uint64_t) -> absl::Status {
      const uint64_t i = rngs[t].Next() % std::max<uint64_t>(1, written.load());
      auto row = client.ReadRow(kTable, Key(i));
      if (!row.ok()) return row.status();
      if (!row->has_value())
        return absl::DataLossError(StrCat("row ", Key(i), " written but not found"));
      return absl::OkStatus();
    });
    if (!r.ok()) return absl::Status(r.status().code(), StrCat("reads: ", r.status().message()));
    reads.push_back(*r);
  }
  return std::make_pair(Median(writes), Median(reads));
}

// One recovery: a cell of two servers, `mb` MiB of unflushed writes to a
// one-tablet table, its server SIGKILLed; milliseconds until the tablet is
// served elsewhere (every row checked). `split` gets the master's report.
absl::StatusOr<double> RecoverOnce(const CellBenchOptions& o, const std::string& dir, double mb,
                                   std::string* split) {
  Cell cell(o, dir);
  if (std::string e = cell.Start(2); !e.empty()) return absl::InternalError(e);
  if (absl::Status s = cell.CreateTable({}); !s.ok()) return s;
  if (!cell.WaitBalanced(absl::Seconds(120)))
    return absl::InternalError("the tablets were not all served");
  // Unflushed writes of the one user tablet (nothing flushes for an hour):
  // all of it stays in its server's commit log.
  const int64_t rows = static_cast<int64_t>(mb * 1024 * 1024) / std::max<int64_t>(1, o.value_size);
  std::atomic<int64_t> next{0};
  std::vector<Random> rngs;
  for (int t = 0; t < o.clients; ++t) rngs.emplace_back(static_cast<uint64_t>(t + 7));
  auto w = Timed(o.clients, 3600, Env::Default(), [&](int t, uint64_t) -> absl::Status {
    const int64_t i = next.fetch_add(1);
    if (i >= rows) return absl::CancelledError("done");
    return cell.client().MutateRow(
        kTable, Key(static_cast<uint64_t>(i)),
        {storage::Mutation::SetCell("f", "v", RandomValue(rngs[t], o.value_size))});
  });
  if (!w.ok() && !absl::IsCancelled(w.status()))
    return absl::InternalError(StrCat("loading: ", w.status().ToString()));
  auto state = cell.State();
  if (!state.ok()) return state.status();
  std::string victim, tablet;
  for (const auto& t : state->tablets()) {
    if (t.table() == kTable) {
      victim = t.server();
      tablet = t.id();
    }
  }
  const absl::Time killed = absl::Now();
  cell.servers()[victim]->Kill(SIGKILL);
  bool back = false;
  std::string split_event;
  while (!back && absl::Now() - killed < absl::Seconds(300)) {
    absl::SleepFor(absl::Milliseconds(20));
    auto s = cell.State();
    if (!s.ok()) continue;
    for (const auto& t : s->tablets())
      back |= t.id() == tablet && t.serving() && t.server() != victim;
    for (const auto& e : s->events()) {
      if (e.find("split commit log") != std::string::npos) split_event = e;
    }
  }
  if (!back)
    return absl::InternalError(StrCat("tablet ", tablet, " was not served again within 300 s"));
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - killed);
  // Everything is there.
  for (int64_t i = 0; i < rows; i += std::max<int64_t>(1, rows / 200)) {
    auto row = cell.client().ReadRow(kTable, Key(static_cast<uint64_t>(i)));
    if (!row.ok() || !row->has_value())
      return absl::InternalError(
          StrCat("after recovery, row ", Key(static_cast<uint64_t>(i)), " is missing"));
  }
  const size_t colon = split_event.find(": ");
  *split = colon == std::string::npos ? split_event : split_event.substr(colon + 2);
  return ms;
}

}  // namespace

int RunCellBench(const CellBenchOptions& o) {
  SetLogLevel("warn");
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp)
    root = (std::filesystem::temp_directory_path() /
            StrCat("msbench-cell-", Env::Default()->Random64()))
               .string();
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "msbench cell: %s (logs under %s)\n", what.c_str(), root.c_str());
    return 1;
  };
  std::vector<std::string> splits;
  for (int i = 1; i < o.tablets; ++i) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "user%016llx",
                  static_cast<unsigned long long>((~0ULL / static_cast<uint64_t>(o.tablets)) *
                                                  static_cast<uint64_t>(i)));
    splits.push_back(buf);
  }
  if (!o.json) {
    std::printf(
        "msbench cell: %d clients, %lld-byte values, %s, table split into %d tablets, %.1f s "
        "phases, "
        "medians of %d runs\n",
        o.clients, static_cast<long long>(o.value_size), o.sync ? "synced commit logs" : "unsynced",
        o.tablets, o.seconds, o.runs);
    std::printf("%-12s %14s %14s\n", "servers", "writes/s", "reads/s");
  }
  // The baseline: one standalone tablet server (no cell, no location
  // lookups), driven directly over RPC at the same concurrency.
  {
    Process standalone;
    const std::string address = StrCat("127.0.0.1:", FreePort());
    std::vector<std::string> argv = {Megastored(), "--listen=" + address,
                                     "--data=" + root + "/standalone", "--log-level=warn"};
    if (!o.sync) argv.push_back("--no-sync");
    std::filesystem::create_directories(root);
    if (!standalone.Start(argv, root + "/standalone.log", "tablet server listening")) {
      return fail("the standalone tablet server did not start");
    }
    storage::TabletClient client(address);
    storage::TableSchema schema;
    schema.set_name(kTable);
    schema.add_families()->set_name("f");
    if (absl::Status s = client.CreateTable(schema); !s.ok()) return fail(s.ToString());
    // The same tablets as the cell's table.
    for (const std::string& row : splits) {
      auto tablets = client.ListTablets(kTable);
      if (!tablets.ok()) return fail(tablets.status().ToString());
      for (const auto& t : *tablets) {
        if (t.entry.start_row() < row && (t.entry.end_row().empty() || row < t.entry.end_row())) {
          if (auto c = client.SplitTablet(t.entry.id(), row); !c.ok())
            return fail(c.status().ToString());
          break;
        }
      }
    }
    auto rates = WritesThenReads(o, client);
    if (!rates.ok()) return fail(StrCat("standalone: ", rates.status().message()));
    const auto [writes, reads] = *rates;
    if (o.json) {
      std::printf(
          "{\"servers\":\"standalone\",\"clients\":%d,\"writes_per_s\":%.1f,\"reads_per_s\":%.1f}"
          "\n",
          o.clients, writes, reads);
    } else {
      std::printf(
          "%-12s %14.1f %14.1f   (one tablet server, no cell, the same tablets: the baseline)\n",
          "standalone", writes, reads);
    }
    std::fflush(stdout);
  }
  for (int n : o.servers) {
    Cell cell(o, StrCat(root, "/throughput-", n));
    if (std::string e = cell.Start(n); !e.empty()) return fail(e);
    if (absl::Status s = cell.CreateTable(splits); !s.ok()) return fail(s.ToString());
    if (!cell.WaitBalanced(absl::Seconds(120))) return fail("the tablets were not all served");
    auto rates = WritesThenReads(o, cell.client());
    if (!rates.ok()) return fail(std::string(rates.status().message()));
    const auto [writes, reads] = *rates;
    if (o.json) {
      std::printf("{\"servers\":%d,\"clients\":%d,\"writes_per_s\":%.1f,\"reads_per_s\":%.1f}\n", n,
                  o.clients, writes, reads);
    } else {
      std::printf("%-12d %14.1f %14.1f\n", n, writes, reads);
    }
    std::fflush(stdout);
  }

  if (!o.json && !o.recovery_mb.empty()) {
    std::printf("\nrecovery of a SIGKILLed server's tablet (session ttl %s):\n",
                o.session_ttl.c_str());
    std::printf("%-12s %14s   %s\n", "log MiB", "recovery ms", "the master's log split");
  }
  absl::Duration ttl;
  absl::ParseDuration(o.session_ttl, &ttl);
  for (double mb : o.recovery_mb) {
    std::vector<double> times;
    std::string split;
    for (int run = 0; run < o.runs; ++run) {
      absl::StatusOr<double> ms =
          RecoverOnce(o, StrCat(root, "/recovery-", mb, "-", run), mb, &split);
      if (!ms.ok()) return fail(std::string(ms.status().message()));
      times.push_back(*ms);
    }
    const double ms = Median(times);
    if (o.json) {
      std::printf("{\"log_mib\":%.1f,\"recovery_ms\":%.0f,\"ttl_ms\":%.0f,\"split\":\"%s\"}\n", mb,
                  ms, absl::ToDoubleMilliseconds(ttl), JsonEscape(split).c_str());
    } else {
      std::printf("%-12.1f %14.0f   %s\n", mb, ms, split.c_str());
    }
    std::fflush(stdout);
  }
  if (temp) {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  return 0;
}

}  // namespace megastore::tools
