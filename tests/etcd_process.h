// A real etcd (Debian's etcd-server, installed by ./ms deps) for tests: one
// member on loopback ports picked at start, data in a test directory,
// stopped with the object.
#pragma once

#include <string>
#include <thread>

#include "tests/subprocess.h"

namespace megastore::testing {

class EtcdProcess {
 public:
  ~EtcdProcess() { Stop(); }

  // Starts it and waits (up to 20 s) until it answers; "" or why not.
  std::string Start(const std::string& dir) {
    const char* binary = "/usr/bin/etcd";
    if (::access(binary, X_OK) != 0)
      return "etcd is not installed (./ms deps installs etcd-server)";
    client_port_ = FreePort();
    const int peer_port = FreePort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    if (!process_.Start({binary, "--name=test", "--data-dir=" + dir + "/etcd",
                         "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
                         "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
                         "--initial-cluster=test=" + peer, "--logger=zap",
                         "--log-outputs=" + dir + "/etcd.log", "--log-level=error"}))
      return "cannot start etcd";
    for (int i = 0; i < 200; ++i) {
      if (Http(client_port_, "GET", "/health").find("\"health\":\"true\"") != std::string::npos)
        return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "etcd did not become healthy within 20 s (see " + dir + "/etcd.log)";
  }

  void Stop() { process_.Kill(SIGTERM); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

 private:
  Subprocess process_;
  int client_port_ = 0;
};

}  // namespace megastore::testing
