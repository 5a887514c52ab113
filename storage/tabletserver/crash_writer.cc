// Test helper: opens a tablet server on DIR, runs a write scenario, then
// exits without closing anything, as a crash would (memtables are lost; only
// the commit log and SSTables remain). Used by tablet_server_test, which
// cannot fork() itself safely once RocksDB's threads run.
//
//   crash_writer DIR SCENARIO     SCENARIO: rows200 | big50 | rows20 | async-hot-row | late100
//
// late100 opens with accept_log_loss (the log was moved aside) and writes
// rows late0..late99 into the existing table "t".
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/synchronization/blocking_counter.h"
#include "storage/tabletserver/tablet_server.h"

using megastore::storage::Mutation;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_writer DIR rows200|big50|rows20|async-hot-row|late100\n");
    return 2;
  }
  megastore::RealEnv env(1);
  megastore::storage::TabletServerOptions o;
  o.data_dir = argv[1];
  o.maintenance_interval = absl::ZeroDuration();
  const std::string scenario = argv[2];
  o.accept_log_loss = scenario == "late100";
  auto server = megastore::storage::TabletServer::Open(o, &env);
  if (!server.ok()) {
    std::fprintf(stderr, "open: %s\n", server.status().ToString().c_str());
    return 3;
  }
  if (scenario == "late100") {
    for (int i = 0; i < 100; ++i) {
      if (!(*server)
               ->MutateRow("t", "late" + std::to_string(i), {Mutation::SetCell("cf", "q", "v")})
               .ok())
        return 5;
    }
    ::_exit(0);
  }
  megastore::storage::TableSchema schema;
  schema.set_name("t");
  schema.add_families()->set_name("cf");
  if (!(*server)->CreateTable(schema).ok()) return 4;
  if (scenario == "async-hot-row") {
    // 500 queued writes to one cell (fixed timestamp, so the last applied
    // wins), with row deletions among them: only log order gives "v499".
    absl::BlockingCounter pending(500);
    std::atomic<bool> failed{false};
    for (int i = 0; i < 500; ++i) {
      auto w = std::make_unique<megastore::storage::Tablet::RowWrite>();
      w->row = "hot";
      if (i % 7 == 3) {
        w->mutations = {Mutation::DeleteRow()};
      } else {
        w->mutations = {Mutation::SetCell("cf", "q", "v" + std::to_string(i), 1000)};
      }
      w->done = [&](absl::Status s) {
        if (!s.ok()) failed = true;
        pending.DecrementCount();
      };
      if (!(*server)->MutateRowAsync("t", w).ok()) return 7;
    }
    pending.Wait();
    if (failed) return 8;
    auto row = (*server)->ReadRow("t", "hot");
    if (!row.ok() || !row->has_value() || (*row)->cells.size() != 1 ||
        (*row)->cells[0].value != "v499") {
      return 9;
    }
    ::_exit(0);
  }
  const int rows = scenario == "rows200" ? 200 : scenario == "big50" ? 50 : 20;
  const std::string value = scenario == "big50" ? std::string(100, 'x') : "v";
  for (int i = 0; i < rows; ++i) {
    const std::string v = scenario == "rows200" ? "v" + std::to_string(i) : value;
    if (!(*server)
             ->MutateRow("t", "row" + std::to_string(i), {Mutation::SetCell("cf", "q", v)})
             .ok()) {
      return 5;
    }
  }
  if (scenario == "rows200" && !(*server)->MutateRow("t", "row7", {Mutation::DeleteRow()}).ok())
    return 6;
  ::_exit(0);
}
