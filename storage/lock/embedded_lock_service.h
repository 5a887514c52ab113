// EmbeddedLockService: the lock service inside one process (docs/architecture.md):
// sessions expire on an Env's clock, so the simulator and tests drive them
// on virtual time; permanent files are kept in DIR/lockservice.state
// (written whole, atomically, on each change: the service holds a cell's
// few small files, not data). Sessions and ephemeral files do not survive a
// restart — their holders find their sessions gone (NotFound) and start
// over, as after a real lock service's failover.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "storage/lock/lock_service.h"

namespace megastore::storage::lock {

class EmbeddedLockService : public LockService {
 public:
  // `dir` empty: nothing is written to disk. DataLoss if the state file is
  // damaged (naming it); the service then does not start.
  static absl::StatusOr<std::unique_ptr<EmbeddedLockService>> Open(Env* env, std::string dir);
  ~EmbeddedLockService() override;

  void OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) override;
  void KeepAlive(SessionId session, Callback<absl::Status> done) override;
  void CloseSession(SessionId session, Callback<absl::Status> done) override;
  void Put(std::string path, std::string contents, SessionId session,
           Callback<absl::StatusOr<int64_t>> done) override;
  void Create(std::string path, std::string contents, SessionId session,
              Callback<absl::StatusOr<bool>> done) override;
  void Get(std::string path, Callback<absl::StatusOr<std::optional<FileInfo>>> done) override;
  void List(std::string prefix, Callback<absl::StatusOr<Listing>> done) override;
  void Delete(std::string path, int64_t if_version, Callback<absl::StatusOr<bool>> done) override;
  std::unique_ptr<Watch> WatchPrefix(std::string prefix, int64_t after,
                                     std::function<void(const WatchEvent&)> on_event,
                                     std::function<void(const absl::Status&)> on_error) override;

 private:
  class EmbeddedWatch;
  struct Session {
    absl::Duration ttl;
    int64_t expires = 0;  // Env monotonic micros
    std::set<std::string> files;
  };
  struct Watcher {
    std::string prefix;
    std::function<void(const WatchEvent&)> on_event;
    int64_t from = 0;  // gets queued events after this revision (older ones are replayed to it)
    bool cancelled = false;
  };
  struct Queued {
    WatchEvent event;
    uint64_t only_watch = 0;  // a replay for one new watch; 0: for every watch
  };
  // How many past changes a new watch can start from.
  static constexpr size_t kHistory = 10'000;

  EmbeddedLockService(Env* env, std::string dir) : env_(env), dir_(std::move(dir)) {}
  absl::Status Load();
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes or deletes a file at a new revision and queues its event.
  void RecordLocked(WatchEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t PutLocked(const std::string& path, std::string contents, SessionId session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends sessions whose lease ran out (their files go).
  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndSessionLocked(SessionId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleExpiry(SessionId id, absl::Duration after);
  // Delivers queued events to the watchers, in revision order, one thread
  // at a time; call without mu_ held.
  void Deliver();
  void CancelWatch(uint64_t id);

  Env* const env_;
  const std::string dir_;

  absl::Mutex mu_;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  SessionId next_session_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, FileInfo> files_ ABSL_GUARDED_BY(mu_);
  std::map<SessionId, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watch_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Queued> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<WatchEvent> history_ ABSL_GUARDED_BY(mu_);  // the last kHistory changes
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id delivering_thread_ ABSL_GUARDED_BY(mu_);
  uint64_t delivering_watch_ ABSL_GUARDED_BY(mu_) = 0;
  // Expiry timers reach the service through this, which the destructor
  // clears (under its mutex) so no timer runs on a destroyed service.
  struct TimerGuard {
    absl::Mutex mu;
    EmbeddedLockService* service ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<TimerGuard> guard_;
};

}  // namespace megastore::storage::lock
