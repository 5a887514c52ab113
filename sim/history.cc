#include "sim/history.h"

#include <set>

#include "base/strings.h"

namespace megastore::sim {

namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string OrNull(const std::optional<std::string>& v) { return v ? Quote(*v) : "null"; }

const char* Name(Event::Type t) {
  switch (t) {
    case Event::Type::kInvoke:
      return "invoke";
    case Event::Type::kOk:
      return "ok";
    case Event::Type::kFail:
      return "fail";
    case Event::Type::kInfo:
      return "info";
  }
  return "?";
}

const char* Name(Event::Op f) {
  switch (f) {
    case Event::Op::kRead:
      return "read";
    case Event::Op::kWrite:
      return "write";
    case Event::Op::kCas:
      return "cas";
    case Event::Op::kDelete:
      return "delete";
  }
  return "?";
}

std::string Describe(const Event& e) {
  return StrCat("process ", e.process, " ", Name(e.f), " ", e.key,
                e.read_key.empty() ? "" : StrCat(" (reading ", e.read_key, ")"),
                e.level.empty() ? "" : " ", e.level, " at ", e.time, "us");
}

std::pair<std::string, std::string> SplitKey(const std::string& key) {
  const size_t slash = key.find('/');
  return {key.substr(0, slash), key};
}

}  // namespace

std::string ToJson(const Event& e) {
  std::string value;
  if (e.f == Event::Op::kCas) {
    value = StrCat("[", OrNull(e.expected), ",", OrNull(e.value), "]");
  } else if (e.f == Event::Op::kDelete) {
    value = "null";  // a delete writes nothing
  } else {
    value = OrNull(e.value);
  }
  std::string out = StrCat("{\"process\":", e.process, ",\"type\":\"", Name(e.type), "\",\"f\":\"",
                           Name(e.f), "\",\"key\":", Quote(e.key), ",\"value\":", value);
  if (!e.read_key.empty()) out += StrCat(",\"read_key\":", Quote(e.read_key));
  if (e.f == Event::Op::kRead) out += StrCat(",\"level\":\"", e.level, "\"");
  out += StrCat(",\"time\":", e.time * 1000, "}");
  return out;
}

absl::Status CheckHistory(const std::vector<Event>& history,
                          const std::map<std::string, GroupLog>& logs) {
  // The state of every key after each position, and where each value was written.
  struct GroupView {
    std::vector<std::map<std::string, std::string>> after;  // [position] -> key -> value
    std::map<std::string, uint64_t> position_of;            // value -> position
    // value -> the state just before its operation took effect
    std::map<std::string, std::map<std::string, std::string>> before;
  };
  auto apply = [](const LogRecord::Writes& writes, std::map<std::string, std::string>* state) {
    for (const auto& [key, value] : writes) {
      if (value) {
        (*state)[key] = *value;
      } else {
        state->erase(key);
      }
    }
  };
  std::map<std::string, GroupView> views;
  std::map<std::string, std::set<std::string>> ever_written;  // key -> values
  for (const auto& [group, log] : logs) {
    GroupView& v = views[group];
    v.after.emplace_back();
    uint64_t expect = 1;
    for (const auto& [pos, rec] : log) {
      if (pos != expect)
        return absl::InternalError(
            StrCat("group ", group, ": log has a hole at position ", expect));
      ++expect;
      std::map<std::string, std::string> state = v.after.back();
      std::vector<LogRecord::Member> ops = rec.members;
      if (ops.empty() && !rec.noop) ops.push_back(LogRecord::Member{rec.id, rec.writes});
      for (const LogRecord::Member& op : ops) {
        if (!v.position_of.emplace(op.id, pos).second)
          return absl::InternalError(StrCat("group ", group, ": operation ", op.id,
                                            " is in the log twice (positions ",
                                            v.position_of[op.id], " and ", pos, ")"));
        v.before[op.id] = state;
        apply(op.writes, &state);
      }
      v.after.push_back(std::move(state));
    }
  }
  for (const Event& e : history)
    if (e.type == Event::Type::kInvoke && (e.f == Event::Op::kWrite || e.f == Event::Op::kCas) &&
        e.value)
      ever_written[e.key].insert(*e.value);

  std::map<int, const Event*> open;       // process -> its invoke
  std::map<int, uint64_t> required;       // process -> min position for its current read
  std::map<std::string, uint64_t> acked;  // group -> highest acknowledged position
  for (const Event& e : history) {
    const std::string group = SplitKey(e.key).first;
    auto vit = views.find(group);
    if (vit == views.end())
      return absl::InternalError(StrCat(Describe(e), ": no log for group ", group));
    GroupView& v = vit->second;
    if (e.type == Event::Type::kInvoke) {
      if (open.count(e.process))
        return absl::InternalError(StrCat(Describe(e), ": process already has an operation open"));
      open[e.process] = &e;
      required[e.process] = acked[group];
      continue;
    }
    auto oit = open.find(e.process);
    if (oit == open.end()) return absl::InternalError(StrCat(Describe(e), ": completes nothing"));
    const Event& inv = *oit->second;
    open.erase(oit);
    if (e.type == Event::Type::kInfo) {
      // Outcome unknown: if it is in the log anyway, a compare-and-set's
      // expectation must have held just before its position (a promotion
      // past a writer of its row would break it).
      auto it = inv.value ? v.position_of.find(*inv.value) : v.position_of.end();
      if (inv.f == Event::Op::kCas && it != v.position_of.end()) {
        const auto& before = v.before.at(it->first);
        auto cur = before.find(inv.read_key.empty() ? inv.key : inv.read_key);
        const std::optional<std::string> actual =
            cur == before.end() ? std::nullopt : std::optional<std::string>(cur->second);
        if (actual != inv.expected)
          return absl::InternalError(StrCat(Describe(e), ": outcome unknown, in the log at ",
                                            it->second, " but expected ", OrNull(inv.expected),
                                            " and the log had ", OrNull(actual), " before it"));
      }
      continue;
    }
    auto it = e.value ? v.position_of.find(*e.value) : v.position_of.end();
    const bool in_log = it != v.position_of.end();
    if (e.f != Event::Op::kRead) {
      if (e.type == Event::Type::kFail) {
        if (in_log)
          return absl::InternalError(StrCat(Describe(e), ": reported failed, but its operation ",
                                            *e.value, " is in the log at position ", it->second));
        continue;
      }
      if (!in_log)
        return absl::InternalError(StrCat(Describe(e), ": acknowledged at position ", e.position,
                                          ", but its operation ", e.value.value_or("?"),
                                          " is not in the log"));
      if (it->second != e.position)
        return absl::InternalError(StrCat(Describe(e), ": acknowledged at position ", e.position,
                                          ", but the log has it at ", it->second));
      if (e.f == Event::Op::kCas) {
        const auto& before = v.before.at(it->first);
        auto cur = before.find(inv.read_key.empty() ? inv.key : inv.read_key);
        const std::optional<std::string> actual =
            cur == before.end() ? std::nullopt : std::optional<std::string>(cur->second);
        if (actual != inv.expected)
          return absl::InternalError(StrCat(Describe(e), ": expected ", OrNull(inv.expected),
                                            " but the log had ", OrNull(actual),
                                            " just before it (position ", e.position, ")"));
      }
      acked[group] = std::max(acked[group], e.position);
      continue;
    }
    if (e.type != Event::Type::kOk) continue;
    if (e.level == "inconsistent") {
      if (e.value && !ever_written[e.key].count(*e.value))
        return absl::InternalError(
            StrCat(Describe(e), ": returned ", *e.value, ", which no write wrote"));
      continue;
    }
    if (e.position >= v.after.size())
      return absl::InternalError(StrCat(Describe(e), ": read at position ", e.position,
                                        ", beyond the log's end ", v.after.size() - 1));
    const auto& state = v.after[e.position];
    auto cur = state.find(e.key);
    const std::optional<std::string> want =
        cur == state.end() ? std::nullopt : std::optional<std::string>(cur->second);
    if (want != e.value)
      return absl::InternalError(StrCat(Describe(e), ": returned ", OrNull(e.value),
                                        " at position ", e.position, ", where the log gives ",
                                        OrNull(want)));
    if (e.level == "current") {
      if (e.position < required[e.process])
        return absl::InternalError(StrCat(
            Describe(e), ": read at position ", e.position, ", but position ", required[e.process],
            " was acknowledged or read before the read began (stale read)"));
      acked[group] = std::max(acked[group], e.position);
    }
  }
  return absl::OkStatus();
}

}  // namespace megastore::sim
