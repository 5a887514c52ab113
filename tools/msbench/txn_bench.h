// `msbench txn`: transactions through the client API on three datacenters
// in this process, with emulated WAN latency between them — 1, 16 and 64
// clients over 1, 10 and 10,000 entity groups, each transaction on one
// entity of its group (read-modify-write, blind write, or a read-mostly
// mix). Reports throughput, p50/p99 latency, conflict and retry rates and
// the fast-path hit rate (docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megastore::tools {

struct TxnBenchOptions {
  std::vector<int> clients = {1, 16, 64};
  std::vector<int64_t> groups = {1, 10, 10000};
  double seconds = 3;                              // per cell
  int runs = 3;                                    // the median of each figure is reported
  std::string replicas = "full,full,witness";      // datacenters A, B, C
  std::string wan = "A-B=10ms,A-C=30ms,B-C=25ms";  // one-way delays
  std::string at = "A,B";                          // where the clients run, round robin
  int64_t value_size = 100;                        // bytes written per transaction
  // Entities per group a transaction picks from uniformly (1: every
  // transaction of a group touches the same entity).
  int64_t rows_per_group = 10;
  // "rmw": read one entity and write it back changed; "blind": write one
  // entity without reading anything; "read-mostly": nine transactions in
  // ten read one entity and write nothing, the tenth is a read-modify-write.
  std::string workload = "rmw";
  bool sync = false;           // fsync each tablet server's commit log
  bool tcp = false;            // every call over TCP, as between processes (not in-process)
  bool preload = true;         // commit once in every group before measuring
  bool advisory_lock = false;  // transactions take their group's advisory lock
  bool promote = true;         // a commit that lost its position may go on to the next
  bool combine = true;         // an app server's commits to a group share log entries
  bool forward = true;         // a hot group's commits go to its home
  bool encrypted = false;      // the schema is ENCRYPTED: every cell sealed at rest
  // "etcd": also start three etcd members on loopback and measure their
  // puts with the same clients and value size, in the same run.
  std::string baseline;
  std::string etcd_binary = "/usr/bin/etcd";
  uint64_t seed = 1;
  bool json = false;
  std::string dir;  // data of the three datacenters (default: temp, removed)
};

int RunTxnBench(const TxnBenchOptions& options);

}  // namespace megastore::tools
