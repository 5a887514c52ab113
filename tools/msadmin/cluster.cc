#include "tools/msadmin/cluster.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "base/await.h"
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
#include "storage/tabletserver/tablet_service.h"
#include "tools/megastored/cluster.h"
#include "tools/megastored/datacenter.pb.h"
#include "txn/transaction.h"

namespace megastore::tools {

namespace {

using server::kSchemaColumn;
using server::kSchemaFamily;
using server::kSchemaTable;

int Usage(const std::string& what) {
  std::fprintf(stderr, "msadmin: %s\n", what.c_str());
  return 2;
}
int Failed(const std::string& what) {
  std::fprintf(stderr, "msadmin: %s\n", what.c_str());
  return 1;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

template <typename Reply, typename Request>
absl::StatusOr<Reply> Call(Transport& t, const std::string& to, const std::string& method,
                           const Request& req, absl::Duration timeout) {
  absl::StatusOr<std::string> raw = Await<std::string>(
      [&](auto cb) { t.Call(to, method, req.SerializeAsString(), timeout, std::move(cb)); });
  if (!raw.ok()) return raw.status();
  Reply reply;
  if (!reply.ParseFromString(*raw))
    return absl::DataLossError(StrCat("unparsable reply from ", to));
  return reply;
}

absl::StatusOr<schema::SchemaDescriptor> ReadSchemaFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (path.size() > 5 && path.substr(path.size() - 5) == ".msdl") {
    schema::CompileResult r = schema::CompileSchema(bytes.str());
    if (!r.ok()) {
      std::string errors;
      for (const auto& e : r.errors)
        errors += StrCat("\n  ", path, ":", e.pos.line, ":", e.pos.column, ": ", e.message);
      return absl::InvalidArgumentError(
          StrCat(path, " does not compile (check it with msc):", errors));
    }
    return r.descriptor;
  }
  schema::SchemaDescriptor d;
  if (!d.ParseFromString(bytes.str()) || d.name().empty())
    return absl::InvalidArgumentError(
        StrCat(path, " is neither DDL (.msdl) nor a descriptor from msc --out"));
  return d;
}

// The schema named `name` as applied to the cluster (read at the first
// datacenter that answers).
absl::StatusOr<schema::SchemaDescriptor> AppliedSchema(const server::ClusterConfig& config,
                                                       const std::string& name,
                                                       absl::Duration timeout) {
  absl::Status last = absl::NotFoundError("no datacenter");
  for (const auto& dc : config.datacenters()) {
    storage::TabletClient client(server::AddressOf(dc, server::Role::kTablet), timeout);
    absl::StatusOr<std::optional<storage::Row>> row = client.ReadRow(kSchemaTable, name);
    if (absl::IsNotFound(row.status()))
      return absl::NotFoundError(
          StrCat("no schema was applied to this cluster yet (msadmin schema apply FILE, or "
                 "megastored --schema=FILE), or give the schema file instead of ",
                 name));
    if (!row.ok()) {
      last = row.status();
      continue;
    }
    if (!row->has_value() || (*row)->cells.empty())
      return absl::NotFoundError(
          StrCat("no schema ", name, " was applied (msadmin schema apply FILE)"));
    schema::SchemaDescriptor d;
    if (!d.ParseFromString((*row)->cells.front().value))
      return absl::DataLossError(StrCat("the stored schema ", name, " is damaged"));
    return d;
  }
  return last;
}

// A datacenter as its processes report it: dc.Status from each distinct
// address of its roles, merged.
struct DatacenterState {
  server::DatacenterStatus merged;  // roles of every process that answered
  std::vector<std::pair<std::string, absl::StatusOr<server::DatacenterStatus>>> processes;
  std::string down;  // why not every process answered; empty when all did

  bool up() const { return down.empty(); }
};

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

// msadmin group catchup: a current read at the datacenter, which brings its
// replica of the group up to the latest position.
int GroupCatchup(const ClusterState& s, const server::ClusterConfig& config,
                 const replication::GroupRef& group) {
  rpc::RpcTransport transport;
  replication::GroupClientOptions o;
  o.replicas = server::ReplicasOf(config);
  o.local = -1;
  for (int i = 0; i < config.datacenters_size(); ++i)
    if (config.datacenters(i).name() == s.datacenter) o.local = i;
  if (o.local < 0) return Usage(StrCat("no datacenter ", s.datacenter, " in ", s.config));
  if (o.replicas[static_cast<size_t>(o.local)].type == replication::ReplicaType::kWitness)
    return Usage(StrCat(s.datacenter,
                        " is a witness: it keeps no data to catch up (its log follows the votes)"));
  o.deadline = absl::Seconds(s.timeout);
  replication::GroupClient client(Env::Default(), &transport, o);
  replication::StateRequest req;
  *req.mutable_group() = group;
  auto before =
      Call<replication::StateReply>(transport, o.replicas[static_cast<size_t>(o.local)].replication,
                                    "repl.State", req, absl::Seconds(s.timeout));
  absl::StatusOr<replication::LogPosition> p = Await<replication::LogPosition>([&](auto cb) {
    client.ReadPosition(group, replication::ReadLevel::kCurrent, std::move(cb));
  });
  if (!p.ok()) return Failed(StrCat("group catchup at ", s.datacenter, ": ", p.status().message()));
  const std::string was = before.ok() ? std::to_string(before->applied().position()) : "";
  if (s.json) {
    std::printf("{\"datacenter\":\"%s\",\"applied\":%llu,\"before\":%s}\n",
                JsonEscape(s.datacenter).c_str(), static_cast<unsigned long long>(p->position),
                was.empty() ? "null" : was.c_str());
  } else {
    std::printf("%s: applied up to position %llu (was %s)\n", s.datacenter.c_str(),
                static_cast<unsigned long long>(p->position),
                was.empty() ? "unknown" : was.c_str());
  }
  return 0;
}

// A log pushed far past what its replicas applied (a forged read position
// accepted before replicas refused them): every position above the highest
// applied one plus one is removed at every replica and the top brought back;
// an entry that was chosen up there is committed again at the group's next
// position, so no acknowledged write is dropped (it lands where filling the
// gap with no-ops would have put it, in the same order).
int GroupRepair(const ClusterState& s, const server::ClusterConfig& config,
                const replication::GroupRef& group) {
  rpc::RpcTransport transport;
  const auto timeout = absl::Seconds(s.timeout);
  uint64_t applied = 0, top = 0;
  for (const auto& dc : config.datacenters()) {
    replication::StateRequest req;
    *req.mutable_group() = group;
    auto st = Call<replication::StateReply>(
        transport, server::AddressOf(dc, server::Role::kReplication), "repl.State", req, timeout);
    if (!st.ok()) {
      return Failed(StrCat("group repair needs every replica's state, and ", dc.name(),
                           " did not answer: ", st.status().message()));
    }
    applied = std::max(applied, st->applied().position());
    top = std::max(top, st->top());
  }
  const uint64_t keep = applied + 1;
  if (top <= keep) {
    std::printf(
        "nothing to repair: the log's top (%llu) is at most one past the highest applied position "
        "(%llu)\n",
        static_cast<unsigned long long>(top), static_cast<unsigned long long>(applied));
    return 0;
  }
  // One pass to list (and keep the chosen entries), then, with --yes, one
  // to remove.
  std::map<uint64_t, std::string>
      chosen;  // position -> its chosen entry, where some replica learned it
  auto pass = [&](bool apply) -> int {
    for (const auto& dc : config.datacenters()) {
      uint64_t removed = 0;
      for (;;) {
        replication::TruncateRequest req;
        *req.mutable_group() = group;
        req.set_keep_through(keep);
        req.set_apply(apply);
        auto r = Call<replication::TruncateReply>(transport,
                                                  server::AddressOf(dc, server::Role::kReplication),
                                                  "repl.Truncate", req, timeout);
        if (!r.ok()) return Failed(StrCat(dc.name(), ": ", r.status().message()));
        removed += static_cast<uint64_t>(r->positions_size());
        for (int i = 0; i < r->positions_size(); ++i)
          if (!r->learned(i).empty()) chosen[r->positions(i)] = r->learned(i);
        if (!apply || !r->more()) break;
      }
      std::printf("%s: %llu positions above %llu %s%s\n", dc.name().c_str(),
                  static_cast<unsigned long long>(removed), static_cast<unsigned long long>(keep),
                  apply ? "removed" : "found",
                  !apply && removed >= static_cast<uint64_t>(replication::LogReplica::kMaxTruncate)
                      ? " (or more)"
                      : "");
    }
    return 0;
  };
  if (int rc = pass(false); rc != 0) return rc;
  if (s.force) {
    // The chosen entries are committed again after the removal; kept in a
    // file first, so that a failure in between loses none of them.
    std::string saved;
    for (const auto& [position, value] : chosen) {
      PutFixed64(&saved, position);
      PutLengthPrefixed(&saved, value);
    }
    const std::string file = StrCat("group-repair-", absl::BytesToHexString(group.root()), "-",
                                    absl::ToUnixSeconds(absl::Now()), ".entries");
    // Owner-only: the entries are the group's data in the clear (also for
    // an encrypted schema).
    if (absl::Status w = WriteFileAtomically(file, saved, 0600); !w.ok()) {
      return Failed(
          StrCat("cannot keep the chosen entries before removing anything: ", w.message()));
    }
    std::printf("chosen entries kept in %s (position and LogEntry, length-prefixed)\n",
                file.c_str());
    if (int rc = pass(true); rc != 0) return rc;
  }
  for (const auto& [position, value] : chosen) {
    std::printf("position %llu holds a chosen entry (%zu bytes)%s\n",
                static_cast<unsigned long long>(position), value.size(),
                s.force ? ": committing it again at the next position" : "");
  }
  if (!s.force) {
    std::printf(
        "the log's top is %llu, the highest applied position %llu: run again with --yes to "
        "repair\n",
        static_cast<unsigned long long>(top), static_cast<unsigned long long>(applied));
    return 0;
  }
  if (chosen.empty()) return 0;
  replication::GroupClientOptions o;
  o.replicas = server::ReplicasOf(config);
  o.local = -1;
  for (int i = 0; i < static_cast<int>(o.replicas.size()) && o.local < 0; ++i)
    if (o.replicas[static_cast<size_t>(i)].type == replication::ReplicaType::kFull) o.local = i;
  o.deadline = timeout;
  replication::GroupClient client(Env::Default(), &transport, o);
  for (const auto& [position, value] : chosen) {
    replication::LogEntry entry;
    if (!entry.ParseFromString(value))
      return Failed(StrCat("position ", position, ": the chosen entry is unreadable"));
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<replication::LogPosition> at = Await<replication::LogPosition>([&](auto cb) {
        client.ReadPosition(group, replication::ReadLevel::kCurrent, std::move(cb));
      });
      if (!at.ok()) return Failed(StrCat("reading the group's position: ", at.status().message()));
      absl::StatusOr<replication::CommitResult> r = Await<replication::CommitResult>(
          [&](auto cb) { client.Commit(group, *at, entry, std::move(cb)); });
      if (r.ok()) {
        std::printf("the entry of position %llu is now at position %llu\n",
                    static_cast<unsigned long long>(position),
                    static_cast<unsigned long long>(r->position));
        break;
      }
      if (!absl::IsAborted(r.status()) || attempt >= 10) {
        return Failed(StrCat("committing the entry of position ", position,
                             " again: ", r.status().message()));
      }
    }
  }
  return 0;
}

int SchemaApply(const ClusterState& s, const server::ClusterConfig& config) {
  absl::StatusOr<schema::SchemaDescriptor> next = ReadSchemaFile(s.file);
  if (!next.ok()) return Usage(std::string(next.status().message()));
  absl::StatusOr<schema::SchemaDescriptor> previous =
      AppliedSchema(config, next->name(), absl::Seconds(s.timeout));
  if (previous.ok()) {
    std::vector<std::string> problems = schema::CheckCompatible(*previous, *next);
    if (!problems.empty()) {
      for (const std::string& p : problems)
        std::fprintf(stderr, "msadmin schema apply: %s\n", p.c_str());
      return Failed(
          StrCat("refused: the change to ", next->name(),
                 " is incompatible with the data written "
                 "under the applied schema (make the change compatible, or create a new table)"));
    }
  } else if (!absl::IsNotFound(previous.status())) {
    return Failed(StrCat("cannot read the applied schema: ", previous.status().message()));
  }
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(*next);
  if (!layout.ok()) return Usage(std::string(layout.status().message()));
  std::vector<storage::TableSchema> tables = txn::TablesFor(*layout);
  storage::TableSchema schemas;
  schemas.set_name(kSchemaTable);
  schemas.add_families()->set_name(kSchemaFamily);
  schemas.set_replicated(true);  // guarded against raw verbs, as megastored makes it
  int created = 0;
  for (const auto& dc : config.datacenters()) {
    storage::TabletClient client(server::AddressOf(dc, server::Role::kTablet),
                                 absl::Seconds(s.timeout));
    client.set_force(true);  // an admin's schema change writes the guarded schema table
    auto create = [&](const storage::TableSchema& t) -> absl::Status {
      absl::Status st = client.CreateTable(t);
      if (st.ok()) ++created;
      if (st.ok() || absl::IsAlreadyExists(st)) return absl::OkStatus();
      return absl::Status(
          st.code(),
          StrCat("datacenter ", dc.name(), ": creating table ", t.name(), ": ", st.message(),
                 " (the tables created so far stay; run it again when ", dc.name(), " is up)"));
    };
    // The schema is recorded before its tables exist, so no replica ever
    // stores a group of them without knowing whether it is encrypted.
    if (absl::Status st = create(schemas); !st.ok()) return Failed(std::string(st.message()));
    if (absl::Status st = client.MutateRow(
            kSchemaTable, next->name(),
            {storage::Mutation::SetCell(kSchemaFamily, kSchemaColumn, next->SerializeAsString())});
        !st.ok())
      return Failed(StrCat("datacenter ", dc.name(), ": storing the schema: ", st.message()));
    for (const storage::TableSchema& t : tables)
      if (absl::Status st = create(t); !st.ok()) return Failed(std::string(st.message()));
  }
  if (s.json) {
    std::printf(
        "{\"schema\":\"%s\",\"datacenters\":%d,\"tables_created\":%d,\"applied_before\":%s}\n",
        JsonEscape(next->name()).c_str(), config.datacenters_size(), created,
        previous.ok() ? "true" : "false");
  } else {
    std::printf("schema %s applied to %d datacenter(s): %d table(s) created%s\n",
                next->name().c_str(), config.datacenters_size(), created,
                previous.ok() ? " (it was applied before; the change is compatible)" : "");
  }
  return 0;
}

int SchemaShow(const ClusterState& s, const server::ClusterConfig& config) {
  for (const auto& dc : config.datacenters()) {
    storage::TabletClient client(server::AddressOf(dc, server::Role::kTablet),
                                 absl::Seconds(s.timeout));
    std::vector<std::string> names;
    absl::Status st = client.ReadRows(kSchemaTable, storage::RowSet{}, {}, [&](storage::Row& row) {
      schema::SchemaDescriptor d;
      if (!row.cells.empty() && d.ParseFromString(row.cells.front().value)) {
        if (s.json)
          names.push_back(Json(d));
        else
          names.push_back(schema::PrintSchema(d));
      }
      return true;
    });
    if (!st.ok()) {
      if (absl::IsNotFound(st))
        return Failed("no schema has been applied yet (msadmin schema apply FILE)");
      continue;  // try the next datacenter
    }
    if (s.json) {
      std::string out = "[";
      for (const std::string& n : names) out += (out.size() > 1 ? "," : "") + n;
      std::printf("%s]\n", out.c_str());
    } else {
      for (const std::string& n : names) std::printf("%s\n", n.c_str());
    }
    return 0;
  }
  return Failed("no datacenter answered");
}

// The group named by `s.schema` and `s.group`, or a usage error.
absl::StatusOr<std::pair<replication::GroupRef, std::string>> ResolveGroup(
    const ClusterState& s, const server::ClusterConfig& config) {
  absl::StatusOr<schema::SchemaDescriptor> d =
      s.schema.find('.') != std::string::npos
          ? ReadSchemaFile(s.schema)
          : AppliedSchema(config, s.schema, absl::Seconds(s.timeout));
  if (!d.ok()) return d.status();
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(*d);
  if (!layout.ok()) return layout.status();
  const size_t colon = s.group.find(':');
  const schema::TableDescriptor* table =
      colon == std::string::npos ? nullptr : layout->schema().FindTable(s.group.substr(0, colon));
  if (table == nullptr)
    return absl::InvalidArgumentError(
        StrCat("group '", s.group, "' is not ROOT_TABLE:KEY[,KEY...] of schema ", d->name()));
  google::protobuf::RepeatedPtrField<google::protobuf::Value> values;
  std::stringstream parts(s.group.substr(colon + 1));
  for (std::string v; std::getline(parts, v, ',');) values.Add()->set_string_value(v);
  absl::StatusOr<std::vector<schema::KeyValue>> key =
      schema::KeyFromJson(*table, table->primary_key(), values, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> root = layout->GroupRow(*table, *key);
  if (!root.ok()) return root.status();
  replication::GroupRef group;
  group.set_table(layout->entity_table());
  group.set_root(*root);
  return std::make_pair(group, d->name());
}

int GroupLog(const ClusterState& s, const server::ClusterConfig& config,
             const std::pair<replication::GroupRef, std::string>& resolved) {
  const replication::GroupRef& group = resolved.first;
  rpc::RpcTransport transport;
  const auto timeout = absl::Seconds(s.timeout);
  uint64_t top = 0;
  std::map<std::string, replication::StateReply> states;
  std::map<std::string, std::string> unreachable;  // datacenter -> why
  for (const auto& dc : config.datacenters()) {
    replication::StateRequest req;
    *req.mutable_group() = group;
    auto st = Call<replication::StateReply>(
        transport, server::AddressOf(dc, server::Role::kReplication), "repl.State", req, timeout);
    if (!st.ok()) {
      unreachable[dc.name()] = std::string(st.status().message());
      continue;
    }
    top = std::max({top, st->top(), st->applied().position()});
    states[dc.name()] = *st;
  }
  if (states.empty()) return Failed("no datacenter answered");
  const uint64_t from =
      top > static_cast<uint64_t>(s.limit) ? top - static_cast<uint64_t>(s.limit) + 1 : 1;
  // Each replica's chosen values for the positions.
  std::map<uint64_t, std::map<std::string, std::string>> log;  // position -> replica -> value
  for (const auto& [name, st] : states) {
    if (top == 0) break;
    replication::ReadLogRequest req;
    *req.mutable_group() = group;
    req.set_from(from);
    req.set_to(top);
    std::string address;
    for (const auto& dc : config.datacenters())
      if (dc.name() == name) address = server::AddressOf(dc, server::Role::kReplication);
    auto r = Call<replication::ReadLogReply>(transport, address, "repl.ReadLog", req, timeout);
    if (!r.ok()) continue;
    for (int i = 0; i < r->positions_size(); ++i) log[r->positions(i)][name] = r->values(i);
  }
  struct Row {
    uint64_t position = 0;
    bool known = false;
    replication::LogEntry entry;
    std::string leader = "-";
    std::vector<std::string> known_at;
  };
  std::vector<Row> rows;
  for (uint64_t p = from; top > 0 && p <= top; ++p) {
    Row row;
    row.position = p;
    auto it = log.find(p);
    if (it != log.end()) {
      row.known = true;
      row.entry.ParseFromString(it->second.begin()->second);
      for (const auto& [name, v] : it->second) row.known_at.push_back(name);
      if (row.entry.next_leader() >= 0 && row.entry.next_leader() < config.datacenters_size())
        row.leader = config.datacenters(row.entry.next_leader()).name();
    }
    rows.push_back(std::move(row));
  }
  if (s.json) {
    std::string out = StrCat("{\"group\":\"", JsonEscape(s.group), "\",\"schema\":\"",
                             resolved.second, "\",\"replicas\":[");
    bool first = true;
    for (const auto& dc : config.datacenters()) {
      out += first ? "" : ",";
      first = false;
      auto st = states.find(dc.name());
      if (st == states.end()) {
        out += StrCat("{\"datacenter\":\"", dc.name(), "\",\"up\":false}");
      } else {
        out += StrCat("{\"datacenter\":\"", dc.name(),
                      "\",\"up\":true,\"applied\":", st->second.applied().position(),
                      ",\"top\":", st->second.top(), "}");
      }
    }
    out += "],\"log\":[";
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row& r = rows[k];
      out += StrCat(k ? "," : "", "{\"position\":", r.position,
                    ",\"known\":", r.known ? "true" : "false");
      if (r.known) {
        out += StrCat(",\"id\":\"", JsonEscape(r.entry.noop() ? "" : r.entry.id()),
                      "\",\"noop\":", r.entry.noop() ? "true" : "false",
                      ",\"timestamp\":", r.entry.timestamp(), ",\"next_leader\":\"", r.leader,
                      "\",\"changes\":", r.entry.changes_size(), ",\"known_at\":[");
        for (size_t n = 0; n < r.known_at.size(); ++n)
          out += StrCat(n ? "," : "", "\"", r.known_at[n], "\"");
        out += "]";
      }
      out += "}";
    }
    std::printf("%s]}\n", out.c_str());
    return 0;
  }
  for (const auto& [name, why] : unreachable) std::printf("%s: %s\n", name.c_str(), why.c_str());
  std::printf("entity group %s of %s (root row %s)\n", s.group.c_str(), resolved.second.c_str(),
              EscapeBytes(group.root()).c_str());
  for (const auto& [name, st] : states)
    std::printf("  %s: applied up to position %llu, highest position seen %llu\n", name.c_str(),
                static_cast<unsigned long long>(st.applied().position()),
                static_cast<unsigned long long>(st.top()));
  if (rows.empty()) {
    std::printf("  the log is empty\n");
    return 0;
  }
  std::printf("  %-9s %-24s %-18s %-7s %-8s %s\n", "position", "entry", "timestamp", "leader",
              "changes", "known at");
  for (const Row& r : rows) {
    if (!r.known) {
      std::printf("  %-9llu (not known to be chosen at any replica yet)\n",
                  static_cast<unsigned long long>(r.position));
      continue;
    }
    std::string at;
    for (const std::string& name : r.known_at) at += (at.empty() ? "" : ",") + name;
    std::printf("  %-9llu %-24s %-18lld %-7s %-8d %s\n",
                static_cast<unsigned long long>(r.position),
                r.entry.noop() ? "(no-op)" : r.entry.id().c_str(),
                static_cast<long long>(r.entry.timestamp()), r.leader.c_str(),
                r.entry.changes_size(), at.c_str());
  }
  return 0;
}

}  // namespace

void AddClusterCommands(CLI::App& app, ClusterState& state) {
  auto with_config = [&state](CLI::App* c) {
    c->add_option("--config", state.config,
                  "the cluster config (megastored --local writes DATA/cluster.textproto)")
        ->required();
    c->add_option("--timeout", state.timeout, "seconds each request may take")
        ->check(CLI::Range(0.001, 86400.0))
        ->capture_default_str();
    c->add_flag("--json", state.json, "JSON output");
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

// msadmin keys status: each datacenter's key directory.
int KeysStatus(const ClusterState& s, const server::ClusterConfig& config) {
  rpc::RpcTransport transport;
  int failed = 0;
  std::string json = "[";
  for (const auto& dc : config.datacenters()) {
    const std::string address = server::AddressOf(dc, server::Role::kReplication);
    auto r = Call<replication::KeysStatusReply>(transport, address, "keys.Status",
                                                replication::KeysStatusRequest(),
                                                absl::Seconds(s.timeout));
    if (s.json) {
      if (json.size() > 1) json += ",";
      json += StrCat("{\"datacenter\":\"", JsonEscape(dc.name()), "\",",
                     r.ok() ? StrCat("\"keys\":", Json(*r))
                            : StrCat("\"error\":\"", JsonEscape(r.status().message()), "\""),
                     "}");
    }
    if (!r.ok()) {
      ++failed;
      if (!s.json)
        std::printf("%-10s unreachable: %s\n", dc.name().c_str(),
                    std::string(r.status().message()).c_str());
      continue;
    }
    if (s.json) continue;
    if (r->key_dir().empty()) {
      std::printf("%-10s no key directory%s\n", dc.name().c_str(),
                  r->encrypted_tables_size() > 0 ? ": its encrypted tables cannot be written" : "");
      continue;
    }
    if (r->keks() == 0) {  // not opened: none created yet, or it does not open
      std::printf("%-10s %s: %s\n", dc.name().c_str(), r->key_dir().c_str(), r->provider().c_str());
      continue;
    }
    std::printf("%-10s %s: %s; key-encryption key %u (of %u), %llu group keys, %llu destroyed\n",
                dc.name().c_str(), r->key_dir().c_str(), r->provider().c_str(), r->active_kek(),
                r->keks(), static_cast<unsigned long long>(r->groups()),
                static_cast<unsigned long long>(r->destroyed()));
  }
  if (s.json) std::printf("%s]\n", json.c_str());
  return failed == 0 ? 0 : 1;
}

// msadmin keys rotate: a new key-encryption key in each datacenter (or one),
// every group key re-wrapped under it; no data is rewritten.
int KeysRotate(const ClusterState& s, const server::ClusterConfig& config) {
  rpc::RpcTransport transport;
  int failed = 0, done = 0;
  for (const auto& dc : config.datacenters()) {
    if (!s.datacenter.empty() && dc.name() != s.datacenter) continue;
    ++done;
    const std::string address = server::AddressOf(dc, server::Role::kReplication);
    auto r = Call<replication::KeysRotateReply>(transport, address, "keys.Rotate",
                                                replication::KeysRotateRequest(),
                                                absl::Seconds(s.timeout));
    if (!r.ok()) {
      ++failed;
      std::fprintf(stderr, "msadmin keys rotate: %s: %s\n", dc.name().c_str(),
                   std::string(r.status().message()).c_str());
      continue;
    }
    if (s.json) {
      std::printf("{\"datacenter\":\"%s\",\"active_kek\":%u,\"rewrapped\":%llu}\n",
                  JsonEscape(dc.name()).c_str(), r->active_kek(),
                  static_cast<unsigned long long>(r->rewrapped()));
    } else {
      std::printf(
          "%s: now key-encryption key %u; %llu group keys re-wrapped, the old key forgotten\n",
          dc.name().c_str(), r->active_kek(), static_cast<unsigned long long>(r->rewrapped()));
    }
  }
  if (done == 0) return Usage(StrCat("no datacenter ", s.datacenter, " in ", s.config));
  return failed == 0 ? 0 : 1;
}

// msadmin group destroy-key: crypto-shreds an encrypted group in every
// datacenter. Without --yes, only says what it would do.
int GroupDestroyKey(const ClusterState& s, const server::ClusterConfig& config,
                    const std::pair<replication::GroupRef, std::string>& resolved) {
  const replication::GroupRef& group = resolved.first;
  if (!s.force) {
    std::printf(
        "would destroy the key of entity group %s (row %s of table %s) in all %d datacenters: its "
        "data, "
        "log and every backup of them become unreadable for good. Run again with --yes.\n",
        s.group.c_str(), EscapeBytes(group.root()).c_str(), group.table().c_str(),
        config.datacenters_size());
    return 0;
  }
  rpc::RpcTransport transport;
  replication::KeysDestroyRequest req;
  req.set_table(group.table());
  req.set_root(group.root());
  std::vector<std::string> missed;
  for (const auto& dc : config.datacenters()) {
    const std::string address = server::AddressOf(dc, server::Role::kReplication);
    auto r = Call<replication::KeysDestroyReply>(transport, address, "keys.Destroy", req,
                                                 absl::Seconds(s.timeout));
    if (!r.ok()) {
      missed.push_back(StrCat(dc.name(), " (", r.status().message(), ")"));
      continue;
    }
    if (!s.json)
      std::printf(
          "%s: %s\n", dc.name().c_str(),
          r->had_key() ? "key destroyed" : "no key here (never written here, or destroyed before)");
  }
  if (!missed.empty()) {
    std::string list;
    for (const std::string& m : missed) list += StrCat(list.empty() ? "" : ", ", m);
    return Failed(StrCat("the key is not destroyed in ", list,
                         ": its data there is still readable; run this again "
                         "once they answer"));
  }
  if (s.json)
    std::printf("{\"group\":\"%s\",\"schema\":\"%s\",\"destroyed\":true}\n",
                JsonEscape(s.group).c_str(), JsonEscape(resolved.second).c_str());
  return 0;
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
