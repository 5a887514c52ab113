// The replication server of one datacenter (DESIGN.md §5): serves remote
// acceptor, apply and log-read requests against its datacenter's Bigtable,
// and periodically finishes writes that were left incomplete (positions
// accepted here but never applied) by catching its replica up, which runs
// no-op Paxos where no value is known.
//
// It keeps no durable state: the groups it has seen Paxos traffic for are a
// hint for the sweep only; after a restart, readers' catch-up does the same.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "base/transport.h"
#include "replication/group_client.h"
#include "replication/log_replica.h"

namespace megastore::replication {

struct ReplicationServerOptions {
  // The group's replicas, with `local` naming this server's datacenter.
  GroupClientOptions cluster;
  // How often to look for incomplete writes, and how old one must be.
  absl::Duration sweep_interval = absl::Seconds(2);
  absl::Duration sweep_age = absl::Seconds(2);
};

class ReplicationServer {
 public:
  // `env`, `transport` and `bigtable` must outlive the server.
  ReplicationServer(Env* env, Transport* transport, storage::BigtableClient* bigtable,
                    ReplicationServerOptions options);
  ~ReplicationServer();

  // Serves repl.Paxos, repl.State, repl.ReadLog, repl.Apply, repl.Read, repl.Scan,
  // repl.ScanIndex.
  void Serve(std::string_view method, std::string request, Responder respond);
  static constexpr std::string_view kMethods[] = {"repl.Paxos", "repl.State", "repl.ReadLog",
                                                  "repl.Apply", "repl.Read", "repl.Scan",
                                                  "repl.ScanIndex"};

  // Starts the periodic sweep; Stop() ends it.
  void Start();
  void Stop();
  // One sweep now; `done` runs when every catch-up it started has finished.
  void Sweep(absl::AnyInvocable<void()> done = nullptr);

 private:
  struct Seen {
    GroupRef group;
    int64_t last = 0;  // monotonic micros of the last Paxos request
  };
  void Note(const GroupRef& group);
  void Tick();

  Env* const env_;
  const ReplicationServerOptions options_;
  LogReplica replica_;
  GroupClient client_;

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool sweeping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
  Env::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace megastore::replication
