#include "paxos/paxos.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

#include "base/logging.h"
#include "base/random.h"
#include "gtest/gtest.h"

namespace megastore::paxos {
namespace {

// An acceptor's step as its driver runs it: persist, then send.
std::vector<Message> Acceptor(AcceptorState& state, const Message& request,
                              const std::optional<std::string>& learned = std::nullopt) {
  Ready ready = HandleRequest(state, request, learned);
  if (ready.persist()) {
    state = *ready.persist();
    ready.Persisted();
  }
  return ready.TakeMessages();
}

// Delivers every message at once, in order, until nothing is left.
void RunToQuiescence(std::vector<AcceptorState>& acceptors, std::vector<Proposer*> proposers,
                     std::vector<Message> in_flight) {
  while (!in_flight.empty()) {
    const Message m = in_flight.front();
    in_flight.erase(in_flight.begin());
    if (m.type == Message::Type::kPrepare || m.type == Message::Type::kAccept) {
      for (Message& out : Acceptor(acceptors[static_cast<size_t>(m.acceptor)], m))
        in_flight.push_back(std::move(out));
    } else {
      for (Proposer* p : proposers) {
        for (Message& out : p->Step(m).TakeMessages()) in_flight.push_back(std::move(out));
      }
    }
  }
}

TEST(PaxosTest, AnUncontendedWriterWinsOnTheFastPathInOneRoundTrip) {
  std::vector<AcceptorState> acceptors(3);
  Proposer p(ProposerOptions{3, 1, 0}, "v");
  std::vector<Message> out = p.Start().TakeMessages();
  ASSERT_EQ(out.size(), 1u);  // only the leader
  EXPECT_EQ(out[0].type, Message::Type::kAccept);
  EXPECT_EQ(out[0].ballot, Ballot{});
  RunToQuiescence(acceptors, {&p}, out);
  ASSERT_TRUE(p.chosen());
  EXPECT_TRUE(p.chosen_ours());
  EXPECT_EQ(p.accepted_by(), (std::set<AcceptorId>{0, 1, 2}));
  for (const auto& a : acceptors) EXPECT_EQ(a.accepted_value, "v");
}

// After the leader's fast-path accept, an accept to one more acceptor
// completes a majority of three (its replica may learn the value), not of
// five; a prepared round's accepts complete nothing (none accepted yet).
TEST(PaxosTest, AcceptsAfterTheLeadersSayWhetherTheyCompleteAMajority) {
  for (int n : {3, 5}) {
    Proposer p(ProposerOptions{n, 1, 0, {}}, "v");
    std::vector<Message> out = p.Start().TakeMessages();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_FALSE(out[0].completes_majority);
    Message accepted;
    accepted.type = Message::Type::kAccepted;
    accepted.acceptor = 0;
    accepted.proposer = 1;
    accepted.ok = true;
    std::vector<Message> next = p.Step(accepted).TakeMessages();
    ASSERT_EQ(next.size(), static_cast<size_t>(n - 1));
    for (const Message& m : next) EXPECT_EQ(m.completes_majority, n == 3) << n;
  }
  {
    // With acceptors 0 and 1 needed: only the accept to 1 completes it.
    Proposer p(ProposerOptions{3, 1, 0, {0, 1}}, "v");
    p.Start().TakeMessages();
    Message accepted;
    accepted.type = Message::Type::kAccepted;
    accepted.acceptor = 0;
    accepted.proposer = 1;
    accepted.ok = true;
    for (const Message& m : p.Step(accepted).TakeMessages())
      EXPECT_EQ(m.completes_majority, m.acceptor == 1) << m.ToString();
  }
  Proposer slow(ProposerOptions{3, 2, std::nullopt}, "w");
  std::vector<Message> prepares = slow.Start().TakeMessages();
  ASSERT_EQ(prepares.size(), 3u);
  for (int a = 0; a < 2; ++a) {
    Message promise;
    promise.type = Message::Type::kPromise;
    promise.acceptor = a;
    promise.proposer = 2;
    promise.ballot = slow.ballot();
    promise.ok = true;
    std::vector<Message> accepts = slow.Step(promise).TakeMessages();
    for (const Message& m : accepts) EXPECT_FALSE(m.completes_majority);
    if (a == 1) {
      EXPECT_EQ(accepts.size(), 3u);
    }
  }
}

TEST(PaxosTest, TheSecondWriterAtTheLeaderIsRefusedAndLearnsTheWinnersValue) {
  std::vector<AcceptorState> acceptors(3);
  Proposer a(ProposerOptions{3, 1, 0}, "a"), b(ProposerOptions{3, 2, 0}, "b");
  RunToQuiescence(acceptors, {&a}, a.Start().TakeMessages());
  RunToQuiescence(acceptors, {&b}, b.Start().TakeMessages());
  EXPECT_EQ(b.state(), Proposer::State::kStalled);
  RunToQuiescence(acceptors, {&b}, b.Retry().TakeMessages());
  ASSERT_TRUE(b.chosen());
  EXPECT_EQ(b.chosen_value(), "a");  // b lost the position: a conflict to retry
  EXPECT_FALSE(b.chosen_ours());
}

TEST(PaxosTest, AcceptorsGrantOnlyHigherPreparesAndNotLowerAccepts) {
  AcceptorState s;
  Message prepare;
  prepare.type = Message::Type::kPrepare;
  prepare.ballot = Ballot{2, 1};
  EXPECT_TRUE(Acceptor(s, prepare)[0].ok);
  EXPECT_FALSE(Acceptor(s, prepare)[0].ok);  // not strictly higher
  Message accept;
  accept.type = Message::Type::kAccept;
  accept.ballot = Ballot{1, 9};
  accept.value = "x";
  const Message refused = Acceptor(s, accept)[0];
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.promised, (Ballot{2, 1}));
  accept.ballot = Ballot{2, 1};
  EXPECT_TRUE(Acceptor(s, accept)[0].ok);
  prepare.ballot = Ballot{3, 2};
  const Message promise = Acceptor(s, prepare)[0];
  ASSERT_TRUE(promise.ok);
  EXPECT_EQ(promise.accepted_ballot, (Ballot{2, 1}));
  EXPECT_EQ(promise.accepted_value, "x");
}

TEST(PaxosTest, AStepThatChangesNothingPersistsNothing) {
  AcceptorState s;
  s.promised = Ballot{5, 1};
  Message prepare;
  prepare.type = Message::Type::kPrepare;
  prepare.ballot = Ballot{4, 2};
  Ready refused = HandleRequest(s, prepare);
  EXPECT_FALSE(refused.persist().has_value());
  EXPECT_EQ(refused.TakeMessages().size(), 1u);  // no persist: sendable at once
  prepare.ballot = Ballot{6, 2};
  Ready granted = HandleRequest(s, prepare);
  ASSERT_TRUE(granted.persist().has_value());
  EXPECT_EQ(granted.persist()->promised, (Ballot{6, 2}));
  EXPECT_EQ(s.promised, (Ballot{5, 1}));  // the state in is not touched
}

TEST(PaxosDeathTest, AReplyCannotBeSentBeforeItsStateIsPersisted) {
  Message accept;
  accept.type = Message::Type::kAccept;
  accept.value = "v";
  Ready ready = HandleRequest(AcceptorState{}, accept);
  ASSERT_TRUE(ready.persist().has_value());
  EXPECT_DEATH(
      {
        LogToStderr();
        (void)ready.TakeMessages();
      },
      "before its state was persisted");
}

TEST(PaxosTest, AnAcceptorThatLearnedTheValueAnswersWithItAndChangesNothing) {
  std::vector<AcceptorState> acceptors(3);
  Proposer p(ProposerOptions{3, 7, std::nullopt}, "mine");
  std::vector<Message> prepares = p.Retry().TakeMessages();
  Ready ready = HandleRequest(acceptors[1], prepares[1], std::string("theirs"));
  EXPECT_FALSE(ready.persist().has_value());
  const std::vector<Message> reply = ready.TakeMessages();
  ASSERT_EQ(reply.size(), 1u);
  ASSERT_EQ(reply[0].learned, std::string("theirs"));
  Ready step = p.Step(reply[0]);
  ASSERT_TRUE(step.report().decided.has_value());
  EXPECT_EQ(step.report().decided->value, "theirs");
  EXPECT_TRUE(step.report().decided->learned);
  EXPECT_TRUE(step.report().decided->accepted_by.empty());
  EXPECT_TRUE(p.chosen());
  EXPECT_FALSE(p.chosen_ours());
  // Reported once: a second learned reply decides nothing new.
  EXPECT_FALSE(p.Step(reply[0]).report().decided.has_value());
}

TEST(PaxosTest, AFastPathLostToAnotherWriterWaitsForTheWinner) {
  std::vector<AcceptorState> acceptors(3);
  Proposer a(ProposerOptions{3, 1, 0}, "a"), b(ProposerOptions{3, 2, 0}, "b");
  // a owns ballot 0 at the leader; b's accept there is refused and shows a's value.
  for (Message& m : Acceptor(acceptors[0], a.Start().TakeMessages()[0])) a.Step(m);
  const std::vector<Message> refusal = Acceptor(acceptors[0], b.Start().TakeMessages()[0]);
  ASSERT_EQ(refusal.size(), 1u);
  EXPECT_FALSE(refusal[0].ok);
  EXPECT_EQ(refusal[0].accepted_value, "a");
  Ready stalled = b.Step(refusal[0]);
  EXPECT_EQ(stalled.report().stalled, Wait::kWinnerFirst);
  EXPECT_EQ(b.state(), Proposer::State::kStalled);
  // A refusal by a higher promise is an ordinary backoff.
  Proposer c(ProposerOptions{3, 3, std::nullopt}, "c");
  std::vector<Message> prepares = c.Retry().TakeMessages();
  AcceptorState promised;
  promised.promised = Ballot{9, 9};
  Ready refused = c.Step(Acceptor(promised, prepares[0])[0]);
  EXPECT_EQ(refused.report().stalled, Wait::kBackoff);
}

TEST(PaxosTest, AcceptsAfterTheMajorityAreReportedAsLate) {
  std::vector<AcceptorState> acceptors(3);
  Proposer p(ProposerOptions{3, 1, 0}, "v");
  for (Message& m : Acceptor(acceptors[0], p.Start().TakeMessages()[0])) {
    std::vector<Message> accepts = p.Step(m).TakeMessages();
    ASSERT_EQ(accepts.size(), 2u);  // to acceptors 1 and 2
    Ready decided = p.Step(Acceptor(acceptors[1], accepts[0])[0]);
    ASSERT_TRUE(decided.report().decided.has_value());
    EXPECT_TRUE(decided.report().decided->fast);
    EXPECT_EQ(decided.report().decided->accepted_by, (std::set<AcceptorId>{0, 1}));
    const Message late = Acceptor(acceptors[2], accepts[1])[0];
    Ready step = p.Step(late);
    EXPECT_EQ(step.report().late_accept, 2);
    EXPECT_FALSE(step.report().decided.has_value());
    EXPECT_FALSE(p.Step(late).report().late_accept.has_value());  // a duplicate: once
  }
}

// ---- exhaustive exploration of message orders ---------------------------------------

struct World {
  std::vector<AcceptorState> acceptors;
  std::vector<std::optional<std::string>> learned;  // per acceptor: its replica learned this
  std::vector<Proposer> proposers;
  std::vector<int> decisions;  // per proposer: how many decisions it reported
  std::vector<Message> in_flight;
  std::vector<int> retries_left;
  int drops_left = 0;
  int dups_left = 0;
  int learns_left = 0;
  // Every (ballot, value) -> acceptors that ever accepted it.
  std::map<std::pair<Ballot, std::string>, std::set<AcceptorId>> accepted;

  std::string Key() const {
    std::string k;
    for (size_t i = 0; i < acceptors.size(); ++i) {
      const AcceptorState& a = acceptors[i];
      k += a.promised.ToString() + "|" + (a.accepted_ballot ? a.accepted_ballot->ToString() : "-") +
           "|" + a.accepted_value + "|" + learned[i].value_or("-") + ";";
    }
    for (size_t i = 0; i < proposers.size(); ++i)
      k += proposers[i].DebugString() + "#" + std::to_string(retries_left[i]) + ";";
    std::vector<std::string> msgs;
    for (const auto& m : in_flight) msgs.push_back(m.ToString());
    std::sort(msgs.begin(), msgs.end());
    for (const auto& m : msgs) k += m + ";";
    k += std::to_string(drops_left) + "/" + std::to_string(dups_left) + "/" +
         std::to_string(learns_left);
    return k;
  }
};

struct Explorer {
  int acceptors;
  std::set<std::string> proposed;
  std::unordered_set<std::string> visited;
  uint64_t states = 0;
  uint64_t chosen_outcomes = 0;
  // How often each report was seen (so a test can show it explored them).
  uint64_t learned_decisions = 0, late_accepts = 0, winner_first_stalls = 0;
  uint64_t majority_learns = 0;  // accepts that completed a majority and were learned

  void Check(const World& w) {
    std::set<std::string> at_ballot_zero;
    for (const auto& [bv, who] : w.accepted) {
      if (bv.first == Ballot{}) at_ballot_zero.insert(bv.second);
    }
    ASSERT_LE(at_ballot_zero.size(), 1u) << "two values accepted at ballot 0: " << w.Key();
    std::set<std::string> chosen;
    for (const auto& [bv, who] : w.accepted) {
      if (static_cast<int>(who.size()) > acceptors / 2) chosen.insert(bv.second);
    }
    ASSERT_LE(chosen.size(), 1u) << "two values chosen: " << *chosen.begin() << " and "
                                 << *chosen.rbegin();
    for (const auto& v : chosen)
      ASSERT_TRUE(proposed.count(v)) << "chosen value was never proposed: " << v;
    for (const auto& p : w.proposers) {
      if (!p.chosen()) continue;
      ASSERT_EQ(chosen.size(), 1u)
          << "a proposer believes in a value no majority accepted: " << p.DebugString();
      ASSERT_EQ(p.chosen_value(), *chosen.begin()) << p.DebugString();
    }
  }

  static bool Accepted(const World& w, const Ballot& b, const std::string& value, AcceptorId a) {
    auto it = w.accepted.find({b, value});
    return it != w.accepted.end() && it->second.count(a) > 0;
  }

  // What the drivers would be told, checked against what really happened:
  // a decision is the chosen value and held by whom it names, a late accept
  // really accepted it, a lost fast path really lost to another value.
  void CheckReport(World& w, size_t j, const Report& report) {
    const Proposer& p = w.proposers[j];
    if (report.decided) {
      ASSERT_EQ(++w.decisions[j], 1) << "a decision reported twice: " << p.DebugString();
      ASSERT_EQ(report.decided->value, p.chosen_value());
      for (AcceptorId a : report.decided->accepted_by) {
        ASSERT_TRUE(Accepted(w, p.ballot(), p.chosen_value(), a))
            << "a decision names an acceptor that did not accept: " << p.DebugString();
      }
      ASSERT_EQ(report.decided->fast, !report.decided->learned && p.ballot() == Ballot{});
      learned_decisions += report.decided->learned;
    }
    if (report.late_accept) {
      ASSERT_TRUE(p.chosen());
      ASSERT_TRUE(Accepted(w, p.ballot(), p.chosen_value(), *report.late_accept))
          << "a late accept that did not accept: " << p.DebugString();
      ++late_accepts;
    }
    if (report.stalled == Wait::kWinnerFirst) {
      bool other_at_zero = false;
      for (const auto& [bv, who] : w.accepted)
        other_at_zero |= bv.first == Ballot{} && !who.empty() &&
                         bv.second != std::string(1, static_cast<char>('a' + j));
      ASSERT_TRUE(other_at_zero) << "told to wait for a winner that does not exist";
      ++winner_first_stalls;
    }
  }

  void Deliver(World& w, const Message& m) {
    if (m.type == Message::Type::kPrepare || m.type == Message::Type::kAccept) {
      const size_t i = static_cast<size_t>(m.acceptor);
      for (Message& reply : Acceptor(w.acceptors[i], m, w.learned[i])) {
        if (m.type == Message::Type::kAccept && reply.ok && !reply.learned) {
          std::set<AcceptorId>& who = w.accepted[{m.ballot, m.value}];
          who.insert(m.acceptor);
          if (m.completes_majority) {
            // The acceptor's replica learns the value at once: it must be
            // chosen (a majority accepted this ballot and value).
            ASSERT_GT(static_cast<int>(who.size()), acceptors / 2)
                << "an accept said it completes a majority, but only " << who.size()
                << " accepted: " << m.ToString();
            ++majority_learns;
            if (!w.learned[i]) w.learned[i] = m.value;
          }
        }
        w.in_flight.push_back(std::move(reply));
      }
    } else {
      for (size_t j = 0; j < w.proposers.size(); ++j) {
        Ready ready = w.proposers[j].Step(m);
        CheckReport(w, j, ready.report());
        for (Message& out : ready.TakeMessages()) w.in_flight.push_back(std::move(out));
      }
    }
  }

  void Explore(const World& w) {
    if (!visited.insert(w.Key()).second) return;
    ++states;
    Check(w);
    if (::testing::Test::HasFatalFailure()) return;
    bool any_chosen = false;
    for (const auto& p : w.proposers) any_chosen |= p.chosen();
    chosen_outcomes += any_chosen;
    for (size_t i = 0; i < w.in_flight.size(); ++i) {
      World next = w;
      const Message m = next.in_flight[i];
      next.in_flight.erase(next.in_flight.begin() + static_cast<ptrdiff_t>(i));
      Deliver(next, m);
      Explore(next);
      if (w.drops_left > 0) {
        World dropped = w;
        dropped.in_flight.erase(dropped.in_flight.begin() + static_cast<ptrdiff_t>(i));
        --dropped.drops_left;
        Explore(dropped);
      }
      if (w.dups_left > 0) {
        World dup = w;
        --dup.dups_left;
        Deliver(dup, m);  // delivered, and still in flight
        Explore(dup);
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    // A replica learns a decided value (the writer's apply, or catch-up
    // elsewhere): later requests there get the learned short-cut.
    if (w.learns_left > 0) {
      for (const Proposer& p : w.proposers) {
        if (!p.chosen()) continue;
        for (size_t i = 0; i < w.learned.size(); ++i) {
          if (w.learned[i]) continue;
          World next = w;
          --next.learns_left;
          next.learned[i] = p.chosen_value();
          Explore(next);
          if (::testing::Test::HasFatalFailure()) return;
        }
        break;
      }
    }
    // A proposer retries when refused, or on a timeout: modelled as "nothing
    // of its round is still in flight" (after drops, or replies it ignores).
    for (size_t j = 0; j < w.proposers.size(); ++j) {
      if (w.retries_left[j] == 0 || w.proposers[j].chosen()) continue;
      const uint32_t id = static_cast<uint32_t>(j + 1);
      const bool waiting = std::any_of(w.in_flight.begin(), w.in_flight.end(),
                                       [&](const Message& m) { return m.proposer == id; });
      if (w.proposers[j].state() != Proposer::State::kStalled && waiting) continue;
      World next = w;
      --next.retries_left[j];
      for (Message& out : next.proposers[j].Retry().TakeMessages())
        next.in_flight.push_back(std::move(out));
      Explore(next);
    }
  }
};

// `retries`: how many times each proposer may retry; `first_retries`, if
// set, the first proposer's instead (a writer that wins and one that keeps
// going after losing, without exploring both retrying).
Explorer ExploreAll(int acceptors, const std::vector<ProposerOptions>& options, int retries,
                    int drops, int dups, int learns = 0,
                    std::optional<int> first_retries = std::nullopt) {
  World w;
  w.acceptors.resize(static_cast<size_t>(acceptors));
  w.learned.resize(static_cast<size_t>(acceptors));
  Explorer e{acceptors, {}, {}, 0, 0};
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string value = std::string(1, static_cast<char>('a' + i));
    e.proposed.insert(value);
    w.proposers.emplace_back(options[i], value);
    w.decisions.push_back(0);
    for (Message& m : w.proposers.back().Start().TakeMessages())
      w.in_flight.push_back(std::move(m));
    w.retries_left.push_back(i == 0 && first_retries ? *first_retries : retries);
  }
  w.drops_left = drops;
  w.dups_left = dups;
  w.learns_left = learns;
  e.Explore(w);
  EXPECT_GT(e.chosen_outcomes, 0u);
  std::printf("%d acceptors, %zu proposers: %llu states, all safe\n", acceptors, options.size(),
              static_cast<unsigned long long>(e.states));
  return e;
}

// Every order of every message (exhaustive, memoized) while each writer runs
// its first round: two writers racing for the leader, and a fast-path
// writer against one that prepares.
TEST(PaxosModelTest, EveryMessageOrderOfTheFirstRoundWithThreeAcceptors) {
  const Explorer e = ExploreAll(3, {ProposerOptions{3, 1, 0}, ProposerOptions{3, 2, 0}},
                                /*retries=*/0, /*drops=*/1, /*dups=*/1);
  ExploreAll(3, {ProposerOptions{3, 1, 0, {0, 1}}, ProposerOptions{3, 2, 0, {0, 1}}}, 0, 1, 1);
  // After the leader's fast-path accept the others' accepts complete a
  // majority, and their replicas learn the value (checked: it is chosen).
  EXPECT_GT(e.majority_learns, 0u);
  ExploreAll(3, {ProposerOptions{3, 1, 0}, ProposerOptions{3, 2, std::nullopt}}, 0, 1, 0);
}

// The learned short-cut, late accepts and the lost fast path, in every
// order: a replica may learn the decided value at any point, writers retry.
TEST(PaxosModelTest, EveryOrderWithLearnedValuesAndRetries) {
  const Explorer e =
      ExploreAll(3, {ProposerOptions{3, 1, 0}, ProposerOptions{3, 2, 0}}, /*retries=*/1,
                 /*drops=*/0, /*dups=*/0, /*learns=*/1, /*first_retries=*/0);
  // Each of the three was reached, and checked, somewhere in the space.
  EXPECT_GT(e.learned_decisions, 0u);
  EXPECT_GT(e.late_accepts, 0u);
  EXPECT_GT(e.winner_first_stalls, 0u);
  EXPECT_GT(e.majority_learns, 0u);
}

TEST(PaxosModelTest, EveryMessageOrderOfTheFirstRoundWithFiveAcceptors) {
  ExploreAll(5, {ProposerOptions{5, 1, 0}, ProposerOptions{5, 2, 0}}, 0, 0, 0);
}

// Random schedules with retries, loss and duplication: many writers, many
// rounds. A failure prints the seed (MS_SEED replays it).
void RandomSchedules(int acceptors, int proposers, int runs, uint64_t first_seed) {
  for (int run = 0; run < runs; ++run) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(run);
    Random rng(seed);
    World w;
    w.acceptors.resize(static_cast<size_t>(acceptors));
    w.learned.resize(static_cast<size_t>(acceptors));
    Explorer e{acceptors, {}, {}, 0, 0};
    // Every writer of a position learns its leader from the previous
    // position's value, so they agree on it; some skip the fast path.
    const AcceptorId position_leader =
        static_cast<AcceptorId>(rng.Uniform(static_cast<uint64_t>(acceptors)));
    for (int i = 0; i < proposers; ++i) {
      const std::string value = std::string(1, static_cast<char>('a' + i));
      e.proposed.insert(value);
      std::optional<AcceptorId> leader;
      if (!rng.OneIn(3)) leader = position_leader;
      w.proposers.emplace_back(ProposerOptions{acceptors, static_cast<uint32_t>(i + 1), leader},
                               value);
      w.decisions.push_back(0);
      for (Message& m : w.proposers.back().Start().TakeMessages())
        w.in_flight.push_back(std::move(m));
    }
    for (int step = 0; step < 2000; ++step) {
      const uint64_t dice = rng.Uniform(100);
      if (!w.in_flight.empty() && dice < 85) {
        const size_t i = rng.Uniform(w.in_flight.size());
        const Message m = w.in_flight[i];
        if (!rng.OneIn(10))
          w.in_flight.erase(w.in_flight.begin() + static_cast<ptrdiff_t>(i));  // else duplicated
        if (!rng.OneIn(10)) e.Deliver(w, m);                                   // else lost
      } else if (dice < 90) {
        // A replica learns a decided value.
        for (const Proposer& p : w.proposers) {
          if (p.chosen()) {
            w.learned[rng.Uniform(w.learned.size())] = p.chosen_value();
            break;
          }
        }
      } else {
        Proposer& p = w.proposers[rng.Uniform(w.proposers.size())];
        for (Message& out : p.Retry().TakeMessages()) w.in_flight.push_back(std::move(out));
      }
      e.Check(w);
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "seed " << seed << " step " << step;
        return;
      }
    }
    // Once faults stop, the writers finish: deliver everything, retry the
    // stalled ones one at a time.
    for (int round = 0; round < 20; ++round) {
      while (!w.in_flight.empty()) {
        const Message m = w.in_flight.front();
        w.in_flight.erase(w.in_flight.begin());
        e.Deliver(w, m);
      }
      bool all = true;
      for (auto& p : w.proposers) {
        if (p.chosen()) continue;
        all = false;
        for (Message& out : p.Retry().TakeMessages()) w.in_flight.push_back(std::move(out));
        break;
      }
      if (all) break;
    }
    e.Check(w);
    for (const auto& p : w.proposers)
      ASSERT_TRUE(p.chosen()) << "seed " << seed << ": " << p.DebugString();
  }
}

TEST(PaxosModelTest, RandomSchedulesWithLossDuplicationAndRetriesStaySafeAndFinish) {
  const uint64_t seed =
      std::getenv("MS_SEED") ? std::strtoull(std::getenv("MS_SEED"), nullptr, 10) : 1;
  RandomSchedules(3, 2, 300, seed);
  if (HasFailure()) return;
  RandomSchedules(3, 3, 300, seed + 1000);
  if (HasFailure()) return;
  RandomSchedules(5, 3, 300, seed + 2000);
}

}  // namespace
}  // namespace megastore::paxos
