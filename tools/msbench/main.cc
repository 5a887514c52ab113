// msbench: megastore's benchmarks. `msbench --help` lists them.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/cli.h"
#include "base/init.h"
#include "tools/msbench/backup_bench.h"
#include "tools/msbench/bt_bench.h"
#include "tools/msbench/cell_bench.h"
#include "tools/msbench/log_bench.h"
#include "tools/msbench/tablet_bench.h"
#include "tools/msbench/throwaway_tls.h"
#include "tools/msbench/txn_bench.h"

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{"msbench: megastore benchmarks (throughput measured side by side with baselines)"};
  app.require_subcommand(1);
  megastore::rpc::TlsFiles tls;  // given before the benchmark: bt and txn's RPC over TLS
  megastore::AddTlsFlags(app, tls, "the benchmark's");
  bool tls_compare = false;
  app.add_flag("--tls-compare", tls_compare,
               "bt and txn: run the benchmark twice in this run, in plaintext and then over mutual "
               "TLS 1.3 with "
               "throwaway certificates, to compare them side by side");

  megastore::tools::TabletBenchOptions tablet;
  CLI::App* t = app.add_subcommand(
      "tablet",
      "In-process puts, point gets and scans of one tablet vs raw RocksDB with equal options "
      "(unsynced writes, YCSB-style keys)");
  t->add_option("--keys", tablet.keys, "records loaded by the put phase")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--gets", tablet.gets, "point reads of random loaded keys")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--scans", tablet.scans, "scans starting at random keys")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--scan-length", tablet.scan_length, "each scan reads 1..N rows (uniform)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--value-size", tablet.value_size, "bytes per value")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  t->add_option("--runs", tablet.runs, "runs per side; the median is reported")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  t->add_option("--seed", tablet.seed, "random seed for keys and access order")
      ->capture_default_str();
  t->add_option("--dir", tablet.dir,
                "directory for the databases (default: a fresh temp dir, removed afterwards)");
  t->add_flag("--json", tablet.json, "print one JSON object per operation instead of a table");
  t->add_flag("--sealed", tablet.sealed,
              "our side seals every value as an encrypted entity group's cell is (AES-256-GCM) and "
              "opens every "
              "value it reads: the cost of encryption at rest per cell");

  megastore::tools::BtBenchOptions bt;
  CLI::App* b = app.add_subcommand(
      "bt",
      "A tablet server over RPC: synced writes from 1 and N clients, point reads and scans; raw "
      "RocksDB with sync=true at the same concurrency in the same run");
  b->add_option("--server", bt.server,
                "tablet server HOST:PORT (default: start one in this process)");
  b->add_option("--clients", bt.clients, "concurrent clients for the many-client phases")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  b->add_option("--connections", bt.connections,
                "RPC connections the concurrent clients share (round robin)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  b->add_option("--seconds", bt.seconds, "duration of each phase")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  b->add_option("--value-size", bt.value_size, "bytes per value")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  b->add_option("--scan-length", bt.scan_length, "rows per scan")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  b->add_option("--runs", bt.runs, "runs; the median is reported")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  b->add_option("--dir", bt.dir, "directory for the raw RocksDB (and the in-process server)");
  b->add_flag("--json", bt.json, "print one JSON object per operation");

  megastore::tools::TxnBenchOptions txn;
  CLI::App* x = app.add_subcommand(
      "txn",
      "Transactions through the client API on three datacenters in this process with emulated "
      "WAN latency, each on one entity of its group (--workload, --rows-per-group): every "
      "(clients, groups) pair; throughput, p50/p99, conflict, retry and fast-path rates");
  x->add_option("--clients", txn.clients, "concurrent clients (threads), a comma-separated list")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  x->add_option("--groups", txn.groups, "entity groups the clients pick from uniformly, a list")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{10'000'000}))
      ->capture_default_str();
  x->add_option("--seconds", txn.seconds, "duration of each (clients, groups) cell")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  x->add_option("--runs", txn.runs, "runs of the whole matrix; medians are reported")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  x->add_option("--replicas", txn.replicas,
                "replica type of datacenters A, B, C, ...: full, witness or read-only")
      ->capture_default_str();
  x->add_option("--wan", txn.wan,
                "one-way delays between datacenters, FROM-TO=DELAY,... ('none': loopback only)")
      ->capture_default_str();
  x->add_option("--at", txn.at, "datacenters the clients run in, round robin")
      ->capture_default_str();
  x->add_option("--value-size", txn.value_size, "bytes written per transaction")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  x->add_option("--rows-per-group", txn.rows_per_group,
                "entities of its group a transaction picks one from, uniformly (1: all of a "
                "group's transactions touch one entity)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}))
      ->capture_default_str();
  x->add_option("--workload", txn.workload,
                "rmw: read an entity and write it back changed; blind: write it without reading; "
                "read-mostly: nine transactions in ten only read it, the tenth is an rmw")
      ->check(CLI::IsMember({"rmw", "blind", "read-mostly"}))
      ->capture_default_str();
  x->add_flag("--sync,!--no-sync", txn.sync,
              "fsync each tablet server's commit log on every write");
  x->add_flag("--tcp", txn.tcp,
              "every call over loopback TCP, as between processes (default: calls between the "
              "datacenters in this process skip TCP)");
  x->add_flag("--preload,!--no-preload", txn.preload,
              "commit once in every group before measuring (so each group has a leader), then read "
              "it once at every datacenter clients run in (so their coordinators know it)");
  x->add_flag("--encrypted", txn.encrypted,
              "the schema is ENCRYPTED: every cell is sealed at rest (AES-256-GCM)");
  bool encrypt_compare = false;
  x->add_flag("--encrypt-compare", encrypt_compare,
              "run the matrix twice in this run, with a plain and then an ENCRYPTED schema, to "
              "compare them");
  x->add_flag("--promote,!--no-promote", txn.promote,
              "a commit that lost its position to a writer of nothing it read goes on to the next "
              "position (--no-promote: it aborts and Run retries it from scratch)");
  x->add_flag("--combine,!--no-combine", txn.combine,
              "an app server's commits to a group that wait behind its proposal in flight share "
              "the next log entry (--no-combine: each proposes on its own)");
  x->add_flag("--forward,!--no-forward", txn.forward,
              "a group whose positions app servers at different datacenters take from each "
              "other has its commits sent to its home replica, which proposes them together "
              "(--no-forward: each app server proposes its own)");
  x->add_flag("--advisory-lock", txn.advisory_lock,
              "each transaction takes its group's advisory lock first (the remedy for hot groups)");
  x->add_option("--baseline", txn.baseline,
                "etcd: also start three etcd members on loopback and measure their puts with the "
                "same clients and value size in the same run, printing both and the ratio")
      ->check(CLI::IsMember({"etcd"}));
  x->add_option("--etcd-binary", txn.etcd_binary, "etcd's executable for --baseline=etcd")
      ->capture_default_str();
  x->add_option("--seed", txn.seed, "random seed for the clients' choices")->capture_default_str();
  x->add_option(
      "--dir", txn.dir,
      "directory for the datacenters' data (default: a fresh temp dir, removed afterwards)");
  x->add_flag("--json", txn.json, "print one JSON object per (clients, groups) cell");

  megastore::tools::CellBenchOptions cell;
  CLI::App* c =
      app.add_subcommand("cell",
                         "A Bigtable cell of processes (lock service, master, N tablet servers on "
                         "one data root) driven by the "
                         "client library: aggregate write/read throughput per number of tablet "
                         "servers, then the time to recover "
                         "a SIGKILLed server's tablet against the amount of commit log to split");
  c->add_option("--servers", cell.servers,
                "tablet server counts to measure, a comma-separated list")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--clients", cell.clients, "concurrent client threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--seconds", cell.seconds, "duration of each write and read phase")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  c->add_option("--tablets", cell.tablets, "tablets the table is created split into")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  c->add_option("--value-size", cell.value_size, "bytes per value")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  c->add_option("--runs", cell.runs, "runs per server count; medians are reported")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  c->add_option("--recovery-mb", cell.recovery_mb,
                "MiB of unflushed log to recover, a list (empty: skip)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 65536.0))
      ->capture_default_str();
  c->add_option("--session-ttl", cell.session_ttl, "the tablet servers' lock-service session ttl")
      ->capture_default_str();
  c->add_flag("--sync,!--no-sync", cell.sync, "fsync the commit logs on every write");
  c->add_option(
      "--dir", cell.dir,
      "directory for the cells' data and logs (default: a fresh temp dir, removed afterwards)");
  c->add_flag("--json", cell.json, "print one JSON object per measurement");

  megastore::tools::BackupBenchOptions bk;
  CLI::App* k = app.add_subcommand(
      "backup",
      "Backup and restore throughput: groups of entities on three datacenters in this process, "
      "a full backup of them, its verification, and a restore into a second, empty cluster");
  k->add_option("--groups", bk.groups, "entity groups")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}))
      ->capture_default_str();
  k->add_option("--entities", bk.entities, "entities per group")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}))
      ->capture_default_str();
  k->add_option("--value-size", bk.value_size, "bytes per entity")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  k->add_option("--replicas", bk.replicas, "replica type of datacenters A, B, C, ...")
      ->capture_default_str();
  k->add_flag("--encrypted", bk.encrypted, "an ENCRYPTED schema (sealed backups)");
  k->add_option("--runs", bk.runs, "backups and restores to take the median of")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  k->add_option("--dir", bk.dir,
                "directory for the data and backups (default: a fresh temp dir, removed "
                "afterwards)");
  k->add_flag("--json", bk.json, "print one JSON object");

  megastore::tools::LogBenchOptions logb;
  CLI::App* l = app.add_subcommand(
      "log",
      "One entity group written many times over with log clean-up on, on three datacenters in "
      "this process: the root row's log size as it goes, and commit and current-read latency "
      "late in the run against early");
  l->add_option("--writes", logb.writes, "transactions committed to the group")
      ->check(CLI::Range(int64_t{2}, int64_t{100'000'000}))
      ->capture_default_str();
  l->add_option("--early", logb.early, "the early latency window ends at this write")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))
      ->capture_default_str();
  l->add_option("--window", logb.window, "writes (and current reads) timed in each window")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}))
      ->capture_default_str();
  l->add_option("--report-every", logb.report_every, "print the log's size every N writes")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))
      ->capture_default_str();
  l->add_option("--replicas", logb.replicas,
                "replica type of datacenters A, B, C, ... (A runs the client)")
      ->capture_default_str();
  l->add_option("--wan", logb.wan,
                "one-way delays between datacenters, FROM-TO=DELAY,... ('none': loopback only)")
      ->capture_default_str();
  l->add_option("--value-size", logb.value_size, "bytes written per transaction")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  l->add_option("--keep-positions", logb.keep_positions,
                "log_cleanup.keep_positions: positions each replica keeps")
      ->check(CLI::Range(uint64_t{0}, uint64_t{100'000'000}))
      ->capture_default_str();
  l->add_flag("--cleanup,!--no-cleanup", logb.cleanup,
              "log clean-up on (off: see the log grow, for comparison)");
  l->add_flag("--sync,!--no-sync", logb.sync, "fsync each tablet server's commit log");
  l->add_option(
      "--dir", logb.dir,
      "directory for the datacenters' data (default: a fresh temp dir, removed afterwards)");
  l->add_flag("--json", logb.json, "print JSON objects instead of a table");

  if (const int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (absl::Status s = megastore::rpc::CheckTls(tls); !s.ok()) {
    std::fprintf(stderr, "msbench: --tls-*: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  megastore::rpc::SetDefaultTls(tls);
  if (tls_compare) {
    if (tls.enabled() || !(b->parsed() || x->parsed())) {
      std::fprintf(stderr, "msbench: --tls-compare is for bt and txn, without --tls-*\n");
      return 2;
    }
    absl::StatusOr<megastore::rpc::TlsFiles> made = megastore::tools::ThrowawayTls();
    if (!made.ok()) {
      std::fprintf(stderr, "msbench: --tls-compare: %s\n",
                   std::string(made.status().message()).c_str());
      return 1;
    }
    int rc = 0;
    for (const bool over_tls : {false, true}) {
      std::printf("\n== %s ==\n", over_tls ? "over mutual TLS 1.3" : "plaintext");
      std::fflush(stdout);
      megastore::rpc::SetDefaultTls(over_tls ? *made : megastore::rpc::TlsFiles{});
      rc |= b->parsed() ? megastore::tools::RunBtBench(bt) : megastore::tools::RunTxnBench(txn);
    }
    megastore::tools::RemoveThrowawayTls(*made);
    return rc;
  }
  if (encrypt_compare) {
    int rc = 0;
    for (const bool sealed : {false, true}) {
      std::printf("\n== %s ==\n", sealed ? "encrypted at rest" : "not encrypted");
      std::fflush(stdout);
      txn.encrypted = sealed;
      rc |= megastore::tools::RunTxnBench(txn);
    }
    return rc;
  }
  if (c->parsed()) return megastore::tools::RunCellBench(cell);
  if (t->parsed()) return megastore::tools::RunTabletBench(tablet);
  if (b->parsed()) return megastore::tools::RunBtBench(bt);
  if (x->parsed()) return megastore::tools::RunTxnBench(txn);
  if (l->parsed()) return megastore::tools::RunLogBench(logb);
  if (k->parsed()) return megastore::tools::RunBackupBench(bk);
  return 2;
}
