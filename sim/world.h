// The simulator's world: one thread, virtual time, one seed (docs/architecture.md).
//
//  SimEnv       Env on virtual time: timers run in deadline order (ties in
//               the order they were scheduled) when the world runs.
//  SimNetwork   nodes with handlers, and one SimTransport per incarnation of
//               a node; messages take the link's one-way latency plus jitter
//               and may be lost, duplicated or reordered; links can be cut in
//               one direction or both; crashed nodes drop everything, and
//               a crash silences the old incarnation's pending work for good.
//  SimBigtable  a datacenter's Bigtable: a real tablet server (RocksDB) in
//               a temporary directory, answering after a disk delay; it
//               keeps its data through crashes of the servers using it.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/random.h"
#include "base/transport.h"
#include "storage/client/bigtable_client.h"

namespace megastore::sim {

// Tasks: blocking code (a master's reconcile loop, a client making
// blocking calls, an RPC handler that waits) runs as a task, on a thread of
// its own that runs only while the simulator hands it the turn. Exactly one
// of the simulator's thread and its tasks runs at any moment, and tasks are
// resumed in the order they were started, so a seed still replays exactly.
// A task's Wait, WaitFor, SleepFor and LockBlocking park it and give the
// turn back; the simulator resumes it, between events, once what it waits
// for has happened. Events always run on the simulator's thread.
class SimEnv : public Env {
 public:
  explicit SimEnv(uint64_t seed);
  // A task that never finished stays parked, its thread detached (and
  // counted in leaked_tasks()): a run's checkers should have reported it.
  ~SimEnv() override;

  // The clocks may be read from other threads (the tablet server's
  // compaction filters run on RocksDB's); everything else is the
  // simulator's one thread.
  int64_t NowMicros() override { return kEpochMicros + now(); }
  int64_t MonotonicMicros() override { return now(); }
  TimerId Schedule(absl::Duration after, std::function<void()> fn) override;
  bool Cancel(TimerId id) override;
  // Runs the other events until `d` from now (a blocking caller on the
  // simulator's thread); parks a task until then.
  void SleepFor(absl::Duration d) override;
  // Runs events until `done` is notified: a blocking caller on the
  // simulator's thread, never one inside an event (checked: the outer run's
  // limits would be ignored). Virtual time advances until the callback
  // comes; the caller's deadlines bound that. With no event left at all it
  // stops the process: the callback can never come.
  void Wait(absl::Notification& done) override;
  bool WaitFor(absl::Notification& done, absl::Duration timeout) override;
  std::unique_ptr<Thread> StartThread(std::string name, std::function<void()> fn) override;
  void LockBlocking(absl::Mutex& mu) override ABSL_NO_THREAD_SAFETY_ANALYSIS;
  uint64_t Random64() override { return rng_.Next(); }
  bool simulated() const override { return true; }
  uint64_t seed() const override { return seed_; }

  // Runs timers until none is due at or before `until` (virtual micros),
  // or `stop` returns true (checked between timers). Returns false if
  // `stop` ended it.
  bool RunUntil(int64_t until, const std::function<bool()>& stop = nullptr);
  int64_t now() const { return now_.load(std::memory_order_relaxed); }
  // Uniform in [0, n).
  uint64_t Uniform(uint64_t n) { return n == 0 ? 0 : rng_.Uniform(n); }
  bool Chance(double p) { return p > 0 && rng_.NextDouble() < p; }

  // Trace lines ("<micros> <text>") go to `trace` when set.
  void set_trace(std::vector<std::string>* trace) { trace_ = trace; }
  bool tracing() const { return trace_ != nullptr; }
  void Trace(std::string_view text);

  static constexpr int64_t kEpochMicros = 1'700'000'000'000'000;

  // The names of tasks started and not finished.
  std::vector<std::string> UnfinishedTasks() const;
  // Gives up on the unfinished tasks (a run that already failed): joining
  // one returns at once, and they stay parked until the SimEnv goes (then
  // detached). Without it, tearing down a failed run could wait forever.
  void AbandonTasks() { abandoned_ = true; }
  static size_t leaked_tasks();

 private:
  static constexpr size_t kMaxTasks = 2000;  // started and not finished
  struct Task;
  class TaskThread;
  static thread_local Task* current_task_;
  // Resumes, one at a time and in start order, every parked task that can
  // go on, until none can. Whether any ran.
  bool RunReadyTasks();
  // Gives the turn back from the task running on this thread until
  // `ready` holds (checked by the simulator's thread between events).
  void Park(const std::function<bool()>& ready);
  // Waits on the simulator's thread until `ready`: runs tasks and events.
  void RunTill(const std::function<bool()>& ready);
  bool OnTask() const;

  const uint64_t seed_;
  Random rng_;
  std::atomic<int64_t> now_{0};
  int event_depth_ = 0;  // events running (RunUntil and Wait nest)
  TimerQueue timers_;
  std::vector<std::string>* trace_ = nullptr;
  std::vector<std::shared_ptr<Task>> tasks_;  // started and not yet finished, in start order
  bool abandoned_ = false;
};

// One process's view of the simulator's clock: the same timers and
// randomness, a wall clock that may be off by `offset` (a clock jump or
// skew), and clocks that may run at a rate off the world's by `drift` (a
// fraction: +1e-3 runs 1 ms per second fast). Both its clocks and its
// timers follow its own rate.
class ProcessEnv : public Env {
 public:
  explicit ProcessEnv(SimEnv* world, double drift = 0) : world_(world), drift_(drift) {}
  int64_t NowMicros() override { return SimEnv::kEpochMicros + Local(world_->now()) + offset_; }
  int64_t MonotonicMicros() override { return Local(world_->now()); }
  TimerId Schedule(absl::Duration after, std::function<void()> fn) override {
    return world_->Schedule(World(after), std::move(fn));
  }
  bool Cancel(TimerId id) override { return world_->Cancel(id); }
  bool simulated() const override { return true; }
  void Wait(absl::Notification& done) override { world_->Wait(done); }
  bool WaitFor(absl::Notification& done, absl::Duration timeout) override {
    return world_->WaitFor(done, World(timeout));
  }
  std::unique_ptr<Thread> StartThread(std::string name, std::function<void()> fn) override {
    return world_->StartThread(std::move(name), std::move(fn));
  }
  void LockBlocking(absl::Mutex& mu) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    world_->LockBlocking(mu);
  }
  void SleepFor(absl::Duration d) override { world_->SleepFor(World(d)); }
  uint64_t Random64() override { return world_->Random64(); }
  uint64_t seed() const override { return world_->seed(); }

  void set_offset(int64_t micros) { offset_ = micros; }
  int64_t offset() const { return offset_; }
  double drift() const { return drift_; }

 private:
  // `d` of this process's time, in the world's (rounded up: never early).
  absl::Duration World(absl::Duration d) const {
    if (d == absl::InfiniteDuration()) return d;
    const double world = static_cast<double>(absl::ToInt64Microseconds(d)) / (1.0 + drift_);
    return absl::Microseconds(static_cast<int64_t>(std::ceil(world)));
  }
  int64_t Local(int64_t world_micros) const {
    return static_cast<int64_t>(static_cast<double>(world_micros) * (1.0 + drift_));
  }
  SimEnv* const world_;
  const double drift_;
  int64_t offset_ = 0;
};

struct LinkFaults {
  double loss = 0;        // probability a message is dropped
  double duplicate = 0;   // probability a request is delivered twice
  absl::Duration jitter;  // extra delay, uniform in [0, jitter]
};

class SimNetwork {
 public:
  // `latency[a][b]`: one-way latency from datacenter a to b.
  SimNetwork(SimEnv* env, std::vector<std::vector<absl::Duration>> latency);
  ~SimNetwork();

  // Adds a node in datacenter `dc` (up, with no handlers).
  void AddNode(const std::string& address, int dc);
  void SetHandler(const std::string& address, std::string_view method, Handler handler);
  // Drops every message to or from the node and silences its current
  // incarnation; its handlers are removed (the restarted process adds its own).
  void Crash(const std::string& address);
  void Restart(const std::string& address);
  bool up(const std::string& address) const;

  // A transport that sends as `address`'s current incarnation. Owned by the
  // network; after a crash of the node it never delivers anything again.
  Transport* TransportFor(const std::string& address);

  void set_faults(LinkFaults f) { faults_ = f; }
  // Drops requests of `method` (e.g. "coord.Invalidate") sent to datacenter
  // `to_dc` (-1: to any) with probability `p`, on top of the links' loss;
  // 0 ends it.
  void set_method_loss(const std::string& method, double p, int to_dc = -1);
  void ClearMethodLoss();
  // Cuts (or restores) messages from datacenter `from` to `to`.
  void Block(int from, int to, bool blocked);
  void HealAll();
  // Extra delay on every message to or from datacenter `dc`.
  void SetSlow(int dc, absl::Duration extra);

  uint64_t messages_sent() const { return sent_; }
  uint64_t messages_dropped() const { return dropped_; }
  // Messages between datacenters sent by `address` (requests and replies
  // to its requests).
  uint64_t remote_messages_of(const std::string& address) const {
    auto it = remote_of_.find(address);
    return it == remote_of_.end() ? 0 : it->second;
  }

 private:
  struct Node {
    int dc = 0;
    bool up = true;
    uint64_t incarnation = 1;
    std::map<std::string, Handler, std::less<>> handlers;
  };
  class Endpoint;
  friend class Endpoint;

  void Send(const std::string& from, uint64_t from_incarnation, std::string_view to,
            std::string_view method, std::string request, absl::Duration timeout,
            Transport::ReplyCallback done);
  absl::Duration Delay(int from_dc, int to_dc);
  bool Alive(const std::string& address, uint64_t incarnation) const;

  SimEnv* const env_;
  const std::vector<std::vector<absl::Duration>> latency_;
  std::map<std::string, Node, std::less<>> nodes_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::set<std::pair<int, int>> blocked_;
  std::map<int, absl::Duration> slow_;
  LinkFaults faults_;
  std::map<std::pair<std::string, int>, double> method_loss_;  // (method, to dc or -1)
  uint64_t sent_ = 0, dropped_ = 0;
  std::map<std::string, uint64_t> remote_of_;
  uint64_t next_call_ = 1;
};

// One datacenter's Bigtable on a shared tablet server: its tables are the
// server's tables prefixed with "<dc>.".
class SimBigtable : public storage::BigtableClient {
 public:
  SimBigtable(SimEnv* env, storage::BigtableClient* inner, std::string prefix,
              absl::Duration disk_latency);

  void ReadRow(std::string table, std::string row, storage::ReadOptions options,
               Callback<absl::StatusOr<std::optional<storage::Row>>> done) override;
  void ReadRows(std::string table, storage::RowRange range, storage::ReadOptions options,
                Callback<absl::StatusOr<std::vector<storage::Row>>> done) override;
  void MutateRow(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override;
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override;

  // Extra delay on every operation (a slow replica).
  void set_extra_latency(absl::Duration d) { extra_ = d; }
  // A tablet server outage: every operation fails with Unavailable (after
  // the usual delay) and changes nothing; the data is kept.
  void set_down(bool down) { down_ = down; }
  // Late and repeated writes, as a Bigtable client's retries and a server's
  // queue produce them: each MutateRow is, with probability `late`, applied
  // only after a random pause of up to `max_delay` (its reply after that);
  // and with probability `twice`, applied again at a random moment up to
  // `max_replay_delay` later (a replay of a write whose reply was lost,
  // landing after the caller moved on; the cell client retries for up to a
  // minute). Conditional writes are never repeated.
  void set_write_faults(double late, double twice, absl::Duration max_delay,
                        absl::Duration max_replay_delay) {
    late_ = late;
    twice_ = twice;
    max_delay_ = max_delay;
    max_replay_delay_ = max_replay_delay;
  }
  // Called with every write as it is applied to the datacenter's tables
  // (table without the datacenter prefix): the simulator's step invariants
  // watch the log through it. Late and repeated writes are seen when they land.
  using WriteObserver = std::function<void(const std::string& table, const std::string& row,
                                           const std::vector<storage::Mutation>& applied)>;
  void set_write_observer(WriteObserver fn) { observer_ = std::move(fn); }

  // The datacenter's tablet server lost its disk: writes still queued (late
  // or to be repeated) are lost with it; a late one's caller is told so.
  void DropQueuedWrites() { ++generation_; }

  uint64_t late_writes() const { return late_writes_; }
  uint64_t repeated_writes() const { return repeated_writes_; }
  bool down() const { return down_; }
  uint64_t operations() const { return ops_; }

 private:
  template <typename T>
  void Later(T result, Callback<T> done);
  absl::Status Outage() const;
  // One MutateRow on the inner Bigtable, shown to the observer if applied.
  absl::Status Write(const std::string& table, const std::string& row,
                     std::vector<storage::Mutation> mutations, int64_t timestamp);

  SimEnv* const env_;
  storage::BigtableClient* const inner_;
  const std::string prefix_;
  const absl::Duration disk_;
  absl::Duration extra_;
  bool down_ = false;
  uint64_t generation_ = 0;  // DropQueuedWrites
  uint64_t ops_ = 0;
  double late_ = 0, twice_ = 0;
  absl::Duration max_delay_, max_replay_delay_;
  uint64_t late_writes_ = 0, repeated_writes_ = 0;
  WriteObserver observer_;
};

}  // namespace megastore::sim
