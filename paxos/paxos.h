// Paxos for one log position, as pure state machines (no I/O, no clocks):
// a message in, one Ready out. A Ready says what to persist, what to send
// and what to report, in that order; its messages cannot be taken before
// the persist was acknowledged (Ready::Persisted). The drivers (the client
// library's commit path, the replication server) do the I/O, deliver the
// messages and decide when a stalled proposer retries: the Ready says how
// long a wait the refusal calls for, the driver draws the random backoff.
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
  // kAccept: acceptors holding a majority but one — and among them every
  // acceptor of ProposerOptions::learn_needs but the recipient — already
  // accepted this ballot and value, so an acceptor that accepts it
  // completes the majority: its replica may learn the value as chosen.
  bool completes_majority = false;
  // Replies:
  bool ok = false;
  Ballot promised;  // the acceptor's promise after handling the request
  // kPromise: what the acceptor had accepted, if anything.
  std::optional<Ballot> accepted_ballot;
  std::string accepted_value;
  // Any reply: the acceptor already knows the position's chosen value (its
  // replica learned it), so it changed nothing and answers with that value.
  std::optional<std::string> learned;

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

// What the proposer reports to its driver.
struct Decision {
  std::string value;                 // the position's chosen value (maybe another writer's)
  std::set<AcceptorId> accepted_by;  // acceptors known to hold it; empty if `learned`
  bool fast = false;                 // chosen at ballot 0, the leader's fast path
  bool learned = false;              // an acceptor already knew it (no majority seen here)
};

// How long a refused proposer should wait before Retry().
enum class Wait {
  kBackoff,  // a random backoff
  // Its fast-path accept lost to another writer's value at ballot 0: that
  // writer is most likely finishing the position, and preparing at once
  // would preempt its accepts. Wait about a round trip more (the winner's
  // accepts), then a backoff; the next round mostly just learns the outcome.
  kWinnerFirst,
};

struct Report {
  std::optional<Decision> decided;  // the position is decided (reported once)
  std::optional<Wait> stalled;      // the round was refused (reported once per round)
  // An acceptor accepted the chosen value after the majority did (its reply
  // was still on the way): it holds the value too.
  std::optional<AcceptorId> late_accept;
};

// One step's output. Persist first, then send, then report.
class Ready {
 public:
  Ready() = default;
  Ready(Ready&&) = default;
  Ready& operator=(Ready&&) = default;

  // The acceptor state to make durable (atomically) before any message of
  // this Ready leaves; none if nothing changed.
  const std::optional<AcceptorState>& persist() const { return persist_; }
  // Acknowledges that persist() is durable.
  void Persisted() { persisted_ = true; }
  // The messages to send. Checked: a Ready with a persist() hands out its
  // messages only after Persisted().
  std::vector<Message> TakeMessages();
  // For tests and traces: the messages without taking them.
  const std::vector<Message>& messages() const { return messages_; }
  const Report& report() const { return report_; }

 private:
  friend class Proposer;
  friend Ready HandleRequest(const AcceptorState&, const Message&,
                             const std::optional<std::string>&);
  std::optional<AcceptorState> persist_;
  bool persisted_ = false;
  std::vector<Message> messages_;
  Report report_;
};

// Handles a kPrepare or kAccept addressed to the acceptor holding `state`:
// the reply, after the new state if it changed. Prepare(b) is granted if
// b > promised. Accept(b, v) is granted if b >= promised, except that a
// ballot-0 accept is refused when a different value was already accepted at
// ballot 0 (ballot 0 has one owner). `learned`: the value the acceptor's
// replica knows was chosen here, if any; then the reply tells it (the
// learned short-cut) and nothing changes.
Ready HandleRequest(const AcceptorState& state, const Message& request,
                    const std::optional<std::string>& learned = std::nullopt);

struct ProposerOptions {
  int acceptors = 3;
  uint64_t id = 1;  // unique among proposers of this position, > 0 (random 64-bit in production)
  // The leader of this position: try the fast path there first.
  std::optional<AcceptorId> leader;
  // Acceptors that must all be among those that accepted before an accept
  // says it completes the majority (Message::completes_majority): those
  // whose replicas' readers must not miss a value another learned early.
  std::set<AcceptorId> learn_needs;
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
  Ready Start();
  // A reply from an acceptor. Replies to older ballots, duplicates and
  // misrouted replies change nothing. A reply telling a learned value
  // decides the position whatever its ballot. After the decision, an accept
  // of the chosen value is reported as a late accept.
  Ready Step(const Message& reply);
  // A new round with a ballot above every ballot seen (from kStalled, or
  // on a timeout in any state but kChosen). Its Prepares; none once chosen.
  Ready Retry();

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
  void Stall(const Message& reply, Ready& ready);
  void Decide(std::string value, bool learned, Ready& ready);

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
  bool learned_ = false;
};

const char* ToString(Proposer::State state);

}  // namespace megastore::paxos
