// The Paxos invariants of every entity group's log, checked at every write
// to any replica's log as it lands (the simulator's step invariants; the
// end-of-run checkers in cluster.cc look at the whole history):
//
//  * one value per position: no two different values are each accepted by
//    a majority of the voting replicas at one ballot;
//  * ballot 0 (the fast path) has one owner: no two values accepted at it;
//  * every learned value is the chosen one: replicas that learned a
//    position learned the same value, it is the majority's once one is
//    known, and no replica's learned value ever changes.
//
// "Accepted" is ever-accepted: an acceptor record overwritten later still
// counts, as in the Paxos model tests. Values are compared as stored
// bytes, so this holds for groups that are not encrypted (sealed values
// differ per replica) and runs without an operator's log truncation (which
// lets a position be decided anew); the simulator uses neither.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "storage/model/data_model.h"

namespace megastore::sim {

class LogInvariants {
 public:
  // `votes[dc]`: whether datacenter dc's replica votes (full or witness).
  explicit LogInvariants(std::vector<bool> votes);

  // A write applied to datacenter `dc`'s table `table`, row `row`, at
  // virtual time `now_us`. Records the first violation.
  void Observe(int dc, const std::string& table, const std::string& row,
               const std::vector<storage::Mutation>& applied, int64_t now_us);

  // The value each position of a group's log was learned as, anywhere:
  // what the log holds although clean-up removed it from the replicas.
  std::map<uint64_t, std::string> LearnedLog(const std::string& table,
                                             const std::string& root) const;
  // Datacenter `dc` lost its copy of `table` (its log restarts empty).
  void Forget(int dc, const std::string& table);

  // OK, or the first violation seen.
  const absl::Status& status() const { return status_; }
  // Log cells checked so far.
  uint64_t checks() const { return checks_; }
  // Snapshots installed by catch-ups (their summary writes seen).
  uint64_t snapshots() const { return snapshots_; }

 private:
  struct Position {
    // (ballot round, ballot proposer, value) -> voters that ever accepted it.
    std::map<std::tuple<uint64_t, uint64_t, std::string>, std::set<int>> accepted;
    std::optional<std::string> chosen;          // once a majority accepted one value at one ballot
    std::optional<std::string> at_ballot_zero;  // the fast path's value, once accepted anywhere
    std::map<int, std::string> learned;         // per datacenter
  };

  void Fail(std::string message);
  void Accepted(int dc, const std::string& where, Position& p, uint64_t round, uint64_t proposer,
                const std::string& value, int64_t now_us);
  void Learned(int dc, const std::string& where, Position& p, const std::string& value,
               int64_t now_us);

  const std::vector<bool> votes_;
  const size_t majority_;
  // (table, group root row, position) -> what was seen of it.
  std::map<std::tuple<std::string, std::string, uint64_t>, Position> positions_;
  // (datacenter, table, group root row) -> the position its log was
  // cleaned up through: it must never take an acceptor step at or below it.
  std::map<std::tuple<int, std::string, std::string>, uint64_t> cleaned_;
  absl::Status status_;
  uint64_t checks_ = 0;
  uint64_t snapshots_ = 0;
};

}  // namespace megastore::sim
