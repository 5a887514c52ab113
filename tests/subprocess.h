// Starting and killing server processes in integration tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/test_util.h"

namespace megastore::testing {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr together
};

// Runs a shell command to completion.
inline Result RunCommand(const std::string& command) {
  Result r{-1, ""};
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// One HTTP/1.1 request to 127.0.0.1:`port`; the whole response (status
// line, headers, body), or "" if the connection failed.
inline std::string Http(int port, const std::string& method, const std::string& path,
                        const std::string& body = "") {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string req =
      method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return resp;
}

// A port on 127.0.0.1 that was free a moment ago. It is drawn at random
// from below the kernel's ephemeral range (ip_local_port_range), so an
// outgoing connection of a test running beside this one cannot take it
// between now and the server's bind, and never twice in one process.
inline int FreePort() {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  if (low < 12000 || low > 65535) low = 32768;
  std::lock_guard<std::mutex> lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = 10000 + static_cast<int>(rng() % static_cast<unsigned>(low - 10000));
    if (given.count(port) != 0) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (free) {
      given.insert(port);
      return port;
    }
  }
  return 0;
}

// A child process whose stdout the test reads line by line.
class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess() { Kill(SIGKILL); }

  // Starts argv[0] with argv. Returns false if fork/exec setup failed.
  bool Start(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe(fds) != 0) return false;
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
    return true;
  }

  // The next line of stdout, or "" after `timeout_ms` or at EOF.
  std::string ReadLine(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return "";
      char buf[4096];
      const ssize_t n = ::read(out_, buf, sizeof(buf));
      if (n <= 0) return "";
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    Wait();
  }

  // Waits for exit; returns the wait status.
  int Wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (out_ >= 0) ::close(out_);
    out_ = -1;
    return status;
  }

  // True once the child has exited (reaped here, its pipe closed; Wait()
  // then returns 0).
  bool Exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    if (out_ >= 0) ::close(out_);
    out_ = -1;
    return true;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

// Reads a megastored's lines until "megastored: ready" (or 40 lines, or
// 30 s without one); returns them all.
inline std::string UntilReady(Subprocess& p) {
  std::string out;
  for (int i = 0; i < 40; ++i) {
    const std::string line = p.ReadLine(30000);
    out += line + "\n";
    if (line.empty() || line == "megastored: ready") break;
  }
  return out;
}

}  // namespace megastore::testing
