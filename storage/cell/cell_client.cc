#include "storage/cell/cell_client.h"

#include <condition_variable>
#include <deque>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/await.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage::cell {

namespace {

// A location worth looking up again: the server does not serve the row, is
// unreachable, or the tablet is between owners.
bool Stale(const absl::Status& s) {
  return IsNotServing(s) || absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// The request never left this process: the RPC client could not connect
// (its message, base/rpc/rpc.cc). Safe to retry even when not idempotent.
bool NeverSent(const absl::Status& s) {
  return absl::IsUnavailable(s) && absl::StartsWith(s.message(), "cannot connect to ");
}

template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& r) {
  return r.status();
}
inline const absl::Status& StatusOf(const absl::Status& s) { return s; }

}  // namespace

CellClient::CellClient(lock::LockService* lock, Env* env, CellClientOptions options)
    : lock_(lock), env_(env), options_(std::move(options)) {}

std::shared_ptr<TabletClient> CellClient::Server(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<TabletClient>& c = servers_[address];
  if (c == nullptr) {
    c = options_.connect
            ? std::make_shared<TabletClient>(options_.connect(address), options_.rpc_timeout)
            : std::make_shared<TabletClient>(address, options_.rpc_timeout);
    c->set_force(options_.force_replicated);
  }
  return c;
}

CellClientStats CellClient::stats() const {
  return CellClientStats{lookups_.load(), cache_hits_.load(), metadata_reads_.load(),
                         retries_.load()};
}

absl::StatusOr<TabletRecord> CellClient::ReadRoot() {
  MS_ASSIGN_OR_RETURN(std::optional<lock::FileInfo> f,
                      Await<std::optional<lock::FileInfo>>(env_, [&](auto cb) {
                        lock_->Get(RootFile(options_.cell), std::move(cb));
                      }));
  if (!f)
    return absl::UnavailableError(
        StrCat("cell ", options_.cell, " has no root tablet yet (no master has started it)"));
  return DecodeRootFile(f->contents);
}

absl::StatusOr<TabletLocation> CellClient::Locate(const std::string& table,
                                                  const std::string& row) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  if (std::optional<TabletLocation> hit = cache_.Lookup(table, row)) {
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    return *hit;
  }
  return LocateOnce(table, row, 0);
}

absl::StatusOr<TabletLocation> CellClient::LocateOnce(const std::string& table,
                                                      const std::string& row, int depth) {
  if (std::optional<TabletLocation> hit = cache_.Lookup(table, row)) return *hit;
  if (table == kMetadataTable && row < kRootEndRow) {
    MS_ASSIGN_OR_RETURN(TabletRecord root, ReadRoot());
    if (!root.assigned()) return absl::UnavailableError("the root tablet is not assigned yet");
    cache_.Insert(root.location);
    return root.location;
  }
  if (depth > 2) return absl::InternalError("METADATA lookup went deeper than the hierarchy");
  std::string at = SearchKeyOf(table, row);
  for (int hop = 0; hop < 1024; ++hop) {
    MS_ASSIGN_OR_RETURN(TabletLocation meta, LocateOnce(kMetadataTable, at, depth + 1));
    ReadOptions o;
    o.filter.families = {"loc"};
    o.rows_limit = options_.prefetch;
    RowSet rows;
    rows.ranges.push_back(RowRange{at, meta.end_row});
    std::optional<TabletRecord> first;
    metadata_reads_.fetch_add(1, std::memory_order_relaxed);
    absl::Status s = Server(meta.server)->ReadRows(kMetadataTable, rows, o, [&](Row& r) {
      absl::StatusOr<TabletRecord> rec = RecordFromRow(r);
      if (!rec.ok()) return true;  // the master reports malformed rows; skip them here
      if (rec->assigned()) cache_.Insert(rec->location);
      if (!first) first = *rec;
      return true;
    });
    if (!s.ok()) {
      if (Stale(s)) cache_.Invalidate(kMetadataTable, at);
      return absl::UnavailableError(StrCat("reading METADATA tablet ", meta.tablet_id, " at ",
                                           meta.server, ": ", s.message()));
    }
    if (first) {
      if (first->location.table != table) {
        return absl::NotFoundError(
            StrCat("table ", table, " does not exist in cell ", options_.cell));
      }
      if (!first->location.Contains(row)) {
        // Between the two METADATA writes of a split: the master or the
        // splitting server completes it.
        return absl::UnavailableError(
            StrCat("tablet ", first->location.tablet_id, " of table ", table, " is being split"));
      }
      if (!first->assigned()) {
        return absl::UnavailableError(StrCat("tablet ", first->location.tablet_id, " of table ",
                                             table, " is not assigned yet"));
      }
      return first->location;
    }
    // No row at or after `at` in this METADATA tablet: the next one has it.
    if (meta.end_row.empty())
      return absl::NotFoundError(
          StrCat("table ", table, " does not exist in cell ", options_.cell));
    at = meta.end_row;
  }
  return absl::InternalError("METADATA lookup did not end");
}

absl::Status CellClient::ReadMetadataTablet(const TabletLocation& meta,
                                            std::vector<TabletRecord>* out) {
  ReadOptions o;
  o.filter.families = {"loc"};
  RowSet rows;
  rows.ranges.push_back(RowRange{meta.start_row, meta.end_row});
  absl::Status bad;
  metadata_reads_.fetch_add(1, std::memory_order_relaxed);
  MS_RETURN_IF_ERROR(Server(meta.server)->ReadRows(kMetadataTable, rows, o, [&](Row& r) {
    absl::StatusOr<TabletRecord> rec = RecordFromRow(r);
    if (!rec.ok()) {
      bad = rec.status();
      return true;
    }
    out->push_back(std::move(*rec));
    return true;
  }));
  return bad;
}

absl::StatusOr<std::vector<TabletRecord>> CellClient::Tablets(const std::string& table) {
  std::vector<TabletRecord> out;
  MS_ASSIGN_OR_RETURN(TabletRecord root, ReadRoot());
  out.push_back(root);
  if (!root.assigned()) return absl::UnavailableError("the root tablet is not assigned yet");
  std::vector<TabletRecord> metas;
  MS_RETURN_IF_ERROR(ReadMetadataTablet(root.location, &metas));
  for (const TabletRecord& m : metas) {
    out.push_back(m);
    if (!m.assigned())
      return absl::UnavailableError(
          StrCat("METADATA tablet ", m.location.tablet_id, " is not assigned yet"));
  }
  for (const TabletRecord& m : metas) {
    std::vector<TabletRecord> users;
    MS_RETURN_IF_ERROR(ReadMetadataTablet(m.location, &users));
    for (TabletRecord& u : users) {
      if (table.empty() || u.location.table == table) out.push_back(std::move(u));
    }
  }
  return out;
}

namespace {

// Stale locations and moving tablets: 20 ms, doubling to 500 ms, until
// options().retry_for has passed (a pause that would end past it is not
// taken).
RetryPolicy StalePolicy() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(20);
  p.multiplier = 2;
  p.max_backoff = absl::Milliseconds(500);
  p.jitter = false;
  p.shorten_at_deadline = false;
  return p;
}

}  // namespace

bool CellClient::Backoff(Retry& retry) {
  if (cancelled_) return false;
  // Env::SleepFor, not an Env timer: this client is a real network adapter
  // (like the RPC client under it), and a caller on the Env's timer thread
  // would otherwise wait for itself.
  if (!retry.SleepBeforeRetry()) return false;
  retries_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <typename Fn>
auto CellClient::OnTablet(const std::string& table, const std::string& row, bool retry_unavailable,
                          Fn fn)
    -> decltype(fn(*static_cast<TabletClient*>(nullptr), TabletLocation{})) {
  Retry retry(env_, StalePolicy(),
              env_->MonotonicMicros() + absl::ToInt64Microseconds(options_.retry_for));
  while (true) {
    absl::StatusOr<TabletLocation> loc = Locate(table, row);
    if (!loc.ok()) {
      if (absl::IsUnavailable(loc.status()) && Backoff(retry)) continue;
      return loc.status();
    }
    auto result = fn(*Server(loc->server), *loc);
    const absl::Status& s = StatusOf(result);
    if (s.ok() || !Stale(s)) return result;
    cache_.Invalidate(table, row);
    if (!retry_unavailable && !IsNotServing(s) && !NeverSent(s)) return result;
    if (!Backoff(retry)) return result;
  }
}

absl::Status CellClient::MutateRow(const std::string& table, const std::string& row,
                                   const std::vector<Mutation>& mutations, int64_t timestamp) {
  return OnTablet(table, row, true, [&](TabletClient& c, const TabletLocation&) {
    return c.MutateRow(table, row, mutations, timestamp);
  });
}

absl::StatusOr<bool> CellClient::CheckAndMutateRow(const std::string& table, const std::string& row,
                                                   const RowFilter& predicate,
                                                   const std::vector<Mutation>& if_true,
                                                   const std::vector<Mutation>& if_false) {
  return OnTablet(table, row, false, [&](TabletClient& c, const TabletLocation&) {
    return c.CheckAndMutateRow(table, row, predicate, if_true, if_false);
  });
}

absl::StatusOr<Row> CellClient::ReadModifyWriteRow(const std::string& table, const std::string& row,
                                                   const std::vector<ReadModifyWriteRule>& rules) {
  return OnTablet(table, row, false, [&](TabletClient& c, const TabletLocation&) {
    return c.ReadModifyWriteRow(table, row, rules);
  });
}

absl::StatusOr<std::optional<Row>> CellClient::ReadRow(const std::string& table,
                                                       const std::string& row,
                                                       const ReadOptions& options) {
  return OnTablet(table, row, true, [&](TabletClient& c, const TabletLocation&) {
    return c.ReadRow(table, row, options);
  });
}

absl::Status CellClient::ReadRows(const std::string& table, const RowRange& range,
                                  const ReadOptions& options,
                                  const std::function<bool(Row&)>& on_row) {
  std::string at = range.start;
  int64_t delivered = 0;
  bool stopped = false;
  while (!stopped) {
    std::string next_start;
    bool last = false;
    absl::Status s = OnTablet(table, at, true, [&](TabletClient& c, const TabletLocation& loc) {
      // This tablet's share of the range, resumed after what was delivered.
      RowSet rows;
      std::string end = range.end;
      if (!loc.end_row.empty() && (end.empty() || loc.end_row < end)) end = loc.end_row;
      rows.ranges.push_back(RowRange{at, end});
      ReadOptions o = options;
      if (options.rows_limit > 0) o.rows_limit = options.rows_limit - delivered;
      last = loc.end_row.empty() || (!range.end.empty() && loc.end_row >= range.end);
      next_start = loc.end_row;
      return c.ReadRows(table, rows, o, [&](Row& r) {
        ++delivered;
        at = r.key + std::string(1, '\0');
        if (!on_row(r) || (options.rows_limit > 0 && delivered >= options.rows_limit)) {
          stopped = true;
          return false;
        }
        return true;
      });
    });
    MS_RETURN_IF_ERROR(s);
    if (stopped || last) break;
    at = next_start;
  }
  return absl::OkStatus();
}

// ---- CellBigtable ----------------------------------------------------------------------------

struct CellBigtable::Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  bool stopping = false;
  std::vector<std::thread> threads;

  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([this] {
        while (true) {
          std::function<void()> fn;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [this] { return stopping || !work.empty(); });
            if (work.empty()) return;
            fn = std::move(work.front());
            work.pop_front();
          }
          fn();
        }
      });
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
  template <typename Fn>
  void Run(Fn fn) {
    // std::function needs a copyable callable: the work is kept shared.
    auto shared = std::make_shared<Fn>(std::move(fn));
    {
      std::lock_guard<std::mutex> lock(mu);
      work.push_back([shared] { (*shared)(); });
    }
    cv.notify_one();
  }
};

CellBigtable::CellBigtable(CellClient* client, int threads)
    : client_(client), pool_(std::make_unique<Pool>(threads)) {}

CellBigtable::~CellBigtable() = default;

void CellBigtable::ReadRow(std::string table, std::string row, ReadOptions options,
                           Callback<absl::StatusOr<std::optional<Row>>> done) {
  pool_->Run([this, table = std::move(table), row = std::move(row), options = std::move(options),
              done = std::move(done)]() mutable { done(client_->ReadRow(table, row, options)); });
}

void CellBigtable::ReadRows(std::string table, RowRange range, ReadOptions options,
                            Callback<absl::StatusOr<std::vector<Row>>> done) {
  pool_->Run([this, table = std::move(table), range = std::move(range),
              options = std::move(options), done = std::move(done)]() mutable {
    std::vector<Row> rows;
    absl::Status s = client_->ReadRows(table, range, options, [&](Row& r) {
      rows.push_back(std::move(r));
      return true;
    });
    if (!s.ok()) return done(s);
    done(std::move(rows));
  });
}

void CellBigtable::MutateRow(std::string table, std::string row, std::vector<Mutation> mutations,
                             int64_t timestamp, Callback<absl::Status> done) {
  pool_->Run([this, table = std::move(table), row = std::move(row),
              mutations = std::move(mutations), timestamp, done = std::move(done)]() mutable {
    done(client_->MutateRow(table, row, mutations, timestamp));
  });
}

void CellBigtable::CheckAndMutateRow(std::string table, std::string row, RowFilter predicate,
                                     std::vector<Mutation> if_true, std::vector<Mutation> if_false,
                                     Callback<absl::StatusOr<bool>> done) {
  pool_->Run([this, table = std::move(table), row = std::move(row),
              predicate = std::move(predicate), if_true = std::move(if_true),
              if_false = std::move(if_false), done = std::move(done)]() mutable {
    done(client_->CheckAndMutateRow(table, row, predicate, if_true, if_false));
  });
}

}  // namespace megastore::storage::cell
