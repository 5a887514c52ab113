#include "sim/world.h"

#include "absl/synchronization/notification.h"
#include "base/strings.h"
#include "gtest/gtest.h"

namespace megastore::sim {
namespace {

std::vector<std::vector<absl::Duration>> TwoDcs() {
  return {{absl::Microseconds(100), absl::Milliseconds(10)},
          {absl::Milliseconds(10), absl::Microseconds(100)}};
}

TEST(SimEnvTest, TimersRunInDeadlineOrderAndTiesInScheduleOrder) {
  SimEnv env(1);
  std::vector<int> order;
  env.Schedule(absl::Milliseconds(2), [&] { order.push_back(3); });
  env.Schedule(absl::Milliseconds(1), [&] { order.push_back(1); });
  env.Schedule(absl::Milliseconds(1), [&] { order.push_back(2); });
  const Env::TimerId cancelled = env.Schedule(absl::Milliseconds(1), [&] { order.push_back(99); });
  EXPECT_TRUE(env.Cancel(cancelled));
  env.RunUntil(1'500);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(env.now(), 1'500);
  env.RunUntil(10'000);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(SimEnvTest, TheSameSeedGivesTheSameRandomNumbers) {
  SimEnv a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Random64();
    EXPECT_EQ(x, b.Random64());
    if (i == 0) {
      EXPECT_NE(x, c.Random64());
    }
  }
}

struct Echo {
  SimEnv env{7};
  SimNetwork net{&env, TwoDcs()};
  int handled = 0;
  Echo() {
    net.AddNode("client", 0);
    net.AddNode("server", 1);
    net.SetHandler("server", "echo", [this](std::string req, Responder respond) {
      ++handled;
      respond(req);
    });
  }
  // Calls echo and runs the world until the answer.
  absl::StatusOr<std::string> Call(Transport* t, absl::Duration timeout = absl::Milliseconds(100)) {
    std::optional<absl::StatusOr<std::string>> out;
    t->Call("server", "echo", "hi", timeout, [&](absl::StatusOr<std::string> r) { out = r; });
    env.RunUntil(env.now() + 1'000'000, [&] { return out.has_value(); });
    return out.value_or(absl::UnknownError("never answered"));
  }
};

TEST(SimNetworkTest, ARequestTakesTheLinkLatencyEachWay) {
  Echo w;
  const int64_t start = w.env.now();
  absl::StatusOr<std::string> r = w.Call(w.net.TransportFor("client"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "hi");
  EXPECT_EQ(w.env.now() - start, 20'000);
  EXPECT_EQ(w.net.remote_messages_of("client"), 2u);
}

TEST(SimNetworkTest, APartitionInEitherDirectionTimesTheCallOut) {
  Echo w;
  Transport* t = w.net.TransportFor("client");
  w.net.Block(0, 1, true);
  EXPECT_EQ(w.Call(t).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.handled, 0);
  w.net.Block(0, 1, false);
  w.net.Block(1, 0, true);  // the request arrives, the reply does not
  EXPECT_EQ(w.Call(t).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.handled, 1);
  w.net.HealAll();
  EXPECT_TRUE(w.Call(t).ok());
}

TEST(SimNetworkTest, ACrashedNodeIsSilentAndItsOldIncarnationStaysSilent) {
  Echo w;
  Transport* old_client = w.net.TransportFor("client");
  w.net.Crash("server");
  EXPECT_EQ(w.Call(old_client).status().code(), absl::StatusCode::kDeadlineExceeded);
  w.net.Restart("server");
  EXPECT_EQ(w.Call(old_client).status().code(), absl::StatusCode::kUnimplemented)
      << "a restarted process serves only what it registers again";

  w.net.Crash("client");
  w.net.Restart("client");
  std::optional<absl::StatusOr<std::string>> out;
  old_client->Call("server", "echo", "x", absl::Milliseconds(50),
                   [&](absl::StatusOr<std::string> r) { out = r; });
  w.env.RunUntil(w.env.now() + 1'000'000);
  EXPECT_FALSE(out.has_value()) << "the dead incarnation neither sends nor hears anything";
  EXPECT_EQ(w.Call(w.net.TransportFor("client")).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(SimNetworkTest, DuplicatesReachTheHandlerTwiceButAnswerOnce) {
  Echo w;
  LinkFaults f;
  f.duplicate = 1.0;
  w.net.set_faults(f);
  int answers = 0;
  w.net.TransportFor("client")->Call("server", "echo", "x", absl::Milliseconds(100),
                                     [&](absl::StatusOr<std::string> r) { answers += r.ok(); });
  w.env.RunUntil(1'000'000);
  EXPECT_EQ(w.handled, 2);
  EXPECT_EQ(answers, 1);
}

TEST(SimNetworkTest, LossIsDrawnFromTheSeed) {
  auto run = [](uint64_t seed) {
    SimEnv env(seed);
    SimNetwork net(&env, TwoDcs());
    net.AddNode("c", 0);
    net.AddNode("s", 1);
    net.SetHandler("s", "m", [](std::string r, Responder respond) { respond(r); });
    LinkFaults f;
    f.loss = 0.3;
    f.jitter = absl::Milliseconds(5);
    net.set_faults(f);
    std::string outcome;
    for (int i = 0; i < 50; ++i)
      net.TransportFor("c")->Call("s", "m", "", absl::Milliseconds(40),
                                  [&outcome, &env](absl::StatusOr<std::string> r) {
                                    outcome += r.ok() ? "o" : "x";
                                    outcome += std::to_string(env.now());
                                  });
    env.RunUntil(1'000'000);
    return outcome;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
  EXPECT_NE(run(5).find('x'), std::string::npos);
}

// ---- tasks ----------------------------------------------------------------------

// Three tasks that sleep random virtual times, write a shared log and
// wait for one another: the log is the same for the same seed.
std::vector<std::string> TaskRun(uint64_t seed) {
  SimEnv env(seed);
  std::vector<std::string> log;
  absl::Notification go;
  std::vector<std::unique_ptr<Env::Thread>> threads;
  for (int i = 0; i < 3; ++i) {
    threads.push_back(env.StartThread(StrCat("t", i), [&env, &log, &go, i] {
      env.Wait(go);  // all three park until an event lets them go
      for (int k = 0; k < 4; ++k) {
        env.SleepFor(absl::Microseconds(1 + env.Uniform(1000)));
        log.push_back(StrCat("t", i, "@", env.now()));
      }
    }));
  }
  env.Schedule(absl::Milliseconds(1), [&] { go.Notify(); });
  for (auto& t : threads) t->Join();  // the main thread runs the world meanwhile
  EXPECT_TRUE(env.UnfinishedTasks().empty());
  return log;
}

TEST(SimEnvTaskTest, TasksTakeTurnsOnVirtualTimeAndReplayExactly) {
  const std::vector<std::string> a = TaskRun(5), b = TaskRun(5), c = TaskRun(6);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Nothing ran before the go event at 1 ms.
  for (const std::string& line : a)
    EXPECT_GE(std::stoll(line.substr(line.find('@') + 1)), 1000) << line;
}

TEST(SimEnvTaskTest, WaitForTimesOutOnVirtualTimeOrReturnsWhenNotified) {
  SimEnv env(1);
  absl::Notification never, soon;
  bool timed_out = false, notified = false;
  int64_t timed_out_at = 0;
  auto a = env.StartThread("a", [&] {
    timed_out = !env.WaitFor(never, absl::Milliseconds(30));
    timed_out_at = env.now();
  });
  auto b = env.StartThread("b", [&] { notified = env.WaitFor(soon, absl::Seconds(10)); });
  env.Schedule(absl::Milliseconds(5), [&] { soon.Notify(); });
  env.RunUntil(100'000);
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(timed_out_at, 30'000);
  EXPECT_TRUE(notified);
  EXPECT_TRUE(env.UnfinishedTasks().empty());
}

TEST(SimEnvTaskTest, AMutexHeldAcrossAParkIsWaitedForByParkingToo) {
  SimEnv env(1);
  absl::Mutex mu;
  std::vector<std::string> order;
  auto holder = env.StartThread("holder", [&] {
    EnvMutexLock lock(&env, &mu);
    order.push_back("holder has it");
    env.SleepFor(absl::Milliseconds(10));  // parked, still holding it
    order.push_back("holder lets go");
  });
  int64_t got_it_at = 0;
  auto waiter = env.StartThread("waiter", [&] {
    env.SleepFor(absl::Milliseconds(1));
    EnvMutexLock lock(&env, &mu);
    order.push_back("waiter has it");
    got_it_at = env.now();
  });
  env.RunUntil(50'000);
  EXPECT_EQ(order, (std::vector<std::string>{"holder has it", "holder lets go", "waiter has it"}));
  // It looks again at growing intervals of at most 10 ms.
  EXPECT_GE(got_it_at, 10'000);
  EXPECT_LE(got_it_at, 21'000);
}

TEST(SimEnvTaskTest, ATaskCanStartAndJoinAnother) {
  SimEnv env(1);
  int result = 0;
  auto outer = env.StartThread("outer", [&] {
    auto inner = env.StartThread("inner", [&] {
      env.SleepFor(absl::Milliseconds(3));
      result = 42;
    });
    inner->Join();  // parks the outer task
    result += 1;
  });
  env.RunUntil(10'000);
  EXPECT_EQ(result, 43);
  EXPECT_TRUE(env.UnfinishedTasks().empty());
}

TEST(SimEnvTaskTest, AStuckTaskIsReportedAndLeftParked) {
  const size_t before = SimEnv::leaked_tasks();
  {
    SimEnv env(1);
    absl::Notification never;
    auto stuck = env.StartThread("stuck", [&] { env.Wait(never); });
    env.RunUntil(1'000);
    EXPECT_EQ(env.UnfinishedTasks(), (std::vector<std::string>{"stuck"}));
    (void)stuck.release();  // its handle would join forever
  }
  EXPECT_EQ(SimEnv::leaked_tasks(), before + 1);
}

}  // namespace
}  // namespace megastore::sim
