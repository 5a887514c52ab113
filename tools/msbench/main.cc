// msbench: megastore's benchmarks. `msbench --help` lists them.
#include <CLI/CLI.hpp>

#include "base/cli.h"
#include "base/init.h"
#include "tools/msbench/bt_bench.h"
#include "tools/msbench/tablet_bench.h"

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{"msbench: megastore benchmarks (throughput measured side by side with baselines)"};
  app.require_subcommand(1);

  megastore::tools::TabletBenchOptions tablet;
  CLI::App* t = app.add_subcommand(
      "tablet",
      "In-process puts, point gets and scans of one tablet vs raw RocksDB with equal options "
      "(unsynced writes, YCSB-style keys)");
  t->add_option("--keys", tablet.keys, "records loaded by the put phase")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--gets", tablet.gets, "point reads of random loaded keys")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--scans", tablet.scans, "scans starting at random keys")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--scan-length", tablet.scan_length, "each scan reads 1..N rows (uniform)")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--value-size", tablet.value_size, "bytes per value")->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  t->add_option("--runs", tablet.runs, "runs per side; the median is reported")->check(CLI::Range(1, 99))->capture_default_str();
  t->add_option("--seed", tablet.seed, "random seed for keys and access order")->capture_default_str();
  t->add_option("--dir", tablet.dir, "directory for the databases (default: a fresh temp dir, removed afterwards)");
  t->add_flag("--json", tablet.json, "print one JSON object per operation instead of a table");

  megastore::tools::BtBenchOptions bt;
  CLI::App* b = app.add_subcommand(
      "bt",
      "A tablet server over RPC: synced writes from 1 and N clients, point reads and scans; raw "
      "RocksDB with sync=true at the same concurrency in the same run");
  b->add_option("--server", bt.server, "tablet server HOST:PORT (default: start one in this process)");
  b->add_option("--clients", bt.clients, "concurrent clients for the many-client phases")->check(CLI::Range(1, 1024))->capture_default_str();
  b->add_option("--connections", bt.connections, "RPC connections the concurrent clients share (round robin)")->check(CLI::Range(1, 1024))->capture_default_str();
  b->add_option("--seconds", bt.seconds, "duration of each phase")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  b->add_option("--value-size", bt.value_size, "bytes per value")->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  b->add_option("--scan-length", bt.scan_length, "rows per scan")->check(CLI::PositiveNumber)->capture_default_str();
  b->add_option("--runs", bt.runs, "runs; the median is reported")->check(CLI::Range(1, 99))->capture_default_str();
  b->add_option("--dir", bt.dir, "directory for the raw RocksDB (and the in-process server)");
  b->add_flag("--json", bt.json, "print one JSON object per operation");

  if (const int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (t->parsed()) return megastore::tools::RunTabletBench(tablet);
  if (b->parsed()) return megastore::tools::RunBtBench(bt);
  return 2;
}
