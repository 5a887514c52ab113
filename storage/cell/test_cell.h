// A whole cell in one process for tests (storage/cell/*_test.cc): the
// embedded lock service, tablet servers in cell mode sharing one data root
// on loopback RPC, masters, and a client. Real time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/random.h"
#include "base/rpc/rpc.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/master.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::storage::cell {

constexpr char kCell[] = "c1";
constexpr absl::Duration kTtl = absl::Seconds(2);

inline TableSchema TestTable(const std::string& name) {
  TableSchema s;
  s.set_name(name);
  s.add_families()->set_name("f");
  return s;
}

inline std::string RowKey(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "row%05d", i);
  return buf;
}

class CellTest : public ::testing::Test {
 protected:
  struct Server {
    // The server's own client library (its split and merge commits), as in
    // megastored: cancelled when the server stops.
    std::unique_ptr<CellClient> client;
    std::unique_ptr<TabletServer> tablets;
    std::unique_ptr<ServiceMetrics> metrics;
    std::unique_ptr<rpc::RpcServer> rpc;
    std::unique_ptr<ServerRegistration> registration;
    std::string address;
    std::atomic<bool> lost{false};
  };
  struct MasterProcess {
    std::unique_ptr<Master> master;
    std::unique_ptr<rpc::RpcServer> rpc;
    std::string address;
  };

  // A fresh cell: a new lock service and data root (tests may run several).
  void SetUp() override {
    root_ = StrCat(dir_.path(), "/cell-", cells_++);
    auto s = lock::EmbeddedLockService::Open(env_, "");
    ASSERT_TRUE(s.ok());
    lock_ = std::move(*s);
    CellClientOptions o;
    o.cell = kCell;
    o.retry_for = absl::Seconds(30);
    client_ = std::make_unique<CellClient>(lock_.get(), env_, o);
  }

  void TearDown() override {
    masters_.clear();
    for (auto& s : servers_) Stop(*s);
  }

  Server& StartServer(uint64_t split_threshold = 0) {
    auto s = std::make_unique<Server>();
    Server* raw = s.get();
    TabletServerOptions o;
    o.data_dir = root_;
    o.cell_log_name = StrCat("ts", servers_.size(), "-", env_->Random64() % 100000);
    o.sync_log = false;
    o.maintenance_interval = absl::Milliseconds(200);
    o.split_threshold_bytes = split_threshold;
    o.may_split = MaySplit;
    o.commit_split = [this, raw, log = o.cell_log_name](const TabletEntry& parent,
                                                        const std::vector<TabletEntry>& children) {
      if (commit_split_hook_) return commit_split_hook_(raw->address, log, parent, children);
      return CommitSplit(raw->client.get(), env_, raw->address, log, parent, children);
    };
    o.commit_merge = [this, raw, log = o.cell_log_name](const TabletEntry& left,
                                                        const TabletEntry& right,
                                                        const TabletEntry& merged) {
      return CommitMerge(raw->client.get(), env_, raw->address, log, left, right, merged);
    };
    s->client = std::make_unique<CellClient>(lock_.get(), env_, client_->options());
    auto opened = TabletServer::Open(o, env_);
    EXPECT_TRUE(opened.ok()) << opened.status();
    s->tablets = std::move(*opened);
    s->metrics = std::make_unique<ServiceMetrics>();
    s->rpc = std::make_unique<rpc::RpcServer>(rpc::ServerOptions{"127.0.0.1:0"});
    RegisterTabletService(s->tablets.get(), s->rpc.get(), s->metrics.get());
    EXPECT_TRUE(s->rpc->Start().ok());
    s->address = StrCat("127.0.0.1:", s->rpc->port());
    s->registration =
        std::make_unique<ServerRegistration>(lock_.get(), env_, kCell, s->address, kTtl,
                                             [raw](const absl::Status&) { raw->lost = true; });
    absl::Notification registered;
    absl::Status status;
    s->registration->Start([&](absl::Status st) {
      status = st;
      registered.Notify();
    });
    registered.WaitForNotification();
    EXPECT_TRUE(status.ok()) << status;
    servers_.push_back(std::move(s));
    return *raw;
  }

  // The server goes away: stops answering, closes its tablets, leaves.
  void Stop(Server& s) {
    if (s.rpc) s.rpc->Stop();
    if (s.client) s.client->Cancel();  // a split committing now gives up
    s.tablets.reset();
    s.registration.reset();
  }

  MasterProcess& StartMaster() {
    auto m = std::make_unique<MasterProcess>();
    MasterOptions o;
    o.cell = kCell;
    o.data_root = root_;
    o.session_ttl = kTtl;
    o.server_ttl = kTtl;
    o.reconcile_interval = absl::Milliseconds(100);
    o.server_timeout = absl::Seconds(2);
    o.balance_margin = balance_margin_;
    o.balance_delay = absl::ZeroDuration();
    o.merge_after = merge_after_;
    o.gc_grace = absl::Seconds(2);
    m->master = std::make_unique<Master>(lock_.get(), env_, o, [](const absl::Status&) {});
    m->rpc = std::make_unique<rpc::RpcServer>(rpc::ServerOptions{"127.0.0.1:0"});
    RegisterMasterService(m->master.get(), m->rpc.get());
    EXPECT_TRUE(m->rpc->Start().ok());
    m->address = StrCat("127.0.0.1:", m->rpc->port());
    m->master->Start(m->address);
    masters_.push_back(std::move(m));
    return *masters_.back();
  }

  static bool Ok(const absl::Status& s) {
    if (!s.ok()) ADD_FAILURE() << s;
    return s.ok();
  }

  static bool WaitFor(const std::function<bool()>& cond,
                      absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (cond()) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return cond();
  }

  Master& ElectedMaster() {
    EXPECT_TRUE(WaitFor([&] {
      for (auto& m : masters_) {
        if (m->master->is_master()) return true;
      }
      return false;
    }));
    for (auto& m : masters_) {
      if (m->master->is_master()) return *m->master;
    }
    return *masters_.front()->master;
  }

  void WriteRows(int from, int to, const std::string& value = "v") {
    for (int i = from; i < to; ++i) {
      ASSERT_TRUE(
          client_->MutateRow("t", RowKey(i), {Mutation::SetCell("f", "q", StrCat(value, i))}).ok())
          << i;
    }
  }

  // Every row of t, read through `client`.
  std::vector<std::string> ReadAll(CellClient& client) {
    std::vector<std::string> rows;
    absl::Status s = client.ReadRows("t", RowRange::All(), {}, [&](Row& r) {
      rows.push_back(r.key);
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return rows;
  }

  int UserTablets(const std::string& table) {
    auto tablets = client_->Tablets(table);
    if (!tablets.ok()) return -1;
    int n = 0;
    for (const auto& t : *tablets) n += t.location.table == table && t.assigned();
    return n;
  }

  Env* env_ = Env::Default();
  TestDir dir_;
  std::string root_;  // the current cell's shared data root
  int cells_ = 0;
  std::unique_ptr<lock::EmbeddedLockService> lock_;
  std::unique_ptr<CellClient> client_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<MasterProcess>> masters_;
  int balance_margin_ = 1;
  absl::Duration merge_after_ = absl::Hours(1);
  std::function<absl::Status(const std::string&, const std::string&, const TabletEntry&,
                             const std::vector<TabletEntry>&)>
      commit_split_hook_;
};

}  // namespace megastore::storage::cell
