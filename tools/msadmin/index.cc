#include "tools/msadmin/index.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "api/database.h"
#include "base/cli.h"
#include "base/strings.h"
#include "schema/entity_json.h"
#include "server/cluster.h"

namespace megastore::tools {

namespace {

int UsageError(const std::string& what) {
  std::fprintf(stderr, "msadmin index: %s\n", what.c_str());
  return 2;
}

// "A=full@127.0.0.1:7001,B=full@...,C=witness@..." — each datacenter's
// servers on one address (a megastored serving every role).
absl::StatusOr<std::vector<replication::ReplicaInfo>> ParseReplicas(const std::string& spec) {
  std::vector<replication::ReplicaInfo> out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<std::string> name_rest = absl::StrSplit(item, absl::MaxSplits('=', 1));
    std::vector<std::string> type_addr = name_rest.size() == 2
                                             ? absl::StrSplit(name_rest[1], absl::MaxSplits('@', 1))
                                             : std::vector<std::string>{};
    if (type_addr.size() != 2 || name_rest[0].empty() || type_addr[1].empty())
      return absl::InvalidArgumentError(
          StrCat("--replicas: '", item, "' is not NAME=TYPE@HOST:PORT"));
    replication::ReplicaInfo r;
    r.name = name_rest[0];
    if (type_addr[0] == "full")
      r.type = replication::ReplicaType::kFull;
    else if (type_addr[0] == "witness")
      r.type = replication::ReplicaType::kWitness;
    else if (type_addr[0] == "read-only")
      r.type = replication::ReplicaType::kReadOnly;
    else
      return absl::InvalidArgumentError(StrCat("--replicas: type '", type_addr[0], "' of ", r.name,
                                               " is not full, witness or read-only"));
    r.replication = r.lock_service = type_addr[1];
    if (r.type == replication::ReplicaType::kFull) r.coordinator = type_addr[1];
    out.push_back(std::move(r));
  }
  if (out.empty()) return absl::InvalidArgumentError("--replicas names no datacenter");
  return out;
}

// "User:7" or "Order:eu,42": a root table and its key's values.
absl::StatusOr<std::pair<std::string, std::vector<schema::KeyValue>>> ParseGroup(
    const schema::SchemaIndex& sx, const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError(StrCat("group '", text, "' is not TABLE:KEY[,KEY...]"));
  const std::string table_name = text.substr(0, colon);
  const schema::TableDescriptor* table = sx.FindTable(table_name);
  if (table == nullptr)
    return absl::NotFoundError(StrCat("group '", text, "': no table ", table_name));
  if (!table->entity_group_root())
    return absl::InvalidArgumentError(
        StrCat("group '", text, "': ", table->name(), " is not an entity group root"));
  google::protobuf::RepeatedPtrField<google::protobuf::Value> values;
  for (absl::string_view v : absl::StrSplit(text.substr(colon + 1), ',')) {
    google::protobuf::Value* j = values.Add();
    if (v == "true" || v == "false")
      j->set_bool_value(v == "true");
    else
      j->set_string_value(std::string(v));
  }
  absl::StatusOr<std::vector<schema::KeyValue>> key =
      schema::KeyFromJson(*table, table->primary_key(), values, StrCat("group '", text, "'"));
  if (!key.ok()) return key.status();
  if (key->size() != static_cast<size_t>(table->primary_key_size()))
    return absl::InvalidArgumentError(StrCat("group '", text, "': ", table->name(), " has ",
                                             table->primary_key_size(), " key parts"));
  return std::make_pair(table->name(), std::move(*key));
}

}  // namespace

void AddIndexCommand(CLI::App& app, IndexState& state) {
  CLI::App* index = app.add_subcommand("index",
                                       "Check that every entity has exactly its index entries and "
                                       "every entry a live entity; repair");
  index->require_subcommand(1);
  for (const char* verb : {"check", "repair"}) {
    const bool repair = std::string(verb) == "repair";
    CLI::App* v = index->add_subcommand(
        verb, repair ? "Check, then fix what was found through the replicated log (every replica)"
                     : "Report every missing or orphan index entry of the given entity groups");
    v->add_option(
        "--config", state.config,
        "the cluster config (protobuf text; megastored --local writes DIR/cluster.textproto)");
    v->add_option(
        "--replicas", state.replicas,
        "instead of --config: every datacenter as NAME=TYPE@HOST:PORT (TYPE full, witness or "
        "read-only), comma-separated");
    v->add_option("--local", state.local,
                  "the datacenter to read from (a full or read-only replica)")
        ->required();
    v->add_option("--schema", state.schema, "the schema descriptor msc wrote (NAME.schema.pb)")
        ->required();
    v->add_option("--timeout", state.timeout, "seconds each step may take")
        ->check(CLI::Range(0.1, 3600.0))
        ->capture_default_str();
    AddOutputOption(v, state.json,
                    "one JSON object: groups, entities, indexEntries, problems, repaired "
                    "(repair), consistent");
    v->add_option("groups", state.groups, "entity groups as ROOT_TABLE:KEY[,KEY...], e.g. User:7")
        ->required();
    v->callback([&state, repair] { state.repair = repair; });
  }
}

int RunIndex(const IndexState& state) {
  if (state.config.empty() == state.replicas.empty())
    return UsageError("give the cluster as --config=FILE or as --replicas=NAME=TYPE@HOST:PORT,...");
  absl::StatusOr<std::vector<replication::ReplicaInfo>> replicas;
  if (!state.config.empty()) {
    absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(state.config);
    if (!config.ok()) return UsageError(std::string(config.status().message()));
    replicas = server::ReplicasOf(*config);
  } else {
    replicas = ParseReplicas(state.replicas);
  }
  if (!replicas.ok()) return UsageError(std::string(replicas.status().message()));
  std::ifstream in(state.schema, std::ios::binary);
  if (!in) return UsageError(StrCat("cannot read --schema ", state.schema));
  std::stringstream bytes;
  bytes << in.rdbuf();
  schema::SchemaDescriptor descriptor;
  if (!descriptor.ParseFromString(bytes.str()) || descriptor.name().empty())
    return UsageError(
        StrCat(state.schema, " is not a schema descriptor (msc --out writes NAME.schema.pb)"));
  const schema::SchemaIndex sx(descriptor);
  std::vector<std::pair<std::string, std::vector<schema::KeyValue>>> groups;
  for (const std::string& g : state.groups) {
    auto parsed = ParseGroup(sx, g);
    if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
    groups.push_back(std::move(*parsed));
  }
  DatabaseOptions o;
  o.replicas = *replicas;
  o.local = state.local;
  o.schema = descriptor;
  o.replication.deadline = absl::Seconds(state.timeout);
  o.queue_sweep_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(o);
  if (!db.ok()) return UsageError(std::string(db.status().message()));
  absl::StatusOr<Database::IndexReport> report =
      state.repair ? (*db)->RepairIndexes(groups) : (*db)->CheckIndexes(groups);
  const char* verb = state.repair ? "repair" : "check";
  if (!report.ok()) {
    std::fprintf(stderr, "msadmin index %s: %s\n", verb, report.status().ToString().c_str());
    return 1;
  }
  if (state.json) {
    std::string problems;
    for (const std::string& p : report->problems)
      problems += StrCat(problems.empty() ? "" : ",", "\"", JsonEscape(p), "\"");
    std::printf(
        "{\"groups\":\"%zu\",\"entities\":\"%lld\",\"indexEntries\":\"%lld\",\"problems\":[%s],%"
        "s\"consistent\":%s}\n",
        groups.size(), static_cast<long long>(report->entities),
        static_cast<long long>(report->entries), problems.c_str(),
        state.repair ? StrCat("\"repaired\":\"", report->repaired, "\",").c_str() : "",
        report->problems.empty() ? "true" : "false");
    return report->problems.empty() ? 0 : 1;
  }
  for (const std::string& p : report->problems) std::printf("%s\n", p.c_str());
  if (state.repair)
    std::printf("repaired %lld index entries\n", static_cast<long long>(report->repaired));
  std::printf("%zu group(s): %lld entities, %lld index entries, %zu problem(s)%s\n", groups.size(),
              static_cast<long long>(report->entities), static_cast<long long>(report->entries),
              report->problems.size(), state.repair && !report->problems.empty() ? " left" : "");
  return report->problems.empty() ? 0 : 1;
}

}  // namespace megastore::tools
