// Child processes a benchmark starts and stops itself (megastored for
// `msbench cell`, etcd members for `msbench txn --baseline=etcd`), and the
// loopback ports they listen on.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace megastore::tools {

// A loopback port that was free a moment ago (0: none found).
int FreePort();

// CPU time (user + system) this process has used so far, in seconds.
double OwnCpuSeconds();

// The executable `name` beside this binary (build/bin/NAME).
std::string BesideThisBinary(const std::string& name);

// A child process; its stdout is read line by line, its stderr goes to a
// log file. Killed (SIGKILL) when the object goes.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(9); }

  // Starts argv[0] (a path) with `argv`, stderr appended to `log`. With
  // `ready` non-empty, waits until a line of its stdout contains it (30 s
  // at most); false if it did not start or did not get ready.
  bool Start(const std::vector<std::string>& argv, const std::string& log,
             const std::string& ready);
  // Sends `signal` and waits for the process to end.
  void Kill(int signal);
  // Whether it has ended (reaping it if so).
  bool Exited();
  // CPU time (user + system) it has used so far, in seconds; 0 if unknown.
  double CpuSeconds() const;

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

}  // namespace megastore::tools
