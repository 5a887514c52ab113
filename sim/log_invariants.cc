#include "sim/log_invariants.h"

#include <algorithm>

#include "base/coding.h"
#include "base/strings.h"
#include "replication/log_replica.h"
#include "replication/replication.pb.h"

namespace megastore::sim {
namespace {

std::string Dc(int dc) { return std::string(1, static_cast<char>('A' + dc)); }

// A log cell's qualifier: 'L', the position (8 bytes, big-endian), the kind
// ('a' acceptor state, 'l' learned value).
bool ParseLogCell(const std::string& q, uint64_t* position, char* kind) {
  if (q.size() != 10 || q[0] != 'L') return false;
  uint64_t pos = 0;
  for (int k = 1; k < 9; ++k) pos = (pos << 8) | static_cast<uint8_t>(q[k]);
  *position = pos;
  *kind = q[9];
  return true;
}

}  // namespace

LogInvariants::LogInvariants(std::vector<bool> votes)
    : votes_(std::move(votes)),
      majority_(static_cast<size_t>(std::count(votes_.begin(), votes_.end(), true)) / 2 + 1) {}

void LogInvariants::Fail(std::string message) {
  if (status_.ok()) status_ = absl::InternalError(std::move(message));
}

void LogInvariants::Observe(int dc, const std::string& table, const std::string& row,
                            const std::vector<storage::Mutation>& applied, int64_t now_us) {
  // The cleaned mark lands with the removal it allows (one row mutation),
  // and with the applied record when a catch-up installed a snapshot.
  bool cleaned = false, applied_record = false;
  for (const storage::Mutation& m : applied) {
    if (m.type == storage::Mutation::Type::kSetCell && m.family == replication::kLogFamily) {
      cleaned |= m.qualifier == "S:cleaned";
      applied_record |= m.qualifier == "S:applied";
    }
  }
  if (cleaned && applied_record) ++snapshots_;
  for (const storage::Mutation& m : applied) {
    if (m.type != storage::Mutation::Type::kSetCell || m.family != replication::kLogFamily ||
        m.qualifier != "S:cleaned" || m.value.size() != 8)
      continue;
    uint64_t through = 0;
    for (char ch : m.value) through = (through << 8) | static_cast<uint8_t>(ch);
    uint64_t& c = cleaned_[{dc, table, row}];
    c = std::max(c, through);
  }
  for (const storage::Mutation& m : applied) {
    if (m.type != storage::Mutation::Type::kSetCell || m.family != replication::kLogFamily)
      continue;
    uint64_t pos = 0;
    char kind = 0;
    if (!ParseLogCell(m.qualifier, &pos, &kind)) continue;
    ++checks_;
    Position& p = positions_[{table, row, pos}];
    const std::string where = StrCat("group ", EscapeBytes(row), " of ", table, " position ", pos);
    if (kind == 'a') {
      if (auto c = cleaned_.find({dc, table, row}); c != cleaned_.end() && pos <= c->second)
        Fail(StrCat(where, ": replica ", Dc(dc), " took an acceptor step at ", now_us,
                    "us after its log was cleaned up through position ", c->second));
      replication::AcceptorRecord r;
      if (!r.ParseFromString(m.value)) {
        Fail(StrCat(where, ": replica ", Dc(dc), " wrote an unreadable acceptor record"));
        continue;
      }
      if (r.has_accepted())
        Accepted(dc, where, p, r.accepted().round(), r.accepted().proposer(), r.accepted_value(),
                 now_us);
    } else if (kind == 'l') {
      Learned(dc, where, p, m.value, now_us);
    }
  }
}

void LogInvariants::Accepted(int dc, const std::string& where, Position& p, uint64_t round,
                             uint64_t proposer, const std::string& value, int64_t now_us) {
  if (dc < 0 || static_cast<size_t>(dc) >= votes_.size() || !votes_[static_cast<size_t>(dc)]) {
    return Fail(StrCat(where, ": replica ", Dc(dc), ", which does not vote, accepted a value at ",
                       now_us, "us"));
  }
  if (round == 0 && proposer == 0) {
    if (!p.at_ballot_zero) p.at_ballot_zero = value;
    if (*p.at_ballot_zero != value)
      return Fail(StrCat(where, ": two values accepted at ballot 0, the second by replica ", Dc(dc),
                         " at ", now_us, "us (the fast path has one owner)"));
  }
  std::set<int>& who = p.accepted[{round, proposer, value}];
  who.insert(dc);
  if (who.size() < majority_) return;
  if (!p.chosen) {
    p.chosen = value;
    for (const auto& [learner, learned] : p.learned) {
      if (learned != value)
        return Fail(StrCat(where, ": replica ", Dc(learner), " learned a value a majority did not ",
                           "choose (the majority's came at ", now_us, "us)"));
    }
  } else if (*p.chosen != value) {
    Fail(StrCat(where, ": two values chosen, the second by a majority at ballot ", round, ".",
                proposer, " when replica ", Dc(dc), " accepted it at ", now_us, "us"));
  }
}

void LogInvariants::Learned(int dc, const std::string& where, Position& p, const std::string& value,
                            int64_t now_us) {
  auto [it, first] = p.learned.emplace(dc, value);
  if (!first && it->second != value) {
    return Fail(StrCat(where, ": replica ", Dc(dc), " learned a second, different value at ",
                       now_us, "us"));
  }
  if (p.chosen && *p.chosen != value) {
    return Fail(StrCat(where, ": replica ", Dc(dc), " learned a value other than the one a ",
                       "majority chose, at ", now_us, "us"));
  }
  for (const auto& [other, learned] : p.learned) {
    if (learned != value)
      return Fail(StrCat(where, ": replicas ", Dc(other), " and ", Dc(dc),
                         " learned different values (the second at ", now_us, "us)"));
  }
}

std::map<uint64_t, std::string> LogInvariants::LearnedLog(const std::string& table,
                                                          const std::string& root) const {
  std::map<uint64_t, std::string> out;
  for (auto it = positions_.lower_bound({table, root, 0});
       it != positions_.end() && std::get<0>(it->first) == table && std::get<1>(it->first) == root;
       ++it) {
    if (!it->second.learned.empty())
      out[std::get<2>(it->first)] = it->second.learned.begin()->second;
  }
  return out;
}

void LogInvariants::Forget(int dc, const std::string& table) {
  for (auto it = cleaned_.begin(); it != cleaned_.end();) {
    if (std::get<0>(it->first) == dc && std::get<1>(it->first) == table) {
      it = cleaned_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace megastore::sim
