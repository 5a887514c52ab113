#include "server/datacenter.h"

#include <algorithm>
#include <filesystem>

#include "absl/time/clock.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/at_rest.h"
#include "server/datacenter.pb.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/remote_bigtable.h"

namespace megastore::server {

Datacenter::Datacenter(Env* env, DatacenterOptions options)
    : env_(env), options_(std::move(options)) {}

bool Datacenter::Runs(Role role) const {
  return std::find(options_.roles.begin(), options_.roles.end(), role) != options_.roles.end();
}

absl::StatusOr<std::unique_ptr<Datacenter>> Datacenter::Start(Env* env, DatacenterOptions options) {
  {
    // The coordinator's lease must outlast a renewal, and the lock role must
    // grant it (storage::lock::LockTableOptions::max_lease).
    coordinator::CoordinatorOptions co;
    co.lease = options.coordinator_lease;
    co.renew_interval = options.coordinator_renew;
    MS_RETURN_IF_ERROR(co.Validate());
    if (co.lease > storage::lock::LockTableOptions{}.max_lease)
      return absl::InvalidArgumentError(
          StrCat("coordinator lease ", absl::FormatDuration(co.lease),
                 " is longer than a lock service grants (",
                 absl::FormatDuration(storage::lock::LockTableOptions{}.max_lease), ")"));
  }
  // Whether this datacenter's directory is new (nothing ran in it before):
  // decided before any role writes there.
  bool new_directory = true;
  {
    std::error_code ec;
    new_directory = !std::filesystem::exists(options.data_dir, ec) ||
                    std::filesystem::is_empty(options.data_dir, ec);
  }
  if (options.data_dir.empty() &&
      std::count(options.roles.begin(), options.roles.end(), Role::kLock))
    return absl::InvalidArgumentError(
        StrCat(options.name,
               ": the lock role needs a data directory (--data): it keeps "
               "coordinator-locks.state there, so a restart knows how long to wait"));
  // Only full replicas have a coordinator.
  if (options.type != replication::ReplicaType::kFull)
    std::erase(options.roles, Role::kCoordinator);
  // A cell's tablet servers are its own processes.
  if (!options.cell.empty()) std::erase(options.roles, Role::kTablet);
  std::unique_ptr<Datacenter> dc(new Datacenter(env, std::move(options)));
  const DatacenterOptions& o = dc->options_;
  if (!o.cell.empty() && dc->Runs(Role::kReplication)) {
    MS_ASSIGN_OR_RETURN(dc->cell_lock_, storage::cell::ConnectLockService(o.cell_lock_service));
    storage::cell::CellClientOptions co;
    co.force_replicated = true;  // the replication server writes its tables
    co.cell = o.cell;
    dc->cell_client_ = std::make_unique<storage::cell::CellClient>(dc->cell_lock_.get(), env, co);
    // The tables, through the cell's master (which may still be starting).
    for (const storage::TableSchema& t : o.tables) {
      absl::Status s = absl::UnavailableError(StrCat("cell ", o.cell, " has no master"));
      for (int attempt = 0; attempt < 600; ++attempt) {
        absl::StatusOr<std::string> master =
            storage::cell::FindMaster(dc->cell_lock_.get(), o.cell);
        if (master.ok()) s = storage::cell::MasterClient(*master, absl::Seconds(30)).CreateTable(t);
        if (s.ok() || absl::IsAlreadyExists(s)) break;
        if (!absl::IsUnavailable(s) && !absl::IsFailedPrecondition(s) &&
            !absl::IsDeadlineExceeded(s))
          return s;
        absl::SleepFor(absl::Milliseconds(100));
      }
      if (!s.ok() && !absl::IsAlreadyExists(s)) {
        return absl::UnavailableError(
            StrCat("creating table ", t.name(), " in cell ", o.cell, ": ", s.message()));
      }
    }
    dc->bigtable_ = std::make_unique<storage::cell::CellBigtable>(dc->cell_client_.get());
  } else if (dc->Runs(Role::kTablet)) {
    storage::TabletServerOptions to;
    to.data_dir = o.data_dir;
    to.sync_log = o.sync_log;
    to.preallocate_log = o.preallocate_log;
    to.accept_log_loss = o.accept_log_loss;
    MS_ASSIGN_OR_RETURN(dc->tablets_, storage::TabletServer::Open(to, env));
    for (const storage::TableSchema& t : o.tables) {
      absl::StatusOr<storage::TableSchema> stored = dc->tablets_->GetTable(t.name());
      if (!stored.ok()) {
        MS_RETURN_IF_ERROR(dc->tablets_->CreateTable(t));
        continue;
      }
      // Tables made before data families masked deletes by timestamp get
      // the rule now (docs/replication.md, "Apply").
      bool changed = false;
      // Tables made before replicated tables were marked get the mark.
      if (t.replicated() && !stored->replicated()) {
        stored->set_replicated(true);
        changed = true;
      }
      for (const storage::ColumnFamily& want : t.families()) {
        for (storage::ColumnFamily& f : *stored->mutable_families()) {
          if (f.name() != want.name() || !want.timestamp_deletes() || f.timestamp_deletes())
            continue;
          f.set_timestamp_deletes(true);
          changed = true;
        }
      }
      if (changed) MS_RETURN_IF_ERROR(dc->tablets_->UpdateTable(*stored));
    }
    dc->bigtable_ = std::make_unique<storage::InProcessBigtable>(dc->tablets_.get());
  } else if (dc->Runs(Role::kReplication)) {
    if (o.tablet_address.empty())
      return absl::InvalidArgumentError(
          StrCat(o.name,
                 ": the replication role without the tablet role needs the "
                 "tablet server's address"));
    dc->bigtable_ = std::make_unique<storage::RemoteBigtable>(o.tablet_address);
  }
  if (dc->Runs(Role::kReplication))
    dc->encryption_ =
        std::make_unique<replication::AtRestEncryption>(env, dc->bigtable_.get(), o.key_dir);
  if (o.one_way) dc->delayed_ = std::make_unique<DelayedTransport>(env, &dc->transport_, o.one_way);
  rpc::ServerOptions so;
  so.listen = o.listen;
  so.worker_threads = o.rpc_workers;
  Datacenter* d = dc.get();
  // The access policy binds principals, which only TLS gives.
  if (so.tls.enabled())
    so.authorize = [d](const rpc::CallContext& ctx, std::string_view method,
                       std::string_view request) {
      return d->access_.Authorize(ctx, method, request);
    };
  dc->server_ = std::make_unique<rpc::RpcServer>(so);
  if (d->Runs(Role::kLock)) {
    // Coordinator locks live in memory; the state file remembers the longest
    // lease granted, so a restarted lock role waits it out before granting
    // or reporting free any lock (storage/lock/lock_table.h).
    storage::lock::LockTableOptions lo;
    // No lease longer than the configured coordinators' is granted, so a
    // restart without its state file need not wait longer than that.
    lo.max_lease = o.coordinator_lease;
    lo.state_file = StrCat(o.data_dir, "/coordinator-locks.state");
    lo.new_directory = new_directory;
    MS_RETURN_IF_ERROR(CreatePrivateDirectories(o.data_dir));
    MS_ASSIGN_OR_RETURN(dc->locks_, storage::lock::LockTable::Open(env, lo));
    if (dc->locks_->quiet_until() > env->MonotonicMicros())
      MS_LOG_WARN(
          "{}: lock role restarted; coordinator locks are neither granted nor reported free for {} "
          "(the longest lease its last run granted)",
          o.name,
          absl::FormatDuration(
              absl::Microseconds(dc->locks_->quiet_until() - env->MonotonicMicros())));
    for (std::string_view m : storage::lock::LockTable::kMethods)
      rpc::Serve(*d->server_, std::string(m), [d, m](std::string req, Responder respond) {
        d->locks_->Serve(m, std::move(req), std::move(respond));
      });
    // The access policy lives with the lock role, as Bigtable keeps its
    // list of writers in Chubby.
    const std::string policy_file = StrCat(o.data_dir, "/access-policy.pb");
    MS_ASSIGN_OR_RETURN(std::optional<AccessPolicy> policy, LoadPolicyFile(policy_file));
    if (policy.has_value()) {
      if (!so.tls.enabled())
        MS_LOG_WARN(
            "{}: {} holds an access policy, but without TLS there are no principals: it is not "
            "enforced",
            o.name, policy_file);
      dc->access_.Install(*std::move(policy));
    }
    rpc::Serve(*d->server_, "acl.Get", [d](std::string, Responder respond) {
      std::shared_ptr<const AccessPolicy> p = d->access_.policy();
      respond(p == nullptr ? std::string() : p->SerializeAsString());
    });
    rpc::Serve(*d->server_, "acl.Set", [d, policy_file](std::string req, Responder respond) {
      AccessPolicy p;
      if (!p.ParseFromString(req))
        return respond(absl::InvalidArgumentError("acl.Set: malformed policy"));
      if (absl::Status s = ValidatePolicy(p); !s.ok()) return respond(s);
      absl::MutexLock lock(&d->policy_mu_);
      std::shared_ptr<const AccessPolicy> current = d->access_.policy();
      if (current != nullptr && p.version() <= current->version())
        return respond(absl::FailedPreconditionError(
            StrCat(d->options_.name, " holds policy version ", current->version(),
                   "; a change must be newer (it is ", p.version(), ")")));
      if (absl::Status s = SavePolicyFile(policy_file, p); !s.ok()) return respond(s);
      RecordEvent(StrCat(d->options_.name, ": access policy version ", p.version(), " installed (",
                         p.members_size(), " members)"));
      d->access_.Install(std::move(p));
      respond(std::string());
    });
  }
  // The roles that need the other datacenters answer Unavailable until
  // StartReplication.
  // Both services answer last and never block after answering: an
  // in-process caller's callback runs on the worker that answered.
  if (d->Runs(Role::kCoordinator))
    for (std::string_view m : coordinator::Coordinator::kMethods) {
      rpc::Serve(*d->server_, std::string(m), [d, m](std::string req, Responder respond) {
        coordinator::Coordinator* c = d->serving_coordinator_.load();
        if (c == nullptr)
          return respond(
              absl::UnavailableError(StrCat("no coordinator runs at ", d->options_.name)));
        c->Serve(m, std::move(req), std::move(respond));
      });
      d->server_->AnswerLocalCallsOnWorker(m);
    }
  if (d->Runs(Role::kReplication))
    for (std::string_view m : replication::ReplicationServer::kMethods) {
      rpc::Serve(*d->server_, std::string(m), [d, m](std::string req, Responder respond) {
        replication::ReplicationServer* r = d->serving_replication_.load();
        if (d->replica_disabled_.load())
          return respond(absl::UnavailableError(
              StrCat("the replica at ", d->options_.name, " is disabled by an operator")));
        if (r == nullptr)
          return respond(absl::UnavailableError(
              StrCat("replication at ", d->options_.name, " has not started")));
        r->Serve(m, std::move(req), std::move(respond));
      });
      d->server_->AnswerLocalCallsOnWorker(m);
    }
  // Encryption at rest's keys (msadmin keys, msadmin group destroy-key).
  if (d->encryption_ != nullptr) {
    rpc::Serve(*d->server_, "keys.Status", [d](std::string, Responder respond) {
      respond(d->encryption_->Status().SerializeAsString());
    });
    rpc::Serve(*d->server_, "keys.Rotate", [d](std::string, Responder respond) {
      absl::StatusOr<replication::KeysRotateReply> r = d->encryption_->Rotate();
      if (!r.ok()) return respond(r.status());
      respond(r->SerializeAsString());
    });
    rpc::Serve(*d->server_, "keys.Destroy", [d](std::string req, Responder respond) {
      replication::KeysDestroyRequest r;
      if (!r.ParseFromString(req))
        return respond(absl::InvalidArgumentError("keys.Destroy: malformed request"));
      absl::StatusOr<replication::KeysDestroyReply> reply =
          d->encryption_->Destroy(r.table(), r.root());
      if (!reply.ok()) return respond(reply.status());
      respond(reply->SerializeAsString());
    });
  }
  // Its Bigtable's own RPC service (msadmin bt, schema apply; a replication
  // server in another process).
  if (dc->tablets_ != nullptr) {
    dc->tablet_metrics_ = std::make_unique<storage::ServiceMetrics>();
    storage::RegisterTabletService(dc->tablets_.get(), dc->server_.get(),
                                   dc->tablet_metrics_.get());
  }
  dc->started_micros_ = env->NowMicros();
  rpc::Serve(*d->server_, "dc.Status", [d](std::string, Responder respond) {
    DatacenterStatus s;
    s.set_name(d->options_.name);
    s.set_type(TypeName(d->options_.type));
    coordinator::Coordinator* c = d->serving_coordinator_.load();
    if (c != nullptr) {
      s.set_coordinator_serving(c->serving());
      s.set_coordinator_epoch(c->epoch());
    }
    s.set_coordinator_disabled(d->coordinator_disabled_.load());
    s.set_replica_disabled(d->replica_disabled_.load());
    if (d->tablets_ != nullptr) {
      s.set_tables(static_cast<uint32_t>(d->tablets_->ListTables().size()));
      for (const storage::TableSchema& t : d->options_.tables)
        if (!d->tablets_->GetTable(t.name()).ok()) s.add_missing_tables(t.name());
    }
    s.set_uptime_seconds((d->env_->NowMicros() - d->started_micros_) / 1'000'000);
    for (Role role : d->options_.roles) {
      // A role that needs the other datacenters counts once it started.
      if (role == Role::kCoordinator && c == nullptr) continue;
      if (role == Role::kReplication && d->serving_replication_.load() == nullptr) continue;
      s.add_roles(RoleName(role));
    }
    respond(s.SerializeAsString());
  });
  rpc::Serve(*d->server_, "dc.Replica", [d](std::string req, Responder respond) {
    SwitchRequest r;
    if (!r.ParseFromString(req))
      return respond(absl::InvalidArgumentError("dc.Replica: malformed request"));
    d->SetReplicaEnabled(r.enable());
    RecordEvent(StrCat(d->options_.name, ": replica ", r.enable() ? "enabled" : "disabled",
                       " by an operator (dc.Replica)"));
    respond(std::string());
  });
  rpc::Serve(*d->server_, "dc.Coordinator", [d](std::string req, Responder respond) {
    SwitchRequest r;
    if (!r.ParseFromString(req))
      return respond(absl::InvalidArgumentError("dc.Coordinator: malformed request"));
    if (d->options_.type != replication::ReplicaType::kFull)
      return respond(absl::FailedPreconditionError(
          StrCat(d->options_.name, " is not a full replica: it has no coordinator")));
    if (!d->Runs(Role::kCoordinator))
      return respond(absl::FailedPreconditionError(
          StrCat("the coordinator of ", d->options_.name, " does not run in this process")));
    d->SetCoordinatorEnabled(r.enable());
    RecordEvent(StrCat(d->options_.name, ": coordinator ", r.enable() ? "enabled" : "disabled",
                       " by an operator (dc.Coordinator)"));
    respond(std::string());
  });
  // A process without the lock role refuses calls until it has read the
  // policy (it would otherwise allow everything meanwhile).
  const bool polls = !d->Runs(Role::kLock) && !o.lock_address.empty() && so.tls.enabled();
  if (polls)
    dc->policy_poller_ = std::make_unique<PolicyPoller>(&dc->access_, dc->outbound(),
                                                        o.lock_address, o.name, o.policy_poll);
  if (polls) dc->access_.RequireKnown(o.lock_address);
  MS_RETURN_IF_ERROR(dc->server_->Start());
  if (polls) dc->policy_poller_->Start();
  const size_t colon = o.listen.rfind(':');
  dc->address_ = StrCat(o.listen.substr(0, colon), ":", dc->server_->port());
  return dc;
}

Datacenter::~Datacenter() { Stop(); }

void Datacenter::StartReplication(const std::vector<replication::ReplicaInfo>& replicas, int self) {
  std::vector<LatencyProber::Target> others;
  for (size_t i = 0; i < replicas.size(); ++i)
    if (static_cast<int>(i) != self) others.push_back({replicas[i].name, replicas[i].lock_service});
  prober_ = std::make_unique<LatencyProber>(env_, outbound(), std::move(others));
  prober_->Start();
  if (Runs(Role::kCoordinator)) {
    coordinator::CoordinatorOptions co;
    co.name = options_.name;
    for (size_t i = 0; i < replicas.size(); ++i)
      if (static_cast<int>(i) != self) co.lock_services.push_back(replicas[i].lock_service);
    co.lease = options_.coordinator_lease;
    co.renew_interval = options_.coordinator_renew;
    coordinator_ = std::make_unique<coordinator::Coordinator>(env_, outbound(), co);
    coordinator_->Start();
    serving_coordinator_ = coordinator_.get();
  }
  if (!Runs(Role::kReplication)) return;
  replication::ReplicationServerOptions ro;
  ro.cluster.replicas = replicas;
  ro.cluster.local = self;
  ro.cluster.max_clock_skew = options_.max_clock_skew;
  ro.encryption = encryption_.get();
  ro.cleanup = options_.log_cleanup;
  replication_ =
      std::make_unique<replication::ReplicationServer>(env_, outbound(), bigtable_.get(), ro);
  replication_->Start();
  serving_replication_ = replication_.get();
}

void Datacenter::SetCoordinatorEnabled(bool enabled) {
  coordinator_disabled_ = !enabled;
  if (coordinator_ == nullptr) return;
  if (enabled) {
    coordinator_->Start();
  } else {
    coordinator_->Stop();
  }
}

void Datacenter::SetReplicaEnabled(bool enabled) {
  replica_disabled_ = !enabled;
  if (Runs(Role::kCoordinator)) SetCoordinatorEnabled(enabled);
}

void Datacenter::Stop() {
  if (policy_poller_) policy_poller_->Stop();
  // Calls waiting for the cell (a tablet being recovered) give up now.
  if (cell_client_) cell_client_->Cancel();
  if (prober_) prober_->Stop();
  if (server_) server_->Stop();  // no handler runs after this
  if (replication_) replication_->Stop();
  if (coordinator_) coordinator_->Stop();
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    Env* env, const std::string& dir, std::vector<replication::ReplicaType> types,
    std::vector<storage::TableSchema> tables, bool sync_log) {
  ClusterConfig config;
  for (size_t i = 0; i < types.size(); ++i) {
    DatacenterConfig* dc = config.add_datacenters();
    dc->set_name(std::string(1, static_cast<char>('A' + i)));
    dc->set_type(TypeName(types[i]));
    dc->set_address("127.0.0.1:0");
  }
  return Start(env, dir, std::move(config), std::move(tables), sync_log);
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    Env* env, const std::string& dir, ClusterConfig config,
    std::vector<storage::TableSchema> tables, bool sync_log, bool accept_log_loss,
    std::string key_dir) {
  if (key_dir.empty()) key_dir = StrCat(dir, "/keys");
  auto cluster = std::make_unique<LocalCluster>();
  // Which datacenter an address belongs to, filled as they start (the
  // delays are looked up per message, after all have started).
  struct Book {
    absl::Mutex mu;
    std::map<std::string, std::string> dc_of ABSL_GUARDED_BY(mu);
  };
  auto book = std::make_shared<Book>();
  const auto delays = DelaysOf(config);
  for (DatacenterConfig& c : *config.mutable_datacenters()) {
    DatacenterOptions o;
    o.name = c.name();
    o.data_dir = StrCat(dir, "/", o.name);
    o.key_dir = StrCat(key_dir, "/", o.name);
    o.type = TypeOf(c);
    o.listen = c.address();
    o.tables = tables;
    o.sync_log = sync_log;
    o.accept_log_loss = accept_log_loss;
    o.coordinator_lease = absl::Seconds(3);
    o.coordinator_renew = absl::Milliseconds(300);
    o.max_clock_skew = MaxClockSkewOf(config);
    o.log_cleanup = LogCleanupOf(config);
    if (!delays.empty()) {
      o.one_way = [book, delays, here = c.name()](std::string_view to) {
        absl::MutexLock lock(&book->mu);
        auto dc = book->dc_of.find(std::string(to));
        if (dc == book->dc_of.end()) return absl::ZeroDuration();
        auto d = delays.find({here, dc->second});
        return d == delays.end() ? absl::ZeroDuration() : d->second;
      };
    }
    MS_ASSIGN_OR_RETURN(std::unique_ptr<Datacenter> dc, Datacenter::Start(env, o));
    c.set_address(dc->address());
    {
      absl::MutexLock lock(&book->mu);
      book->dc_of[dc->address()] = c.name();
    }
    cluster->datacenters_.push_back(std::move(dc));
  }
  cluster->replicas_ = ReplicasOf(config);
  cluster->config_ = std::move(config);
  for (size_t i = 0; i < cluster->datacenters_.size(); ++i)
    cluster->datacenters_[i]->StartReplication(cluster->replicas_, static_cast<int>(i));
  return cluster;
}

bool LocalCluster::WaitUntilServing(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (auto& dc : datacenters_) {
    while (dc->coordinator() != nullptr && !dc->coordinator()->serving()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  return true;
}

rpc::ServerStats Datacenter::rpc_stats() const {
  return server_ ? server_->stats() : rpc::ServerStats{};
}

}  // namespace megastore::server
