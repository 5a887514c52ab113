#include "sim/world.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "base/logging.h"
#include "base/strings.h"

namespace megastore::sim {

// ---- SimEnv ---------------------------------------------------------------------

// One task: its thread runs only while `running` (the turn is its).
struct SimEnv::Task {
  std::string name;
  std::function<void()> fn;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false;  // guarded by mu
  bool done = false;     // guarded by mu; also read by the simulator's thread between turns
  // While parked: whether it can go on (read by the simulator's thread).
  std::function<bool()> ready = [] { return true; };
  // An abandoned task that finished later is never joined; its Task may
  // even go with its own thread's last reference.
  ~Task() {
    if (thread.joinable()) thread.detach();
  }
};

// The task this thread runs, if it is one.
thread_local SimEnv::Task* SimEnv::current_task_ = nullptr;

namespace {
std::atomic<size_t> leaked{0};
}  // namespace

class SimEnv::TaskThread : public Env::Thread {
 public:
  TaskThread(SimEnv* env, std::shared_ptr<Task> task) : env_(env), task_(std::move(task)) {}
  ~TaskThread() override { Join(); }
  void Join() override {
    if (!task_->thread.joinable()) return;
    MS_CHECK(current_task_ != task_.get(), "task {} joins itself", task_->name);
    Task* t = task_.get();
    auto finished = [t] {
      std::lock_guard<std::mutex> lock(t->mu);
      return t->done;
    };
    if (env_->abandoned_ && !finished()) return;  // detached when the SimEnv goes
    if (current_task_ != nullptr) {
      env_->Park(finished);
    } else {
      env_->RunTill(finished);
    }
    if (!finished()) return;  // abandoned meanwhile
    task_->thread.join();
  }

 private:
  SimEnv* const env_;
  const std::shared_ptr<Task> task_;
};

SimEnv::SimEnv(uint64_t seed) : seed_(seed), rng_(seed) {}

SimEnv::~SimEnv() {
  for (const std::shared_ptr<Task>& t : tasks_) {
    if (t->thread.joinable()) {
      t->thread.detach();  // parked for good; it keeps its Task alive
      ++leaked;
    }
  }
}

size_t SimEnv::leaked_tasks() { return leaked.load(); }

bool SimEnv::OnTask() const { return current_task_ != nullptr; }

std::vector<std::string> SimEnv::UnfinishedTasks() const {
  std::vector<std::string> out;
  for (const std::shared_ptr<Task>& t : tasks_) {
    std::lock_guard<std::mutex> lock(t->mu);
    if (!t->done) out.push_back(t->name);
  }
  return out;
}

Env::TimerId SimEnv::Schedule(absl::Duration after, std::function<void()> fn) {
  int64_t d = std::max<int64_t>(0, absl::ToInt64Microseconds(after));
  d = std::min(d, INT64_MAX / 2 - now());  // "never" stays in the future
  return timers_.Add(now() + d, std::move(fn));
}

bool SimEnv::Cancel(TimerId id) {
  std::function<void()> fn;  // destroyed once the queue is consistent again
  return timers_.Cancel(id, &fn);
}

std::unique_ptr<Env::Thread> SimEnv::StartThread(std::string name, std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->name = std::move(name);
  task->fn = std::move(fn);
  Task* t = task.get();
  task->thread = std::thread([task] {
    {
      std::unique_lock<std::mutex> lock(task->mu);
      task->cv.wait(lock, [&] { return task->running; });
    }
    current_task_ = task.get();
    task->fn();
    task->fn = nullptr;
    current_task_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(task->mu);
      task->done = true;
      task->running = false;
    }
    task->cv.notify_all();
  });
  tasks_.push_back(task);
  if (tracing()) Trace(StrCat("task ", t->name, " started"));
  if (tasks_.size() > kMaxTasks) {
    // Each task is a thread: a leak would end in thread exhaustion. Name it.
    std::map<std::string, int> by_name;
    for (const auto& other : tasks_) ++by_name[other->name];
    std::string top;
    for (const auto& [name, n] : by_name)
      if (n > 10) top += StrCat(" [", name, "] x", n);
    MS_CHECK(false, "more than {} simulator tasks at once:{}", kMaxTasks, top);
  }
  return std::make_unique<TaskThread>(this, std::move(task));
}

bool SimEnv::RunReadyTasks() {
  bool any = false;
  for (bool progress = true; progress;) {
    progress = false;
    // Tasks started by a resumed task are resumed in this pass too.
    for (size_t i = 0; i < tasks_.size(); ++i) {
      std::shared_ptr<Task> t = tasks_[i];
      {
        std::lock_guard<std::mutex> lock(t->mu);
        if (t->done) continue;
      }
      if (!t->ready()) continue;
      {
        std::lock_guard<std::mutex> lock(t->mu);
        t->running = true;
      }
      t->cv.notify_all();
      {
        // A task that blocks outside the Env (a mutex a parked task holds,
        // a real sleep) would hang the simulation: name it instead.
        std::unique_lock<std::mutex> lock(t->mu);
        MS_CHECK(t->cv.wait_for(lock, std::chrono::seconds(120), [&] { return !t->running; }),
                 "simulator task \"{}\" has not given the turn back for 120 s of real time: it "
                 "blocks outside the Env (a lock held by a parked task, or real I/O)",
                 t->name);
      }
      progress = any = true;
    }
    // Finished tasks leave the list (their handles still join them).
    tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                                [](const std::shared_ptr<Task>& t) {
                                  std::lock_guard<std::mutex> lock(t->mu);
                                  return t->done;
                                }),
                 tasks_.end());
  }
  return any;
}

void SimEnv::Park(const std::function<bool()>& ready) {
  Task* t = current_task_;
  MS_CHECK(t != nullptr, "Park outside a task");
  {
    std::lock_guard<std::mutex> lock(t->mu);
    t->ready = ready;
    t->running = false;
  }
  t->cv.notify_all();
  std::unique_lock<std::mutex> lock(t->mu);
  t->cv.wait(lock, [&] { return t->running; });
  t->ready = [] { return true; };
}

bool SimEnv::RunUntil(int64_t until, const std::function<bool()>& stop) {
  MS_CHECK(!OnTask(), "RunUntil from a task (tasks wait through the Env)");
  while (true) {
    RunReadyTasks();
    if (stop && stop()) return false;
    const int64_t next = timers_.NextDeadline();
    if (next > until) break;
    now_.store(std::max(now(), next), std::memory_order_relaxed);
    std::function<void()> fn;
    if (timers_.PopDue(now(), &fn)) {
      ++event_depth_;
      fn();
      --event_depth_;
    }
  }
  now_.store(std::max(now(), until), std::memory_order_relaxed);
  return true;
}

void SimEnv::RunTill(const std::function<bool()>& ready) {
  while (!ready() && !abandoned_) {
    if (RunReadyTasks()) continue;
    if (ready()) return;
    MS_CHECK(event_depth_ == 0,
             "a blocking wait (a task's Join) inside a simulator event would run the simulation "
             "nested");
    std::function<void()> fn;
    const int64_t next = timers_.NextDeadline();
    MS_CHECK(next != INT64_MAX,
             "a blocking wait on the simulator's thread with nothing left to run: the awaited "
             "callback can never come");
    now_.store(std::max(now(), next), std::memory_order_relaxed);
    if (timers_.PopDue(now(), &fn)) {
      ++event_depth_;
      fn();
      --event_depth_;
    }
  }
}

void SimEnv::Wait(absl::Notification& done) {
  if (done.HasBeenNotified()) return;  // answered at once (an inline callback)
  if (OnTask()) return Park([&done] { return done.HasBeenNotified(); });
  MS_CHECK(event_depth_ == 0, "Env::Wait from inside a simulator event (use a callback there)");
  RunTill([&done] { return done.HasBeenNotified(); });
}

bool SimEnv::WaitFor(absl::Notification& done, absl::Duration timeout) {
  if (done.HasBeenNotified()) return true;
  auto expired = std::make_shared<bool>(false);
  const TimerId timer = Schedule(timeout, [expired] { *expired = true; });
  if (OnTask()) {
    Park([&done, expired] { return done.HasBeenNotified() || *expired; });
  } else {
    MS_CHECK(event_depth_ == 0, "Env::WaitFor from inside a simulator event");
    RunTill([&done, expired] { return done.HasBeenNotified() || *expired; });
  }
  Cancel(timer);
  return done.HasBeenNotified();
}

void SimEnv::SleepFor(absl::Duration d) {
  const int64_t until = now() + std::max<int64_t>(0, absl::ToInt64Microseconds(d));
  if (!OnTask()) {
    RunUntil(until);
    return;
  }
  auto woke = std::make_shared<bool>(false);
  Schedule(absl::Microseconds(until - now()), [woke] { *woke = true; });
  Park([woke] { return *woke; });
}

void SimEnv::LockBlocking(absl::Mutex& mu) {
  if (OnTask()) {
    // The holder may be parked: take turns until it lets go, looking again
    // after 50 us, then less and less often (at most every 10 ms).
    absl::Duration pause = absl::Microseconds(50);
    while (!mu.TryLock()) {
      SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(10));
    }
    return;
  }
  MS_CHECK(mu.TryLock(),
           "the simulator's thread would block on a mutex a parked task holds (lock it in a task)");
}

void SimEnv::Trace(std::string_view text) {
  if (trace_ != nullptr) trace_->push_back(StrCat(now(), " ", text));
}

// ---- SimNetwork -------------------------------------------------------------------

class SimNetwork::Endpoint : public Transport {
 public:
  Endpoint(SimNetwork* net, std::string address, uint64_t incarnation)
      : net_(net), address_(std::move(address)), incarnation_(incarnation) {}

  void Call(std::string_view to, std::string_view method, std::string request,
            absl::Duration timeout, ReplyCallback done) override {
    net_->Send(address_, incarnation_, to, method, std::move(request), timeout, std::move(done));
  }

  const std::string& address() const { return address_; }
  uint64_t incarnation() const { return incarnation_; }

 private:
  SimNetwork* const net_;
  const std::string address_;
  const uint64_t incarnation_;
};

SimNetwork::SimNetwork(SimEnv* env, std::vector<std::vector<absl::Duration>> latency)
    : env_(env), latency_(std::move(latency)) {}

SimNetwork::~SimNetwork() = default;

void SimNetwork::AddNode(const std::string& address, int dc) { nodes_[address].dc = dc; }

void SimNetwork::SetHandler(const std::string& address, std::string_view method, Handler handler) {
  nodes_.at(address).handlers[std::string(method)] = std::move(handler);
}

void SimNetwork::Crash(const std::string& address) {
  Node& n = nodes_.at(address);
  n.up = false;
  ++n.incarnation;
  n.handlers.clear();
  env_->Trace(StrCat("crash ", address));
}

void SimNetwork::Restart(const std::string& address) {
  Node& n = nodes_.at(address);
  if (n.up) return;
  n.up = true;
  ++n.incarnation;
  env_->Trace(StrCat("restart ", address));
}

bool SimNetwork::up(const std::string& address) const {
  auto it = nodes_.find(address);
  return it != nodes_.end() && it->second.up;
}

bool SimNetwork::Alive(const std::string& address, uint64_t incarnation) const {
  auto it = nodes_.find(address);
  return it != nodes_.end() && it->second.up && it->second.incarnation == incarnation;
}

Transport* SimNetwork::TransportFor(const std::string& address) {
  const Node& n = nodes_.at(address);
  endpoints_.push_back(std::make_unique<Endpoint>(this, address, n.incarnation));
  return endpoints_.back().get();
}

void SimNetwork::Block(int from, int to, bool blocked) {
  if (blocked) {
    blocked_.insert({from, to});
  } else {
    blocked_.erase({from, to});
  }
  env_->Trace(StrCat(blocked ? "block " : "unblock ", from, "->", to));
}

void SimNetwork::HealAll() {
  blocked_.clear();
  slow_.clear();
  faults_ = LinkFaults{};
  env_->Trace("heal");
}

void SimNetwork::set_method_loss(const std::string& method, double p, int to_dc) {
  if (p <= 0) {
    method_loss_.erase({method, to_dc});
  } else {
    method_loss_[{method, to_dc}] = p;
  }
  env_->Trace(StrCat("loss of ", method, to_dc < 0 ? "" : StrCat(" to dc", to_dc), " ", p));
}

void SimNetwork::ClearMethodLoss() { method_loss_.clear(); }

void SimNetwork::SetSlow(int dc, absl::Duration extra) {
  slow_[dc] = extra;
  env_->Trace(StrCat("slow dc", dc, " +", absl::FormatDuration(extra)));
}

absl::Duration SimNetwork::Delay(int from_dc, int to_dc) {
  absl::Duration d = latency_[from_dc][to_dc];
  if (faults_.jitter > absl::ZeroDuration())
    d += absl::Microseconds(env_->Uniform(absl::ToInt64Microseconds(faults_.jitter) + 1));
  if (auto it = slow_.find(from_dc); it != slow_.end()) d += it->second;
  if (auto it = slow_.find(to_dc); it != slow_.end() && to_dc != from_dc) d += it->second;
  return d;
}

void SimNetwork::Send(const std::string& from, uint64_t from_incarnation, std::string_view to,
                      std::string_view method, std::string request, absl::Duration timeout,
                      Transport::ReplyCallback done) {
  if (!Alive(from, from_incarnation)) return;  // a dead process sends nothing
  auto dst = nodes_.find(to);
  if (dst == nodes_.end()) {
    env_->Schedule(
        absl::ZeroDuration(),
        [done = std::make_shared<Transport::ReplyCallback>(std::move(done)), to = std::string(to)] {
          (*done)(absl::NotFoundError(StrCat("no node ", to)));
        });
    return;
  }
  const uint64_t id = next_call_++;
  const int from_dc = nodes_.at(from).dc, to_dc = dst->second.dc;
  const std::string to_address(to), method_name(method);
  ++sent_;
  if (from_dc != to_dc) remote_of_[from] += 2;  // the request and its reply
  struct Call {
    bool finished = false;
    Transport::ReplyCallback done;
  };
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  if (env_->tracing()) env_->Trace(StrCat("send #", id, " ", from, " -> ", to, " ", method));

  // The caller's timeout.
  env_->Schedule(timeout, [this, call, from, from_incarnation, id] {
    if (call->finished || !Alive(from, from_incarnation)) return;
    call->finished = true;
    if (env_->tracing()) env_->Trace(StrCat("timeout #", id));
    auto done = std::move(call->done);
    done(absl::DeadlineExceededError("request timed out"));
  });

  auto reply = [this, call, from, from_incarnation, to_address, from_dc, to_dc,
                id](absl::StatusOr<std::string> r) {
    if (blocked_.count({to_dc, from_dc}) || env_->Chance(faults_.loss)) {
      ++dropped_;
      if (env_->tracing()) env_->Trace(StrCat("drop reply #", id));
      return;
    }
    auto shared = std::make_shared<absl::StatusOr<std::string>>(std::move(r));
    env_->Schedule(Delay(to_dc, from_dc), [this, call, from, from_incarnation, id, shared] {
      if (call->finished || !Alive(from, from_incarnation)) return;
      call->finished = true;
      if (env_->tracing()) env_->Trace(StrCat("reply #", id, shared->ok() ? " ok" : " error"));
      auto done = std::move(call->done);
      done(std::move(*shared));
    });
  };

  const int copies = env_->Chance(faults_.duplicate) ? 2 : 1;
  auto body = std::make_shared<std::string>(std::move(request));
  double method_loss = 0;
  for (int dc : {-1, to_dc})
    if (auto m = method_loss_.find({method_name, dc}); m != method_loss_.end())
      method_loss = std::max(method_loss, m->second);
  for (int copy = 0; copy < copies; ++copy) {
    if (blocked_.count({from_dc, to_dc}) || env_->Chance(faults_.loss) ||
        env_->Chance(method_loss)) {
      ++dropped_;
      if (env_->tracing()) env_->Trace(StrCat("drop #", id));
      continue;
    }
    env_->Schedule(Delay(from_dc, to_dc), [this, to_address, method_name, body, reply, id] {
      auto it = nodes_.find(to_address);
      if (it == nodes_.end() || !it->second.up) {
        ++dropped_;
        return;
      }
      const uint64_t incarnation = it->second.incarnation;
      auto h = it->second.handlers.find(method_name);
      if (env_->tracing()) env_->Trace(StrCat("deliver #", id));
      if (h == it->second.handlers.end()) {
        reply(absl::UnimplementedError(StrCat(to_address, " does not serve ", method_name)));
        return;
      }
      Handler handler = h->second;  // the handler may crash its own node
      handler(*body, [this, to_address, incarnation, reply](absl::StatusOr<std::string> r) {
        if (!Alive(to_address, incarnation)) return;  // answered by a dead incarnation
        reply(std::move(r));
      });
    });
  }
}

// ---- SimBigtable -------------------------------------------------------------------

SimBigtable::SimBigtable(SimEnv* env, storage::BigtableClient* inner, std::string prefix,
                         absl::Duration disk_latency)
    : env_(env), inner_(inner), prefix_(std::move(prefix)), disk_(disk_latency) {}

absl::Status SimBigtable::Outage() const {
  return absl::UnavailableError(StrCat("the tablet server of ", prefix_, "* is down"));
}

template <typename T>
void SimBigtable::Later(T result, Callback<T> done) {
  ++ops_;
  const absl::Duration d =
      disk_ / 2 + absl::Microseconds(env_->Uniform(absl::ToInt64Microseconds(disk_) + 1)) + extra_;
  auto r = std::make_shared<T>(std::move(result));
  auto cb = std::make_shared<Callback<T>>(std::move(done));
  env_->Schedule(d, [r, cb] { (*cb)(std::move(*r)); });
}

void SimBigtable::ReadRow(std::string table, std::string row, storage::ReadOptions options,
                          Callback<absl::StatusOr<std::optional<storage::Row>>> done) {
  absl::StatusOr<std::optional<storage::Row>> result = Outage();
  if (!down_)
    inner_->ReadRow(prefix_ + table, std::move(row), std::move(options),
                    [&](absl::StatusOr<std::optional<storage::Row>> r) { result = std::move(r); });
  Later(std::move(result), std::move(done));
}

void SimBigtable::ReadRows(std::string table, storage::RowRange range, storage::ReadOptions options,
                           Callback<absl::StatusOr<std::vector<storage::Row>>> done) {
  absl::StatusOr<std::vector<storage::Row>> result = Outage();
  if (!down_)
    inner_->ReadRows(prefix_ + table, std::move(range), std::move(options),
                     [&](absl::StatusOr<std::vector<storage::Row>> r) { result = std::move(r); });
  Later(std::move(result), std::move(done));
}

absl::Status SimBigtable::Write(const std::string& table, const std::string& row,
                                std::vector<storage::Mutation> mutations, int64_t timestamp) {
  std::optional<std::vector<storage::Mutation>> seen;
  if (observer_) seen = mutations;
  absl::Status result;
  inner_->MutateRow(prefix_ + table, row, std::move(mutations), timestamp,
                    [&](absl::Status s) { result = std::move(s); });
  if (result.ok() && seen) observer_(table, row, *seen);
  return result;
}

void SimBigtable::MutateRow(std::string table, std::string row,
                            std::vector<storage::Mutation> mutations, int64_t timestamp,
                            Callback<absl::Status> done) {
  if (down_) return Later(Outage(), std::move(done));
  if (env_->Chance(twice_)) {
    // The replay: the same write again, later, whatever happened meanwhile.
    ++repeated_writes_;
    const absl::Duration after =
        absl::Microseconds(1 + env_->Uniform(absl::ToInt64Microseconds(max_replay_delay_) + 1));
    env_->Schedule(after, [this, table, row, mutations, timestamp, gen = generation_] {
      if (gen != generation_) return;  // the disk it was queued for is gone
      if (env_->tracing()) env_->Trace(StrCat("bigtable ", prefix_, " repeats a write of ", row));
      if (!down_) (void)Write(table, row, mutations, timestamp);
    });
  }
  if (env_->Chance(late_)) {
    ++late_writes_;
    const absl::Duration after =
        absl::Microseconds(1 + env_->Uniform(absl::ToInt64Microseconds(max_delay_) + 1));
    auto cb = std::make_shared<Callback<absl::Status>>(std::move(done));
    auto m = std::make_shared<std::vector<storage::Mutation>>(std::move(mutations));
    env_->Schedule(after, [this, table = std::move(table), row = std::move(row), m, timestamp, cb,
                           gen = generation_] {
      absl::Status result =
          gen != generation_
              ? absl::UnavailableError(StrCat("the tablet server of ", prefix_,
                                              "* lost its disk before this write landed"))
          : down_ ? Outage()
                  : Write(table, row, std::move(*m), timestamp);
      Later(std::move(result), std::move(*cb));
    });
    return;
  }
  absl::Status result = Write(table, row, std::move(mutations), timestamp);
  Later(std::move(result), std::move(done));
}

void SimBigtable::CheckAndMutateRow(std::string table, std::string row,
                                    storage::RowFilter predicate,
                                    std::vector<storage::Mutation> if_true,
                                    std::vector<storage::Mutation> if_false,
                                    Callback<absl::StatusOr<bool>> done) {
  absl::StatusOr<bool> result = Outage();
  if (!down_) {
    std::optional<std::pair<std::vector<storage::Mutation>, std::vector<storage::Mutation>>> seen;
    if (observer_) seen.emplace(if_true, if_false);
    inner_->CheckAndMutateRow(prefix_ + table, row, std::move(predicate), std::move(if_true),
                              std::move(if_false),
                              [&](absl::StatusOr<bool> r) { result = std::move(r); });
    if (result.ok() && seen) observer_(table, row, *result ? seen->first : seen->second);
  }
  Later(std::move(result), std::move(done));
}

}  // namespace megastore::sim
