#include "tools/msadmin/cluster.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "base/await.h"
#include "base/cli.h"
#include "base/coding.h"
#include "base/env.h"
#include "base/file.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"
#include "replication/group_client.h"
#include "replication/keys.pb.h"
#include "replication/replication.pb.h"
#include "schema/compat.h"
#include "schema/compiler.h"
#include "schema/entity_json.h"
#include "schema/layout.h"
#include "schema/printer.h"
#include "server/cluster.h"
#include "server/datacenter.pb.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/msadmin/cluster_internal.h"
#include "txn/transaction.h"

namespace megastore::tools {

namespace cluster_internal {

DatacenterState AskDatacenter(Transport& transport, const server::DatacenterConfig& dc,
                              absl::Duration timeout) {
  DatacenterState out;
  for (const auto& [address, roles] : server::ProcessesOf(dc)) {
    auto st = Call<server::DatacenterStatus>(transport, address, "dc.Status",
                                             server::DatacenterStatusRequest(), timeout);
    if (st.ok()) {
      server::DatacenterStatus& m = out.merged;
      m.set_name(st->name());
      m.set_type(st->type());
      for (const std::string& r : st->roles()) m.add_roles(r);
      m.set_tables(m.tables() + st->tables());
      for (const std::string& t : st->missing_tables()) m.add_missing_tables(t);
      m.set_uptime_seconds(std::max(m.uptime_seconds(), st->uptime_seconds()));
      // The coordinator's and the replication server's own processes say
      // whether they are switched off.
      if (std::count(roles.begin(), roles.end(), server::Role::kCoordinator)) {
        m.set_coordinator_serving(st->coordinator_serving());
        m.set_coordinator_epoch(st->coordinator_epoch());
        m.set_coordinator_disabled(st->coordinator_disabled());
      }
      if (std::count(roles.begin(), roles.end(), server::Role::kReplication))
        m.set_replica_disabled(st->replica_disabled());
    } else {
      std::string names;
      for (server::Role r : roles) names += StrCat(names.empty() ? "" : ",", server::RoleName(r));
      out.down +=
          StrCat(out.down.empty() ? "" : "; ", names, " at ", address, ": ", st.status().message());
    }
    out.processes.emplace_back(address, std::move(st));
  }
  return out;
}

int ClusterStatus(const ClusterState& s, const server::ClusterConfig& config) {
  rpc::RpcTransport transport;
  bool healthy = true;
  if (!s.json)
    std::printf("%-10s %-9s %-22s %-8s %-36s %s\n", "datacenter", "type", "address", "state",
                "roles", "coordinator");
  std::string json = "[";
  std::string why_down;  // one line per datacenter down: what its processes answered
  for (const auto& dc : config.datacenters()) {
    const DatacenterState st = AskDatacenter(transport, dc, absl::Seconds(s.timeout));
    if (!st.up()) why_down += StrCat("  ", dc.name(), ": ", st.down, "\n");
    const bool missing = st.up() && st.merged.missing_tables_size() > 0;
    if (missing) {
      std::string tables;
      for (const std::string& t : st.merged.missing_tables())
        tables += StrCat(tables.empty() ? "" : ", ", t);
      why_down += StrCat(
          "  ", dc.name(), ": its Bigtable lacks ", tables,
          ": restart its tablet role with --schema to recreate them (they catch up from the other "
          "replicas)\n");
      healthy = false;
    }
    std::string coord = "—";
    if (st.up() && server::TypeOf(dc) == replication::ReplicaType::kFull) {
      coord = st.merged.coordinator_disabled() ? "disabled by an operator"
              : st.merged.coordinator_serving()
                  ? StrCat("serving (epoch ", st.merged.coordinator_epoch(), ")")
                  : "NOT serving: no lock majority";
      healthy &= st.merged.coordinator_serving() || st.merged.coordinator_disabled();
    }
    healthy &= st.up();
    if (s.json) {
      std::string processes;
      for (const auto& [address, ps] : st.processes)
        processes +=
            StrCat(processes.empty() ? "" : ",", "{\"address\":\"", address, "\",\"up\":",
                   ps.ok() ? StrCat("true,\"status\":", Json(*ps))
                           : StrCat("false,\"error\":\"", JsonEscape(ps.status().message()), "\""),
                   "}");
      json +=
          StrCat(json.size() > 1 ? "," : "", "{\"datacenter\":\"", dc.name(), "\",\"address\":\"",
                 st.processes.front().first, "\",\"up\":", st.up() ? "true" : "false",
                 st.up() ? StrCat(",\"status\":", Json(st.merged))
                         : StrCat(",\"error\":\"", JsonEscape(st.down), "\""),
                 ",\"processes\":[", processes, "]}");
    } else {
      std::string roles;
      for (const std::string& r : st.merged.roles()) roles += (roles.empty() ? "" : ",") + r;
      std::printf("%-10s %-9s %-22s %-8s %-36s %s\n", dc.name().c_str(),
                  dc.type().empty() ? "full" : dc.type().c_str(),
                  st.processes.size() == 1 ? st.processes.front().first.c_str()
                                           : StrCat(st.processes.size(), " processes").c_str(),
                  !st.up()                       ? "DOWN"
                  : missing                      ? "BROKEN"
                  : st.merged.replica_disabled() ? "disabled"
                                                 : "up",
                  st.up() ? roles.c_str() : st.down.substr(0, 36).c_str(), coord.c_str());
      if (st.processes.size() > 1) {
        for (const auto& [address, ps] : st.processes) {
          std::string here;
          if (ps.ok())
            for (const std::string& r : ps->roles()) here += (here.empty() ? "" : ",") + r;
          std::printf("  %-31s %-8s %s\n", address.c_str(), ps.ok() ? "up" : "DOWN",
                      ps.ok() ? here.c_str() : std::string(ps.status().message()).c_str());
        }
      }
    }
  }
  if (s.json)
    std::printf("%s]\n", json.c_str());
  else if (!why_down.empty())
    std::printf("\n%s", why_down.c_str());
  if (!s.json && !healthy)
    std::printf(
        "\nnot healthy: start the datacenters that are down (megastored --config ... "
        "--datacenter=NAME); a coordinator without its lock majority recovers once the other "
        "datacenters' lock services answer\n");
  return healthy ? 0 : 1;
}

// msadmin coordinator|replica disable|enable DC.
int Switch(const ClusterState& s, const server::ClusterConfig& config, bool replica, bool enable) {
  int self = -1;
  for (int i = 0; i < config.datacenters_size(); ++i)
    if (config.datacenters(i).name() == s.datacenter) self = i;
  if (self < 0) return Usage(StrCat("no datacenter ", s.datacenter, " in ", s.config));
  rpc::RpcTransport transport;
  if (replica && !enable && !s.force) {
    // Refuse to take out a vote the cluster needs for its majority.
    int voters = 0, others_up = 0;
    for (int i = 0; i < config.datacenters_size(); ++i) {
      const auto& dc = config.datacenters(i);
      if (server::TypeOf(dc) == replication::ReplicaType::kReadOnly) continue;
      ++voters;
      if (i == self) continue;
      const DatacenterState st = AskDatacenter(transport, dc, absl::Seconds(s.timeout));
      if (st.up() && !st.merged.replica_disabled()) ++others_up;
    }
    const bool votes =
        server::TypeOf(config.datacenters(self)) != replication::ReplicaType::kReadOnly;
    if (votes && others_up < voters / 2 + 1)
      return Failed(
          StrCat("refused: without ", s.datacenter, " only ", others_up, " of ", voters,
                 " voting replicas are up and enabled, fewer than a majority: every commit would "
                 "stop. Bring another datacenter back first, or add --force"));
  }
  const auto& dc = config.datacenters(self);
  server::SwitchRequest req;
  req.set_enable(enable);
  const std::string what = StrCat(replica ? "replica" : "coordinator", " ",
                                  enable ? "enable " : "disable ", s.datacenter);
  if (!replica && server::TypeOf(dc) != replication::ReplicaType::kFull)
    return Failed(
        StrCat(what, ": ", s.datacenter, " is not a full replica: it has no coordinator"));
  // The switch goes to the processes running the roles it turns off: the
  // coordinator, and for a replica also its replication server.
  std::vector<std::string> targets;
  for (server::Role role : {server::Role::kCoordinator, server::Role::kReplication}) {
    if (role == server::Role::kReplication && !replica) continue;
    if (role == server::Role::kCoordinator && server::TypeOf(dc) != replication::ReplicaType::kFull)
      continue;
    const std::string& address = server::AddressOf(dc, role);
    if (std::find(targets.begin(), targets.end(), address) == targets.end())
      targets.push_back(address);
  }
  for (const std::string& address : targets) {
    absl::StatusOr<std::string> r = Await<std::string>([&](auto cb) {
      transport.Call(address, replica ? "dc.Replica" : "dc.Coordinator", req.SerializeAsString(),
                     absl::Seconds(s.timeout), std::move(cb));
    });
    if (!r.ok())
      return Failed(StrCat(what, ": ", address, ": ", r.status().message(),
                           targets.size() > 1
                               ? " (the switch may have reached the datacenter's other processes; "
                                 "run it again once all are up)"
                               : ""));
  }
  if (s.json) {
    std::printf("{\"datacenter\":\"%s\",\"switch\":\"%s\",\"enabled\":%s}\n",
                JsonEscape(s.datacenter).c_str(), replica ? "replica" : "coordinator",
                enable ? "true" : "false");
  } else if (replica) {
    std::printf("replica %s %s\n", s.datacenter.c_str(),
                enable ? "enabled: its next current reads catch it up"
                       : "disabled: it answers nothing for the other datacenters and app servers "
                         "until enabled");
  } else {
    std::printf("coordinator of %s %s\n", s.datacenter.c_str(),
                enable ? "enabled: it serves again once it holds its locks"
                       : "disabled: writers stop waiting for it once its lease runs out; reads "
                         "there go to a majority");
  }
  return 0;
}

}  // namespace cluster_internal

using cluster_internal::ClusterStatus;
using cluster_internal::GroupCatchup;
using cluster_internal::GroupDestroyKey;
using cluster_internal::GroupLog;
using cluster_internal::GroupRepair;
using cluster_internal::KeysRotate;
using cluster_internal::KeysStatus;
using cluster_internal::ResolveGroup;
using cluster_internal::SchemaApply;
using cluster_internal::SchemaShow;
using cluster_internal::Switch;
using cluster_internal::Usage;

void AddClusterCommands(CLI::App& app, ClusterState& state) {
  auto with_config = [&state](CLI::App* c) {
    AddConfigOption(c, state.config,
                    "the cluster config (megastored --local writes DATA/cluster.textproto)",
                    /*required=*/true);
    c->add_option("--timeout", state.timeout, "seconds each request may take")
        ->check(CLI::Range(0.001, 86400.0))
        ->capture_default_str();
    AddOutputOption(c, state.json, "JSON output");
  };
  CLI::App* cluster = app.add_subcommand("cluster", "The cluster as a whole");
  cluster->require_subcommand(1);
  CLI::App* status =
      cluster->add_subcommand("status", "Every datacenter: reachable?, roles, coordinator health");
  with_config(status);
  status->callback([&state] { state.command = "cluster status"; });

  CLI::App* coord = app.add_subcommand("coordinator", "The operator's coordinator switch");
  coord->require_subcommand(1);
  for (const char* verb : {"disable", "enable"}) {
    CLI::App* v =
        coord->add_subcommand(verb, std::string(verb) == std::string("disable")
                                        ? "Stop a datacenter's coordinator (its locks lapse: "
                                          "writers stop waiting for an unhealthy replica)"
                                        : "Start a disabled coordinator again");
    with_config(v);
    v->add_option("datacenter", state.datacenter, "the datacenter")->required();
    v->callback([&state, verb] { state.command = StrCat("coordinator ", verb); });
  }

  CLI::App* rep =
      app.add_subcommand("replica", "Take a datacenter's replica out of the cluster and back");
  rep->require_subcommand(1);
  for (const char* verb : {"disable", "enable"}) {
    CLI::App* v = rep->add_subcommand(
        verb, std::string(verb) == std::string("disable")
                  ? "Its replication server answers nothing and its coordinator stops, as if the "
                    "datacenter "
                    "were down (maintenance); refused if the others are not a majority"
                  : "Take a disabled replica back; reads catch it up");
    with_config(v);
    v->add_option("datacenter", state.datacenter, "the datacenter")->required();
    v->add_flag("--force", state.force, "disable even if the remaining voters are no majority");
    v->callback([&state, verb] { state.command = StrCat("replica ", verb); });
  }

  CLI::App* sch = app.add_subcommand("schema", "Schemas applied to the cluster");
  sch->require_subcommand(1);
  CLI::App* apply = sch->add_subcommand("apply",
                                        "Create a schema's tables in every datacenter (DDL .msdl "
                                        "or msc's .schema.pb); a change to an "
                                        "applied schema must be compatible");
  with_config(apply);
  apply->add_option("file", state.file, "the schema")->required();
  apply->callback([&state] { state.command = "schema apply"; });
  CLI::App* show = sch->add_subcommand("show", "Print the applied schemas as DDL");
  with_config(show);
  show->callback([&state] { state.command = "schema show"; });

  CLI::App* grp = app.add_subcommand("group", "One entity group");
  grp->require_subcommand(1);
  CLI::App* log =
      grp->add_subcommand("log",
                          "The group's replicated log at every replica: positions, entries, "
                          "leaders, where each is known");
  with_config(log);
  log->add_option("schema", state.schema,
                  "an applied schema's name, or a NAME.schema.pb/.msdl file")
      ->required();
  log->add_option("group", state.group, "ROOT_TABLE:KEY[,KEY...], e.g. User:7")->required();
  log->add_option("--last", state.limit, "how many of the latest positions to show")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  log->callback([&state] { state.command = "group log"; });
  CLI::App* catchup = grp->add_subcommand(
      "catchup", "Bring one datacenter's replica of the group up to the latest position now");
  with_config(catchup);
  catchup
      ->add_option("schema", state.schema,
                   "an applied schema's name, or a NAME.schema.pb/.msdl file")
      ->required();
  catchup->add_option("group", state.group, "ROOT_TABLE:KEY[,KEY...], e.g. User:7")->required();
  catchup->add_option("--datacenter", state.datacenter, "the replica to catch up")->required();
  catchup->callback([&state] { state.command = "group catchup"; });
  CLI::App* repair = grp->add_subcommand("repair",
                                         "Bring back a log pushed far past the positions its "
                                         "replicas applied: lists what would be removed; "
                                         "with --yes removes it at every replica (all must answer) "
                                         "and commits any chosen entry among it "
                                         "again at the group's next position");
  with_config(repair);
  repair
      ->add_option("schema", state.schema,
                   "an applied schema's name, or a NAME.schema.pb/.msdl file")
      ->required();
  repair->add_option("group", state.group, "ROOT_TABLE:KEY[,KEY...], e.g. User:7")->required();
  repair->add_flag("--yes", state.force, "repair (without it, only show what would be removed)");
  repair->callback([&state] { state.command = "group repair"; });
  CLI::App* shred = grp->add_subcommand(
      "destroy-key",
      "Crypto-shred an ENCRYPTED group: destroy its key in every datacenter, so its data, log and "
      "backups can never be read again");
  with_config(shred);
  shred
      ->add_option("schema", state.schema,
                   "an applied schema's name, or a NAME.schema.pb/.msdl file")
      ->required();
  shred->add_option("group", state.group, "ROOT_TABLE:KEY[,KEY...], e.g. Patient:7")->required();
  shred->add_flag("--yes", state.force, "destroy (without it, only say what would be destroyed)");
  shred->callback([&state] { state.command = "group destroy-key"; });

  CLI::App* keys =
      app.add_subcommand("keys", "Encryption at rest: each datacenter's key directory");
  keys->require_subcommand(1);
  CLI::App* kstatus = keys->add_subcommand(
      "status", "Each datacenter's key directory, key-encryption key and counts");
  with_config(kstatus);
  kstatus->callback([&state] { state.command = "keys status"; });
  CLI::App* rotate = keys->add_subcommand(
      "rotate",
      "A new key-encryption key; every group key re-wrapped under it (no data is rewritten)");
  with_config(rotate);
  rotate->add_option("--datacenter", state.datacenter, "only this datacenter (default: all)");
  rotate->callback([&state] { state.command = "keys rotate"; });
}

int RunClusterCommand(const ClusterState& s) {
  absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(s.config);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  if (s.command == "cluster status") return ClusterStatus(s, *config);
  if (s.command == "coordinator disable") return Switch(s, *config, false, false);
  if (s.command == "coordinator enable") return Switch(s, *config, false, true);
  if (s.command == "replica disable") return Switch(s, *config, true, false);
  if (s.command == "replica enable") return Switch(s, *config, true, true);
  if (s.command == "schema apply") return SchemaApply(s, *config);
  if (s.command == "schema show") return SchemaShow(s, *config);
  if (s.command == "keys status") return KeysStatus(s, *config);
  if (s.command == "keys rotate") return KeysRotate(s, *config);
  if (s.command == "group log" || s.command == "group catchup" || s.command == "group repair" ||
      s.command == "group destroy-key") {
    auto resolved = ResolveGroup(s, *config);
    if (!resolved.ok()) return Usage(std::string(resolved.status().message()));
    if (s.command == "group log") return GroupLog(s, *config, *resolved);
    if (s.command == "group repair") return GroupRepair(s, *config, resolved->first);
    if (s.command == "group destroy-key") return GroupDestroyKey(s, *config, *resolved);
    return GroupCatchup(s, *config, resolved->first);
  }
  return Usage(StrCat("unknown command ", s.command));
}

}  // namespace megastore::tools
