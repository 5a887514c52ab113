// The cell's client library (Bigtable §5.1; docs/cell.md): finds the tablet
// holding a row through the three-level location hierarchy —
// /<cell>/root names the root tablet, the root tablet's rows the METADATA
// tablets, METADATA rows the user tablets — caches what it learns (with the
// METADATA rows that follow, as a prefetch) and walks up again when a
// cached location is stale. Callers never see a location: an operation on
// a tablet that moved, split or is being recovered is retried, after
// looking it up again, until `retry_for` has passed.
//
// CellBigtable is the same over the asynchronous BigtableClient interface,
// so the Megastore layer runs on a cell.
//
// Thread-safe. Calls block; not to be called from a callback of the lock
// service the client uses.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/retry.h"
#include "storage/cell/location_cache.h"
#include "storage/cell/metadata.h"
#include "storage/client/bigtable_client.h"
#include "storage/lock/lock_service.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::storage::cell {

struct CellClientOptions {
  std::string cell;
  absl::Duration rpc_timeout = absl::Seconds(5);
  // How long an operation whose tablet is not served keeps retrying (a
  // dead server's tablets are served again within about the lock-service
  // session ttl plus the log split).
  absl::Duration retry_for = absl::Seconds(60);
  // METADATA rows read (and cached) per lookup.
  int prefetch = 8;
  // Raw writes to replicated tables go through (TabletClient::set_force):
  // for a replication server, whose writes they are, not for tools.
  bool force_replicated = false;
  // How to reach a tablet server; unset: TCP (rpc::Connect). The
  // simulator's network is the other.
  rpc::Connector connect;
};

struct CellClientStats {
  uint64_t lookups = 0;  // Locate calls
  uint64_t cache_hits = 0;
  uint64_t metadata_reads = 0;  // reads of the root or a METADATA tablet
  uint64_t retries = 0;         // operations re-run after a stale location
};

class CellClient {
 public:
  // `lock` and `env` must outlive the client.
  CellClient(lock::LockService* lock, Env* env, CellClientOptions options);

  // The tablet of `table` holding `row`: NotFound if the table does not
  // exist, Unavailable if METADATA cannot be read or the tablet is not
  // assigned yet (both retried by the operations below).
  absl::StatusOr<TabletLocation> Locate(const std::string& table, const std::string& row);
  // The root tablet's record, from the lock service.
  absl::StatusOr<TabletRecord> ReadRoot();
  // Every record of the METADATA tablet `meta` (of the root tablet: the
  // METADATA tablets), read from its server.
  absl::Status ReadMetadataTablet(const TabletLocation& meta, std::vector<TabletRecord>* out);
  // Every tablet of the cell in key order: the root, the METADATA tablets,
  // then the user tablets (only `table`'s if not empty).
  absl::StatusOr<std::vector<TabletRecord>> Tablets(const std::string& table = "");

  // Retried after any stale-location answer, a lost connection included:
  // a write whose reply was lost may be applied twice, the second time
  // after writes the caller made meanwhile. With server timestamps that is a
  // second version. With explicit timestamps a repeated cell is the same
  // cell, but a repeated *old* cell lands after any later delete of it: it
  // stays deleted only in a timestamp_deletes family (schema.proto), which
  // is why Megastore's data families are declared so.
  absl::Status MutateRow(const std::string& table, const std::string& row,
                         const std::vector<Mutation>& mutations,
                         int64_t timestamp = kServerTimestamp);
  // Retried only when it surely did nothing — the server said it does not
  // serve the row, or could not be connected to; Unavailable otherwise,
  // since it may have happened.
  absl::StatusOr<bool> CheckAndMutateRow(const std::string& table, const std::string& row,
                                         const RowFilter& predicate,
                                         const std::vector<Mutation>& if_true,
                                         const std::vector<Mutation>& if_false);
  absl::StatusOr<Row> ReadModifyWriteRow(const std::string& table, const std::string& row,
                                         const std::vector<ReadModifyWriteRule>& rules);
  absl::StatusOr<std::optional<Row>> ReadRow(const std::string& table, const std::string& row,
                                             const ReadOptions& options = {});
  // The rows of `range` in order, tablet by tablet; `on_row` returns false
  // to stop. A tablet retried after a stale location resumes after the last
  // row delivered.
  absl::Status ReadRows(const std::string& table, const RowRange& range, const ReadOptions& options,
                        const std::function<bool(Row&)>& on_row);

  // From now on operations stop retrying (Cancelled): for shutting down.
  void Cancel() { cancelled_ = true; }

  // The RPC client of one tablet server (kept for the client's life).
  std::shared_ptr<TabletClient> Server(const std::string& address);
  LocationCache& cache() { return cache_; }
  CellClientStats stats() const;
  const CellClientOptions& options() const { return options_; }

 private:
  absl::StatusOr<TabletLocation> LocateOnce(const std::string& table, const std::string& row,
                                            int depth);
  // Runs `fn(server, location)` on the tablet holding (table, row),
  // looking it up again and retrying while `retry(status)`.
  template <typename Fn>
  auto OnTablet(const std::string& table, const std::string& row, bool retry_unavailable, Fn fn)
      -> decltype(fn(*static_cast<TabletClient*>(nullptr), TabletLocation{}));
  // Sleeps before the next try of an operation; false if it is out of time
  // or cancelled.
  bool Backoff(Retry& retry);

  lock::LockService* const lock_;
  Env* const env_;
  const CellClientOptions options_;
  LocationCache cache_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<TabletClient>> servers_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> lookups_{0}, cache_hits_{0}, metadata_reads_{0}, retries_{0};
  std::atomic<bool> cancelled_{false};
};

// The Megastore layer's BigtableClient on a cell: each call runs on one of
// the adaptor's threads (so a caller's RPC or timer thread never blocks on
// a lookup or a retry) and calls back from there.
class CellBigtable : public BigtableClient {
 public:
  // `threads` bounds the calls in flight (each blocks one thread while it
  // waits for its tablet server).
  CellBigtable(CellClient* client, int threads = 32);
  ~CellBigtable() override;  // finishes the calls already queued

  void ReadRow(std::string table, std::string row, ReadOptions options,
               Callback<absl::StatusOr<std::optional<Row>>> done) override;
  void ReadRows(std::string table, RowRange range, ReadOptions options,
                Callback<absl::StatusOr<std::vector<Row>>> done) override;
  void MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override;
  void CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                         std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override;

 private:
  struct Pool;
  CellClient* const client_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace megastore::storage::cell
