#include "storage/tabletserver/tablet_service.h"

#include <chrono>

#include "base/status.h"
#include "base/strings.h"
#include "storage/tabletserver/convert.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.pb.h"

namespace megastore::storage {

// ---- metrics ------------------------------------------------------------------------------

const std::vector<int64_t>& ServiceMetrics::BucketBounds() {
  static const std::vector<int64_t> bounds = {100,    250,    500,     1000,    2500,
                                              5000,   10000,  25000,   50000,   100000,
                                              250000, 500000, 1000000, 2500000, 10000000};
  return bounds;
}

void ServiceMetrics::Record(const std::string& method, int64_t micros, bool ok) {
  absl::MutexLock lock(&mu_);
  Method& m = methods_[method];
  if (m.buckets.empty()) m.buckets.assign(BucketBounds().size(), 0);
  ++m.calls;
  if (!ok) ++m.errors;
  m.sum_micros += micros;
  for (size_t i = 0; i < BucketBounds().size(); ++i) {
    if (micros <= BucketBounds()[i]) ++m.buckets[i];
  }
}

std::string ServiceMetrics::PrometheusText() const {
  absl::MutexLock lock(&mu_);
  std::string out =
      "# HELP megastore_rpc_calls_total RPC calls served, by method.\n"
      "# TYPE megastore_rpc_calls_total counter\n";
  for (const auto& [name, m] : methods_)
    out += StrCat("megastore_rpc_calls_total{method=\"", name, "\"} ", m.calls, "\n");
  out +=
      "# HELP megastore_rpc_errors_total RPC calls that returned an error, by method.\n"
      "# TYPE megastore_rpc_errors_total counter\n";
  for (const auto& [name, m] : methods_)
    out += StrCat("megastore_rpc_errors_total{method=\"", name, "\"} ", m.errors, "\n");
  out +=
      "# HELP megastore_rpc_latency_seconds Time to serve an RPC, by method.\n"
      "# TYPE megastore_rpc_latency_seconds histogram\n";
  for (const auto& [name, m] : methods_) {
    for (size_t i = 0; i < BucketBounds().size(); ++i) {
      out += StrCat("megastore_rpc_latency_seconds_bucket{method=\"", name, "\",le=\"",
                    static_cast<double>(BucketBounds()[i]) / 1e6, "\"} ", m.buckets[i], "\n");
    }
    out += StrCat("megastore_rpc_latency_seconds_bucket{method=\"", name, "\",le=\"+Inf\"} ",
                  m.calls, "\n");
    out += StrCat("megastore_rpc_latency_seconds_sum{method=\"", name, "\"} ",
                  static_cast<double>(m.sum_micros) / 1e6, "\n");
    out += StrCat("megastore_rpc_latency_seconds_count{method=\"", name, "\"} ", m.calls, "\n");
  }
  return out;
}

// ---- service -------------------------------------------------------------------------------

namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A raw write to, or the deletion or change of, a table Megastore
// replicates: refused unless the request says `force`. (Its rows must change
// only through Paxos, or this replica would differ from the others.)
absl::Status GuardReplicated(const TabletServer& server, const std::string& table, bool force,
                             std::string_view what) {
  if (force || !server.IsReplicated(table)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      StrCat("table ", table, " is replicated by Megastore: ", what,
             " here would make this datacenter's copy differ from the others'. Use the client "
             "library or the "
             "gateway; an admin who means it gives msadmin bt --force"));
}

// Registers a unary method: parse Req, run fn, serialize its response.
template <typename Req, typename Fn>
void Unary(rpc::MethodRegistry* rpc, ServiceMetrics* metrics, const std::string& method, Fn fn) {
  rpc->Register(method, [metrics, method, fn](const rpc::CallContext&, std::string_view body,
                                              std::shared_ptr<rpc::Responder> responder) {
    const int64_t start = NowMicros();
    Req request;
    absl::StatusOr<std::string> result;
    if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      result = absl::InvalidArgumentError(StrCat("malformed ", method, " request"));
    } else {
      result = fn(request);
    }
    metrics->Record(method, NowMicros() - start, result.ok());
    if (result.ok()) {
      responder->Finish(absl::OkStatus(), std::move(*result));
    } else {
      responder->Finish(result.status());
    }
  });
}

// Registers `method` with `fn(body, responder, may_block)`: tried first on
// the I/O thread with may_block false (it returns false to decline, without
// answering), and then on a worker with may_block true.
template <typename Fn>
void TryOnIoThread(rpc::MethodRegistry* rpc, const std::string& method, Fn fn) {
  rpc->RegisterInline(
      method,
      [fn](const rpc::CallContext&, std::string_view body,
           std::shared_ptr<rpc::Responder>& responder) { return fn(body, responder, false); },
      [fn](const rpc::CallContext&, std::string_view body,
           std::shared_ptr<rpc::Responder> responder) { fn(body, responder, true); });
}

absl::StatusOr<std::string> Serialize(const google::protobuf::Message& m) {
  return m.SerializeAsString();
}

absl::StatusOr<std::string> Done(const absl::Status& s) {
  if (!s.ok()) return s;
  return Empty().SerializeAsString();
}

absl::StatusOr<ReadOptions> ReadOptionsFrom(const RowFilterProto& filter, bool has_ts, int64_t ts,
                                            int64_t limit) {
  ReadOptions o;
  MS_ASSIGN_OR_RETURN(o.filter, FromProto(filter));
  if (has_ts) o.read_timestamp = ts;
  o.rows_limit = limit;
  return o;
}

}  // namespace

void RegisterTabletService(TabletServer* server, rpc::MethodRegistry* rpc,
                           ServiceMetrics* metrics) {
  Unary<SchemaRequest>(rpc, metrics, "tablet.CreateTable", [server](const SchemaRequest& r) {
    return Done(server->CreateTable(r.schema()));
  });
  Unary<TableRequest>(
      rpc, metrics, "tablet.DeleteTable",
      [server](const TableRequest& r) -> absl::StatusOr<std::string> {
        MS_RETURN_IF_ERROR(GuardReplicated(*server, r.name(), r.force(), "deleting it"));
        return Done(server->DeleteTable(r.name()));
      });
  Unary<Empty>(rpc, metrics, "tablet.ListTables", [server](const Empty&) {
    ListTablesResponse resp;
    for (TableSchema& t : server->ListTables()) *resp.add_tables() = std::move(t);
    return Serialize(resp);
  });
  Unary<TableRequest>(rpc, metrics, "tablet.GetTable",
                      [server](const TableRequest& r) -> absl::StatusOr<std::string> {
                        MS_ASSIGN_OR_RETURN(TableSchema t, server->GetTable(r.name()));
                        return Serialize(t);
                      });
  Unary<SchemaRequest>(rpc, metrics, "tablet.UpdateTable",
                       [server](const SchemaRequest& r) -> absl::StatusOr<std::string> {
                         MS_RETURN_IF_ERROR(GuardReplicated(
                             *server, r.schema().name(), r.force() || r.schema().replicated(),
                             "changing its schema without keeping it replicated"));
                         return Done(server->UpdateTable(r.schema()));
                       });
  Unary<ListTabletsRequest>(rpc, metrics, "tablet.ListTablets",
                            [server](const ListTabletsRequest& r) {
                              ListTabletsResponse resp;
                              const auto errors = server->load_errors();
                              std::map<std::string, uint64_t> sizes;
                              for (const auto& t : server->Stats().per_tablet)
                                sizes[t.entry.id()] = t.size_bytes;
                              for (const TabletEntry& e : server->ListTablets(r.table())) {
                                TabletInfo* info = resp.add_tablets();
                                *info->mutable_entry() = e;
                                info->set_size_bytes(sizes[e.id()]);
                                if (auto it = errors.find(e.id()); it != errors.end())
                                  info->set_load_error(it->second);
                              }
                              resp.set_log_name(server->options().cell_log_name);
                              for (const std::string& id : server->CreatingTablets())
                                resp.add_creating(id);
                              return Serialize(resp);
                            });
  Unary<AssignTabletRequest>(
      rpc, metrics, "tablet.AssignTablet", [server](const AssignTabletRequest& r) {
        return Done(server->AssignTablet(r.entry(), r.schema(), r.create(), r.for_log()));
      });
  Unary<MergeTabletsRequest>(rpc, metrics, "tablet.MergeTablets",
                             [server](const MergeTabletsRequest& r) -> absl::StatusOr<std::string> {
                               MS_ASSIGN_OR_RETURN(TabletEntry merged,
                                                   server->MergeTablets(r.left(), r.right()));
                               return Serialize(merged);
                             });
  Unary<TabletRequest>(rpc, metrics, "tablet.LoadTablet", [server](const TabletRequest& r) {
    return Done(server->LoadTablet(r.id()));
  });
  Unary<TabletRequest>(rpc, metrics, "tablet.UnloadTablet", [server](const TabletRequest& r) {
    return Done(server->UnloadTablet(r.id(), r.for_log()));
  });
  Unary<TabletRequest>(rpc, metrics, "tablet.CompactTablet", [server](const TabletRequest& r) {
    return Done(server->CompactTablet(r.id()));
  });
  Unary<TabletRequest>(rpc, metrics, "tablet.SplitTablet",
                       [server](const TabletRequest& r) -> absl::StatusOr<std::string> {
                         MS_ASSIGN_OR_RETURN(std::vector<TabletEntry> children,
                                             server->SplitTablet(r.id(), r.split_row()));
                         SplitTabletResponse resp;
                         for (TabletEntry& c : children) *resp.add_children() = std::move(c);
                         return Serialize(resp);
                       });

  // Writes do not hold a thread through the commit log's sync: the log's
  // thread answers once the write is durable and applied. They are queued
  // right on the I/O thread unless that would wait for a lock (a split, a
  // check-and-mutate of the same rows); then a worker queues them.
  auto mutate_row = [server, metrics](std::string_view body,
                                      std::shared_ptr<rpc::Responder>& responder, bool may_block) {
    const int64_t start = NowMicros();
    auto fail = [&](const absl::Status& s) {
      metrics->Record("tablet.MutateRow", NowMicros() - start, false);
      responder->Finish(s);
      return true;
    };
    MutateRowRequest r;
    if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return fail(absl::InvalidArgumentError("malformed tablet.MutateRow request"));
    }
    if (absl::Status s = GuardReplicated(*server, r.table(), r.force(), "a raw write"); !s.ok())
      return fail(s);
    auto write = std::make_unique<Tablet::RowWrite>();
    absl::StatusOr<std::vector<Mutation>> ms = FromProto(r.mutations());
    if (!ms.ok()) return fail(ms.status());
    write->mutations = std::move(*ms);
    write->row = std::move(*r.mutable_row());
    write->timestamp = r.has_timestamp() ? r.timestamp() : kServerTimestamp;
    write->done = [metrics, start, responder](absl::Status s) {
      metrics->Record("tablet.MutateRow", NowMicros() - start, s.ok());
      if (s.ok()) {
        responder->Finish(absl::OkStatus(), Empty().SerializeAsString());
      } else {
        responder->Finish(s);
      }
    };
    absl::Status s = server->MutateRowAsync(r.table(), write, may_block);
    if (!may_block && IsWouldBlock(s)) return false;
    if (!s.ok()) return fail(s);
    return true;
  };
  TryOnIoThread(rpc, "tablet.MutateRow", mutate_row);
  rpc->Register(
      "tablet.MutateRows", [server, metrics](const rpc::CallContext&, std::string_view body,
                                             std::shared_ptr<rpc::Responder> responder) {
        const int64_t start = NowMicros();
        auto fail = [&](const absl::Status& s) {
          metrics->Record("tablet.MutateRows", NowMicros() - start, false);
          responder->Finish(s);
        };
        MutateRowsRequest r;
        if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
          return fail(absl::InvalidArgumentError("malformed tablet.MutateRows request"));
        }
        if (absl::Status s = GuardReplicated(*server, r.table(), r.force(), "a raw write"); !s.ok())
          return fail(s);
        std::vector<RowMutations> entries;
        for (auto& e : *r.mutable_entries()) {
          absl::StatusOr<std::vector<Mutation>> ms = FromProto(e.mutations());
          if (!ms.ok()) return fail(ms.status());
          entries.push_back(RowMutations{std::move(*e.mutable_row()), std::move(*ms)});
        }
        server->MutateRowsAsync(r.table(), std::move(entries),
                                [metrics, start, responder](std::vector<absl::Status> statuses) {
                                  MutateRowsResponse resp;
                                  for (const absl::Status& s : statuses)
                                    ToProto(s, resp.add_statuses());
                                  metrics->Record("tablet.MutateRows", NowMicros() - start, true);
                                  responder->Finish(absl::OkStatus(), resp.SerializeAsString());
                                });
      });
  Unary<CheckAndMutateRowRequest>(
      rpc, metrics, "tablet.CheckAndMutateRow",
      [server](const CheckAndMutateRowRequest& r) -> absl::StatusOr<std::string> {
        MS_RETURN_IF_ERROR(GuardReplicated(*server, r.table(), r.force(), "a raw write"));
        MS_ASSIGN_OR_RETURN(RowFilter predicate, FromProto(r.predicate()));
        MS_ASSIGN_OR_RETURN(std::vector<Mutation> yes, FromProto(r.true_mutations()));
        MS_ASSIGN_OR_RETURN(std::vector<Mutation> no, FromProto(r.false_mutations()));
        MS_ASSIGN_OR_RETURN(bool matched,
                            server->CheckAndMutateRow(r.table(), r.row(), predicate, yes, no));
        CheckAndMutateRowResponse resp;
        resp.set_predicate_matched(matched);
        return Serialize(resp);
      });
  Unary<ReadModifyWriteRowRequest>(
      rpc, metrics, "tablet.ReadModifyWriteRow",
      [server](const ReadModifyWriteRowRequest& r) -> absl::StatusOr<std::string> {
        MS_RETURN_IF_ERROR(GuardReplicated(*server, r.table(), r.force(), "a raw write"));
        std::vector<ReadModifyWriteRule> rules;
        for (const auto& p : r.rules()) {
          MS_ASSIGN_OR_RETURN(ReadModifyWriteRule rule, FromProto(p));
          rules.push_back(std::move(rule));
        }
        MS_ASSIGN_OR_RETURN(Row row, server->ReadModifyWriteRow(r.table(), r.row(), rules));
        ReadModifyWriteRowResponse resp;
        ToProto(row, resp.mutable_row());
        return Serialize(resp);
      });

  // Reads first try the I/O thread: a read of data in memory that stays
  // small (at most kInlineReadEntries stored entries and one chunk) is
  // answered there without a hand-off to a worker. Anything else (data on
  // disk, a contended lock, a long scan) declines and runs again on a
  // worker from the start.
  auto read_rows = [server, metrics](std::string_view body,
                                     std::shared_ptr<rpc::Responder>& responder, bool may_block) {
    constexpr int64_t kInlineReadEntries = 1024;
    constexpr size_t kChunkBytes = 1 << 20;
    const int64_t start = NowMicros();
    ReadRowsRequest r;
    absl::Status status;
    if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      status = absl::InvalidArgumentError("malformed tablet.ReadRows request");
    }
    absl::StatusOr<ReadOptions> options =
        ReadOptionsFrom(r.filter(), r.has_read_timestamp(), r.read_timestamp(), r.rows_limit());
    if (status.ok()) status = options.status();
    if (status.ok()) {
      if (!may_block) options->nonblocking_budget = kInlineReadEntries;
      RowSet set;
      set.keys.assign(r.keys().begin(), r.keys().end());
      for (const RowRangeProto& range : r.ranges())
        set.ranges.push_back(RowRange{range.start(), range.end()});
      // Rows go out in chunks of about 1 MiB; inline, in one.
      ReadRowsResponse chunk;
      size_t chunk_bytes = 0;
      status = server->ReadRows(r.table(), set, *options, [&](Row& row) {
        ToProto(row, chunk.add_rows());
        for (const Cell& c : row.cells) chunk_bytes += c.value.size() + c.qualifier.size() + 16;
        if (chunk_bytes >= kChunkBytes) {
          if (!may_block) return false;
          responder->Send(chunk.SerializeAsString());
          chunk.Clear();
          chunk_bytes = 0;
        }
        return true;
      });
      if (!may_block && (IsWouldBlock(status) || chunk_bytes >= kChunkBytes)) return false;
      if (status.ok() && chunk.rows_size() > 0) responder->Send(chunk.SerializeAsString());
    }
    metrics->Record("tablet.ReadRows", NowMicros() - start, status.ok());
    responder->Finish(status);
    return true;
  };
  TryOnIoThread(rpc, "tablet.ReadRows", read_rows);
}

// ---- client ---------------------------------------------------------------------------------

TabletClient::TabletClient(std::string address, absl::Duration timeout)
    : rpc_(rpc::Connect(address)), timeout_(timeout) {}

TabletClient::TabletClient(std::shared_ptr<rpc::Channel> channel, absl::Duration timeout)
    : rpc_(std::move(channel)), timeout_(timeout) {}

template <typename Response>
absl::StatusOr<Response> TabletClient::Call(const std::string& method,
                                            const google::protobuf::Message& request) {
  MS_ASSIGN_OR_RETURN(std::string body, rpc_->Call(method, request.SerializeAsString(), timeout_));
  Response response;
  if (!response.ParseFromString(body)) {
    return absl::InternalError(StrCat("malformed response to ", method));
  }
  return response;
}

absl::Status TabletClient::CreateTable(const TableSchema& schema) {
  SchemaRequest r;
  *r.mutable_schema() = schema;
  return Call<Empty>("tablet.CreateTable", r).status();
}

absl::Status TabletClient::DeleteTable(const std::string& name) {
  TableRequest r;
  r.set_name(name);
  r.set_force(force_);
  return Call<Empty>("tablet.DeleteTable", r).status();
}

absl::StatusOr<std::vector<TableSchema>> TabletClient::ListTables() {
  MS_ASSIGN_OR_RETURN(ListTablesResponse resp,
                      Call<ListTablesResponse>("tablet.ListTables", Empty()));
  return std::vector<TableSchema>(resp.tables().begin(), resp.tables().end());
}

absl::StatusOr<TableSchema> TabletClient::GetTable(const std::string& name) {
  TableRequest r;
  r.set_name(name);
  return Call<TableSchema>("tablet.GetTable", r);
}

absl::Status TabletClient::UpdateTable(const TableSchema& schema) {
  SchemaRequest r;
  *r.mutable_schema() = schema;
  r.set_force(force_);
  return Call<Empty>("tablet.UpdateTable", r).status();
}

absl::StatusOr<std::vector<TabletClient::TabletInfo>> TabletClient::ListTablets(
    const std::string& table, std::string* log_name, std::vector<std::string>* creating) {
  ListTabletsRequest r;
  r.set_table(table);
  MS_ASSIGN_OR_RETURN(ListTabletsResponse resp, Call<ListTabletsResponse>("tablet.ListTablets", r));
  if (log_name != nullptr) *log_name = resp.log_name();
  if (creating != nullptr) creating->assign(resp.creating().begin(), resp.creating().end());
  std::vector<TabletInfo> out;
  for (const auto& t : resp.tablets())
    out.push_back(TabletInfo{t.entry(), t.size_bytes(), t.load_error()});
  return out;
}

absl::Status TabletClient::LoadTablet(const std::string& id) {
  TabletRequest r;
  r.set_id(id);
  return Call<Empty>("tablet.LoadTablet", r).status();
}

absl::Status TabletClient::AssignTablet(const TabletEntry& entry, const TableSchema& schema,
                                        bool create, const std::string& for_log) {
  AssignTabletRequest r;
  *r.mutable_entry() = entry;
  *r.mutable_schema() = schema;
  r.set_create(create);
  r.set_for_log(for_log);
  return Call<Empty>("tablet.AssignTablet", r).status();
}

absl::StatusOr<TabletEntry> TabletClient::MergeTablets(const std::string& left,
                                                       const std::string& right) {
  MergeTabletsRequest r;
  r.set_left(left);
  r.set_right(right);
  return Call<TabletEntry>("tablet.MergeTablets", r);
}

absl::Status TabletClient::UnloadTablet(const std::string& id, const std::string& for_log) {
  TabletRequest r;
  r.set_id(id);
  r.set_for_log(for_log);
  return Call<Empty>("tablet.UnloadTablet", r).status();
}

absl::Status TabletClient::CompactTablet(const std::string& id) {
  TabletRequest r;
  r.set_id(id);
  return Call<Empty>("tablet.CompactTablet", r).status();
}

absl::StatusOr<std::vector<TabletEntry>> TabletClient::SplitTablet(const std::string& id,
                                                                   const std::string& row) {
  TabletRequest r;
  r.set_id(id);
  r.set_split_row(row);
  MS_ASSIGN_OR_RETURN(SplitTabletResponse resp, Call<SplitTabletResponse>("tablet.SplitTablet", r));
  return std::vector<TabletEntry>(resp.children().begin(), resp.children().end());
}

absl::Status TabletClient::MutateRow(const std::string& table, const std::string& row,
                                     const std::vector<Mutation>& mutations, int64_t timestamp) {
  MutateRowRequest r;
  r.set_table(table);
  r.set_row(row);
  for (const Mutation& m : mutations) ToProto(m, r.add_mutations());
  r.set_force(force_);

  if (timestamp != kServerTimestamp) r.set_timestamp(timestamp);
  return Call<Empty>("tablet.MutateRow", r).status();
}

absl::StatusOr<std::vector<absl::Status>> TabletClient::MutateRows(
    const std::string& table, const std::vector<RowMutations>& entries) {
  MutateRowsRequest r;
  r.set_table(table);
  r.set_force(force_);
  for (const RowMutations& e : entries) {
    auto* pe = r.add_entries();
    pe->set_row(e.row);
    for (const Mutation& m : e.mutations) ToProto(m, pe->add_mutations());
  }
  MS_ASSIGN_OR_RETURN(MutateRowsResponse resp, Call<MutateRowsResponse>("tablet.MutateRows", r));
  std::vector<absl::Status> out;
  for (const StatusProto& s : resp.statuses()) out.push_back(FromProto(s));
  return out;
}

absl::StatusOr<bool> TabletClient::CheckAndMutateRow(const std::string& table,
                                                     const std::string& row,
                                                     const RowFilter& predicate,
                                                     const std::vector<Mutation>& true_mutations,
                                                     const std::vector<Mutation>& false_mutations) {
  CheckAndMutateRowRequest r;
  r.set_table(table);
  r.set_force(force_);
  r.set_row(row);
  ToProto(predicate, r.mutable_predicate());
  for (const Mutation& m : true_mutations) ToProto(m, r.add_true_mutations());
  for (const Mutation& m : false_mutations) ToProto(m, r.add_false_mutations());
  MS_ASSIGN_OR_RETURN(CheckAndMutateRowResponse resp,
                      Call<CheckAndMutateRowResponse>("tablet.CheckAndMutateRow", r));
  return resp.predicate_matched();
}

absl::StatusOr<Row> TabletClient::ReadModifyWriteRow(
    const std::string& table, const std::string& row,
    const std::vector<ReadModifyWriteRule>& rules) {
  ReadModifyWriteRowRequest r;
  r.set_table(table);
  r.set_force(force_);
  r.set_row(row);
  for (const ReadModifyWriteRule& rule : rules) ToProto(rule, r.add_rules());
  MS_ASSIGN_OR_RETURN(ReadModifyWriteRowResponse resp,
                      Call<ReadModifyWriteRowResponse>("tablet.ReadModifyWriteRow", r));
  return FromProto(resp.row());
}

absl::StatusOr<std::optional<Row>> TabletClient::ReadRow(const std::string& table,
                                                         const std::string& row,
                                                         const ReadOptions& options) {
  RowSet set;
  set.keys.push_back(row);
  std::optional<Row> out;
  MS_RETURN_IF_ERROR(ReadRows(table, set, options, [&](Row& r) {
    out = std::move(r);
    return false;
  }));
  return out;
}

absl::Status TabletClient::ReadRows(const std::string& table, const RowSet& rows,
                                    const ReadOptions& options,
                                    const std::function<bool(Row&)>& on_row) {
  const ReadRowsRequest r = ToReadRowsRequest(table, rows, options);
  absl::Status parse_error;
  absl::Status s =
      rpc_->Stream("tablet.ReadRows", r.SerializeAsString(), timeout_, [&](std::string_view msg) {
        ReadRowsResponse chunk;
        if (!chunk.ParseFromArray(msg.data(), static_cast<int>(msg.size()))) {
          parse_error = absl::InternalError("malformed tablet.ReadRows response");
          return false;
        }
        for (const RowProto& p : chunk.rows()) {
          Row row = FromProto(p);
          if (!on_row(row)) return false;
        }
        return true;
      });
  return parse_error.ok() ? s : parse_error;
}

}  // namespace megastore::storage
