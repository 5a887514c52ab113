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

  // Starts it and waits until it answers; "" or why not. A member that
  // exits at once (its port was taken after we picked it) is started again
  // on fresh ports, up to three times; each try may wait up to 20 s.
  std::string Start(const std::string& dir) {
    const char* binary = "/usr/bin/etcd";
    if (::access(binary, X_OK) != 0)
      return "etcd is not installed (./ms deps installs etcd-server)";
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      why = StartOnce(binary, dir, attempt);
      if (why.empty()) return "";
      Stop();
    }
    return why;
  }

  void Stop() { process_.Kill(SIGTERM); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

 private:
  std::string StartOnce(const char* binary, const std::string& dir, int attempt) {
    client_port_ = FreePort();
    const int peer_port = FreePort();
    if (client_port_ == 0 || peer_port == 0) return "no free loopback port for etcd";
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    const std::string data = dir + "/etcd" + std::to_string(attempt);
    const std::string log = dir + "/etcd" + std::to_string(attempt) + ".log";
    if (!process_.Start({binary, "--name=test", "--data-dir=" + data,
                         "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
                         "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
                         "--initial-cluster=test=" + peer, "--logger=zap", "--log-outputs=" + log,
                         "--log-level=error"}))
      return "cannot start etcd";
    for (int i = 0; i < 200; ++i) {
      if (Http(client_port_, "GET", "/health").find("\"health\":\"true\"") != std::string::npos)
        return "";
      if (process_.Exited()) return "etcd exited at start (see " + log + ")";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "etcd did not become healthy within 20 s (see " + log + ")";
  }

  Subprocess process_;
  int client_port_ = 0;
};

}  // namespace megastore::testing
