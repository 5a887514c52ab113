#include "storage/lock/lock_session.h"

#include <atomic>

#include "base/await.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/lock/embedded_lock_service.h"
#include "storage/lock/partitionable_lock_service.h"

namespace megastore::storage::lock {
namespace {

class LockSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = EmbeddedLockService::Open(&env_, "");
    ASSERT_TRUE(s.ok());
    service_ = std::move(*s);
    link_ = std::make_unique<Partitionable>(service_.get());
  }

  ManualEnv env_;
  std::unique_ptr<EmbeddedLockService> service_;
  std::unique_ptr<Partitionable> link_;
};

TEST_F(LockSessionTest, RenewalsKeepASessionAndItsFilesAlive) {
  int lost = 0;
  LockSession session(link_.get(), &env_, absl::Seconds(3), [&](const absl::Status&) { ++lost; });
  auto id = Await<SessionId>([&](auto cb) { session.Start(std::move(cb)); });
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(*Await<bool>(
      [&](auto cb) { service_->Create("/cell/servers/ts1", "", *id, std::move(cb)); }));
  for (int i = 0; i < 30; ++i) env_.Advance(absl::Milliseconds(500));  // five ttls
  EXPECT_TRUE(session.alive());
  EXPECT_EQ(lost, 0);
  EXPECT_GE(link_->keepalives, 10);
  auto file = Await<std::optional<FileInfo>>(
      [&](auto cb) { service_->Get("/cell/servers/ts1", std::move(cb)); });
  EXPECT_TRUE(file->has_value());

  session.Close();
  EXPECT_FALSE(session.alive());
  file = Await<std::optional<FileInfo>>(
      [&](auto cb) { service_->Get("/cell/servers/ts1", std::move(cb)); });
  EXPECT_FALSE(file->has_value()) << "closing the session removes its files";
}

// The safety property: cut off from the service, the holder gives its
// session up no later than the service expires it (and frees its lock for
// someone else) — never two holders at once.
TEST_F(LockSessionTest, APartitionedHolderGivesUpBeforeTheServiceFreesItsLock) {
  int64_t lost_at = 0, freed_at = 0;
  LockSession session(link_.get(), &env_, absl::Seconds(3), [&](const absl::Status& why) {
    EXPECT_TRUE(absl::IsUnavailable(why)) << why;
    lost_at = env_.MonotonicMicros();
  });
  auto id = Await<SessionId>([&](auto cb) { session.Start(std::move(cb)); });
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(
      *Await<bool>([&](auto cb) { service_->Create("/cell/master", "me", *id, std::move(cb)); }));
  auto watch = service_->WatchPrefix(
      "/cell/master",
      Await<Listing>([&](auto cb) { service_->List("/cell/master", std::move(cb)); })->revision,
      [&](const WatchEvent& e) {
        if (e.type == WatchEvent::Type::kDelete) freed_at = env_.MonotonicMicros();
      },
      [](const absl::Status& s) { ADD_FAILURE() << s; });
  for (int i = 0; i < 7; ++i) env_.Advance(absl::Milliseconds(700));
  link_->cut = true;
  for (int i = 0; i < 100 && freed_at == 0; ++i) env_.Advance(absl::Milliseconds(50));
  ASSERT_NE(freed_at, 0) << "the service expires the session";
  ASSERT_NE(lost_at, 0) << "the holder noticed";
  EXPECT_LE(lost_at, freed_at);
  EXPECT_FALSE(session.alive());
}

TEST_F(LockSessionTest, ASessionTheServiceEndedIsLostAtTheNextRenewal) {
  absl::Status why;
  LockSession session(link_.get(), &env_, absl::Seconds(3),
                      [&](const absl::Status& s) { why = s; });
  auto id = Await<SessionId>([&](auto cb) { session.Start(std::move(cb)); });
  ASSERT_TRUE(id.ok());
  // E.g. the master deleted a server it could not reach, or an operator.
  ASSERT_TRUE(Await<bool>([&](auto cb) {
                service_->CloseSession(*id, [cb = std::move(cb)](absl::Status s) mutable {
                  if (s.ok()) return cb(true);
                  cb(s);
                });
              }).ok());
  env_.Advance(absl::Seconds(1) + absl::Milliseconds(1));
  EXPECT_EQ(why.code(), absl::StatusCode::kNotFound) << why;
  EXPECT_FALSE(session.alive());
}

}  // namespace
}  // namespace megastore::storage::lock
