#include "paxos/paxos.h"

#include <algorithm>

#include "base/logging.h"
#include "base/strings.h"

namespace megastore::paxos {

std::string Ballot::ToString() const { return StrCat(round, ".", proposer); }

std::string Message::ToString() const {
  static constexpr const char* kTypes[] = {"Prepare", "Promise", "Accept", "Accepted"};
  std::string out = StrCat(kTypes[static_cast<int>(type)], "(", ballot.ToString(), ") proposer ",
                           proposer, " acceptor ", acceptor);
  if (type == Type::kAccept) out += StrCat(" value \"", value, "\"");
  if (type == Type::kPromise || type == Type::kAccepted) {
    out += StrCat(ok ? " ok" : " refused", " promised ", promised.ToString());
  }
  if (accepted_ballot)
    out += StrCat(" accepted ", accepted_ballot->ToString(), " \"", accepted_value, "\"");
  return out;
}

const char* ToString(Proposer::State state) {
  switch (state) {
    case Proposer::State::kFastAccept:
      return "fast-accept";
    case Proposer::State::kPreparing:
      return "preparing";
    case Proposer::State::kAccepting:
      return "accepting";
    case Proposer::State::kStalled:
      return "stalled";
    case Proposer::State::kChosen:
      return "chosen";
  }
  return "?";
}

Message HandleRequest(AcceptorState& state, const Message& request) {
  MS_CHECK(request.type == Message::Type::kPrepare || request.type == Message::Type::kAccept,
           "acceptors handle requests only");
  Message reply;
  reply.acceptor = request.acceptor;
  reply.proposer = request.proposer;
  reply.ballot = request.ballot;
  if (request.type == Message::Type::kPrepare) {
    reply.type = Message::Type::kPromise;
    reply.ok = request.ballot > state.promised;
    if (reply.ok) state.promised = request.ballot;
    reply.accepted_ballot = state.accepted_ballot;
    reply.accepted_value = state.accepted_value;
  } else {
    reply.type = Message::Type::kAccepted;
    reply.ok = request.ballot >= state.promised;
    // Ballot 0 belongs to the first value the leader accepted; any replica
    // holding a different value at ballot 0 refuses another.
    if (reply.ok && request.ballot == Ballot{} && state.accepted_ballot == Ballot{} &&
        state.accepted_value != request.value) {
      reply.ok = false;
    }
    if (reply.ok) {
      state.promised = request.ballot;
      state.accepted_ballot = request.ballot;
      state.accepted_value = request.value;
    }
  }
  reply.promised = state.promised;
  return reply;
}

std::string Proposer::DebugString() const {
  std::string out = StrCat(ToString(state_), " ballot ", ballot_.ToString(), " seen ",
                           highest_seen_.ToString(), " proposing \"", proposal_, "\" promised-by");
  for (AcceptorId a : promised_by_) out += StrCat(" ", a);
  out += " accepted-by";
  for (AcceptorId a : accepted_by_) out += StrCat(" ", a);
  if (best_accepted_) out += StrCat(" best ", best_accepted_->ToString());
  if (state_ == State::kChosen) out += StrCat(" chosen \"", chosen_value_, "\"");
  return out;
}

Proposer::Proposer(ProposerOptions options, std::string value)
    : options_(std::move(options)), value_(std::move(value)) {
  MS_CHECK(options_.acceptors >= 1 && options_.id > 0, "a proposer needs acceptors and an id > 0");
}

std::vector<Message> Proposer::Start() {
  if (!options_.leader) return Retry();
  state_ = State::kFastAccept;
  ballot_ = Ballot{};
  proposal_ = value_;
  accepted_by_.clear();
  Message m;
  m.type = Message::Type::kAccept;
  m.acceptor = *options_.leader;
  m.proposer = options_.id;
  m.ballot = ballot_;
  m.value = proposal_;
  return {m};
}

std::vector<Message> Proposer::Retry() {
  if (state_ == State::kChosen) return {};
  const uint64_t round = std::max(highest_seen_.round, ballot_.round) + 1;
  ballot_ = Ballot{round, options_.id};
  highest_seen_ = std::max(highest_seen_, ballot_);
  state_ = State::kPreparing;
  promised_by_.clear();
  accepted_by_.clear();
  best_accepted_.reset();
  proposal_ = value_;
  std::vector<Message> out;
  for (AcceptorId a = 0; a < options_.acceptors; ++a) {
    Message m;
    m.type = Message::Type::kPrepare;
    m.acceptor = a;
    m.proposer = options_.id;
    m.ballot = ballot_;
    out.push_back(m);
  }
  return out;
}

std::vector<Message> Proposer::AcceptAll(const std::set<AcceptorId>& skip) {
  std::vector<Message> out;
  for (AcceptorId a = 0; a < options_.acceptors; ++a) {
    if (skip.count(a)) continue;
    Message m;
    m.type = Message::Type::kAccept;
    m.acceptor = a;
    m.proposer = options_.id;
    m.ballot = ballot_;
    m.value = proposal_;
    out.push_back(m);
  }
  return out;
}

void Proposer::Stall(const Message& reply) {
  highest_seen_ = std::max(highest_seen_, reply.promised);
  if (reply.accepted_ballot) highest_seen_ = std::max(highest_seen_, *reply.accepted_ballot);
  state_ = State::kStalled;
}

std::vector<Message> Proposer::Step(const Message& reply) {
  if (reply.proposer != options_.id || reply.ballot != ballot_) return {};  // stale or misrouted
  if (reply.acceptor < 0 || reply.acceptor >= options_.acceptors) return {};
  switch (state_) {
    case State::kFastAccept: {
      if (reply.type != Message::Type::kAccepted || reply.acceptor != *options_.leader) return {};
      if (!reply.ok) {
        Stall(reply);
        return {};
      }
      accepted_by_.insert(reply.acceptor);
      state_ = State::kAccepting;
      if (static_cast<int>(accepted_by_.size()) >= majority()) {
        state_ = State::kChosen;
        chosen_value_ = proposal_;
        return {};
      }
      return AcceptAll(accepted_by_);
    }
    case State::kPreparing: {
      if (reply.type != Message::Type::kPromise) return {};
      if (!reply.ok) {
        Stall(reply);
        return {};
      }
      if (!promised_by_.insert(reply.acceptor).second) return {};
      if (reply.accepted_ballot && (!best_accepted_ || *reply.accepted_ballot > *best_accepted_)) {
        best_accepted_ = reply.accepted_ballot;
        proposal_ = reply.accepted_value;  // a value that may have been chosen: propose it
      }
      if (static_cast<int>(promised_by_.size()) < majority()) return {};
      state_ = State::kAccepting;
      return AcceptAll({});
    }
    case State::kAccepting: {
      if (reply.type != Message::Type::kAccepted) return {};
      if (!reply.ok) {
        Stall(reply);
        return {};
      }
      accepted_by_.insert(reply.acceptor);
      if (static_cast<int>(accepted_by_.size()) >= majority()) {
        state_ = State::kChosen;
        chosen_value_ = proposal_;
      }
      return {};
    }
    case State::kChosen:
      // Late acceptances still tell which replicas hold the value.
      if (reply.type == Message::Type::kAccepted && reply.ok) accepted_by_.insert(reply.acceptor);
      return {};
    case State::kStalled:
      return {};
  }
  return {};
}

}  // namespace megastore::paxos
