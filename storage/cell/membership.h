// Who is in a Bigtable cell, through the lock service (docs/cell.md):
//
//  * ServerRegistration — a tablet server's ephemeral file
//    /<cell>/servers/<address>, held by its LockSession. When the session is
//    lost the server must stop serving at once (`on_lost`).
//  * MasterElection — the master lock /<cell>/master: whoever creates it is
//    the master until its session is lost; the others stand by, watching
//    the file, and try again when it goes.
//  * LiveServers — the servers directory as the master sees it: a listing,
//    then a watch from the listing's revision, reporting each server that
//    joins or leaves (relisting if the watch fails).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "storage/lock/lock_service.h"
#include "storage/lock/lock_session.h"

namespace megastore::storage::cell {

std::string ServersDir(const std::string& cell);  // "/<cell>/servers/"
std::string MasterLock(const std::string& cell);  // "/<cell>/master"

class ServerRegistration {
 public:
  // `on_lost` runs once when the server can no longer be sure it belongs
  // to the cell — its session is lost, or its file was deleted (the master
  // does that to a server it cannot reach): it must stop serving.
  ServerRegistration(lock::LockService* service, Env* env, std::string cell, std::string address,
                     absl::Duration ttl, std::function<void(const absl::Status&)> on_lost);
  ~ServerRegistration();  // leaves the cell (its file goes)
  // Opens the session and creates the file. AlreadyExists if another
  // server's file has this address (a previous incarnation whose session
  // has not expired yet: try again after its ttl).
  void Start(lock::LockService::Callback<absl::Status> done);
  bool registered() const;

 private:
  struct Lost;  // runs on_lost once, from the session or the file's watch
  void WatchFile(int64_t after);

  lock::LockService* const service_;
  const std::string path_;
  const std::string address_;
  std::shared_ptr<Lost> lost_;
  std::unique_ptr<lock::LockSession> session_;
  absl::Mutex mu_;
  std::unique_ptr<lock::LockService::Watch> watch_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<lock::LockService::Watch>> retired_ ABSL_GUARDED_BY(mu_);
};

class MasterElection {
 public:
  // `on_elected` runs when this candidate becomes the master; `on_lost` once
  // if it then loses the lock (it must stop acting as master: exit).
  MasterElection(lock::LockService* service, Env* env, std::string cell, std::string address,
                 absl::Duration ttl, std::function<void()> on_elected,
                 std::function<void(const absl::Status&)> on_lost);
  ~MasterElection();
  // Starts campaigning: takes the lock if free, else waits for it to go.
  void Start();
  bool is_master() const;
  // The current master's address as last seen ("" if none).
  std::string master() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class LiveServers {
 public:
  // `on_join(address)` / `on_leave(address)` run in order, on the lock
  // service's callback threads; the first listing reports every server as
  // joining.
  // `env` paces retries while the lock service is unreachable.
  LiveServers(lock::LockService* service, Env* env, std::string cell,
              std::function<void(const std::string&)> on_join,
              std::function<void(const std::string&)> on_leave);
  ~LiveServers();
  void Start();
  std::set<std::string> servers() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace megastore::storage::cell
