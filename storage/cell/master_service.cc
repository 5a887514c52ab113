// The master's RPC service and its typed client (master.h).
#include "base/await.h"
#include "base/rpc/rpc.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/cell/master.h"

namespace megastore::storage::cell {

namespace {

template <typename Req>
void Serve(rpc::MethodRegistry* rpc, const std::string& method,
           std::function<absl::StatusOr<std::string>(const Req&)> fn) {
  rpc->Register(method, [method, fn](const rpc::CallContext&, std::string_view body,
                                     std::shared_ptr<rpc::Responder> responder) {
    Req request;
    if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      responder->Finish(absl::InvalidArgumentError(StrCat("malformed ", method, " request")));
      return;
    }
    absl::StatusOr<std::string> result = fn(request);
    if (result.ok()) {
      responder->Finish(absl::OkStatus(), std::move(*result));
    } else {
      responder->Finish(result.status());
    }
  });
}

absl::StatusOr<std::string> Empty(const absl::Status& s) {
  if (!s.ok()) return s;
  return MasterEmpty().SerializeAsString();
}

}  // namespace

void RegisterMasterService(Master* master, rpc::MethodRegistry* rpc) {
  Serve<CreateTableRequest>(rpc, "master.CreateTable", [master](const CreateTableRequest& r) {
    return Empty(
        master->CreateTable(r.schema(), {r.initial_splits().begin(), r.initial_splits().end()}));
  });
  // A table Megastore replicates is deleted, or stops being replicated,
  // only when the request says `force` (as on a tablet server).
  auto guard = [master](const std::string& table, bool force,
                        std::string_view what) -> absl::Status {
    if (force) return absl::OkStatus();
    MS_ASSIGN_OR_RETURN(std::vector<TableSchema> tables, master->ListTables());
    for (const TableSchema& t : tables)
      if (t.name() == table && t.replicated())
        return absl::FailedPreconditionError(
            StrCat("table ", table, " is replicated by Megastore: ", what,
                   " here would make this datacenter's copy differ from the others'. Use the "
                   "client library or the "
                   "gateway; an admin who means it gives msadmin bt --force"));
    return absl::OkStatus();
  };
  Serve<TableName>(rpc, "master.DeleteTable",
                   [master, guard](const TableName& r) -> absl::StatusOr<std::string> {
                     MS_RETURN_IF_ERROR(guard(r.name(), r.force(), "deleting it"));
                     return Empty(master->DeleteTable(r.name()));
                   });
  Serve<CreateTableRequest>(
      rpc, "master.UpdateTable",
      [master, guard](const CreateTableRequest& r) -> absl::StatusOr<std::string> {
        MS_RETURN_IF_ERROR(guard(r.schema().name(), r.force() || r.schema().replicated(),
                                 "changing its schema without keeping it replicated"));
        return Empty(master->UpdateTable(r.schema()));
      });
  Serve<MasterEmpty>(rpc, "master.ListTables",
                     [master](const MasterEmpty&) -> absl::StatusOr<std::string> {
                       MS_ASSIGN_OR_RETURN(std::vector<TableSchema> tables, master->ListTables());
                       Tables out;
                       for (TableSchema& t : tables) *out.add_tables() = std::move(t);
                       return out.SerializeAsString();
                     });
  Serve<SplitRequest>(rpc, "master.SplitTablet",
                      [master](const SplitRequest& r) -> absl::StatusOr<std::string> {
                        MS_ASSIGN_OR_RETURN(std::vector<TabletEntry> children,
                                            master->SplitTablet(r.tablet_id(), r.split_row()));
                        SplitResponse out;
                        for (TabletEntry& c : children) *out.add_children() = std::move(c);
                        return out.SerializeAsString();
                      });
  Serve<MoveRequest>(rpc, "master.MoveTablet", [master](const MoveRequest& r) {
    return Empty(master->MoveTablet(r.tablet_id(), r.server()));
  });
  Serve<ReportSplitRequest>(rpc, "master.ReportSplit", [master](const ReportSplitRequest& r) {
    master->ReportSplit(r);
    return Empty(absl::OkStatus());
  });
  Serve<MasterEmpty>(rpc, "master.State",
                     [master](const MasterEmpty&) -> absl::StatusOr<std::string> {
                       MS_ASSIGN_OR_RETURN(CellState s, master->State());
                       return s.SerializeAsString();
                     });
}

absl::StatusOr<std::string> FindMaster(lock::LockService* lock, const std::string& cell, Env* env) {
  MS_ASSIGN_OR_RETURN(
      std::optional<lock::FileInfo> f,
      Await<std::optional<lock::FileInfo>>(env != nullptr ? env : Env::Default(), [&](auto cb) {
        lock->Get(MasterLock(cell), std::move(cb));
      }));
  if (!f || f->contents.empty())
    return absl::UnavailableError(StrCat("cell ", cell, " has no master now"));
  return f->contents;
}

struct MasterClient::Impl {
  Impl(std::shared_ptr<rpc::Channel> channel, absl::Duration timeout)
      : rpc(std::move(channel)), timeout(timeout) {}
  template <typename Resp>
  absl::StatusOr<Resp> Call(const std::string& method, const google::protobuf::Message& req) {
    MS_ASSIGN_OR_RETURN(std::string body, rpc->Call(method, req.SerializeAsString(), timeout));
    Resp resp;
    if (!resp.ParseFromString(body))
      return absl::DataLossError(StrCat("malformed ", method, " response"));
    return resp;
  }
  std::shared_ptr<rpc::Channel> rpc;
  absl::Duration timeout;
};

MasterClient::MasterClient(std::string address, absl::Duration timeout)
    : impl_(std::make_unique<Impl>(rpc::Connect(address), timeout)) {}
MasterClient::MasterClient(std::shared_ptr<rpc::Channel> channel, absl::Duration timeout)
    : impl_(std::make_unique<Impl>(std::move(channel), timeout)) {}
MasterClient::~MasterClient() = default;

absl::Status MasterClient::CreateTable(const TableSchema& schema,
                                       const std::vector<std::string>& initial_splits) {
  CreateTableRequest r;
  *r.mutable_schema() = schema;
  for (const std::string& s : initial_splits) r.add_initial_splits(s);
  return impl_->Call<MasterEmpty>("master.CreateTable", r).status();
}

absl::Status MasterClient::DeleteTable(const std::string& name, bool force) {
  TableName r;
  r.set_name(name);
  r.set_force(force);
  return impl_->Call<MasterEmpty>("master.DeleteTable", r).status();
}

absl::Status MasterClient::UpdateTable(const TableSchema& schema, bool force) {
  CreateTableRequest r;
  *r.mutable_schema() = schema;
  r.set_force(force);
  return impl_->Call<MasterEmpty>("master.UpdateTable", r).status();
}

absl::StatusOr<std::vector<TableSchema>> MasterClient::ListTables() {
  MS_ASSIGN_OR_RETURN(Tables t, impl_->Call<Tables>("master.ListTables", MasterEmpty()));
  return std::vector<TableSchema>(t.tables().begin(), t.tables().end());
}

absl::StatusOr<std::vector<TabletEntry>> MasterClient::SplitTablet(const std::string& tablet_id,
                                                                   const std::string& row) {
  SplitRequest r;
  r.set_tablet_id(tablet_id);
  r.set_split_row(row);
  MS_ASSIGN_OR_RETURN(SplitResponse resp, impl_->Call<SplitResponse>("master.SplitTablet", r));
  return std::vector<TabletEntry>(resp.children().begin(), resp.children().end());
}

absl::Status MasterClient::MoveTablet(const std::string& tablet_id, const std::string& server) {
  MoveRequest r;
  r.set_tablet_id(tablet_id);
  r.set_server(server);
  return impl_->Call<MasterEmpty>("master.MoveTablet", r).status();
}

absl::Status MasterClient::ReportSplit(const ReportSplitRequest& report) {
  return impl_->Call<MasterEmpty>("master.ReportSplit", report).status();
}

absl::StatusOr<CellState> MasterClient::State() {
  return impl_->Call<CellState>("master.State", MasterEmpty());
}

}  // namespace megastore::storage::cell
