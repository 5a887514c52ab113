// msadmin keys status|rotate (docs/msadmin.md).
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
#include "server/cluster.h"
#include "server/datacenter.pb.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/msadmin/cluster_internal.h"
#include "txn/transaction.h"

namespace megastore::tools::cluster_internal {

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
      std::printf("{\"datacenter\":\"%s\",\"activeKek\":%u,\"rewrapped\":\"%llu\"}\n",
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

}  // namespace megastore::tools::cluster_internal
