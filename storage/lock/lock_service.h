// LockService: the Chubby subset that Bigtable and Megastore use (docs/architecture.md;
// Bigtable §5.1): a namespace of small files, sessions that live
// while their holder renews them within a lease, ephemeral files that die
// with their session (a lock is an ephemeral file created only if absent),
// and watches that report every change under a prefix in order.
//
// Two implementations: EmbeddedLockService (one process, permanent files
// durable on local disk; --local and tests) and EtcdLockService (a real
// etcd 3.4 cluster through its v3 API: leases are sessions, transactions
// give create-if-absent and compare-and-delete, watches are watches).
//
// Every call is asynchronous: `done` runs exactly once, maybe before the
// call returns, maybe on another thread; callers must not hold a lock the
// callback takes. Errors: Unavailable/DeadlineExceeded when the service
// cannot be reached (the operation may or may not have happened),
// NotFound for a session that has ended, InvalidArgument for a bad path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace megastore::storage::lock {

using SessionId = int64_t;  // 0: none (a permanent file)

struct FileInfo {
  std::string path;
  std::string contents;
  int64_t version = 0;    // the service's revision when the file was last written
  SessionId session = 0;  // its session if ephemeral
};

struct Listing {
  std::vector<FileInfo> files;  // in path order
  int64_t revision = 0;         // the service's revision the listing is as of
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string path;
  std::string contents;  // kPut
  int64_t revision = 0;  // the revision of this change
};

class LockService {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(T)>;

  // A watch's handle; destroying it (or Cancel) stops the events. No event
  // callback runs after Cancel returns, unless Cancel is called from one.
  class Watch {
   public:
    virtual ~Watch() = default;
    virtual void Cancel() = 0;
  };

  virtual ~LockService() = default;

  // A new session, alive for `ttl` unless renewed. When it ends (it expired,
  // or was closed) every ephemeral file it holds is deleted.
  virtual void OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) = 0;
  // Renews the session for another ttl. NotFound if it has ended: its files
  // are gone, and its holder must stop acting on the locks it had.
  virtual void KeepAlive(SessionId session, Callback<absl::Status> done) = 0;
  virtual void CloseSession(SessionId session, Callback<absl::Status> done) = 0;

  // Creates or replaces `path` (ephemeral if `session` != 0); returns its
  // new version.
  virtual void Put(std::string path, std::string contents, SessionId session,
                   Callback<absl::StatusOr<int64_t>> done) = 0;
  // Creates `path` only if it does not exist: true if created (for a lock:
  // acquired), false if it exists.
  virtual void Create(std::string path, std::string contents, SessionId session,
                      Callback<absl::StatusOr<bool>> done) = 0;
  virtual void Get(std::string path, Callback<absl::StatusOr<std::optional<FileInfo>>> done) = 0;
  // Every file whose path starts with `prefix`.
  virtual void List(std::string prefix, Callback<absl::StatusOr<Listing>> done) = 0;
  // Deletes `path`; with `if_version` != 0 only if that is its version.
  // True if a file was deleted.
  virtual void Delete(std::string path, int64_t if_version,
                      Callback<absl::StatusOr<bool>> done) = 0;

  // Reports, in revision order, every change under `prefix` after revision
  // `after` (a List's revision, so nothing between the listing and the
  // watch is missed). `on_error` runs once if the watch cannot continue
  // (e.g. the revision was compacted away): list again and re-watch.
  virtual std::unique_ptr<Watch> WatchPrefix(std::string prefix, int64_t after,
                                             std::function<void(const WatchEvent&)> on_event,
                                             std::function<void(const absl::Status&)> on_error) = 0;
};

// Paths are "/"-separated, start with "/", and are at most 4 KiB;
// InvalidArgument naming what is wrong otherwise.
absl::Status CheckPath(const std::string& path);

}  // namespace megastore::storage::lock
