// One datacenter's Megastore servers in this process: a tablet server (its
// Bigtable), the lock service, the coordinator and the replication server,
// all served on one RPC port — or a subset of them (megastored --roles), the
// replication server then reaching the datacenter's Bigtable over RPC. LocalCluster starts several
// on loopback — the core of the embedded default (`megastored --local=3`) and of the
// end-to-end tests.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "base/delayed_transport.h"
#include "base/env.h"
#include "base/rpc/rpc.h"
#include "base/rpc/rpc_transport.h"
#include "coordinator/coordinator.h"
#include "replication/group_client.h"
#include "replication/replication_server.h"
#include "server/access.h"
#include "server/cluster.h"
#include "server/prober.h"
#include "storage/client/bigtable_client.h"
#include "storage/lock/lock_table.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::storage::cell {
class CellClient;
}
namespace megastore::storage::lock {
class LockService;
}
namespace megastore::replication {
class AtRestEncryption;
}

namespace megastore::server {

struct DatacenterOptions {
  std::string name;
  std::string data_dir;
  std::string listen = "127.0.0.1:0";
  replication::ReplicaType type = replication::ReplicaType::kFull;
  // Which roles run here; the others run in other processes. (A witness or
  // read-only replica has no coordinator: that role is dropped.)
  std::vector<Role> roles = {std::begin(kAllRoles), std::end(kAllRoles)};
  // Without the tablet role: the tablet server the replication server uses.
  std::string tablet_address;
  // The datacenter's Bigtable is this cell (its own processes): no tablet
  // role runs here; the tables are created through the cell's master.
  std::string cell;
  std::string cell_lock_service;
  // Created at start unless they exist (tablet role, or in the cell).
  std::vector<storage::TableSchema> tables;
  bool sync_log = true;
  bool preallocate_log = true;  // storage::TabletServerOptions::preallocate_log
  // Start the tablet role although its commit log is missing or behind
  // (storage::TabletServerOptions::accept_log_loss).
  bool accept_log_loss = false;
  absl::Duration coordinator_lease = absl::Seconds(10);
  absl::Duration coordinator_renew = absl::Seconds(2);
  int rpc_workers = 8;
  // How far ahead of this clock a log entry's timestamp may be.
  absl::Duration max_clock_skew = replication::kDefaultMaxClockSkew;
  // The replication server's log clean-up.
  replication::LogCleanupOptions log_cleanup;
  // Without the lock role: where the datacenter's lock role listens; the
  // access policy is read from there every `policy_poll`.
  std::string lock_address;
  absl::Duration policy_poll = absl::Seconds(2);
  // This datacenter's key directory for encrypted schemas
  // (replication/key_store.h); empty: none, and writes to encrypted entity
  // groups are refused.
  std::string key_dir;
  // Emulated WAN: the one-way delay of this datacenter's messages to a node
  // (its coordinator's lock renewals, its replication server's sweeps).
  // Empty: none.
  DelayedTransport::OneWay one_way;
};

class Datacenter {
 public:
  // Opens the tablet server, creates missing tables and starts serving the
  // lock service (those of its roles that run here); the coordinator and
  // replication server answer once StartReplication() knows the other
  // datacenters.
  static absl::StatusOr<std::unique_ptr<Datacenter>> Start(Env* env, DatacenterOptions options);
  ~Datacenter();

  // Starts the coordinator (full replicas) and the replication server;
  // `replicas[self]` is this datacenter.
  void StartReplication(const std::vector<replication::ReplicaInfo>& replicas, int self);
  // Stops answering anything (a datacenter outage); the data stays.
  void Stop();
  // An operator's switch (msadmin coordinator disable|enable): a disabled
  // coordinator stops renewing its locks, so after its lease writers no
  // longer need to reach it, and reads there go to a majority.
  void SetCoordinatorEnabled(bool enabled);
  // Takes the replica out (msadmin replica disable): its replication server
  // answers Unavailable and its coordinator is disabled, as if the
  // datacenter were down, until enabled again.
  void SetReplicaEnabled(bool enabled);

  const std::string& address() const { return address_; }
  const DatacenterOptions& options() const { return options_; }
  bool Runs(Role role) const;
  // Null where the role does not run in this process.
  coordinator::Coordinator* coordinator() { return coordinator_.get(); }
  replication::ReplicationServer* replication() { return replication_.get(); }
  // Encryption at rest (with the replication role).
  replication::AtRestEncryption* encryption() { return encryption_.get(); }
  // Round trips to the other datacenters (after StartReplication).
  std::vector<LatencyProber::Result> Latencies() const {
    return prober_ ? prober_->Results() : std::vector<LatencyProber::Result>();
  }
  // The datacenter's Bigtable as the replication role reaches it (null
  // without that role).
  storage::BigtableClient* bigtable() { return bigtable_.get(); }
  // Null without the tablet role.
  storage::TabletServer* tablets() { return tablets_.get(); }
  // Null unless the Bigtable is a cell.
  storage::cell::CellClient* cell_client() { return cell_client_.get(); }
  // The datacenter's RPC listener's counters (limits' refusals included).
  rpc::ServerStats rpc_stats() const;
  // Who may call what here (enforced over TLS once a policy is set).
  const AccessControl& access() const { return access_; }
  AccessControl& access() { return access_; }

  // What this datacenter's servers call other processes through (the
  // emulated WAN's delays included).
  Transport* outbound() { return delayed_ ? static_cast<Transport*>(delayed_.get()) : &transport_; }

 private:
  Datacenter(Env* env, DatacenterOptions options);

  Env* const env_;
  const DatacenterOptions options_;
  // Before the tablets: an asynchronous tablet write still finishing on the
  // commit log's thread as they close counts itself here.
  std::unique_ptr<storage::ServiceMetrics> tablet_metrics_;
  std::unique_ptr<storage::TabletServer> tablets_;
  std::unique_ptr<storage::lock::LockService> cell_lock_;
  std::unique_ptr<storage::cell::CellClient> cell_client_;
  std::unique_ptr<storage::BigtableClient>
      bigtable_;  // destroyed before the cell client it may use
  std::unique_ptr<replication::AtRestEncryption> encryption_;  // with the replication role
  std::unique_ptr<storage::lock::LockTable> locks_;
  rpc::RpcTransport transport_;
  std::unique_ptr<DelayedTransport> delayed_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<replication::ReplicationServer> replication_;
  std::unique_ptr<LatencyProber> prober_;
  // What the RPC handlers use: set once the roles have started.
  std::atomic<coordinator::Coordinator*> serving_coordinator_{nullptr};
  std::atomic<replication::ReplicationServer*> serving_replication_{nullptr};
  std::unique_ptr<rpc::RpcServer> server_;
  std::string address_;
  int64_t started_micros_ = 0;
  std::atomic<bool> coordinator_disabled_{false};
  std::atomic<bool> replica_disabled_{false};
  AccessControl access_;
  absl::Mutex policy_mu_;                        // one acl.Set at a time (lock role)
  std::unique_ptr<PolicyPoller> policy_poller_;  // without the lock role
};

// N datacenters named A, B, C, ... under `dir`, on loopback.
class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      Env* env, const std::string& dir, std::vector<replication::ReplicaType> types,
      std::vector<storage::TableSchema> tables, bool sync_log = true);
  // The datacenters of `config` (ports 0 are picked), each under
  // dir/NAME, with its links' delays emulated on their messages. Keys of
  // encrypted schemas go in key_dir/NAME (default: dir/keys/NAME).
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      Env* env, const std::string& dir, ClusterConfig config,
      std::vector<storage::TableSchema> tables, bool sync_log = true, bool accept_log_loss = false,
      std::string key_dir = "");
  // The config with the addresses actually bound.
  const ClusterConfig& config() const { return config_; }
  int size() const { return static_cast<int>(datacenters_.size()); }

  const std::vector<replication::ReplicaInfo>& replicas() const { return replicas_; }
  Datacenter& datacenter(int i) { return *datacenters_[static_cast<size_t>(i)]; }
  // Waits until every coordinator holds its locks (false on timeout).
  bool WaitUntilServing(absl::Duration timeout);

 private:
  std::vector<std::unique_ptr<Datacenter>> datacenters_;
  std::vector<replication::ReplicaInfo> replicas_;
  ClusterConfig config_;
};

}  // namespace megastore::server
