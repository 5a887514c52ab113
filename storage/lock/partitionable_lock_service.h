// For tests: a LockService in front of another that a test can cut off
// (a partition between a holder and the lock service).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "storage/lock/lock_service.h"

namespace megastore::storage::lock {

// Forwards to a lock service unless cut off: then every call fails with
// Unavailable (a partition between the holder and the service).
class Partitionable : public LockService {
 public:
  explicit Partitionable(LockService* to) : to_(to) {}
  std::atomic<bool> cut{false};

  void OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) override {
    if (cut) return done(Down());
    to_->OpenSession(ttl, std::move(done));
  }
  void KeepAlive(SessionId s, Callback<absl::Status> done) override {
    ++keepalives;
    if (cut) return done(Down());
    to_->KeepAlive(s, std::move(done));
  }
  void CloseSession(SessionId s, Callback<absl::Status> done) override {
    if (cut) return done(Down());
    to_->CloseSession(s, std::move(done));
  }
  void Put(std::string p, std::string c, SessionId s,
           Callback<absl::StatusOr<int64_t>> done) override {
    if (cut) return done(Down());
    to_->Put(std::move(p), std::move(c), s, std::move(done));
  }
  void Create(std::string p, std::string c, SessionId s,
              Callback<absl::StatusOr<bool>> done) override {
    if (cut) return done(Down());
    to_->Create(std::move(p), std::move(c), s, std::move(done));
  }
  void Get(std::string p, Callback<absl::StatusOr<std::optional<FileInfo>>> done) override {
    if (cut) return done(Down());
    to_->Get(std::move(p), std::move(done));
  }
  void List(std::string p, Callback<absl::StatusOr<Listing>> done) override {
    if (cut) return done(Down());
    to_->List(std::move(p), std::move(done));
  }
  void Delete(std::string p, int64_t v, Callback<absl::StatusOr<bool>> done) override {
    if (cut) return done(Down());
    to_->Delete(std::move(p), v, std::move(done));
  }
  std::unique_ptr<Watch> WatchPrefix(std::string p, int64_t after,
                                     std::function<void(const WatchEvent&)> on_event,
                                     std::function<void(const absl::Status&)> on_error) override {
    return to_->WatchPrefix(std::move(p), after, std::move(on_event), std::move(on_error));
  }
  std::atomic<int> keepalives{0};

 private:
  static absl::Status Down() { return absl::UnavailableError("partitioned"); }
  LockService* const to_;
};

}  // namespace megastore::storage::lock
