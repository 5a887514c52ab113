#include "tools/msbench/bench_cluster.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/schema_table.h"
#include "server/cluster.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::tools {
namespace {

// Adds "A-B=10ms,A-C=30ms" to `config` as links (emulated one-way delays).
absl::Status ParseWan(const std::string& spec, server::ClusterConfig* config) {
  if (spec.empty() || spec == "none") return absl::OkStatus();
  for (absl::string_view link : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(link, '=');
    std::vector<std::string> ends =
        kv.size() == 2 ? absl::StrSplit(kv[0], '-') : std::vector<std::string>{};
    absl::Duration d;
    if (ends.size() != 2 || !absl::ParseDuration(kv[1], &d) || d < absl::ZeroDuration())
      return absl::InvalidArgumentError(
          StrCat("--wan: '", link, "' is not FROM-TO=DELAY (e.g. A-B=10ms)"));
    server::Link* l = config->add_links();
    l->set_a(ends[0]);
    l->set_b(ends[1]);
    l->set_one_way_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(d)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<replication::ReplicaType>> ParseTypes(const std::string& spec) {
  std::vector<replication::ReplicaType> out;
  for (absl::string_view t : absl::StrSplit(spec, ',')) {
    if (t == "full")
      out.push_back(replication::ReplicaType::kFull);
    else if (t == "witness")
      out.push_back(replication::ReplicaType::kWitness);
    else if (t == "read-only")
      out.push_back(replication::ReplicaType::kReadOnly);
    else
      return absl::InvalidArgumentError(
          StrCat("--replicas: '", t, "' is not full, witness or read-only"));
  }
  if (out.size() < 1 || out.size() > 26)
    return absl::InvalidArgumentError("--replicas: name 1 to 26 datacenters");
  return out;
}

absl::StatusOr<server::ClusterConfig> BenchClusterConfig(
    const std::vector<replication::ReplicaType>& types, const std::string& wan) {
  server::ClusterConfig config;
  std::vector<std::string> names;
  for (size_t i = 0; i < types.size(); ++i) {
    names.emplace_back(1, static_cast<char>('A' + i));
    server::DatacenterConfig* dc = config.add_datacenters();
    dc->set_name(names.back());
    dc->set_type(types[i] == replication::ReplicaType::kWitness    ? "witness"
                 : types[i] == replication::ReplicaType::kReadOnly ? "read-only"
                                                                   : "full");
    dc->set_address("127.0.0.1:0");
  }
  MS_RETURN_IF_ERROR(ParseWan(wan, &config));
  for (const server::Link& l : config.links())
    for (const std::string& end : {l.a(), l.b()})
      if (std::find(names.begin(), names.end(), end) == names.end())
        return absl::InvalidArgumentError(
            StrCat("--wan names datacenter ", end, "; --replicas has ", absl::StrJoin(names, ",")));
  return config;
}

absl::Status RecordSchema(server::LocalCluster& cluster, const schema::SchemaDescriptor& schema) {
  for (int i = 0; i < cluster.size(); ++i) {
    storage::TabletServer* tablets = cluster.datacenter(i).tablets();
    storage::TableSchema schemas;
    schemas.set_name(replication::kSchemaTable);
    schemas.add_families()->set_name(replication::kSchemaFamily);
    schemas.set_replicated(true);
    if (absl::Status s = tablets->CreateTable(schemas); !s.ok() && !absl::IsAlreadyExists(s))
      return s;
    MS_RETURN_IF_ERROR(tablets->MutateRow(
        replication::kSchemaTable, schema.name(),
        {storage::Mutation::SetCell(replication::kSchemaFamily, replication::kSchemaColumn,
                                    schema.SerializeAsString())}));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AppServer>> OpenAppServer(server::LocalCluster& cluster,
                                                         const std::string& here,
                                                         const schema::SchemaDescriptor& schema,
                                                         bool combine, bool forward) {
  auto s = std::make_unique<AppServer>();
  s->rpc = std::make_unique<rpc::RpcTransport>();
  s->wan = std::make_unique<DelayedTransport>(Env::Default(), s->rpc.get(),
                                              server::OneWayFrom(cluster.config(), here));
  DatabaseOptions d;
  d.replicas = cluster.replicas();
  d.local = here;
  d.schema = schema;
  d.transport = s->wan.get();
  d.replication.combine = combine;
  d.replication.forward = forward;
  MS_ASSIGN_OR_RETURN(s->db, Database::Open(d));
  return s;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return v[i];
}

}  // namespace megastore::tools
