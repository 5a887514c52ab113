// mssim: the deterministic simulator (docs/replication.md, "The simulator").
//
//   mssim --seeds=N [--first=S]        run N seeds (the deployment and the
//                                       Bigtable cell); stop at the first failure
//   mssim --seed=S [--trace] [--history=FILE]   one run, replayable exactly
//   mssim --measure                     latency figures for docs/replication.md
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "base/buggify.h"
#include "base/cli.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/strings.h"
#include "sim/cell_sim.h"
#include "sim/cluster.h"

namespace {

using megastore::StrCat;
using megastore::sim::SimOptions;
using megastore::sim::SimResult;

// `flags`: the options that shape the run, for the replay command.
int RunOne(const SimOptions& o, const std::string& history_path, bool verbose,
           const std::string& flags) {
  SimResult r = megastore::sim::RunSimulation(o);
  for (const std::string& line : r.trace) std::cout << line << "\n";
  if (!history_path.empty()) {
    std::ofstream out(history_path);
    for (const auto& e : r.history) out << megastore::sim::ToJson(e) << "\n";
    if (!out) {
      std::cerr << "mssim: cannot write " << history_path << "\n";
      return 1;
    }
  }
  const auto& s = r.stats;
  if (!r.status.ok()) {
    std::cerr << "mssim: seed " << o.seed << " FAILED: " << r.status.message() << "\n"
              << "replay: mssim --seed=" << o.seed << flags << " --no-cell --trace\n";
    return 1;
  }
  if (verbose)
    std::cout << "seed " << o.seed << " ok: " << s.bank_ok << " bank operations done; " << s.ops_ok
              << " ok, " << s.ops_failed << " failed, " << s.ops_unknown << " unknown; "
              << s.positions << " log positions, " << s.promotions << " promotions, " << s.commits
              << " writes committed in " << s.entries << " entries (" << s.combined << " combined; "
              << s.forwarded << " sent to their group's home; " << s.learned_on_accept
              << " learned on accept); " << s.faults << " faults; " << s.messages << " messages ("
              << s.dropped << " dropped); " << s.late_writes << " late and " << s.repeated_writes
              << " repeated Bigtable writes; " << s.valid_checks
              << " coordinator \"valid\" answers and " << s.log_checks << " log writes checked; "
              << s.positions_cleaned << " log positions cleaned up, " << s.wipes
              << " replicas wiped, " << s.snapshot_catchups << " snapshot catch-ups; "
              << s.virtual_micros / 1000 << " ms virtual\n";
  return 0;
}

// Prints how many of the fault points linked into mssim fired in these runs
// (with `verbose`, each point's counts) and returns that number.
size_t PrintFaultPoints(bool verbose) {
  const std::vector<megastore::buggify::PointStats> points = megastore::buggify::Stats();
  size_t fired = 0;
  for (const auto& p : points) fired += p.fired > 0 ? 1 : 0;
  std::cout << "mssim: fault points: " << fired << " of " << points.size() << " fired";
  std::string never;
  for (const auto& p : points)
    if (p.fired == 0) never += StrCat(never.empty() ? "" : ", ", p.name);
  if (!never.empty()) std::cout << " (never: " << never << ")";
  std::cout << "\n";
  if (verbose) {
    for (const auto& p : points)
      std::cout << "  " << p.name << ": fired " << p.fired << " of " << p.evaluated << " -- "
                << p.what << "\n";
  }
  return fired;
}

// The Bigtable cell's run for seed `seed`.
int RunCell(const megastore::sim::CellSimOptions& o, bool verbose) {
  megastore::sim::CellSimResult r = megastore::sim::RunCellSimulation(o);
  for (const std::string& line : r.trace) std::cout << line << "\n";
  if (!r.status.ok()) {
    std::cerr << "mssim: cell seed " << o.seed << " FAILED: " << r.status.message() << "\n"
              << "replay: mssim --seed=" << o.seed << " --cell-only --trace\n";
    return 1;
  }
  const auto& s = r.stats;
  if (verbose)
    std::cout << "cell seed " << o.seed << " ok: " << s.ops_ok << " ok, " << s.ops_failed
              << " failed, " << s.ops_unknown << " unknown; " << s.reads_checked
              << " reads checked; " << s.server_kills << " server and " << s.master_kills
              << " master kills, " << s.splits << " splits, " << s.moves << " moves; " << s.tablets
              << " tablets at rest; " << s.owner_checks << " single-owner checks; " << s.messages
              << " messages (" << s.dropped << " dropped); " << s.virtual_micros / 1000
              << " ms virtual\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{
      "mssim: runs whole Megastore deployments (datacenters, coordinators, replication "
      "servers, app-server clients) and a Bigtable cell (lock service, masters, tablet servers "
      "in cell mode, clients) in one thread on virtual time from a seed, injecting faults, "
      "then checks the history, the replicas and the cell. A failing seed replays exactly."};
  uint64_t seed = 0, first = 1;
  int seeds = 0, clients = 4, groups = 2, ops = 25, measure_ops = 50, bank_clients = 2,
      bank_ops = 6;
  bool trace = false, no_faults = false, measure = false, verbose = false, fixed_timing = false;
  std::string history, replicas = "full,full,full";
  app.add_option("--seed", seed, "Run this one seed (with --trace / --history)");
  app.add_option("--seeds", seeds, "Run this many seeds, stopping at the first failure")
      ->check(CLI::PositiveNumber);
  app.add_option("--first", first, "The first seed of --seeds")->capture_default_str();
  app.add_flag("--trace", trace, "Print every message, fault and history event of the run");
  app.add_option("--history", history, "Write the client history to FILE as JSON lines");
  app.add_option("--replicas", replicas,
                 "Replica types, one per datacenter: full, witness or read-only")
      ->capture_default_str();
  app.add_option("--clients", clients, "App-server clients")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--groups", groups, "Entity groups")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ops", ops, "Operations per client")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--bank-clients", bank_clients,
         "App servers moving money between entity groups by two-phase commit and queues (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bank-ops", bank_ops, "Transfers or collections per bank app server")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-faults", no_faults, "Run without injected faults");
  bool no_promote = false;
  app.add_flag("--no-promote", no_promote,
               "Writes that lose their log position fail instead of going on to the next "
               "position when the winner did not write what they read");
  bool no_combine = false;
  app.add_flag("--no-combine", no_combine,
               "Each write proposes on its own instead of waiting behind its app server's "
               "proposal for the group and sharing the next log entry");
  bool no_forward = false;
  app.add_flag("--no-forward", no_forward,
               "Never send a hot group's writes to its home: each app server proposes its own, "
               "racing the others");
  int sessions = 1;
  app.add_option("--sessions", sessions,
                 "Operations each client runs at once through its one GroupClient (more than "
                 "one: its writes to a group combine into shared log entries)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bool no_wipe = false;
  app.add_flag("--no-wipe", no_wipe,
               "Never replace a read-only replica's disk (by default a fault now and then does: "
               "the replica comes back by a catch-up from a snapshot of another's data)");
  bool no_buggify = false, require_fault_points = false;
  app.add_flag("--no-buggify", no_buggify,
               "Keep the fault points in the servers' code (base/buggify.h) off; network and "
               "process faults still run");
  app.add_flag("--require-fault-points", require_fault_points,
               "Exit 1 if no fault point fired in these runs (CI: the fault points are live)");
  app.add_flag(
      "--fixed-timing", fixed_timing,
      "Keep the coordinators' lease (2 s), renew interval (400 ms) and RPC timeout (250 ms) "
      "and run every clock at the same rate, instead of drawing them per seed");
  app.add_flag("--measure", measure, "Print the latency measurements of docs/replication.md");
  app.add_option("--measure-ops", measure_ops, "Operations per measurement")->capture_default_str();
  app.add_flag("-v,--verbose", verbose, "One line per seed");
  bool no_cell = false, cell_only = false;
  int cell_ops = 30;
  app.add_flag("--no-cell", no_cell, "Run only the Megastore deployment of each seed");
  app.add_flag("--cell-only", cell_only, "Run only the Bigtable cell of each seed");
  app.add_option("--cell-ops", cell_ops, "Operations per client of the cell's run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level,
                 "Server log level: trace, debug, info, warn, error or off (the masters' and "
                 "tablet servers' own logs; the simulator's report is separate)")
      ->capture_default_str();
  if (int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (!megastore::SetLogLevel(log_level)) {
    std::cerr << "mssim: --log-level: unknown level '" << log_level << "'\n";
    return 2;
  }

  SimOptions o;
  o.replicas.clear();
  std::vector<std::string> types;
  for (size_t start = 0;;) {
    const size_t comma = replicas.find(',', start);
    types.push_back(replicas.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (const std::string& t : types) {
    if (t == "full") {
      o.replicas.push_back(megastore::replication::ReplicaType::kFull);
    } else if (t == "witness") {
      o.replicas.push_back(megastore::replication::ReplicaType::kWitness);
    } else if (t == "read-only") {
      o.replicas.push_back(megastore::replication::ReplicaType::kReadOnly);
    } else {
      std::cerr << "mssim: --replicas: unknown replica type '" << t
                << "' (expected full, witness or read-only)\n";
      return 2;
    }
  }
  int voters = 0;
  for (auto t : o.replicas) voters += megastore::replication::Votes(t) ? 1 : 0;
  if (voters < 1 || o.replicas.size() > 26) {
    std::cerr << "mssim: --replicas: need at least one voting replica and at most 26\n";
    return 2;
  }
  o.clients = clients;
  o.groups = groups;
  o.ops_per_client = ops;
  o.faults = !no_faults;
  o.promote = !no_promote;
  o.combine = !no_combine;
  o.forward = !no_forward;
  o.sessions = sessions;
  o.wipe_read_only = !no_wipe;
  o.buggify = !no_buggify;
  o.vary_timing = !fixed_timing;
  o.bank_clients = bank_clients;
  o.bank_ops = bank_ops;
  if (no_cell && cell_only) {
    std::cerr << "mssim: --no-cell and --cell-only exclude each other\n";
    return 2;
  }
  megastore::sim::CellSimOptions co;
  co.faults = !no_faults;
  co.buggify = !no_buggify;
  co.ops_per_client = cell_ops;
  // What a replay of one of the deployment's seeds needs besides the seed.
  std::string flags;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() == 0 || name == "--seed" || name == "--seeds" || name == "--first" ||
        name == "--trace" || name == "--history" || name == "--verbose" || name == "--help" ||
        name == "--require-fault-points" || name == "--no-cell" || name == "--cell-only" ||
        name == "--cell-ops")
      continue;
    if (opt->get_expected_min() == 0) {
      flags += " " + name;
    } else {
      for (const std::string& r : opt->results()) flags += " " + name + "=" + r;
    }
  }
  // One seed's runs: the deployment, then the cell.
  auto run_seed = [&](uint64_t s, bool verbose_seed) {
    if (!cell_only) {
      o.seed = s;
      if (RunOne(o, history, verbose_seed, flags) != 0) return 1;
    }
    if (!no_cell) {
      co.seed = s;
      if (RunCell(co, verbose_seed) != 0) return 1;
    }
    return 0;
  };

  if (measure) {
    std::cout << megastore::sim::RunMeasurements(seed == 0 ? 1 : seed, measure_ops);
    return 0;
  }
  if (seeds == 0 && seed == 0) {
    std::cerr << "mssim: say --seeds=N or --seed=S (see --help)\n";
    return 2;
  }
  if (seeds == 0) {
    o.trace = trace;
    co.trace = trace && cell_only;
    if (trace && !cell_only) no_cell = true;  // one trace at a time: --cell-only traces the cell
    const int rc = run_seed(seed, true);
    if (rc != 0) return rc;
    if (PrintFaultPoints(verbose) == 0 && require_fault_points) {
      std::cerr << "mssim: no fault point fired (--require-fault-points)\n";
      return 1;
    }
    return 0;
  }
  if (trace || !history.empty()) {
    std::cerr << "mssim: --trace and --history go with --seed=S (one run)\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  history.clear();
  for (int i = 0; i < seeds; ++i) {
    if (run_seed(first + static_cast<uint64_t>(i), verbose) != 0) return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "mssim: " << seeds << " seeds passed (" << first << ".." << first + seeds - 1
            << ") in " << StrCat(fmt::format("{:.1f}", secs)) << " s ("
            << fmt::format("{:.2f}", seeds / std::max(secs, 1e-9)) << " seeds/s)\n";
  if (PrintFaultPoints(verbose) == 0 && require_fault_points) {
    std::cerr << "mssim: no fault point fired (--require-fault-points)\n";
    return 1;
  }
  return 0;
}
