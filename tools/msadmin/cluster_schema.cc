// msadmin schema apply|show (docs/msadmin.md).
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
        "{\"schema\":\"%s\",\"datacenters\":%d,\"tablesCreated\":%d,\"appliedBefore\":%s}\n",
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

}  // namespace megastore::tools::cluster_internal
