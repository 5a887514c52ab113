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
  if (completes_majority) out += " completes-majority";
  if (type == Type::kPromise || type == Type::kAccepted) {
    out += StrCat(ok ? " ok" : " refused", " promised ", promised.ToString());
  }
  if (accepted_ballot)
    out += StrCat(" accepted ", accepted_ballot->ToString(), " \"", accepted_value, "\"");
  if (learned) out += StrCat(" learned \"", *learned, "\"");
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

std::vector<Message> Ready::TakeMessages() {
  MS_CHECK(!persist_ || persisted_, "a Ready's messages were taken before its state was persisted");
  return std::move(messages_);
}

Ready HandleRequest(const AcceptorState& state, const Message& request,
                    const std::optional<std::string>& learned) {
  MS_CHECK(request.type == Message::Type::kPrepare || request.type == Message::Type::kAccept,
           "acceptors handle requests only");
  Ready ready;
  Message reply;
  reply.acceptor = request.acceptor;
  reply.proposer = request.proposer;
  reply.ballot = request.ballot;
  reply.type =
      request.type == Message::Type::kPrepare ? Message::Type::kPromise : Message::Type::kAccepted;
  if (learned) {
    reply.learned = *learned;
    reply.promised = state.promised;
    ready.messages_.push_back(std::move(reply));
    return ready;
  }
  AcceptorState next = state;
  if (request.type == Message::Type::kPrepare) {
    reply.ok = request.ballot > next.promised;
    if (reply.ok) next.promised = request.ballot;
    reply.accepted_ballot = next.accepted_ballot;
    reply.accepted_value = next.accepted_value;
  } else {
    reply.ok = request.ballot >= next.promised;
    // Ballot 0 belongs to the first value the leader accepted; any replica
    // holding a different value at ballot 0 refuses another, and shows it.
    if (reply.ok && request.ballot == Ballot{} && next.accepted_ballot == Ballot{} &&
        next.accepted_value != request.value) {
      reply.ok = false;
    }
    if (reply.ok) {
      next.promised = request.ballot;
      next.accepted_ballot = request.ballot;
      next.accepted_value = request.value;
    } else {
      reply.accepted_ballot = next.accepted_ballot;
      reply.accepted_value = next.accepted_value;
    }
  }
  reply.promised = next.promised;
  if (!(next == state)) ready.persist_ = std::move(next);
  ready.messages_.push_back(std::move(reply));
  return ready;
}

std::string Proposer::DebugString() const {
  std::string out = StrCat(ToString(state_), " ballot ", ballot_.ToString(), " seen ",
                           highest_seen_.ToString(), " proposing \"", proposal_, "\" promised-by");
  for (AcceptorId a : promised_by_) out += StrCat(" ", a);
  out += " accepted-by";
  for (AcceptorId a : accepted_by_) out += StrCat(" ", a);
  if (best_accepted_) out += StrCat(" best ", best_accepted_->ToString());
  if (state_ == State::kChosen)
    out += StrCat(learned_ ? " learned \"" : " chosen \"", chosen_value_, "\"");
  return out;
}

Proposer::Proposer(ProposerOptions options, std::string value)
    : options_(std::move(options)), value_(std::move(value)) {
  MS_CHECK(options_.acceptors >= 1 && options_.id > 0, "a proposer needs acceptors and an id > 0");
}

Ready Proposer::Start() {
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
  Ready ready;
  ready.messages_.push_back(std::move(m));
  return ready;
}

Ready Proposer::Retry() {
  Ready ready;
  if (state_ == State::kChosen) return ready;
  const uint64_t round = std::max(highest_seen_.round, ballot_.round) + 1;
  ballot_ = Ballot{round, options_.id};
  highest_seen_ = std::max(highest_seen_, ballot_);
  state_ = State::kPreparing;
  promised_by_.clear();
  accepted_by_.clear();
  best_accepted_.reset();
  proposal_ = value_;
  for (AcceptorId a = 0; a < options_.acceptors; ++a) {
    Message m;
    m.type = Message::Type::kPrepare;
    m.acceptor = a;
    m.proposer = options_.id;
    m.ballot = ballot_;
    ready.messages_.push_back(std::move(m));
  }
  return ready;
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
    // (Those in accepted_by_ accepted this round's ballot and proposal.)
    m.completes_majority = static_cast<int>(accepted_by_.size()) + 1 >= majority();
    for (AcceptorId need : options_.learn_needs)
      m.completes_majority = m.completes_majority && (need == a || accepted_by_.count(need) > 0);
    out.push_back(m);
  }
  return out;
}

void Proposer::Stall(const Message& reply, Ready& ready) {
  highest_seen_ = std::max(highest_seen_, reply.promised);
  if (reply.accepted_ballot) highest_seen_ = std::max(highest_seen_, *reply.accepted_ballot);
  state_ = State::kStalled;
  // The lost fast path: our ballot-0 accept was refused because another
  // value holds ballot 0 there.
  const bool lost_fast_path = reply.type == Message::Type::kAccepted && ballot_ == Ballot{} &&
                              reply.accepted_ballot == Ballot{} &&
                              reply.accepted_value != proposal_;
  ready.report_.stalled = lost_fast_path ? Wait::kWinnerFirst : Wait::kBackoff;
}

void Proposer::Decide(std::string value, bool learned, Ready& ready) {
  state_ = State::kChosen;
  chosen_value_ = std::move(value);
  learned_ = learned;
  if (learned) accepted_by_.clear();
  Decision d;
  d.value = chosen_value_;
  d.accepted_by = accepted_by_;
  d.fast = !learned && ballot_ == Ballot{};
  d.learned = learned;
  ready.report_.decided = std::move(d);
}

Ready Proposer::Step(const Message& reply) {
  Ready ready;
  if (reply.proposer != options_.id) return ready;  // misrouted
  if (reply.acceptor < 0 || reply.acceptor >= options_.acceptors) return ready;
  if (reply.type != Message::Type::kPromise && reply.type != Message::Type::kAccepted) return ready;
  if (reply.learned) {
    // The learned short-cut: true whatever ballot the request carried.
    if (state_ != State::kChosen) Decide(*reply.learned, /*learned=*/true, ready);
    return ready;
  }
  if (reply.ballot != ballot_) return ready;  // an older round's reply
  switch (state_) {
    case State::kFastAccept: {
      if (reply.type != Message::Type::kAccepted || reply.acceptor != *options_.leader)
        return ready;
      if (!reply.ok) {
        Stall(reply, ready);
        return ready;
      }
      accepted_by_.insert(reply.acceptor);
      state_ = State::kAccepting;
      if (static_cast<int>(accepted_by_.size()) >= majority()) {
        Decide(proposal_, /*learned=*/false, ready);
        return ready;
      }
      ready.messages_ = AcceptAll(accepted_by_);
      return ready;
    }
    case State::kPreparing: {
      if (reply.type != Message::Type::kPromise) return ready;
      if (!reply.ok) {
        Stall(reply, ready);
        return ready;
      }
      if (!promised_by_.insert(reply.acceptor).second) return ready;
      if (reply.accepted_ballot && (!best_accepted_ || *reply.accepted_ballot > *best_accepted_)) {
        best_accepted_ = reply.accepted_ballot;
        proposal_ = reply.accepted_value;  // a value that may have been chosen: propose it
      }
      if (static_cast<int>(promised_by_.size()) < majority()) return ready;
      state_ = State::kAccepting;
      ready.messages_ = AcceptAll({});
      return ready;
    }
    case State::kAccepting: {
      if (reply.type != Message::Type::kAccepted) return ready;
      if (!reply.ok) {
        Stall(reply, ready);
        return ready;
      }
      accepted_by_.insert(reply.acceptor);
      if (static_cast<int>(accepted_by_.size()) >= majority())
        Decide(proposal_, /*learned=*/false, ready);
      return ready;
    }
    case State::kChosen:
      // Late acceptances still tell which acceptors hold the value.
      if (!learned_ && reply.type == Message::Type::kAccepted && reply.ok &&
          accepted_by_.insert(reply.acceptor).second)
        ready.report_.late_accept = reply.acceptor;
      return ready;
    case State::kStalled:
      return ready;
  }
  return ready;
}

}  // namespace megastore::paxos
