// The cell's master (Bigtable §5.2; docs/cell.md).
//
// It campaigns for the master lock (/<cell>/master; a standby waits for it)
// and, while it holds it, reconciles the cell with METADATA, level-
// triggered: every pass (each `reconcile_interval`, and at once after any
// event it hears of) it
//   1. probes every live tablet server (tablet.ListTablets: what it serves,
//      its commit log); a server unreachable for `server_timeout` is made
//      dead by deleting its servers file, and its tablets wait `server_ttl`
//      more (by then it has surely stopped serving);
//   2. reads /<cell>/root (creating the root tablet and the first METADATA
//      tablet in a new cell), then the root tablet, then every METADATA
//      tablet — the paper's start-up scan, done every pass;
//   3. completes splits whose METADATA commit was interrupted;
//   4. for every tablet whose server is dead, splits that server's commit
//      log by tablet (recovered/<id>/<log> under the data root) and assigns
//      the tablet elsewhere; assigns unassigned tablets to the live server
//      with the fewest; re-sends assignments a live server lost; METADATA
//      is written (check-and-mutate on the tablet id) before the server is
//      told;
//   5. moves one tablet when the busiest server has more than the least
//      busy plus `balance_margin`; merges two small neighbours (first moving
//      them to one server);
//   6. now and then, deletes tablet directories, log pieces and logs that
//      nothing references, after `gc_grace`.
// A new master therefore changes no assignment that is being served. Table
// schemas are the lock-service files /<cell>/tables/<name>.
//
// The master loses its lock when its session is lost: `on_lost` runs (the
// process exits) and a standby takes over.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "storage/cell/cell.pb.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/membership.h"
#include "storage/lock/lock_service.h"

namespace megastore::rpc {
class RpcServer;
}

namespace megastore::storage::cell {

struct MasterOptions {
  std::string cell;
  std::string data_root;  // the cell's shared data root (log splitting, garbage collection)
  absl::Duration session_ttl = absl::Seconds(10);
  // The tablet servers' session ttl: after the master deletes an
  // unreachable server's file it waits this long before reassigning.
  absl::Duration server_ttl = absl::Seconds(10);
  absl::Duration reconcile_interval = absl::Seconds(1);
  absl::Duration server_timeout = absl::Seconds(10);
  // 0 turns balancing off.
  int balance_margin = 2;
  absl::Duration gc_grace = absl::Seconds(60);
  // Merge two neighbouring tablets of a table when together they hold less
  // than this (0: never) and this master has known both for `merge_after`
  // (so a freshly pre-split table is not merged back at once). Keep it well
  // below the tablet servers' split threshold.
  uint64_t merge_threshold_bytes = 32 << 20;
  absl::Duration merge_after = absl::Minutes(10);
  // METADATA reads and writes, unloads.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Assignments (a server replays the tablet's log pieces before answering).
  absl::Duration assign_timeout = absl::Seconds(60);
  // A new master only watches this long before it starts balancing: the
  // takeover itself moves nothing.
  absl::Duration balance_delay = absl::Seconds(10);
  // The per-pass probe of each server: short, so a hung server does not
  // hold up the pass.
  absl::Duration probe_timeout = absl::Seconds(1);
  // How to reach tablet servers; unset: TCP (rpc::Connect).
  rpc::Connector connect;
};

class Master {
 public:
  // `lock` and `env` must outlive the master. `on_lost` runs once if the
  // master loses its lock after winning it.
  Master(lock::LockService* lock, Env* env, MasterOptions options,
         std::function<void(const absl::Status&)> on_lost);
  ~Master();

  // Campaigns with `address` (this master's RPC address, written in the
  // master lock); once elected, reconciles until destroyed.
  void Start(const std::string& address);
  bool is_master() const;
  // The current master's address as last seen ("" if none).
  std::string current_master() const;

  // ---- operations (FailedPrecondition on a standby, naming the master) ----
  // A new table, one tablet per range between `initial_splits`.
  // AlreadyExists, InvalidArgument for a bad name/schema/splits.
  absl::Status CreateTable(const TableSchema& schema,
                           const std::vector<std::string>& initial_splits);
  // Unloads and forgets the table's tablets; their directories go with the
  // next garbage collection. NotFound if absent.
  absl::Status DeleteTable(const std::string& name);
  // A changed schema (CompiledSchema::CheckChange), sent to the servers.
  absl::Status UpdateTable(const TableSchema& schema);
  absl::StatusOr<std::vector<TableSchema>> ListTables();
  // Asks the tablet's server to split it (at the middle row if `row` is
  // empty).
  absl::StatusOr<std::vector<TabletEntry>> SplitTablet(const std::string& tablet_id,
                                                       const std::string& row);
  // Unloads the tablet from its server and assigns it to `server`.
  absl::Status MoveTablet(const std::string& tablet_id, const std::string& server);
  // A tablet server's report of a split it committed (a wake-up: the next
  // pass reads METADATA anyway).
  void ReportSplit(const ReportSplitRequest& report);
  // The cell as of the last pass.
  absl::StatusOr<CellState> State();
  // Runs a pass now and returns when it finished.
  absl::Status ReconcileNow();

 private:
  // The size recorded for a tablet assigned during this pass, until the
  // next probe measures it: "unknown", never small enough to merge.
  static constexpr uint64_t kUnknownSize = UINT64_MAX / 4;
  struct Probe {
    bool reachable = false;
    std::string log;
    int64_t last_ok = 0;  // monotonic micros of the last answered probe (or first sight)
    std::map<std::string, uint64_t> serving;  // tablet id -> size
  };

  absl::Status CheckMaster() const;
  void Loop();
  void Kick();
  absl::Status Pass() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  std::unique_ptr<TabletClient> Connect(const std::string& server, absl::Duration timeout) const;
  void ProbeServers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  absl::StatusOr<std::map<std::string, TableSchema>> ReadSchemas();
  // Makes `record` served; returns its (possibly new) record.
  void EnsureServed(TabletRecord& record, const std::map<std::string, TableSchema>& schemas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Writes `record` where it is recorded (the root file, or its METADATA
  // row if that still names `expected_id`). Aborted if METADATA changed.
  absl::Status WriteRecord(const TabletRecord& record, const std::string& expected_id,
                           const std::string& event);
  absl::Status CreateRecord(const TabletRecord& record, const std::string& event);
  absl::Status SplitLog(const std::string& log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void FixSplits(std::vector<TabletRecord>& records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Moves one tablet (not one of `keep`) from the busiest server.
  void Balance(const std::vector<TabletRecord>& records,
               const std::map<std::string, TableSchema>& schemas, const std::set<std::string>& keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Merges (or brings together) one pair of small neighbours; returns the
  // ids of every tablet in such a pair, which balancing leaves alone.
  std::set<std::string> MergeSmall(const std::vector<TabletRecord>& records,
                                   const std::map<std::string, TableSchema>& schemas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  absl::Status Move(TabletRecord record, const std::string& to,
                    const std::map<std::string, TableSchema>& schemas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void CollectGarbage(const std::vector<TabletRecord>& records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  std::string LeastLoaded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Tells `server` to serve `record` (with a timeout long enough to replay).
  absl::Status Assign(const std::string& server, const TabletRecord& record,
                      const TableSchema& schema) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Whether `server` answered this pass's probe.
  bool Reachable(const std::string& server) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void Event(std::string text);
  std::string NewTabletId(const std::string& table);

  lock::LockService* const lock_;
  Env* const env_;
  const MasterOptions options_;
  std::string address_;
  std::function<void(const absl::Status&)> on_lost_;
  CellClient client_;
  std::unique_ptr<MasterElection> election_;
  std::unique_ptr<LiveServers> live_;

  absl::Mutex pass_mu_;  // one pass (or operation that changes METADATA) at a time
  std::map<std::string, Probe> probes_ ABSL_GUARDED_BY(pass_mu_);  // by server address
  std::map<std::string, std::unique_ptr<TabletClient>> probe_clients_ ABSL_GUARDED_BY(pass_mu_);
  std::map<std::string, std::unique_ptr<TabletClient>> assign_clients_ ABSL_GUARDED_BY(pass_mu_);
  int64_t elected_at_ = 0;  // monotonic micros; set before the loop starts
  // Servers whose file this master deleted, until when their tablets wait.
  std::map<std::string, int64_t> fenced_until_ ABSL_GUARDED_BY(pass_mu_);
  std::map<std::string, int> assigned_this_pass_ ABSL_GUARDED_BY(pass_mu_);
  std::set<std::string> split_logs_ ABSL_GUARDED_BY(pass_mu_);
  std::map<std::string, int64_t> first_seen_
      ABSL_GUARDED_BY(pass_mu_);  // tablet id -> monotonic micros
  int64_t passes_ ABSL_GUARDED_BY(pass_mu_) = 0;
  // The last pass read the root and every METADATA tablet.
  bool metadata_ready_ ABSL_GUARDED_BY(pass_mu_) = false;

  mutable absl::Mutex mu_;
  bool elected_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  CellState state_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> recent_ ABSL_GUARDED_BY(mu_);  // event text -> when last told
  // Set while the loop waits between passes: Kick() and the destructor
  // wake it early.
  std::shared_ptr<absl::Notification> wake_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Env::Thread> loop_;  // the reconcile loop, an Env thread
};

// Registers "master.*" on `rpc`, served by `master`.
void RegisterMasterService(Master* master, rpc::MethodRegistry* rpc);

// The cell's current master's address, from the lock service; Unavailable
// if none holds the lock.
// Waits through `env` (none: the real one).
absl::StatusOr<std::string> FindMaster(lock::LockService* lock, const std::string& cell,
                                       Env* env = nullptr);

// A typed client of the master (msadmin, tablet servers' split reports).
class MasterClient {
 public:
  explicit MasterClient(std::string address, absl::Duration timeout = absl::Seconds(30));
  MasterClient(std::shared_ptr<rpc::Channel> channel, absl::Duration timeout);
  ~MasterClient();
  absl::Status CreateTable(const TableSchema& schema,
                           const std::vector<std::string>& initial_splits = {});
  // `force`: even a table Megastore replicates (TableSchema.replicated).
  absl::Status DeleteTable(const std::string& name, bool force = false);
  absl::Status UpdateTable(const TableSchema& schema, bool force = false);
  absl::StatusOr<std::vector<TableSchema>> ListTables();
  absl::StatusOr<std::vector<TabletEntry>> SplitTablet(const std::string& tablet_id,
                                                       const std::string& row);
  absl::Status MoveTablet(const std::string& tablet_id, const std::string& server);
  absl::Status ReportSplit(const ReportSplitRequest& report);
  absl::StatusOr<CellState> State();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The tablet server's side of a split (TabletServerOptions::commit_split):
// one check-and-mutate of the parent's row (only if it still names the
// parent) makes the right child own it and records the left child's id;
// then the left child's row is written and the mark cleared. Once the first
// write succeeded the split is committed: a crash before the rest is
// completed by the master from the mark (FixSplits). Aborted if METADATA
// no longer names the parent (the master moved or recovered it); Unknown if
// the first write's outcome cannot be learned (the server must then serve
// neither the parent nor the children, and let the master decide).
absl::Status CommitSplit(CellClient* client, Env* env, const std::string& server,
                         const std::string& log, const TabletEntry& parent,
                         const std::vector<TabletEntry>& children);

// The tablet server's side of a merge (TabletServerOptions::commit_merge):
// one check-and-mutate of the right tablet's row (only if it still names
// it) makes the merged tablet own it, from the left tablet's start row;
// then the left tablet's row is deleted (only if it still names the left
// tablet). Committed after the first write: a left row left behind is
// found by the master (a row covered by the next one) and deleted. Unknown
// if the first write's outcome cannot be learned.
absl::Status CommitMerge(CellClient* client, Env* env, const std::string& server,
                         const std::string& log, const TabletEntry& left, const TabletEntry& right,
                         const TabletEntry& merged);

}  // namespace megastore::storage::cell
