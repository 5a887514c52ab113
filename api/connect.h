// Opening a Database from a cluster config file: what an application
// server does at start.
//
//   auto conn = megastore::ConnectToCluster("cluster.textproto", "A", photoapp::Schema());
//   if (!conn.ok()) ...
//   megastore::Database& db = (*conn)->db();
//
// The config is the one `megastored --local` writes (DATA/cluster.textproto)
// or a cluster's own (docs/operations.md). Its client_tls becomes this
// process's certificate (unless the process set one), and the app server's
// messages are delayed by the config's emulated WAN links from its
// datacenter, as the servers' are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/database.h"

namespace megastore {

class Connection {
 public:
  ~Connection();
  Database& db() { return *db_; }
  // The datacenters of the cluster, in the config's order (the indexes of
  // TransactionOptions::replica).
  const std::vector<std::string>& datacenters() const { return datacenters_; }

 private:
  friend absl::StatusOr<std::unique_ptr<Connection>> ConnectToCluster(const std::string&,
                                                                      const std::string&,
                                                                      schema::SchemaDescriptor,
                                                                      DatabaseOptions);
  Connection() = default;
  std::unique_ptr<Transport> rpc_, wan_;  // before db_: it outlives them
  std::unique_ptr<Database> db_;
  std::vector<std::string> datacenters_;
};

// Opens the cluster of `config_path` as an app server in datacenter
// `datacenter`, serving `schema`. `options` gives the rest (timeouts, the
// queue sweep); its replicas, local, schema and transport are set here.
// InvalidArgument naming the file or the datacenter that is wrong.
absl::StatusOr<std::unique_ptr<Connection>> ConnectToCluster(const std::string& config_path,
                                                             const std::string& datacenter,
                                                             schema::SchemaDescriptor schema,
                                                             DatabaseOptions options = {});

}  // namespace megastore
