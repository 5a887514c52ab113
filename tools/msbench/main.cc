// msbench: megastore's benchmarks. `msbench --help` lists them.
#include <CLI/CLI.hpp>

#include "tools/msbench/tablet_bench.h"

int main(int argc, char** argv) {
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

  CLI11_PARSE(app, argc, argv);
  if (t->parsed()) return megastore::tools::RunTabletBench(tablet);
  return 2;
}
