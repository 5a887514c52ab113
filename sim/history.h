// Client histories and the checkers run over them after a simulation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace megastore::sim {

struct Event {
  enum class Type { kInvoke, kOk, kFail, kInfo };
  enum class Op { kRead, kWrite, kCas, kDelete };
  int process = 0;
  Type type = Type::kInvoke;
  Op f = Op::kRead;
  std::string key;                      // "<group>/<entity>"
  std::optional<std::string> value;     // read result / written value / cas new / delete's id
  std::optional<std::string> expected;  // cas
  // cas: the entity `expected` is of, when not `key` (another of its group):
  // it writes `key` only if `read_key` held `expected`.
  std::string read_key;
  std::string level;  // reads: current | snapshot | inconsistent
  int64_t time = 0;   // virtual micros
  // Not exported: the log position a read was served at, or a commit's.
  uint64_t position = 0;
};

// One line of the JSON-lines history (docs/replication.md, "mssim").
std::string ToJson(const Event& e);

// One entity group's final log: position -> entry. The simulator's writes
// each set one key to a value no other write uses, and each entry's id is
// that value (a delete's: its own unique id), so an id names its operation.
// A combined entry holds several operations, in their serial order.
struct LogRecord {
  using Writes =
      std::map<std::string, std::optional<std::string>>;  // key -> value (nullopt: delete)
  std::string id;
  bool noop = false;
  Writes writes;
  struct Member {
    std::string id;
    Writes writes;
  };
  std::vector<Member> members;  // a combined entry's (then `id` and `writes` are unused)
};
using GroupLog = std::map<uint64_t, LogRecord>;

// Checks a history against the agreed final logs (group name -> log):
//  * every acknowledged write/cas is in the log exactly once, at the position
//    it reported; no failed one is in it; none is in it twice;
//  * every ok read (current, snapshot) returned the value its position's
//    prefix of the log gives; a cas's expected value held just before it
//    (before its position, and the members ahead of it in its entry);
//  * a current read is at or after every commit acknowledged, and every
//    current read completed, before it was invoked;
//  * an inconsistent read returned a value some write wrote (or nothing).
// Returns the first violation found.
// `history` is in time order; keys are "<group>/<entity>".
absl::Status CheckHistory(const std::vector<Event>& history,
                          const std::map<std::string, GroupLog>& logs);

}  // namespace megastore::sim
