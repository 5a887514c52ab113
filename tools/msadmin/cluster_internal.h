// Internal to msadmin's cluster commands (cluster*.cc): the helpers they
// share and the commands each file implements.
#pragma once

#include <google/protobuf/util/json_util.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "base/await.h"
#include "base/strings.h"
#include "base/transport.h"
#include "replication/replication.pb.h"
#include "schema/key_codec.h"
#include "schema/schema.pb.h"
#include "server/cluster.h"
#include "server/datacenter.pb.h"
#include "tools/msadmin/cluster.h"

namespace megastore::tools::cluster_internal {

using server::kSchemaColumn;
using server::kSchemaFamily;
using server::kSchemaTable;

inline int Usage(const std::string& what) {
  std::fprintf(stderr, "msadmin: %s\n", what.c_str());
  return 2;
}
inline int Failed(const std::string& what) {
  std::fprintf(stderr, "msadmin: %s\n", what.c_str());
  return 1;
}

inline std::string Json(const google::protobuf::Message& m) {
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

// A datacenter as its processes report it: dc.Status from each distinct
// address of its roles, merged.
struct DatacenterState {
  server::DatacenterStatus merged;  // roles of every process that answered
  std::vector<std::pair<std::string, absl::StatusOr<server::DatacenterStatus>>> processes;
  std::string down;  // why not every process answered; empty when all did

  bool up() const { return down.empty(); }
};
DatacenterState AskDatacenter(Transport& transport, const server::DatacenterConfig& dc,
                              absl::Duration timeout);

// schema.cc

absl::StatusOr<schema::SchemaDescriptor> ReadSchemaFile(const std::string& path);
absl::StatusOr<schema::SchemaDescriptor> AppliedSchema(const server::ClusterConfig& config,
                                                       const std::string& name,
                                                       absl::Duration timeout);
int SchemaApply(const ClusterState& s, const server::ClusterConfig& config);
int SchemaShow(const ClusterState& s, const server::ClusterConfig& config);

// cluster_group.cc

// A group given as ROOT_TABLE:KEY[,KEY...] of schema `d`.
struct NamedGroup {
  replication::GroupRef group;
  std::string root_table;
  std::vector<schema::KeyValue> root_key;
};
absl::StatusOr<NamedGroup> ParseGroup(const schema::SchemaDescriptor& d, const std::string& text);
absl::StatusOr<std::pair<replication::GroupRef, std::string>> ResolveGroup(
    const ClusterState& s, const server::ClusterConfig& config);
int GroupCatchup(const ClusterState& s, const server::ClusterConfig& config,
                 const replication::GroupRef& group);
int GroupRepair(const ClusterState& s, const server::ClusterConfig& config,
                const replication::GroupRef& group);
int GroupLog(const ClusterState& s, const server::ClusterConfig& config,
             const std::pair<replication::GroupRef, std::string>& resolved);
int GroupDestroyKey(const ClusterState& s, const server::ClusterConfig& config,
                    const std::pair<replication::GroupRef, std::string>& resolved);

// cluster_keys.cc

int KeysStatus(const ClusterState& s, const server::ClusterConfig& config);
int KeysRotate(const ClusterState& s, const server::ClusterConfig& config);

}  // namespace megastore::tools::cluster_internal
