// Paxos for one log position, as pure state machines (no I/O, no clocks):
// messages in, messages out. The driver (the client library's commit path,
// the replication server) persists acceptor state before sending replies,
// delivers messages, and decides when a stalled proposer retries (after a
// random backoff drawn from its own Random).
//
// Megastore's fast path: the value chosen at position p names the leader of
// p+1. A writer first sends Accept with ballot 0 to that leader; the leader
// accepts at most one value at ballot 0, so whoever reaches it first owns
// ballot 0 and then sends the same Accept to the other replicas. Only if that
// fails does a proposer run both phases with a higher ballot, unique to it
// (round, proposer id).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace megastore::paxos {

// Ordered by round, then proposer id. Round 0 is the fast path's ballot.
struct Ballot {
  uint64_t round = 0;
  uint64_t proposer = 0;
  friend auto operator<=>(const Ballot&, const Ballot&) = default;
  std::string ToString() const;
};

using AcceptorId = int;  // index of a replica in the group's replica list

struct Message {
  enum class Type { kPrepare, kPromise, kAccept, kAccepted };
  Type type = Type::kPrepare;
  AcceptorId acceptor = 0;  // the acceptor it goes to or comes from
  uint64_t proposer = 0;    // the proposer it goes to or comes from
  Ballot ballot;            // the ballot the request is for (echoed in replies)
  std::string value;        // kAccept: the value
  // Replies:
  bool ok = false;
  Ballot promised;  // the acceptor's promise after handling the request
  // kPromise: what the acceptor had accepted, if anything.
  std::optional<Ballot> accepted_ballot;
  std::string accepted_value;

  std::string ToString() const;
};

// What an acceptor keeps for one position (persisted, e.g. in the entity
// group's root row, atomically with each change).
struct AcceptorState {
  Ballot promised;
  std::optional<Ballot> accepted_ballot;
  std::string accepted_value;
  friend bool operator==(const AcceptorState&, const AcceptorState&) = default;
};

// Handles a kPrepare or kAccept addressed to the acceptor holding `state`:
// updates `state` (persist it before sending the reply) and returns the
// reply. Prepare(b) is granted if b > promised. Accept(b, v) is granted if
// b >= promised, except that a ballot-0 accept is refused when a different
// value was already accepted at ballot 0 (ballot 0 has one owner).
Message HandleRequest(AcceptorState& state, const Message& request);

struct ProposerOptions {
  int acceptors = 3;
  uint64_t id = 1;  // unique among proposers of this position, > 0 (random 64-bit in production)
  // The leader of this position: try the fast path there first.
  std::optional<AcceptorId> leader;
};

class Proposer {
 public:
  enum class State {
    kFastAccept,  // waiting for the leader to accept at ballot 0
    kPreparing,   // phase 1 at `ballot()`
    kAccepting,   // phase 2 at `ballot()`
    kStalled,     // refused: call Retry() (after a backoff)
    kChosen,      // done: chosen_value() is the position's value
  };

  Proposer(ProposerOptions options, std::string value);

  // The first messages: the fast path's Accept to the leader, or Prepares.
  std::vector<Message> Start();
  // A reply from an acceptor. Replies to older ballots, duplicates and
  // replies after the value is chosen are ignored. Returns what to send.
  std::vector<Message> Step(const Message& reply);
  // A new round with a ballot above every ballot seen (from kStalled, or
  // on a timeout in any state but kChosen). Returns the Prepares.
  std::vector<Message> Retry();

  State state() const { return state_; }
  const Ballot& ballot() const { return ballot_; }
  bool chosen() const { return state_ == State::kChosen; }
  // The chosen value (valid when chosen()), and whether it is the value
  // this proposer was asked to propose (if not, its write lost the position).
  const std::string& chosen_value() const { return chosen_value_; }
  bool chosen_ours() const { return chosen() && chosen_value_ == value_; }
  // Acceptors known to have accepted the chosen value: the writer must
  // invalidate the coordinators of the other full replicas.
  const std::set<AcceptorId>& accepted_by() const { return accepted_by_; }
  // Every field, for traces and for model checkers that compare states.
  std::string DebugString() const;

 private:
  int majority() const { return options_.acceptors / 2 + 1; }
  std::vector<Message> AcceptAll(const std::set<AcceptorId>& skip);
  void Stall(const Message& reply);

  const ProposerOptions options_;
  const std::string value_;
  State state_ = State::kStalled;
  Ballot ballot_;
  Ballot highest_seen_;
  std::string proposal_;  // the value being proposed in this round
  std::set<AcceptorId> promised_by_;
  std::optional<Ballot> best_accepted_;  // highest accepted ballot among promises
  std::set<AcceptorId> accepted_by_;
  std::string chosen_value_;
};

const char* ToString(Proposer::State state);

}  // namespace megastore::paxos
