// The LockService contract, run against both implementations: the embedded
// one (on a ManualEnv: leases expire as the test moves time), the same
// reached over RPC (RemoteLockService), and a real etcd started by the test
// on loopback (leases expire in real time).
#include "storage/lock/lock_service.h"

#include <filesystem>
#include <fstream>

#include "base/await.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/etcd_lock_service.h"
#include "storage/lock/lock_service_rpc.h"
#include "tests/etcd_process.h"

namespace megastore::storage::lock {
namespace {

using ::testing::HasSubstr;

absl::Status AwaitStatus(const std::function<void(LockService::Callback<absl::Status>)>& fn) {
  absl::StatusOr<bool> r = Await<bool>([&](auto cb) {
    fn([cb = std::move(cb)](absl::Status s) mutable {
      if (s.ok()) return cb(true);
      cb(s);
    });
  });
  return r.status();
}

class LockServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "embedded" || GetParam() == "remote") {
      auto s = EmbeddedLockService::Open(&env_, dir_.path());
      ASSERT_TRUE(s.ok()) << s.status();
      service_ = std::move(*s);
      ttl_ = absl::Seconds(2);
      if (GetParam() == "remote") {
        // The same service, reached over RPC.
        embedded_ = std::move(service_);
        server_ = std::make_unique<rpc::RpcServer>(rpc::ServerOptions{});
        rpc_service_ = std::make_unique<LockServiceRpc>(embedded_.get(), &env_);
        rpc_service_->Register(server_.get());
        ASSERT_TRUE(server_->Start().ok());
        service_ = std::make_unique<RemoteLockService>(StrCat("127.0.0.1:", server_->port()));
      }
    } else {
      const std::string error = etcd_.Start(dir_.path());
      ASSERT_EQ(error, "");
      EtcdOptions o;
      o.endpoints = {etcd_.endpoint()};
      o.key_prefix = "/test-cell";
      service_ = std::make_unique<EtcdLockService>(o);
      ttl_ = absl::Seconds(2);
    }
  }
  void TearDown() override {
    service_.reset();
    server_.reset();
    rpc_service_.reset();
    embedded_.reset();
  }

  // Lets `d` pass: virtual time for the embedded service, real for etcd.
  void Pass(absl::Duration d) {
    if (GetParam() != "etcd") {
      env_.Advance(d);
    } else {
      absl::SleepFor(d);
    }
  }

  SessionId Session() {
    auto s = Await<SessionId>([&](auto cb) { service_->OpenSession(ttl_, std::move(cb)); });
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : 0;
  }
  absl::StatusOr<int64_t> Put(const std::string& path, const std::string& contents,
                              SessionId session = 0) {
    return Await<int64_t>([&](auto cb) { service_->Put(path, contents, session, std::move(cb)); });
  }
  absl::StatusOr<bool> Create(const std::string& path, const std::string& contents,
                              SessionId session) {
    return Await<bool>([&](auto cb) { service_->Create(path, contents, session, std::move(cb)); });
  }
  std::optional<FileInfo> Get(const std::string& path) {
    auto r = Await<std::optional<FileInfo>>([&](auto cb) { service_->Get(path, std::move(cb)); });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  }
  Listing List(const std::string& prefix) {
    auto r = Await<Listing>([&](auto cb) { service_->List(prefix, std::move(cb)); });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Listing{};
  }
  absl::StatusOr<bool> Delete(const std::string& path, int64_t if_version = 0) {
    return Await<bool>([&](auto cb) { service_->Delete(path, if_version, std::move(cb)); });
  }
  absl::Status KeepAlive(SessionId s) {
    return AwaitStatus([&](auto cb) { service_->KeepAlive(s, std::move(cb)); });
  }

  TestDir dir_;
  ManualEnv env_;
  testing::EtcdProcess etcd_;
  std::unique_ptr<LockService> embedded_;  // "remote": the service behind server_
  std::unique_ptr<rpc::RpcServer> server_;
  std::unique_ptr<LockServiceRpc> rpc_service_;
  std::unique_ptr<LockService> service_;
  absl::Duration ttl_;
};

TEST_P(LockServiceTest, FilesAreWrittenReadListedAndDeletedByVersion) {
  auto v1 = Put("/cell/schema/users", "families: a");
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto v2 = Put("/cell/schema/users", "families: a, b");
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(*v2, *v1);
  ASSERT_TRUE(Put("/cell/schema/photos", "x").ok());
  ASSERT_TRUE(Put("/cell/servers/ts1", "127.0.0.1:1").ok());

  std::optional<FileInfo> users = Get("/cell/schema/users");
  ASSERT_TRUE(users.has_value());
  EXPECT_EQ(users->contents, "families: a, b");
  EXPECT_EQ(users->version, *v2);
  EXPECT_EQ(users->session, 0);
  EXPECT_FALSE(Get("/cell/schema/none").has_value());

  Listing schema = List("/cell/schema/");
  ASSERT_EQ(schema.files.size(), 2u);
  EXPECT_EQ(schema.files[0].path, "/cell/schema/photos");
  EXPECT_EQ(schema.files[1].path, "/cell/schema/users");
  EXPECT_GE(schema.revision, *v2);

  auto stale = Delete("/cell/schema/users", *v1);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(*stale) << "a delete of an older version does nothing";
  auto current = Delete("/cell/schema/users", *v2);
  ASSERT_TRUE(current.ok());
  EXPECT_TRUE(*current);
  EXPECT_FALSE(Get("/cell/schema/users").has_value());
  auto again = Delete("/cell/schema/users");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST_P(LockServiceTest, ALockIsAFileOnlyOneSessionCanCreate) {
  const SessionId a = Session(), b = Session();
  auto first = Create("/cell/master", "a", a);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first);
  auto second = Create("/cell/master", "b", b);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  std::optional<FileInfo> holder = Get("/cell/master");
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->contents, "a");
  EXPECT_EQ(holder->session, a);

  // Closing the session releases it.
  ASSERT_TRUE(AwaitStatus([&](auto cb) { service_->CloseSession(a, std::move(cb)); }).ok());
  EXPECT_FALSE(Get("/cell/master").has_value());
  auto taken = Create("/cell/master", "b", b);
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(*taken);
}

TEST_P(LockServiceTest, AnExpiredSessionLosesItsFilesAndCannotBeRenewed) {
  const SessionId kept = Session(), dropped = Session();
  ASSERT_TRUE(*Create("/cell/servers/kept", "k", kept));
  ASSERT_TRUE(*Create("/cell/servers/dropped", "d", dropped));
  ASSERT_TRUE(Put("/cell/permanent", "p").ok());
  // Renew one for twice its ttl; leave the other alone. (etcd's leader
  // looks for expired leases every half second: the last round waits that
  // out too.)
  for (int i = 0; i < 4; ++i) {
    Pass(ttl_ / 2);
    ASSERT_TRUE(KeepAlive(kept).ok()) << i;
  }
  Pass(ttl_ / 2);
  ASSERT_TRUE(KeepAlive(kept).ok());
  EXPECT_TRUE(Get("/cell/servers/kept").has_value());
  EXPECT_FALSE(Get("/cell/servers/dropped").has_value()) << "its session expired";
  EXPECT_TRUE(Get("/cell/permanent").has_value());
  absl::Status renewed = KeepAlive(dropped);
  EXPECT_EQ(renewed.code(), absl::StatusCode::kNotFound) << renewed;
  auto put = Put("/cell/servers/dropped", "again", dropped);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kNotFound) << put.status();
}

TEST_P(LockServiceTest, AWatchReportsEveryChangeUnderItsPrefixInOrderFromAListing) {
  ASSERT_TRUE(Put("/cell/servers/a", "1").ok());
  const Listing before = List("/cell/servers/");
  ASSERT_EQ(before.files.size(), 1u);
  // A change between the listing and the watch is not missed.
  ASSERT_TRUE(Put("/cell/servers/b", "2").ok());

  absl::Mutex mu;
  std::vector<std::string> seen;
  std::vector<int64_t> revisions;
  auto watch = service_->WatchPrefix(
      "/cell/servers/", before.revision,
      [&](const WatchEvent& e) {
        absl::MutexLock lock(&mu);
        seen.push_back(
            StrCat(e.type == WatchEvent::Type::kPut ? "put " : "delete ", e.path, " ", e.contents));
        revisions.push_back(e.revision);
      },
      [&](const absl::Status& s) { ADD_FAILURE() << s; });
  const SessionId s = Session();
  ASSERT_TRUE(*Create("/cell/servers/c", "3", s));
  ASSERT_TRUE(Put("/cell/other", "not watched").ok());
  ASSERT_TRUE(*Delete("/cell/servers/a"));
  ASSERT_TRUE(AwaitStatus([&](auto cb) { service_->CloseSession(s, std::move(cb)); }).ok());

  const std::vector<std::string> want = {"put /cell/servers/b 2", "put /cell/servers/c 3",
                                         "delete /cell/servers/a ", "delete /cell/servers/c "};
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(absl::Condition(
                          +[](std::vector<std::string>* v) { return v->size() >= 4; }, &seen),
                      absl::Seconds(10));
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(std::is_sorted(revisions.begin(), revisions.end()));
  mu.Unlock();
  watch->Cancel();
  ASSERT_TRUE(Put("/cell/servers/d", "after cancel").ok());
  mu.Lock();
  EXPECT_EQ(seen.size(), 4u) << "nothing arrives after Cancel";
}

TEST_P(LockServiceTest, BadPathsAreRefused) {
  auto put = Put("no-slash", "x");
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("does not start with /"));
  auto create = Create(std::string(5000, '/'), "x", 0);
  EXPECT_EQ(create.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Implementations, LockServiceTest,
                         ::testing::Values("embedded", "remote", "etcd"),
                         [](const auto& info) { return info.param; });

TEST(EmbeddedLockServiceTest, PermanentFilesSurviveARestartAndSessionsDoNot) {
  TestDir dir;
  ManualEnv env;
  int64_t version = 0;
  SessionId old_session = 0;
  {
    auto s = EmbeddedLockService::Open(&env, dir.path());
    ASSERT_TRUE(s.ok());
    version =
        *Await<int64_t>([&](auto cb) { (*s)->Put("/root-tablet", "ts1:7400", 0, std::move(cb)); });
    old_session =
        *Await<SessionId>([&](auto cb) { (*s)->OpenSession(absl::Seconds(10), std::move(cb)); });
    ASSERT_TRUE(*Await<bool>(
        [&](auto cb) { (*s)->Create("/servers/ts1", "", old_session, std::move(cb)); }));
  }
  auto s = EmbeddedLockService::Open(&env, dir.path());
  ASSERT_TRUE(s.ok());
  auto root =
      Await<std::optional<FileInfo>>([&](auto cb) { (*s)->Get("/root-tablet", std::move(cb)); });
  ASSERT_TRUE(root.ok() && root->has_value());
  EXPECT_EQ((*root)->contents, "ts1:7400");
  EXPECT_EQ((*root)->version, version);
  auto server =
      Await<std::optional<FileInfo>>([&](auto cb) { (*s)->Get("/servers/ts1", std::move(cb)); });
  EXPECT_FALSE(server->has_value()) << "ephemeral files die with the process";
  auto fresh =
      Await<SessionId>([&](auto cb) { (*s)->OpenSession(absl::Seconds(10), std::move(cb)); });
  EXPECT_GT(*fresh, old_session) << "session ids are never reused";
  auto renewed = Await<bool>([&](auto cb) {
    (*s)->KeepAlive(old_session, [cb = std::move(cb)](absl::Status st) mutable {
      if (st.ok()) return cb(true);
      cb(st);
    });
  });
  EXPECT_EQ(renewed.status().code(), absl::StatusCode::kNotFound);
}

TEST(EmbeddedLockServiceTest, ADamagedStateFileIsRefusedNamingIt) {
  TestDir dir;
  ManualEnv env;
  {
    auto s = EmbeddedLockService::Open(&env, dir.path());
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(Await<int64_t>([&](auto cb) { (*s)->Put("/a", "b", 0, std::move(cb)); }).ok());
  }
  const std::string path = dir.path() + "/lockservice.state";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 1] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto s = EmbeddedLockService::Open(&env, dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("lockservice.state is damaged"));
}

// ls.Watch streams end after RemoteLockService::kWatchStream; the client
// renews from the last revision it saw: nothing is lost or repeated.
TEST(RemoteLockServiceTest, AWatchGoesOnAcrossStreamRenewals) {
  TestDir dir;
  ManualEnv env;
  auto embedded = EmbeddedLockService::Open(&env, dir.path());
  ASSERT_TRUE(embedded.ok());
  rpc::RpcServer server(rpc::ServerOptions{});
  LockServiceRpc rpc_service(embedded->get(), &env);
  rpc_service.Register(&server);
  ASSERT_TRUE(server.Start().ok());
  RemoteLockService remote(StrCat("127.0.0.1:", server.port()));

  absl::Mutex mu;
  std::vector<std::string> seen;
  auto watch = remote.WatchPrefix(
      "/w/", 0,
      [&](const WatchEvent& e) {
        absl::MutexLock lock(&mu);
        seen.push_back(e.contents);
      },
      [&](const absl::Status& s) { ADD_FAILURE() << s; });
  auto put = [&](const std::string& v) {
    ASSERT_TRUE(Await<int64_t>([&](auto cb) { remote.Put("/w/x", v, 0, std::move(cb)); }).ok());
  };
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 1000; ++i) {
      {
        absl::MutexLock lock(&mu);
        if (seen.size() >= n) return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  };
  put("1");
  ASSERT_TRUE(wait_for(1));
  for (int round = 0; round < 3; ++round) {
    env.Advance(RemoteLockService::kWatchStream + absl::Seconds(1));  // the server ends the stream
    put(std::to_string(round + 2));
    ASSERT_TRUE(wait_for(static_cast<size_t>(round) + 2)) << "round " << round;
  }
  watch->Cancel();
  server.Stop();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"1", "2", "3", "4"}));
}

TEST(EtcdLockServiceTest, AnUnreachableEtcdIsUnavailable) {
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:1"};
  EtcdLockService service(o);
  auto r = Await<std::optional<FileInfo>>([&](auto cb) { service.Get("/x", std::move(cb)); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

}  // namespace
}  // namespace megastore::storage::lock
