#include "tools/msbench/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/time/clock.h"
#include "base/rpc/rpc.h"

namespace megastore::tools {

int FreePort() {
  rpc::RpcServer probe(rpc::ServerOptions{"127.0.0.1:0"});
  if (!probe.Start().ok()) return 0;
  const int port = probe.port();
  probe.Stop();
  return port;
}

double OwnCpuSeconds() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

std::string BesideThisBinary(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

bool ChildProcess::Start(const std::vector<std::string>& argv, const std::string& log,
                         const std::string& ready) {
  int out[2];
  if (::pipe(out) != 0) return false;
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return false;
  }
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) ::dup2(err, 2);
    ::close(out[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  out_ = out[0];
  if (ready.empty()) return true;
  // Until a line containing `ready`, or 30 s.
  std::string buffer;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof(buf));
    if (n <= 0) return false;
    buffer.append(buf, static_cast<size_t>(n));
    if (buffer.find(ready) != std::string::npos) return true;
    if (buffer.size() > (1 << 20)) buffer.erase(0, buffer.size() - 4096);
  }
  return false;
}

void ChildProcess::Kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  int status;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  if (out_ >= 0) ::close(out_);
  out_ = -1;
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  int status;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  if (out_ >= 0) ::close(out_);
  out_ = -1;
  return true;
}

double ChildProcess::CpuSeconds() const {
  if (pid_ <= 0) return 0;
  // /proc/PID/stat: "PID (COMM) STATE ..." — utime and stime are fields
  // 14 and 15, in clock ticks; COMM may hold spaces, so count after ')'.
  FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  unsigned long long utime = 0, stime = 0;
  // After ")": state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8) flags(9)
  // minflt(10) cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15).
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2)
    return 0;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(utime + stime) / static_cast<double>(ticks) : 0;
}

}  // namespace megastore::tools
