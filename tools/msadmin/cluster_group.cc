// msadmin group catchup|repair|log|destroy-key (docs/msadmin.md).
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
#include "server/cluster.h"
#include "server/datacenter.pb.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/msadmin/cluster_internal.h"
#include "txn/transaction.h"

namespace megastore::tools::cluster_internal {

absl::StatusOr<NamedGroup> ParseGroup(const schema::SchemaDescriptor& d, const std::string& text) {
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(d);
  if (!layout.ok()) return layout.status();
  const size_t colon = text.find(':');
  const schema::TableDescriptor* table =
      colon == std::string::npos ? nullptr : layout->schema().FindTable(text.substr(0, colon));
  if (table == nullptr || !table->entity_group_root())
    return absl::InvalidArgumentError(
        StrCat("group '", text, "' is not ROOT_TABLE:KEY[,KEY...] of schema ", d.name()));
  google::protobuf::RepeatedPtrField<google::protobuf::Value> values;
  std::stringstream parts(text.substr(colon + 1));
  for (std::string v; std::getline(parts, v, ',');) values.Add()->set_string_value(v);
  NamedGroup out;
  absl::StatusOr<std::vector<schema::KeyValue>> key =
      schema::KeyFromJson(*table, table->primary_key(), values, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> root = layout->GroupRow(*table, *key);
  if (!root.ok()) return root.status();
  out.group.set_table(layout->entity_table());
  out.group.set_root(*root);
  out.root_table = table->name();
  out.root_key = std::move(*key);
  return out;
}

// The group named by `s.schema` and `s.group`, or a usage error.
absl::StatusOr<std::pair<replication::GroupRef, std::string>> ResolveGroup(
    const ClusterState& s, const server::ClusterConfig& config) {
  absl::StatusOr<schema::SchemaDescriptor> d =
      s.schema.find('.') != std::string::npos
          ? ReadSchemaFile(s.schema)
          : AppliedSchema(config, s.schema, absl::Seconds(s.timeout));
  if (!d.ok()) return d.status();
  absl::StatusOr<NamedGroup> g = ParseGroup(*d, s.group);
  if (!g.ok()) return g.status();
  return std::make_pair(g->group, d->name());
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
    std::printf("{\"datacenter\":\"%s\",\"applied\":\"%llu\",\"before\":%s}\n",
                JsonEscape(s.datacenter).c_str(), static_cast<unsigned long long>(p->position),
                was.empty() ? "null" : StrCat("\"", was, "\"").c_str());
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
  // -o json: one object at the end (the text lines are progress, printed
  // as each step ends).
  std::string json_replicas, json_chosen, saved_file;
  // A chosen entry for -o json; `committed_at` once committed again (0: not).
  auto add_chosen = [&json_chosen](uint64_t position, size_t bytes, uint64_t committed_at) {
    json_chosen +=
        StrCat(json_chosen.empty() ? "" : ",", "{\"position\":\"", position, "\",\"bytes\":", bytes,
               committed_at == 0 ? "" : StrCat(",\"committedAt\":\"", committed_at, "\""), "}");
  };
  auto finish = [&](bool repaired) {
    if (!s.json) return 0;
    std::printf(
        "{\"top\":\"%llu\",\"applied\":\"%llu\",\"keepThrough\":\"%llu\",\"repaired\":%s,"
        "\"replicas\":[%s],\"chosen\":[%s],\"savedEntries\":%s}\n",
        static_cast<unsigned long long>(top), static_cast<unsigned long long>(applied),
        static_cast<unsigned long long>(keep), repaired ? "true" : "false", json_replicas.c_str(),
        json_chosen.c_str(),
        saved_file.empty() ? "null" : StrCat("\"", JsonEscape(saved_file), "\"").c_str());
    return 0;
  };
  if (top <= keep) {
    if (!s.json) {
      std::printf(
          "nothing to repair: the log's top (%llu) is at most one past the highest applied "
          "position (%llu)\n",
          static_cast<unsigned long long>(top), static_cast<unsigned long long>(applied));
    }
    return finish(false);
  }
  // One pass to list (and keep the chosen entries), then, with --yes, one
  // to remove.
  std::map<uint64_t, std::string>
      chosen;  // position -> its chosen entry, where some replica learned it
  auto pass = [&](bool apply) -> int {
    json_replicas.clear();
    for (const auto& dc : config.datacenters()) {
      uint64_t removed = 0;
      bool more = false;
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
        more = r->more();
        if (!apply || !r->more()) break;
      }
      // Listing stops at kMaxTruncate positions a replica; there may be more.
      const bool at_least = !apply && more;
      if (s.json) {
        json_replicas +=
            StrCat(json_replicas.empty() ? "" : ",", "{\"datacenter\":\"", JsonEscape(dc.name()),
                   "\",\"positions\":\"", removed, "\",\"removed\":", apply ? "true" : "false",
                   ",\"orMore\":", at_least ? "true" : "false", "}");
      } else {
        std::printf("%s: %llu positions above %llu %s%s\n", dc.name().c_str(),
                    static_cast<unsigned long long>(removed), static_cast<unsigned long long>(keep),
                    apply ? "removed" : "found", at_least ? " (or more)" : "");
      }
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
    saved_file = file;
    if (!s.json) {
      std::printf("chosen entries kept in %s (position and LogEntry, length-prefixed)\n",
                  file.c_str());
    }
    if (int rc = pass(true); rc != 0) return rc;
  }
  if (!s.json) {
    for (const auto& [position, value] : chosen) {
      std::printf("position %llu holds a chosen entry (%zu bytes)%s\n",
                  static_cast<unsigned long long>(position), value.size(),
                  s.force ? ": committing it again at the next position" : "");
    }
  }
  if (!s.force) {
    for (const auto& [position, value] : chosen) add_chosen(position, value.size(), 0);
    if (!s.json) {
      std::printf(
          "the log's top is %llu, the highest applied position %llu: run again with --yes to "
          "repair\n",
          static_cast<unsigned long long>(top), static_cast<unsigned long long>(applied));
    }
    return finish(false);
  }
  if (chosen.empty()) return finish(true);
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
        if (s.json) {
          add_chosen(position, value.size(), r->position);
        } else {
          std::printf("the entry of position %llu is now at position %llu\n",
                      static_cast<unsigned long long>(position),
                      static_cast<unsigned long long>(r->position));
        }
        break;
      }
      if (!absl::IsAborted(r.status()) || attempt >= 10) {
        return Failed(StrCat("committing the entry of position ", position,
                             " again: ", r.status().message()));
      }
    }
  }
  client.AwaitLocalApplies(o.rpc_timeout);  // applied here before this process exits
  return finish(true);
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
        out += StrCat("{\"datacenter\":\"", dc.name(), "\",\"up\":true,\"applied\":\"",
                      st->second.applied().position(), "\",\"top\":\"", st->second.top(), "\"}");
      }
    }
    out += "],\"log\":[";
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row& r = rows[k];
      out += StrCat(k ? "," : "", "{\"position\":\"", r.position,
                    "\",\"known\":", r.known ? "true" : "false");
      if (r.known) {
        out += StrCat(",\"id\":\"", JsonEscape(r.entry.noop() ? "" : r.entry.id()),
                      "\",\"noop\":", r.entry.noop() ? "true" : "false", ",\"timestamp\":\"",
                      r.entry.timestamp(), "\",\"nextLeader\":\"", r.leader,
                      "\",\"changes\":", r.entry.changes_size(), ",\"knownAt\":[");
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
  std::printf("  %-9s %-24s %-27s %-7s %-8s %s\n", "position", "entry", "time (UTC)", "leader",
              "changes", "known at");
  for (const Row& r : rows) {
    if (!r.known) {
      std::printf("  %-9llu (not known to be chosen at any replica yet)\n",
                  static_cast<unsigned long long>(r.position));
      continue;
    }
    std::string at;
    for (const std::string& name : r.known_at) at += (at.empty() ? "" : ",") + name;
    // Text is for people: the commit time as a date (--json keeps the
    // microseconds).
    const std::string when = absl::FormatTime(
        "%Y-%m-%d %H:%M:%E6S", absl::FromUnixMicros(r.entry.timestamp()), absl::UTCTimeZone());
    std::printf("  %-9llu %-24s %-27s %-7s %-8d %s\n", static_cast<unsigned long long>(r.position),
                r.entry.noop() ? "(no-op)" : r.entry.id().c_str(), when.c_str(), r.leader.c_str(),
                r.entry.changes_size(), at.c_str());
  }
  return 0;
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

}  // namespace megastore::tools::cluster_internal
