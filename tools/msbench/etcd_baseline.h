// The etcd baseline of `msbench txn --baseline=etcd`: three etcd members
// (Debian's etcd-server) on loopback, started and stopped by the
// benchmark, driven by the same number of clients writing values of the
// same size through etcd's client API (its JSON gateway, POST
// /v3/kv/put, one keep-alive connection per client, clients spread over
// the members). etcd syncs its write-ahead log on every commit, always.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/msbench/child_process.h"

namespace megastore::tools {

struct EtcdFigures {
  double puts_per_s = 0;
  double p50_ms = 0, p99_ms = 0;
  double cpu_us_per_put = 0;  // the members' CPU time (user + system) per put
  uint64_t errors = 0;
  std::string first_error;
};

class EtcdBaseline {
 public:
  // Starts `members` members with data under `dir` and waits until the
  // cluster has a leader and takes a put. `binary`: etcd's path.
  static absl::StatusOr<std::unique_ptr<EtcdBaseline>> Start(const std::string& binary,
                                                             const std::string& dir,
                                                             int members = 3);
  ~EtcdBaseline();

  // `clients` threads putting, back to back, one of `keys` keys (uniformly
  // at random) with a `value_size`-byte value, for `seconds`.
  EtcdFigures Measure(int clients, int64_t keys, int64_t value_size, double seconds, uint64_t seed);

  const std::vector<int>& client_ports() const { return client_ports_; }

 private:
  EtcdBaseline() = default;
  std::vector<std::unique_ptr<ChildProcess>> members_;
  std::vector<int> client_ports_;
};

// One put through etcd's JSON gateway on `port` over a fresh connection:
// OK or why not (for the start-up check and tests).
absl::Status EtcdPut(int port, const std::string& key, const std::string& value);

}  // namespace megastore::tools
