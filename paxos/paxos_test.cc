#include "paxos/paxos.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

#include "base/random.h"
#include "gtest/gtest.h"

namespace megastore::paxos {
namespace {

// Delivers every message at once, in order, until nothing is left.
void RunToQuiescence(std::vector<AcceptorState>& acceptors, std::vector<Proposer*> proposers,
                     std::vector<Message> in_flight) {
  while (!in_flight.empty()) {
    const Message m = in_flight.front();
    in_flight.erase(in_flight.begin());
    if (m.type == Message::Type::kPrepare || m.type == Message::Type::kAccept) {
      in_flight.push_back(HandleRequest(acceptors[static_cast<size_t>(m.acceptor)], m));
    } else {
      for (Proposer* p : proposers) {
        for (Message& out : p->Step(m)) in_flight.push_back(std::move(out));
      }
    }
  }
}

TEST(PaxosTest, AnUncontendedWriterWinsOnTheFastPathInOneRoundTrip) {
  std::vector<AcceptorState> acceptors(3);
  Proposer p(ProposerOptions{3, 1, 0}, "v");
  std::vector<Message> out = p.Start();
  ASSERT_EQ(out.size(), 1u);  // only the leader
  EXPECT_EQ(out[0].type, Message::Type::kAccept);
  EXPECT_EQ(out[0].ballot, Ballot{});
  RunToQuiescence(acceptors, {&p}, out);
  ASSERT_TRUE(p.chosen());
  EXPECT_TRUE(p.chosen_ours());
  EXPECT_EQ(p.accepted_by(), (std::set<AcceptorId>{0, 1, 2}));
  for (const auto& a : acceptors) EXPECT_EQ(a.accepted_value, "v");
}

TEST(PaxosTest, TheSecondWriterAtTheLeaderIsRefusedAndLearnsTheWinnersValue) {
  std::vector<AcceptorState> acceptors(3);
  Proposer a(ProposerOptions{3, 1, 0}, "a"), b(ProposerOptions{3, 2, 0}, "b");
  RunToQuiescence(acceptors, {&a}, a.Start());
  RunToQuiescence(acceptors, {&b}, b.Start());
  EXPECT_EQ(b.state(), Proposer::State::kStalled);
  RunToQuiescence(acceptors, {&b}, b.Retry());
  ASSERT_TRUE(b.chosen());
  EXPECT_EQ(b.chosen_value(), "a");  // b lost the position: a conflict to retry
  EXPECT_FALSE(b.chosen_ours());
}

TEST(PaxosTest, AcceptorsGrantOnlyHigherPreparesAndNotLowerAccepts) {
  AcceptorState s;
  Message prepare;
  prepare.type = Message::Type::kPrepare;
  prepare.ballot = Ballot{2, 1};
  EXPECT_TRUE(HandleRequest(s, prepare).ok);
  EXPECT_FALSE(HandleRequest(s, prepare).ok);  // not strictly higher
  Message accept;
  accept.type = Message::Type::kAccept;
  accept.ballot = Ballot{1, 9};
  accept.value = "x";
  const Message refused = HandleRequest(s, accept);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.promised, (Ballot{2, 1}));
  accept.ballot = Ballot{2, 1};
  EXPECT_TRUE(HandleRequest(s, accept).ok);
  prepare.ballot = Ballot{3, 2};
  const Message promise = HandleRequest(s, prepare);
  ASSERT_TRUE(promise.ok);
  EXPECT_EQ(promise.accepted_ballot, (Ballot{2, 1}));
  EXPECT_EQ(promise.accepted_value, "x");
}

// ---- exhaustive exploration of message orders ---------------------------------------

struct World {
  std::vector<AcceptorState> acceptors;
  std::vector<Proposer> proposers;
  std::vector<Message> in_flight;
  std::vector<int> retries_left;
  int drops_left = 0;
  int dups_left = 0;
  // Every (ballot, value) -> acceptors that ever accepted it.
  std::map<std::pair<Ballot, std::string>, std::set<AcceptorId>> accepted;

  std::string Key() const {
    std::string k;
    for (const auto& a : acceptors) {
      k += a.promised.ToString() + "|" + (a.accepted_ballot ? a.accepted_ballot->ToString() : "-") +
           "|" + a.accepted_value + ";";
    }
    for (size_t i = 0; i < proposers.size(); ++i)
      k += proposers[i].DebugString() + "#" + std::to_string(retries_left[i]) + ";";
    std::vector<std::string> msgs;
    for (const auto& m : in_flight) msgs.push_back(m.ToString());
    std::sort(msgs.begin(), msgs.end());
    for (const auto& m : msgs) k += m + ";";
    k += std::to_string(drops_left) + "/" + std::to_string(dups_left);
    return k;
  }
};

struct Explorer {
  int acceptors;
  std::set<std::string> proposed;
  std::unordered_set<std::string> visited;
  uint64_t states = 0;
  uint64_t chosen_outcomes = 0;

  void Check(const World& w) {
    std::set<std::string> at_ballot_zero;
    for (const auto& [bv, who] : w.accepted) {
      if (bv.first == Ballot{}) at_ballot_zero.insert(bv.second);
    }
    ASSERT_LE(at_ballot_zero.size(), 1u) << "two values accepted at ballot 0";
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

  void Deliver(World& w, const Message& m) {
    if (m.type == Message::Type::kPrepare || m.type == Message::Type::kAccept) {
      const Message reply = HandleRequest(w.acceptors[static_cast<size_t>(m.acceptor)], m);
      if (m.type == Message::Type::kAccept && reply.ok)
        w.accepted[{m.ballot, m.value}].insert(m.acceptor);
      w.in_flight.push_back(reply);
    } else {
      for (auto& p : w.proposers) {
        for (Message& out : p.Step(m)) w.in_flight.push_back(std::move(out));
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
      for (Message& out : next.proposers[j].Retry()) next.in_flight.push_back(std::move(out));
      Explore(next);
    }
  }
};

void ExploreAll(int acceptors, const std::vector<ProposerOptions>& options, int retries, int drops,
                int dups) {
  World w;
  w.acceptors.resize(static_cast<size_t>(acceptors));
  Explorer e{acceptors, {}, {}, 0, 0};
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string value = std::string(1, static_cast<char>('a' + i));
    e.proposed.insert(value);
    w.proposers.emplace_back(options[i], value);
    for (Message& m : w.proposers.back().Start()) w.in_flight.push_back(std::move(m));
    w.retries_left.push_back(retries);
  }
  w.drops_left = drops;
  w.dups_left = dups;
  e.Explore(w);
  EXPECT_GT(e.chosen_outcomes, 0u);
  std::printf("%d acceptors, %zu proposers: %llu states, all safe\n", acceptors, options.size(),
              static_cast<unsigned long long>(e.states));
}

// Every order of every message (exhaustive, memoized) while each writer runs
// its first round: two writers racing for the leader, and a fast-path
// writer against one that prepares.
TEST(PaxosModelTest, EveryMessageOrderOfTheFirstRoundWithThreeAcceptors) {
  ExploreAll(3, {ProposerOptions{3, 1, 0}, ProposerOptions{3, 2, 0}}, /*retries=*/0, /*drops=*/1,
             /*dups=*/1);
  ExploreAll(3, {ProposerOptions{3, 1, 0}, ProposerOptions{3, 2, std::nullopt}}, 0, 1, 0);
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
      for (Message& m : w.proposers.back().Start()) w.in_flight.push_back(std::move(m));
    }
    for (int step = 0; step < 2000; ++step) {
      const uint64_t dice = rng.Uniform(100);
      if (!w.in_flight.empty() && dice < 85) {
        const size_t i = rng.Uniform(w.in_flight.size());
        const Message m = w.in_flight[i];
        if (!rng.OneIn(10))
          w.in_flight.erase(w.in_flight.begin() + static_cast<ptrdiff_t>(i));  // else duplicated
        if (!rng.OneIn(10)) e.Deliver(w, m);                                   // else lost
      } else {
        Proposer& p = w.proposers[rng.Uniform(w.proposers.size())];
        for (Message& out : p.Retry()) w.in_flight.push_back(std::move(out));
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
        for (Message& out : p.Retry()) w.in_flight.push_back(std::move(out));
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
