#include "sim/history.h"

#include "gtest/gtest.h"

namespace megastore::sim {
namespace {

// A small history builder: each call appends an event at the next time.
struct H {
  std::vector<Event> events;
  int64_t t = 0;
  Event& Add(int process, Event::Type type, Event::Op f, std::string key) {
    Event e;
    e.process = process;
    e.type = type;
    e.f = f;
    e.key = std::move(key);
    e.time = ++t;
    events.push_back(e);
    return events.back();
  }
  void Write(int p, const std::string& key, const std::string& v, Event::Type outcome,
             uint64_t pos) {
    Add(p, Event::Type::kInvoke, Event::Op::kWrite, key).value = v;
    Event& e = Add(p, outcome, Event::Op::kWrite, key);
    e.value = v;
    e.position = pos;
  }
  void Read(int p, const std::string& key, const std::string& level, std::optional<std::string> v,
            uint64_t pos) {
    Add(p, Event::Type::kInvoke, Event::Op::kRead, key).level = level;
    Event& e = Add(p, Event::Type::kOk, Event::Op::kRead, key);
    e.level = level;
    e.value = std::move(v);
    e.position = pos;
  }
};

// g/k = a at 1, b at 2.
std::map<std::string, GroupLog> Log() {
  GroupLog log;
  log[1].id = "a";
  log[1].writes["g/k"] = "a";
  log[2].id = "b";
  log[2].writes["g/k"] = "b";
  log[3].noop = true;
  return {{"g", log}};
}

TEST(CheckHistoryTest, AConsistentHistoryPasses) {
  H h;
  h.Write(0, "g/k", "a", Event::Type::kOk, 1);
  h.Read(1, "g/k", "current", "a", 1);
  h.Write(0, "g/k", "b", Event::Type::kInfo, 0);
  h.Read(1, "g/k", "snapshot", "a", 1);
  h.Read(1, "g/k", "current", "b", 3);
  h.Read(1, "g/k", "inconsistent", "b", 0);
  h.Write(2, "g/k", "never", Event::Type::kFail, 0);
  EXPECT_TRUE(CheckHistory(h.events, Log()).ok()) << CheckHistory(h.events, Log());
}

TEST(CheckHistoryTest, AnAcknowledgedWriteMissingFromTheLogIsCaught) {
  H h;
  h.Write(0, "g/k", "lost", Event::Type::kOk, 4);
  absl::Status s = CheckHistory(h.events, Log());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not in the log"), std::string::npos) << s;
}

TEST(CheckHistoryTest, AFailedWriteThatHappenedAnywayIsCaught) {
  H h;
  h.Write(0, "g/k", "b", Event::Type::kFail, 0);
  EXPECT_NE(CheckHistory(h.events, Log()).message().find("reported failed"), std::string::npos);
}

TEST(CheckHistoryTest, AWriteAcknowledgedAtTheWrongPositionIsCaught) {
  H h;
  h.Write(0, "g/k", "b", Event::Type::kOk, 1);
  EXPECT_FALSE(CheckHistory(h.events, Log()).ok());
}

TEST(CheckHistoryTest, AStaleCurrentReadIsCaught) {
  H h;
  h.Write(0, "g/k", "b", Event::Type::kOk, 2);
  h.Read(1, "g/k", "current", "a", 1);  // consistent with position 1, but 2 was acknowledged
  absl::Status s = CheckHistory(h.events, Log());
  EXPECT_NE(s.message().find("stale read"), std::string::npos) << s;
  // The same read at snapshot level is allowed.
  H ok;
  ok.Write(0, "g/k", "b", Event::Type::kOk, 2);
  ok.Read(1, "g/k", "snapshot", "a", 1);
  EXPECT_TRUE(CheckHistory(ok.events, Log()).ok());
}

TEST(CheckHistoryTest, CurrentReadsMayNotGoBackInTime) {
  H h;
  h.Read(1, "g/k", "current", "b", 2);
  h.Read(2, "g/k", "current", "a", 1);
  EXPECT_FALSE(CheckHistory(h.events, Log()).ok());
}

TEST(CheckHistoryTest, AReadThatNoPrefixOfTheLogExplainsIsCaught) {
  H h;
  h.Read(1, "g/k", "snapshot", "b", 1);
  EXPECT_NE(CheckHistory(h.events, Log()).message().find("where the log gives"), std::string::npos);
  H inconsistent;
  inconsistent.Read(1, "g/k", "inconsistent", "zzz", 0);
  EXPECT_FALSE(CheckHistory(inconsistent.events, Log()).ok());
}

TEST(CheckHistoryTest, ACasWhoseExpectationDidNotHoldIsCaught) {
  H h;
  Event& inv = h.Add(0, Event::Type::kInvoke, Event::Op::kCas, "g/k");
  inv.value = "b";
  inv.expected = "zzz";
  Event& ok = h.Add(0, Event::Type::kOk, Event::Op::kCas, "g/k");
  ok.value = "b";
  ok.expected = "zzz";
  ok.position = 2;
  EXPECT_NE(CheckHistory(h.events, Log()).message().find("expected"), std::string::npos);
}

// An unknown outcome that made it into the log is held to its expectation
// too (a promotion past a writer of its row would break it).
TEST(CheckHistoryTest, ACasOfUnknownOutcomeInTheLogIsCheckedAtItsPosition) {
  for (const char* expected : {"a", "zzz"}) {
    H h;
    Event& inv = h.Add(0, Event::Type::kInvoke, Event::Op::kCas, "g/k");
    inv.value = "b";
    inv.expected = expected;
    h.Add(0, Event::Type::kInfo, Event::Op::kCas, "g/k");
    const absl::Status s = CheckHistory(h.events, Log());
    if (std::string(expected) == "a") {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_NE(s.message().find("outcome unknown"), std::string::npos) << s;
    }
  }
}

TEST(CheckHistoryTest, AWriteTwiceInTheLogOrAHoleIsCaught) {
  auto log = Log();
  log["g"][4].id = "a";
  log["g"][4].writes["g/k"] = "a";
  EXPECT_NE(CheckHistory({}, log).message().find("twice"), std::string::npos);
  auto holed = Log();
  holed["g"].erase(2);
  EXPECT_NE(CheckHistory({}, holed).message().find("hole"), std::string::npos);
}

// A combined entry at 3: "x" sets g/j, then "y" sets g/k if g/j held
// nothing, then "z" sets g/k if g/j held "x". Only z's expectation held.
TEST(CheckHistoryTest, ACombinedEntrysMembersAreCheckedInTheirSerialOrder) {
  auto log = Log();
  log["g"][3].noop = false;
  log["g"][3].members.push_back(LogRecord::Member{"x", {{"g/j", "x"}}});
  log["g"][3].members.push_back(LogRecord::Member{"z", {{"g/k", "z"}}});
  auto cas = [](H& h, const std::string& value, std::optional<std::string> expected) {
    Event& inv = h.Add(0, Event::Type::kInvoke, Event::Op::kCas, "g/k");
    inv.value = value;
    inv.expected = std::move(expected);
    inv.read_key = "g/j";
    Event& ok = h.Add(0, Event::Type::kOk, Event::Op::kCas, "g/k");
    ok.value = value;
    ok.position = 3;
    ok.read_key = "g/j";
  };
  H good;
  good.Write(1, "g/j", "x", Event::Type::kOk, 3);
  cas(good, "z", "x");
  good.Read(2, "g/k", "current", "z", 3);
  good.Read(2, "g/j", "current", "x", 3);
  EXPECT_TRUE(CheckHistory(good.events, log).ok()) << CheckHistory(good.events, log);

  // y expected g/j empty, but x ahead of it in the entry had set it.
  auto bad_log = log;
  bad_log["g"][3].members.insert(bad_log["g"][3].members.begin() + 1,
                                 LogRecord::Member{"y", {{"g/k", "y"}}});
  H bad;
  cas(bad, "y", std::nullopt);
  const absl::Status s = CheckHistory(bad.events, bad_log);
  EXPECT_NE(s.message().find("expected null but the log had \"x\" just before it"),
            std::string::npos)
      << s;
  // A member twice, within an entry or across entries, is caught too.
  auto twice = log;
  twice["g"][3].members.push_back(LogRecord::Member{"b", {}});
  EXPECT_NE(CheckHistory({}, twice).message().find("twice"), std::string::npos);
}

// g/k = a at 1, b at 2, deleted at 3 (by d1).
TEST(CheckHistoryTest, ADeleteIsCheckedLikeAWriteAndItsKeyReadsAsNothing) {
  auto log = Log();
  log["g"][3].noop = false;
  log["g"][3].id = "d1";
  log["g"][3].writes["g/k"] = std::nullopt;
  H h;
  h.Add(0, Event::Type::kInvoke, Event::Op::kDelete, "g/k").value = "d1";
  Event& ok = h.Add(0, Event::Type::kOk, Event::Op::kDelete, "g/k");
  ok.value = "d1";
  ok.position = 3;
  h.Read(1, "g/k", "current", std::nullopt, 3);
  EXPECT_TRUE(CheckHistory(h.events, log).ok()) << CheckHistory(h.events, log);

  H stale = h;
  stale.Read(1, "g/k", "current", "b", 3);
  EXPECT_NE(CheckHistory(stale.events, log).message().find("where the log gives null"),
            std::string::npos)
      << "deleted data that comes back is caught";
  H wrong;
  wrong.Add(0, Event::Type::kInvoke, Event::Op::kDelete, "g/k").value = "d1";
  Event& bad = wrong.Add(0, Event::Type::kOk, Event::Op::kDelete, "g/k");
  bad.value = "d1";
  bad.position = 2;
  EXPECT_NE(CheckHistory(wrong.events, log).message().find("the log has it at 3"),
            std::string::npos);
}

TEST(ToJsonTest, OneObjectPerEventInTheDocumentedShape) {
  Event e;
  e.process = 3;
  e.type = Event::Type::kOk;
  e.f = Event::Op::kCas;
  e.key = "g1/k\"2";
  e.value = "new";
  e.time = 12;
  EXPECT_EQ(
      ToJson(e),
      R"({"process":3,"type":"ok","f":"cas","key":"g1/k\"2","value":[null,"new"],"time":12000})");
  Event r;
  r.type = Event::Type::kInvoke;
  r.key = "g/k";
  r.level = "snapshot";
  EXPECT_EQ(
      ToJson(r),
      R"({"process":0,"type":"invoke","f":"read","key":"g/k","value":null,"level":"snapshot","time":0})");
}

}  // namespace
}  // namespace megastore::sim
