// The RPC layer's interfaces (rpc::Channel, rpc::MethodRegistry) on the
// simulator's network, so servers written against RPC — the tablet
// server's and the master's services, the cell's clients — run in the
// simulator unchanged.
//
//  SimRegistry  serves a node's rpc methods: each call's handler runs as a
//               simulator task (handlers may block); an inline handler is
//               tried first, in the delivering event. A streamed answer
//               travels as one reply holding every message.
//  SimChannel   a blocking Call/Stream from one node to another: the
//               caller (a task, or the simulator's thread outside events)
//               waits through the Env. Its own timer bounds every call, so
//               a crashed caller's task still gets an answer (Cancelled).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/rpc/rpc.h"
#include "sim/world.h"

namespace megastore::sim {

class SimRegistry : public rpc::MethodRegistry {
 public:
  // Methods are served by `address` (a node of `net`) while it is up; a
  // crash drops them, so a restarted node registers them again.
  SimRegistry(SimNetwork* net, Env* env, std::string address);
  ~SimRegistry() override;

  void Register(std::string method, rpc::Handler handler) override;
  void RegisterInline(std::string method, rpc::InlineHandler inline_handler,
                      rpc::Handler handler) override;

  // Handler tasks started and not finished (a server being torn down waits
  // for them).
  int running() const { return *running_; }
  // Waits (through the Env) until no handler task runs.
  void Drain();

 private:
  void Serve(const std::string& method, rpc::InlineHandler inline_handler, rpc::Handler handler);

  SimNetwork* const net_;
  Env* const env_;
  const std::string address_;
  const std::shared_ptr<int> running_ = std::make_shared<int>(0);
  struct Task {
    std::unique_ptr<Env::Thread> thread;
    std::shared_ptr<bool> done;
  };
  std::vector<Task> tasks_;  // joined (their threads released) once done
};

class SimChannel : public rpc::Channel {
 public:
  // Calls from node `from` to node `to`.
  SimChannel(SimNetwork* net, Env* env, std::string from, std::string to);

  absl::StatusOr<std::string> Call(std::string_view method, std::string request,
                                   absl::Duration timeout) override;
  absl::Status Stream(std::string_view method, std::string request, absl::Duration timeout,
                      const OnMessage& on_message) override;

 private:
  absl::StatusOr<std::vector<std::string>> Exchange(std::string_view method, std::string request,
                                                    absl::Duration timeout);

  SimNetwork* const net_;
  Env* const env_;
  const std::string from_, to_;
};

// Channels from node `from` to any address.
rpc::Connector SimConnector(SimNetwork* net, Env* env, std::string from);

}  // namespace megastore::sim
