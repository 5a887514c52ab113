// The tablet server's RPC methods ("tablet.*", tablet_service.proto) and a
// typed client for them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/rpc/rpc.h"
#include "storage/model/data_model.h"
#include "storage/model/schema.pb.h"
#include "storage/tabletserver/tabletserver.pb.h"

namespace megastore::storage {

class TabletServer;

// Per-method call counts and latencies, for /metrics. Thread-safe.
class ServiceMetrics {
 public:
  // Latency buckets' upper bounds in microseconds (Prometheus "le").
  static const std::vector<int64_t>& BucketBounds();
  void Record(const std::string& method, int64_t micros, bool ok);
  // Prometheus text exposition of everything recorded.
  std::string PrometheusText() const;

 private:
  struct Method {
    uint64_t calls = 0, errors = 0;
    int64_t sum_micros = 0;
    std::vector<uint64_t> buckets;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Method> methods_ ABSL_GUARDED_BY(mu_);
};

// Registers every "tablet.*" method on `rpc`, served by `server`. Both must
// outlive the RPC server's running handlers.
void RegisterTabletService(TabletServer* server, rpc::MethodRegistry* rpc, ServiceMetrics* metrics);

// A typed client of one tablet server. Thread-safe. Errors are the server's
// statuses, or the RPC layer's (Unavailable, DeadlineExceeded).
class TabletClient {
 public:
  explicit TabletClient(std::string address, absl::Duration timeout = absl::Seconds(30));
  // Over a channel of the caller's (the simulator's network, a test's).
  TabletClient(std::shared_ptr<rpc::Channel> channel, absl::Duration timeout);
  // Writes to, deletes and changes of replicated tables (TableSchema
  // .replicated) go through: Megastore's own, or an admin's who means it.
  void set_force(bool force) { force_ = force; }

  absl::Status CreateTable(const TableSchema& schema);
  absl::Status DeleteTable(const std::string& name);
  absl::StatusOr<std::vector<TableSchema>> ListTables();
  absl::StatusOr<TableSchema> GetTable(const std::string& name);
  absl::Status UpdateTable(const TableSchema& schema);

  struct TabletInfo {
    TabletEntry entry;
    uint64_t size_bytes = 0;
    std::string load_error;
  };
  // With `log_name`, also the server's commit log name; with `creating`,
  // the tablets a split or merge is creating there (cell mode).
  absl::StatusOr<std::vector<TabletInfo>> ListTablets(const std::string& table = "",
                                                      std::string* log_name = nullptr,
                                                      std::vector<std::string>* creating = nullptr);
  // Cell mode: the master's assignment (TabletServer::AssignTablet), for
  // the incarnation whose commit log is `for_log` ("" for any).
  absl::Status AssignTablet(const TabletEntry& entry, const TableSchema& schema, bool create,
                            const std::string& for_log = "");
  // Cell mode: TabletServer::MergeTablets.
  absl::StatusOr<TabletEntry> MergeTablets(const std::string& left, const std::string& right);
  absl::Status LoadTablet(const std::string& id);
  // `for_log`: the incarnation meant (TabletServer::UnloadTablet); "" any.
  absl::Status UnloadTablet(const std::string& id, const std::string& for_log = "");
  absl::StatusOr<std::vector<TabletEntry>> SplitTablet(const std::string& id,
                                                       const std::string& row);
  absl::Status CompactTablet(const std::string& id);

  absl::Status MutateRow(const std::string& table, const std::string& row,
                         const std::vector<Mutation>& mutations,
                         int64_t timestamp = kServerTimestamp);
  absl::StatusOr<std::vector<absl::Status>> MutateRows(const std::string& table,
                                                       const std::vector<RowMutations>& entries);
  absl::StatusOr<bool> CheckAndMutateRow(const std::string& table, const std::string& row,
                                         const RowFilter& predicate,
                                         const std::vector<Mutation>& true_mutations,
                                         const std::vector<Mutation>& false_mutations);
  absl::StatusOr<Row> ReadModifyWriteRow(const std::string& table, const std::string& row,
                                         const std::vector<ReadModifyWriteRule>& rules);
  absl::StatusOr<std::optional<Row>> ReadRow(const std::string& table, const std::string& row,
                                             const ReadOptions& options = {});
  // Streams rows; `on_row` returns false to stop.
  absl::Status ReadRows(const std::string& table, const RowSet& rows, const ReadOptions& options,
                        const std::function<bool(Row&)>& on_row);

 private:
  template <typename Response>
  absl::StatusOr<Response> Call(const std::string& method,
                                const google::protobuf::Message& request);

  std::shared_ptr<rpc::Channel> rpc_;
  absl::Duration timeout_;
  bool force_ = false;
};

}  // namespace megastore::storage
