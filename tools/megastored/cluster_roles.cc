#include "tools/megastored/cluster_roles.h"

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "api/database.h"
#include "api/gateway.h"
#include "base/coding.h"
#include "base/delayed_transport.h"
#include "base/env.h"
#include "base/file.h"
#include "base/http/http_server.h"
#include "base/logging.h"
#include "base/rpc/rpc_transport.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/tls/certs.h"
#include "base/tls/context.h"
#include "schema/compat.h"
#include "server/cluster.h"
#include "server/datacenter.h"
#include "storage/cell/cell_client.h"
#include "tools/megastored/backups.h"
#include "tools/megastored/signals.h"
#include "tools/megastored/status.h"
#include "txn/transaction.h"

namespace megastore::server {

namespace {

int BadFlags(const std::string& what) {
  std::fprintf(stderr, "megastored: %s\n", what.c_str());
  return 2;
}

// "https" or "http": what this process's HTTP listeners speak.
const char* HttpScheme() { return tls::DefaultTls().enabled() ? "https" : "http"; }

// The throwaway certificates of megastored --local, in `dir` (DATA/tls):
// a CA, one certificate every datacenter of the process presents
// ("megastore-local", for the hosts of `config` and loopback) and one for
// tools and the example app ("admin"). Made on first start, reused after.
struct LocalCertificates {
  tls::TlsFiles server, client;
};
absl::StatusOr<LocalCertificates> EnsureLocalCertificates(const std::string& dir,
                                                          const ClusterConfig& config) {
  LocalCertificates out;
  out.server =
      tls::TlsFiles{dir + "/ca.crt", dir + "/megastore-local.crt", dir + "/megastore-local.key"};
  out.client = tls::TlsFiles{dir + "/ca.crt", dir + "/admin.crt", dir + "/admin.key"};
  if (!std::filesystem::exists(dir + "/ca.key")) {
    MS_RETURN_IF_ERROR(tls::CreateCa(dir, "megastore local CA (throwaway)"));
    tls::CertificateRequest server;
    server.common_name = "megastore-local";
    server.hosts = {"127.0.0.1", "localhost", "::1"};
    for (const DatacenterConfig& dc : config.datacenters()) {
      const std::string host = dc.address().substr(0, dc.address().rfind(':'));
      if (!host.empty() &&
          std::find(server.hosts.begin(), server.hosts.end(), host) == server.hosts.end())
        server.hosts.push_back(host);
    }
    MS_RETURN_IF_ERROR(tls::IssueCertificate(dir, dir, "megastore-local", server));
    tls::CertificateRequest admin;
    admin.common_name = "admin";
    MS_RETURN_IF_ERROR(tls::IssueCertificate(dir, dir, "admin", admin));
  }
  MS_RETURN_IF_ERROR(tls::CheckTls(out.server));
  MS_RETURN_IF_ERROR(tls::CheckTls(out.client));
  return out;
}

// The JSON gateway of one datacenter: an app server there (its client
// library reaching every replica through the config's emulated WAN),
// serving one schema. Members in the order they must be made (and, in
// reverse, destroyed).
struct GatewayProcess {
  std::unique_ptr<rpc::RpcTransport> rpc;
  std::unique_ptr<DelayedTransport> wan;
  std::unique_ptr<LatencyProber> prober;      // round trips to the datacenters with data
  std::unique_ptr<AccessControl> own_access;  // a process without the datacenter's roles
  std::unique_ptr<PolicyPoller> poller;
  std::unique_ptr<Database> db;
  std::unique_ptr<Gateway> gateway;
};

// Starts the gateway on `listen` as an app server of datacenter `local`.
// Requests are authorized by `access` (a datacenter of this process), or
// with TLS on and no `access`, by the policy read from `lock_address`
// (the datacenter's lock role). 0, or the exit code once the reason is
// printed.
int StartGateway(const ClusterFlags& flags, Env* env, const ClusterConfig& config,
                 std::vector<replication::ReplicaInfo> replicas, const std::string& local,
                 const std::string& listen, const schema::SchemaDescriptor& schema,
                 AccessControl* access, const std::string& lock_address, GatewayProcess& out) {
  out.rpc = std::make_unique<rpc::RpcTransport>();
  out.wan = std::make_unique<DelayedTransport>(env, out.rpc.get(), OneWayFrom(config, local));
  if (access == nullptr && tls::DefaultTls().enabled()) {
    out.own_access = std::make_unique<AccessControl>();
    out.poller = std::make_unique<PolicyPoller>(out.own_access.get(), out.wan.get(), lock_address,
                                                StrCat(local, " gateway"), absl::Seconds(2));
    out.poller->Start();
    access = out.own_access.get();
  }
  // "nearest" is measured: the round trip to each datacenter that holds
  // data, probed all along. A gateway in a witness datacenter (which has
  // no data to read) reads at the nearest one by default.
  std::vector<LatencyProber::Target> data_holders;
  bool local_has_data = false;
  for (const replication::ReplicaInfo& r : replicas) {
    if (r.type == replication::ReplicaType::kWitness) continue;
    data_holders.push_back({r.name, r.lock_service});
    if (r.name == local) local_has_data = true;
  }
  if (data_holders.empty()) {
    std::fprintf(stderr, "megastored: the gateway: no datacenter of the cluster holds data\n");
    return 1;
  }
  out.prober = std::make_unique<LatencyProber>(env, out.wan.get(), data_holders);
  out.prober->Start();
  std::string read_at = local;
  if (!local_has_data) {
    const absl::Time give_up = absl::Now() + absl::Seconds(3);
    while (!out.prober->ProbedAll() && absl::Now() < give_up)
      absl::SleepFor(absl::Milliseconds(20));
    std::vector<std::string> nearest = out.prober->Nearest();
    read_at = nearest.empty() ? data_holders.front().datacenter : nearest.front();
    std::printf("megastored: the gateway's datacenter %s is a witness; it reads at %s (%s)\n",
                local.c_str(), read_at.c_str(),
                nearest.empty() ? "none answered yet: the first in the config"
                                : "the nearest by round trip");
  }
  DatabaseOptions d;
  d.replicas = std::move(replicas);
  d.local = read_at;
  d.schema = schema;
  d.transport = out.wan.get();
  d.replication.max_clock_skew = MaxClockSkewOf(config);
  auto opened = Database::Open(d);
  if (!opened.ok()) {
    std::fprintf(stderr, "megastored: the gateway's database: %s\n",
                 opened.status().ToString().c_str());
    return 1;
  }
  out.db = std::move(*opened);
  GatewayOptions g;
  g.listen = listen;
  g.max_json_depth = flags.gateway_max_json_depth;
  g.max_page = flags.gateway_max_page;
  // Read tokens are sealed under a secret kept with the data, so they
  // stay valid across restarts; gateways given the same file accept each
  // other's tokens.
  const std::string secret_file = flags.gateway_secret_file.empty()
                                      ? flags.data + "/gateway-token.key"
                                      : flags.gateway_secret_file;
  absl::StatusOr<TokenMac> mac =
      flags.gateway_secret_file.empty() && flags.data.empty()
          ? TokenMac::Random()
          : TokenMac::FromFile(secret_file, /*create=*/flags.gateway_secret_file.empty());
  if (!mac.ok()) {
    std::fprintf(stderr, "megastored: --gateway-secret-file: %s\n",
                 std::string(mac.status().message()).c_str());
    return 2;
  }
  mac->set_key_period(absl::Minutes(flags.gateway_token_key_minutes));
  g.token_mac = std::make_shared<const TokenMac>(std::move(*mac));
  if (!flags.gateway_tokens_file.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> tokens =
        LoadGatewayTokens(flags.gateway_tokens_file);
    if (!tokens.ok()) {
      std::fprintf(stderr, "megastored: --gateway-tokens-file: %s\n",
                   std::string(tokens.status().message()).c_str());
      return 2;
    }
    g.tokens = std::move(*tokens);
  }
  // Requests are checked against the access policy of the gateway's
  // datacenter, as their principals (a bearer token's, or the TLS
  // client certificate's).
  if (access != nullptr && tls::DefaultTls().enabled())
    g.authorize = [access](const std::string& principal, bool write, const std::string& object) {
      return access->AuthorizeAction(principal,
                                     Action{write ? Action::kWrite : Action::kRead, object},
                                     write ? "gateway commit" : "gateway read");
    };
  g.nearest = [prober = out.prober.get()] { return prober->Nearest(); };
  out.gateway = std::make_unique<Gateway>(out.db.get(), g);
  if (absl::Status s = out.gateway->Start(); !s.ok()) {
    std::fprintf(stderr, "megastored: the gateway on %s: %s\n", listen.c_str(),
                 s.ToString().c_str());
    return 1;
  }
  std::printf("megastored: JSON gateway at %s://%s:%d/v1/ (schema %s, datacenter %s)\n",
              HttpScheme(), listen.substr(0, listen.rfind(':')).c_str(), out.gateway->port(),
              schema.name().c_str(), read_at.c_str());
  return 0;
}

// "gateway" taken out of a --roles list: the other roles, and whether it
// was there.
std::pair<std::string, bool> WithoutGateway(const std::string& roles) {
  std::string rest;
  bool gateway = false;
  for (size_t start = 0; start <= roles.size();) {
    size_t comma = roles.find(',', start);
    if (comma == std::string::npos) comma = roles.size();
    const std::string name = roles.substr(start, comma - start);
    start = comma + 1;
    if (name == "gateway")
      gateway = true;
    else
      rest += StrCat(rest.empty() ? "" : ",", name);
  }
  return {roles.empty() ? "" : rest, gateway};
}

}  // namespace

// Serves the status pages if --http asks for them, says "ready", and
// waits for SIGINT/SIGTERM. False if the status server could not start.
bool ServeUntilSignal(const ClusterFlags& flags, const std::string& command_line,
                      std::vector<Datacenter*> dcs, const ClusterConfig& config,
                      Database* gateway_db, const Gateway* gateway) {
  ScheduledBackups backups = StartScheduledBackups(config, dcs);
  std::unique_ptr<http::HttpServer> status;
  if (!flags.http.empty()) {
    std::string bound;
    status = ServeStatus(
        flags.http,
        StatusSources{command_line, std::move(dcs), config, gateway_db, gateway,
                      backups.scheduler.get(), absl::Seconds(flags.console_sample_seconds)},
        &bound);
    if (status == nullptr) return false;
    std::printf("megastored: status at %s://%s/status\n", HttpScheme(), bound.c_str());
  }
  std::printf("megastored: ready\n");
  std::fflush(stdout);
  WaitForShutdown();
  if (status) status->Stop();
  return true;
}

int RunCluster(const ClusterFlags& flags, const std::string& command_line) {
  KeepRecentErrors();
  Env* env = Env::Default();
  // The schemas whose tables every datacenter needs.
  std::vector<schema::SchemaDescriptor> schemas;
  std::vector<storage::TableSchema> tables;
  for (const std::string& path : flags.schemas) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    schema::SchemaDescriptor d;
    if (!in || !d.ParseFromString(bytes.str()) || d.name().empty())
      return BadFlags(
          StrCat("--schema=", path, ": not a schema descriptor (msc --out writes NAME.schema.pb)"));
    absl::StatusOr<schema::Layout> layout = schema::Layout::Create(d);
    if (!layout.ok()) return BadFlags(StrCat("--schema=", path, ": ", layout.status().message()));
    for (storage::TableSchema& t : txn::TablesFor(*layout)) tables.push_back(std::move(t));
    schemas.push_back(std::move(d));
  }
  if (!flags.gateway.empty() && schemas.empty())
    return BadFlags("--gateway needs --schema (the schema it serves)");
  if (!schemas.empty()) {
    storage::TableSchema t;
    t.set_name(kSchemaTable);
    t.add_families()->set_name(kSchemaFamily);
    // What replicas read to know which groups they must encrypt: raw
    // Bigtable verbs leave it alone unless forced, like the replicated
    // tables.
    t.set_replicated(true);
    tables.push_back(std::move(t));
  }
  // Records the schemas as applied (what msadmin schema show|group log read).
  // A schema recorded before is replaced only by a compatible one (the
  // check msadmin schema apply makes): FailedPrecondition naming the
  // incompatibilities otherwise.
  // `tablets`: the TabletServer here, or the cell's client library.
  auto record = [&schemas](auto* tablets) -> absl::Status {
    for (const schema::SchemaDescriptor& d : schemas) {
      MS_ASSIGN_OR_RETURN(std::optional<storage::Row> row,
                          tablets->ReadRow(kSchemaTable, d.name(), {}));
      schema::SchemaDescriptor previous;
      if (row.has_value() && !row->cells.empty()) {
        if (!previous.ParseFromString(row->cells.front().value))
          return absl::DataLossError(StrCat("the recorded schema ", d.name(), " is damaged"));
        std::vector<std::string> problems = schema::CheckCompatible(previous, d);
        if (!problems.empty()) {
          std::string why;
          for (const std::string& p : problems) why += StrCat("\n  ", p);
          return absl::FailedPreconditionError(
              StrCat("--schema: ", d.name(),
                     " differs incompatibly from the schema recorded in this cluster "
                     "(make the change compatible, or create new tables):",
                     why));
        }
      }
      MS_RETURN_IF_ERROR(tablets->MutateRow(
          kSchemaTable, d.name(),
          {storage::Mutation::SetCell(kSchemaFamily, kSchemaColumn, d.SerializeAsString())}));
    }
    return absl::OkStatus();
  };
  auto record_failed = [](const absl::Status& s) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return absl::IsFailedPrecondition(s) ? 2 : 1;
  };

  ClusterConfig config;
  if (!flags.config.empty()) {
    absl::StatusOr<ClusterConfig> loaded =
        LoadClusterConfig(flags.config, /*local_mode=*/flags.local > 0);
    if (!loaded.ok()) return BadFlags(std::string(loaded.status().message()));
    config = std::move(*loaded);
  } else {
    config = DefaultLocalConfig(flags.local);
  }

  if (flags.local == 0) {
    // One datacenter's roles, as the config describes it.
    if (flags.datacenter.empty())
      return BadFlags("--config without --local needs --datacenter=NAME");
    int self = -1;
    for (int i = 0; i < config.datacenters_size(); ++i)
      if (config.datacenters(i).name() == flags.datacenter) self = i;
    if (self < 0)
      return BadFlags(StrCat("--datacenter=", flags.datacenter, ": not in ", flags.config));
    const DatacenterConfig& me = config.datacenters(self);
    // The gateway: named in --roles, asked for with --gateway, or (all
    // roles) given an address in the config's roles { gateway }.
    auto [other_roles, gateway_role] = WithoutGateway(flags.roles);
    const std::string gateway_listen =
        !flags.gateway.empty() ? flags.gateway : me.roles().gateway();
    bool run_gateway =
        gateway_role || !flags.gateway.empty() || (flags.roles.empty() && !gateway_listen.empty());
    if (run_gateway && !gateway_role && flags.gateway.empty() && schemas.empty()) {
      // Only the config asks for it: the datacenter's roles still start.
      std::printf(
          "megastored: not running %s's gateway (roles { gateway } in the config): it needs "
          "--schema, the schema it serves\n",
          me.name().c_str());
      run_gateway = false;
    }
    if (run_gateway && gateway_listen.empty())
      return BadFlags(StrCat("--roles=", flags.roles, ": the gateway needs --gateway=HOST:PORT or ",
                             me.name(), "'s roles { gateway: \"HOST:PORT\" } in ", flags.config));
    if (run_gateway && schemas.empty())
      return BadFlags("the gateway needs --schema (the schema it serves)");
    if (flags.no_tls)
      return BadFlags("--no-tls is for --local; a --config cluster's TLS is its config's tls");
    // The config's certificates, unless --tls-* named this process's own.
    if (!tls::DefaultTls().enabled()) {
      const tls::TlsFiles files = ServerTlsOf(config, me);
      if (absl::Status s = tls::CheckTls(files); !s.ok())
        return BadFlags(StrCat(flags.config, ": datacenter ", me.name(), "'s tls: ", s.message()));
      tls::SetDefaultTls(files);
    }
    if (gateway_role && other_roles.empty()) {
      // Only the gateway: an app server of this datacenter, no storage.
      GatewayProcess gw;
      if (int rc = StartGateway(flags, env, config, ReplicasOf(config), me.name(), gateway_listen,
                                schemas.front(), nullptr, AddressOf(me, Role::kLock), gw);
          rc != 0)
        return rc;
      const bool served =
          ServeUntilSignal(flags, command_line, {}, config, gw.db.get(), gw.gateway.get());
      return served ? 0 : 1;
    }
    DatacenterOptions o;
    o.name = me.name();
    o.data_dir = flags.data;
    if (!flags.key_dir.empty()) {
      // Keys kept apart from the data they open: a copy of the data
      // directory (a backup, a disk) must not carry them.
      std::error_code ec;
      const std::string keys = std::filesystem::weakly_canonical(flags.key_dir, ec).string();
      const std::string data = std::filesystem::weakly_canonical(flags.data, ec).string();
      if (!flags.data.empty() && (keys == data || keys.rfind(data + "/", 0) == 0))
        return BadFlags(StrCat(
            "--key-dir=", flags.key_dir, " is inside --data=", flags.data,
            ": keep the keys apart from the data they open (another directory, ideally another "
            "volume or owner)"));
      o.key_dir = flags.key_dir;
    }
    o.max_clock_skew = MaxClockSkewOf(config);
    o.log_cleanup = LogCleanupOf(config);
    o.accept_log_loss = flags.accept_log_loss;
    o.type = TypeOf(me);
    if (flags.roles.empty()) {
      o.roles.clear();
      for (Role r : kAllRoles)
        if (r != Role::kCoordinator || o.type == replication::ReplicaType::kFull)
          o.roles.push_back(r);
    } else {
      absl::StatusOr<std::vector<Role>> roles = ParseRoles(other_roles);
      if (!roles.ok())
        return BadFlags(StrCat("--roles=", flags.roles, ": ", roles.status().message()));
      o.roles = std::move(*roles);
      if (std::count(o.roles.begin(), o.roles.end(), Role::kMaster))
        return BadFlags(
            StrCat("--roles=", flags.roles,
                   ": the master role runs a Bigtable cell: "
                   "megastored --roles=master --cell=C --lock-service=... (docs/cell.md)"));
      if (std::count(o.roles.begin(), o.roles.end(), Role::kCoordinator) &&
          o.type != replication::ReplicaType::kFull)
        return BadFlags(StrCat("--roles=", flags.roles, ": ", me.name(), " is a ", TypeName(o.type),
                               " replica; only full replicas have a coordinator"));
    }
    // Every role run here listens on one address.
    o.listen = AddressOf(me, o.roles.front());
    for (Role r : o.roles)
      if (AddressOf(me, r) != o.listen)
        return BadFlags(
            StrCat(flags.config, " puts ", me.name(), "'s ", RoleName(o.roles.front()), " role on ",
                   o.listen, " and its ", RoleName(r), " role on ", AddressOf(me, r),
                   ": run one megastored per address, each with --roles naming the roles there"));
    o.tablet_address = AddressOf(me, Role::kTablet);
    o.lock_address = AddressOf(me, Role::kLock);
    const bool in_cell = !me.bigtable_cell().name().empty();
    if (in_cell) {
      if (me.bigtable_cell().lock_service().empty())
        return BadFlags(
            StrCat(flags.config, ": ", me.name(), "'s bigtable_cell needs its lock_service"));
      o.cell = me.bigtable_cell().name();
      o.cell_lock_service = me.bigtable_cell().lock_service();
      if (!flags.roles.empty() && std::count(o.roles.begin(), o.roles.end(), Role::kTablet))
        return BadFlags(StrCat("--roles=", flags.roles, ": ", me.name(), "'s Bigtable is cell ",
                               o.cell, ": its tablet servers are megastored --cell processes"));
      std::erase(o.roles, Role::kTablet);
      if (o.roles.empty())
        return BadFlags(StrCat("--roles=", flags.roles, ": nothing left to run here"));
    }
    const bool has_tablet = std::count(o.roles.begin(), o.roles.end(), Role::kTablet) > 0;
    const bool has_replication = std::count(o.roles.begin(), o.roles.end(), Role::kReplication) > 0;
    if (has_tablet && flags.data.empty())
      return BadFlags("--data=DIR is required where the tablet role runs");
    if (!schemas.empty() && !has_tablet && !(in_cell && has_replication) && !run_gateway)
      return BadFlags(
          in_cell ? "--schema creates tables: give it to the process running the replication role"
                  : "--schema creates tables: give it to the process running the tablet role");
    o.tables = tables;
    o.sync_log = flags.sync;
    o.preallocate_log = flags.log_preallocate;
    // The config's links: this process delays its own outgoing messages.
    if (!config.links().empty()) o.one_way = OneWayFrom(config, me.name());
    auto dc = Datacenter::Start(env, o);
    if (!dc.ok()) {
      std::fprintf(stderr, "megastored: cannot start datacenter %s: %s\n", o.name.c_str(),
                   dc.status().ToString().c_str());
      return 1;
    }
    absl::Status recorded = absl::OkStatus();
    if (has_tablet) recorded = record((*dc)->tablets());
    if ((*dc)->cell_client() != nullptr && !schemas.empty())
      recorded = record((*dc)->cell_client());
    if (absl::Status s = recorded; !s.ok()) {
      (*dc)->Stop();
      return record_failed(s);
    }
    (*dc)->StartReplication(ReplicasOf(config), self);
    std::string running;
    for (Role r : o.roles) running += StrCat(running.empty() ? "" : ",", RoleName(r));
    std::printf("megastored: datacenter %s (%s) serving %s on %s (data %s)\n", o.name.c_str(),
                TypeName(o.type), running.c_str(), (*dc)->address().c_str(), flags.data.c_str());
    // The config's status address belongs to the datacenter's tablet-role
    // process (its replication process when the Bigtable is a cell).
    ClusterFlags serving = flags;
    if (serving.http.empty() && (has_tablet || (in_cell && has_replication)))
      serving.http = me.http();
    GatewayProcess gw;
    if (run_gateway) {
      if (int rc = StartGateway(flags, env, config, ReplicasOf(config), me.name(), gateway_listen,
                                schemas.front(), &(*dc)->access(), AddressOf(me, Role::kLock), gw);
          rc != 0) {
        (*dc)->Stop();
        return rc;
      }
    }
    const bool served =
        ServeUntilSignal(serving, command_line, {dc->get()}, config, gw.db.get(), gw.gateway.get());
    if (gw.gateway) gw.gateway->Stop();
    (*dc)->Stop();
    return served ? 0 : 1;
  }

  // --local: the whole cluster in this process.
  if (!flags.roles.empty())
    return BadFlags("--roles needs --config and --datacenter (--local runs every role)");
  if (flags.data.empty())
    return BadFlags("--local needs --data=DIR (each datacenter keeps its data under it)");
  if (config.datacenters_size() < 1) return BadFlags("--local needs at least one datacenter");
  if (!flags.config.empty() && config.datacenters_size() != flags.local)
    return BadFlags(StrCat("--local=", flags.local, " but ", flags.config, " describes ",
                           config.datacenters_size(), " datacenters"));
  // TLS: --tls-* if given, else the config's, else throwaway certificates
  // in DATA/tls (unless --no-tls).
  tls::TlsFiles client_tls;
  if (!tls::DefaultTls().enabled() && !flags.no_tls) {
    if (ServerTlsOf(config, config.datacenters(0)).enabled()) {
      const tls::TlsFiles files = ServerTlsOf(config, config.datacenters(0));
      for (const DatacenterConfig& dc : config.datacenters())
        if (ServerTlsOf(config, dc) != files)
          return BadFlags(StrCat(flags.config,
                                 ": --local runs every datacenter in one process, with one "
                                 "certificate: give them all the same tls"));
      if (absl::Status s = tls::CheckTls(files); !s.ok())
        return BadFlags(StrCat(flags.config, ": tls: ", s.message()));
      tls::SetDefaultTls(files);
      client_tls = ClientTlsOf(config);
    } else {
      if (absl::Status s = CreatePrivateDirectories(flags.data); !s.ok())
        return BadFlags(std::string(s.message()));
      absl::StatusOr<LocalCertificates> made = EnsureLocalCertificates(flags.data + "/tls", config);
      if (!made.ok()) {
        std::fprintf(stderr, "megastored: the local cluster's certificates in %s/tls: %s\n",
                     flags.data.c_str(), std::string(made.status().message()).c_str());
        return 1;
      }
      tls::SetDefaultTls(made->server);
      client_tls = made->client;
      std::printf(
          "megastored: TLS on, with throwaway certificates in %s/tls (CA ca.crt; tools: admin.crt, "
          "admin.key; --no-tls turns it off)\n",
          flags.data.c_str());
    }
  }
  auto cluster = LocalCluster::Start(env, flags.data, config, tables, flags.sync,
                                     flags.accept_log_loss, flags.key_dir);
  if (!cluster.ok()) {
    std::fprintf(stderr, "megastored: cannot start the local cluster: %s\n",
                 cluster.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < (*cluster)->size(); ++i) {
    if (absl::Status s = record((*cluster)->datacenter(i).tablets()); !s.ok())
      return record_failed(s);
  }
  if (!(*cluster)->WaitUntilServing(absl::Seconds(15))) {
    std::fprintf(stderr, "megastored: the coordinators did not get their locks within 15 s\n");
    return 1;
  }
  const std::string config_path = flags.data + "/cluster.textproto";
  ClusterConfig written = (*cluster)->config();
  if (tls::DefaultTls().enabled()) {
    // Absolute paths: the files may live anywhere (--tls-*), and a
    // relative one would be read from the config's directory.
    auto set = [](TlsConfig* t, const tls::TlsFiles& f) {
      auto absolute = [](const std::string& p) {
        return std::filesystem::absolute(p).lexically_normal().string();
      };
      t->set_ca(absolute(f.ca));
      t->set_cert(absolute(f.cert));
      t->set_key(absolute(f.key));
    };
    set(written.mutable_tls(), tls::DefaultTls());
    for (DatacenterConfig& dc : *written.mutable_datacenters()) dc.clear_tls();
    if (client_tls.enabled()) set(written.mutable_client_tls(), client_tls);
  }
  if (absl::Status s = WriteFileAtomically(
          config_path,
          "# Written by megastored --local: the running cluster's addresses.\n" + ToText(written));
      !s.ok()) {
    std::fprintf(stderr, "megastored: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("megastored: local cluster of %d datacenters (data %s)\n", (*cluster)->size(),
              flags.data.c_str());
  for (const DatacenterConfig& dc : (*cluster)->config().datacenters())
    std::printf("  %-4s %-9s %s\n", dc.name().c_str(), TypeName(TypeOf(dc)), dc.address().c_str());
  for (const Link& l : (*cluster)->config().links())
    std::printf("  WAN %s-%s: %u ms one way\n", l.a().c_str(), l.b().c_str(), l.one_way_ms());
  std::printf("megastored: cluster config (for msadmin --config): %s\n", config_path.c_str());

  // The JSON gateway, as an app server in the first datacenter with data.
  GatewayProcess gw;
  if (!flags.gateway.empty()) {
    const ClusterConfig& running = (*cluster)->config();
    std::string local;
    for (const DatacenterConfig& dc : running.datacenters())
      if (local.empty() && TypeOf(dc) != replication::ReplicaType::kWitness) local = dc.name();
    Datacenter* here = nullptr;
    for (int i = 0; i < (*cluster)->size(); ++i)
      if ((*cluster)->datacenter(i).options().name == local) here = &(*cluster)->datacenter(i);
    if (here == nullptr) return BadFlags("--gateway: no datacenter of the cluster holds data");
    if (int rc = StartGateway(flags, env, running, (*cluster)->replicas(), local, flags.gateway,
                              schemas.front(), &here->access(), "", gw);
        rc != 0)
      return rc;
  }
  std::vector<Datacenter*> dcs;
  for (int i = 0; i < (*cluster)->size(); ++i) dcs.push_back(&(*cluster)->datacenter(i));
  const bool served = ServeUntilSignal(flags, command_line, dcs, (*cluster)->config(), gw.db.get(),
                                       gw.gateway.get());
  if (gw.gateway) gw.gateway->Stop();
  return served ? 0 : 1;
}

}  // namespace megastore::server
