#include "replication/log_replica.h"

#include "absl/synchronization/notification.h"
#include "base/await.h"
#include "base/coding.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::replication {
namespace {

class LogReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::TabletServerOptions o;
    o.data_dir = dir_.path();
    o.sync_log = false;
    o.maintenance_interval = absl::ZeroDuration();
    auto s = storage::TabletServer::Open(o, Env::Default());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    storage::TableSchema schema;
    schema.set_name("t");
    *schema.add_families() = LogFamilySchema();
    *schema.add_families() = DataFamilySchema("e");
    ASSERT_TRUE(server_->CreateTable(schema).ok());
    bigtable_ = std::make_unique<storage::InProcessBigtable>(server_.get());
  }

  GroupRef Group() const {
    GroupRef g;
    g.set_table("t");
    g.set_root("root");
    return g;
  }

  absl::StatusOr<PaxosReply> Step(LogReplica& r, uint64_t pos, bool accept, uint64_t round,
                                  uint64_t proposer, const std::string& value = "") {
    PaxosRequest req;
    *req.mutable_group() = Group();
    req.set_position(pos);
    req.set_accept(accept);
    req.mutable_ballot()->set_round(round);
    req.mutable_ballot()->set_proposer(proposer);
    req.set_value(EntryValue(value));
    return Await<PaxosReply>([&](auto cb) { r.Paxos(req, std::move(cb)); });
  }

  // A proposed value: a log entry named `id` ("" for a no-op).
  static std::string EntryValue(const std::string& id) {
    LogEntry e;
    e.set_id(id);
    return e.SerializeAsString();
  }

  absl::StatusOr<ApplyReply> Apply(LogReplica& r, uint64_t pos, const LogEntry& e) {
    ApplyRequest req;
    *req.mutable_group() = Group();
    req.set_position(pos);
    req.set_value(e.SerializeAsString());
    return Await<ApplyReply>([&](auto cb) { r.Apply(req, std::move(cb)); });
  }

  absl::StatusOr<StateReply> State(LogReplica& r) {
    return Await<StateReply>([&](auto cb) { r.State(Group(), std::move(cb)); });
  }

  std::optional<std::string> Value(LogReplica& r, const std::string& row, int64_t ts) {
    ReadRequest req;
    *req.mutable_group() = Group();
    req.set_row(row);
    req.set_family("e");
    req.set_timestamp(ts);
    absl::StatusOr<ReadReply> reply =
        Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok() || reply->values_size() == 0) return std::nullopt;
    return reply->values(0);
  }

  static LogEntry Set(const std::string& id, const std::string& row, const std::string& value,
                      int64_t ts) {
    LogEntry e;
    e.set_id(id);
    e.set_timestamp(ts);
    e.set_next_leader(1);
    RowChange* rc = e.add_changes();
    rc->set_row(row);
    CellChange* cc = rc->add_cells();
    cc->set_family("e");
    cc->set_qualifier("v");
    cc->set_value(value);
    return e;
  }

  static LogEntry Delete(const std::string& id, const std::string& row, int64_t ts) {
    LogEntry e = Set(id, row, "", ts);
    e.mutable_changes(0)->mutable_cells(0)->set_delete_cells(true);
    return e;
  }

  TestDir dir_;
  std::unique_ptr<storage::TabletServer> server_;
  std::unique_ptr<storage::InProcessBigtable> bigtable_;
};

TEST_F(LogReplicaTest, AcceptorStateIsPersistedInTheRootRowAndSurvivesANewServer) {
  {
    LogReplica r(bigtable_.get(), ReplicaType::kFull);
    absl::StatusOr<PaxosReply> p = Step(r, 1, false, 3, 7);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->ok());
    EXPECT_FALSE(p->has_accepted());
    ASSERT_TRUE(Step(r, 1, true, 3, 7, "v1")->ok());
  }
  LogReplica again(bigtable_.get(), ReplicaType::kFull);  // stateless: a restart
  absl::StatusOr<PaxosReply> p = Step(again, 1, false, 2, 9);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->ok()) << "ballot (2,9) is below the promise (3,7)";
  p = Step(again, 1, false, 4, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->ok());
  ASSERT_TRUE(p->has_accepted());
  EXPECT_EQ(p->accepted().round(), 3u);
  EXPECT_EQ(p->accepted_value(), EntryValue("v1"));
  absl::StatusOr<StateReply> s = State(again);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->top(), 1u);
  EXPECT_EQ(s->applied().position(), 0u);
}

TEST_F(LogReplicaTest, BallotZeroHasOneOwnerPerPosition) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  EXPECT_TRUE(Step(r, 1, true, 0, 0, "first")->ok());
  EXPECT_TRUE(Step(r, 1, true, 0, 0, "first")->ok()) << "a duplicated accept is harmless";
  EXPECT_FALSE(Step(r, 1, true, 0, 0, "second")->ok());
  EXPECT_TRUE(Step(r, 2, true, 0, 0, "second")->ok()) << "another position is another instance";
}

TEST_F(LogReplicaTest, ApplyWaitsForHolesAndThenAppliesInOrder) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  ASSERT_TRUE(Step(r, 1, true, 0, 0, "w1")->ok());  // accepted here, not yet learned
  absl::StatusOr<ApplyReply> a = Apply(r, 2, Set("w2", "root/k", "two", 200));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->applied().position(), 0u) << "position 1 is not known yet";
  EXPECT_EQ(Value(r, "root/k", 1000), std::nullopt);
  a = Apply(r, 1, Set("w1", "root/k", "one", 100));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->applied().position(), 2u);
  EXPECT_EQ(a->applied().timestamp(), 200);
  EXPECT_EQ(a->applied().next_leader(), 1);
  EXPECT_EQ(Value(r, "root/k", 100), "one") << "each position's data is at its timestamp";
  EXPECT_EQ(Value(r, "root/k", 200), "two");
  // The position's value is now known here: Paxos answers with it.
  absl::StatusOr<PaxosReply> p = Step(r, 1, false, 9, 9);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->learned());
  LogEntry e;
  ASSERT_TRUE(e.ParseFromString(p->learned_value()));
  EXPECT_EQ(e.id(), "w1");
  ReadLogRequest rl;
  *rl.mutable_group() = Group();
  rl.set_from(1);
  rl.set_to(5);
  absl::StatusOr<ReadLogReply> log =
      Await<ReadLogReply>([&](auto cb) { r.ReadLog(rl, std::move(cb)); });
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->positions_size(), 2);
  EXPECT_EQ(log->positions(1), 2u);
}

// The next position to apply takes two row writes: its data, then the
// root row's learned value, top and applied record at once. An apply of a
// position already applied writes nothing.
TEST_F(LogReplicaTest, TheNextPositionIsAppliedInTwoRowWritesAndARepeatInNone) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Set("w1", "root/k", "one", 100)).ok());
  ASSERT_TRUE(Step(r, 2, true, 0, 0, "w2")->ok());
  auto mutated = [&] { return server_->Stats().tablets.rows_mutated; };
  uint64_t before = mutated();
  absl::StatusOr<ApplyReply> a = Apply(r, 2, Set("w2", "root/k", "two", 200));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->applied().position(), 2u);
  EXPECT_EQ(mutated() - before, 2u);
  EXPECT_EQ(Value(r, "root/k", 200), "two");
  absl::StatusOr<StateReply> st = State(r);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->top(), 2u);
  EXPECT_EQ(st->applied().position(), 2u);
  absl::StatusOr<PaxosReply> p = Step(r, 2, false, 9, 9);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->learned()) << "the learned value was written with the applied record";

  before = mutated();
  a = Apply(r, 1, Set("w1", "root/k", "one", 100));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->applied().position(), 2u);
  EXPECT_EQ(mutated(), before);
  // Next without an accept here (a replica that missed it): the top moves.
  a = Apply(r, 3, Set("w3", "root/k", "three", 300));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->applied().position(), 3u);
  st = State(r);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->top(), 3u);
}

// Forwards every call to another client; wrappers below override a few.
class ForwardingBigtable : public storage::BigtableClient {
 public:
  explicit ForwardingBigtable(storage::BigtableClient* to) : to_(to) {}
  void ReadRow(std::string table, std::string row, storage::ReadOptions options,
               Callback<absl::StatusOr<std::optional<storage::Row>>> done) override {
    to_->ReadRow(std::move(table), std::move(row), std::move(options), std::move(done));
  }
  void ReadRows(std::string table, storage::RowRange range, storage::ReadOptions options,
                Callback<absl::StatusOr<std::vector<storage::Row>>> done) override {
    to_->ReadRows(std::move(table), std::move(range), std::move(options), std::move(done));
  }
  void MutateRow(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override {
    to_->MutateRow(std::move(table), std::move(row), std::move(mutations), timestamp,
                   std::move(done));
  }
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override {
    to_->CheckAndMutateRow(std::move(table), std::move(row), std::move(predicate),
                           std::move(if_true), std::move(if_false), std::move(done));
  }
  void MutateRowLazily(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                       int64_t timestamp, Callback<absl::Status> done) override {
    to_->MutateRowLazily(std::move(table), std::move(row), std::move(mutations), timestamp,
                         std::move(done));
  }
  void CheckAndMutateRowLazily(std::string table, std::string row, storage::RowFilter predicate,
                               std::vector<storage::Mutation> if_true,
                               std::vector<storage::Mutation> if_false,
                               Callback<absl::StatusOr<bool>> done) override {
    to_->CheckAndMutateRowLazily(std::move(table), std::move(row), std::move(predicate),
                                 std::move(if_true), std::move(if_false), std::move(done));
  }
  void SyncLazyWrites(Callback<absl::Status> done) override {
    to_->SyncLazyWrites(std::move(done));
  }

 protected:
  storage::BigtableClient* const to_;
};

// Forwards to another client, holding back the first row write that
// records an applied position until released.
class HoldingBigtable : public ForwardingBigtable {
 public:
  using ForwardingBigtable::ForwardingBigtable;
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override {
    bool applied = false;
    for (const storage::Mutation& m : if_true) applied = applied || m.qualifier == "S:applied";
    auto run = [=, this, done = std::move(done)]() mutable {
      to_->CheckAndMutateRow(table, row, predicate, if_true, if_false, std::move(done));
    };
    {
      absl::MutexLock lock(&mu_);
      if (applied && hold_ && !held_.HasBeenNotified()) {
        run_held_ = std::move(run);
        held_.Notify();
        return;
      }
    }
    run();
  }
  // Held the same way (and written durably).
  void CheckAndMutateRowLazily(std::string table, std::string row, storage::RowFilter predicate,
                               std::vector<storage::Mutation> if_true,
                               std::vector<storage::Mutation> if_false,
                               Callback<absl::StatusOr<bool>> done) override {
    CheckAndMutateRow(std::move(table), std::move(row), std::move(predicate), std::move(if_true),
                      std::move(if_false), std::move(done));
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  // Waits (at most 10 s) for the held write; false if none came.
  bool AwaitHeld() { return held_.WaitForNotificationWithTimeout(absl::Seconds(10)); }
  void Release() {
    absl::AnyInvocable<void()> run;
    {
      absl::MutexLock lock(&mu_);
      hold_ = false;
      run = std::move(run_held_);
    }
    run();
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification held_;
  absl::AnyInvocable<void()> run_held_ ABSL_GUARDED_BY(mu_);
};

// Forwards to another client, counting the writes of applied records by
// how they were asked for: durably, or lazily.
class ApplyCountingBigtable : public ForwardingBigtable {
 public:
  using ForwardingBigtable::ForwardingBigtable;
  void MutateRow(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override {
    Count(mutations, &durable);
    bool removal = false;  // a truncation's: it deletes the top
    for (const storage::Mutation& m : mutations)
      removal =
          removal || (m.qualifier == "S:top" && m.type == storage::Mutation::Type::kDeleteCells);
    auto run = [this, table = std::move(table), row = std::move(row),
                mutations = std::move(mutations), timestamp, done = std::move(done)]() mutable {
      to_->MutateRow(std::move(table), std::move(row), std::move(mutations), timestamp,
                     std::move(done));
    };
    {
      absl::MutexLock lock(&mu_);
      if (removal && hold_removal_) {
        held_ = std::move(run);
        return;
      }
    }
    run();
  }
  // Holds the next truncation's removal until ReleaseRemoval.
  void HoldRemoval() {
    absl::MutexLock lock(&mu_);
    hold_removal_ = true;
  }
  bool RemovalHeld() {
    absl::MutexLock lock(&mu_);
    return held_ != nullptr;
  }
  void ReleaseRemoval() {
    absl::AnyInvocable<void()> run;
    {
      absl::MutexLock lock(&mu_);
      hold_removal_ = false;
      run = std::move(held_);
    }
    if (run) run();
  }
  void MutateRowLazily(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                       int64_t timestamp, Callback<absl::Status> done) override {
    Count(mutations, &lazy);
    ForwardingBigtable::MutateRowLazily(std::move(table), std::move(row), std::move(mutations),
                                        timestamp, std::move(done));
  }
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override {
    Count(if_true, &durable);
    ForwardingBigtable::CheckAndMutateRow(std::move(table), std::move(row), std::move(predicate),
                                          std::move(if_true), std::move(if_false), std::move(done));
  }
  void CheckAndMutateRowLazily(std::string table, std::string row, storage::RowFilter predicate,
                               std::vector<storage::Mutation> if_true,
                               std::vector<storage::Mutation> if_false,
                               Callback<absl::StatusOr<bool>> done) override {
    Count(if_true, &lazy);
    ForwardingBigtable::CheckAndMutateRowLazily(std::move(table), std::move(row),
                                                std::move(predicate), std::move(if_true),
                                                std::move(if_false), std::move(done));
  }
  void SyncLazyWrites(Callback<absl::Status> done) override {
    ++syncs;
    ForwardingBigtable::SyncLazyWrites(std::move(done));
  }
  std::atomic<int> durable{0}, lazy{0};  // applied records written
  std::atomic<int> syncs{0};             // SyncLazyWrites calls

 private:
  static void Count(const std::vector<storage::Mutation>& ms, std::atomic<int>* n) {
    for (const storage::Mutation& m : ms)
      if (m.qualifier == "S:applied") ++*n;
  }
  absl::Mutex mu_;
  bool hold_removal_ ABSL_GUARDED_BY(mu_) = false;
  absl::AnyInvocable<void()> held_ ABSL_GUARDED_BY(mu_);
};

// A replica applies a position with a lazy applied record only where a
// power cut losing it leaves its durable top at or above the position (it
// accepted or promised there itself, so current reads catch it up), and
// only for an entry that writes nothing outside its group.
TEST_F(LogReplicaTest, TheAppliedRecordIsLazyOnlyWhereTheLogHereHoldsThePosition) {
  ApplyCountingBigtable counting(bigtable_.get());
  LogReplica r(&counting, ReplicaType::kFull);
  // Position 1 learned without an accept here: durable.
  ASSERT_TRUE(Apply(r, 1, Set("w1", "root/k", "one", 100)).ok());
  EXPECT_EQ(counting.durable.load(), 1);
  EXPECT_EQ(counting.lazy.load(), 0);
  // Position 2 accepted here first: lazy.
  ASSERT_TRUE(Step(r, 2, true, 0, 0, "w2")->ok());
  ASSERT_TRUE(Apply(r, 2, Set("w2", "root/k", "two", 200)).ok());
  EXPECT_EQ(counting.durable.load(), 1);
  EXPECT_EQ(counting.lazy.load(), 1);
  EXPECT_EQ(Value(r, "root/k", 200), "two");
  // Accepted here but writing another table's row (a global index entry):
  // durable.
  LogEntry outside = Set("w3", "root/k", "three", 300);
  RowChange* index = outside.add_changes();
  index->set_table("t");
  index->set_row("index/3");
  *index->add_cells() = outside.changes(0).cells(0);
  ASSERT_TRUE(Step(r, 3, true, 0, 0, "w3")->ok());
  ASSERT_TRUE(Apply(r, 3, outside).ok());
  EXPECT_EQ(counting.durable.load(), 2);
  EXPECT_EQ(counting.lazy.load(), 1);
  // A promise here (a prepare's) writes the top durably as well.
  ASSERT_TRUE(Step(r, 4, false, 1, 1)->ok());
  ASSERT_TRUE(Apply(r, 4, Set("w4", "root/k", "four", 400)).ok());
  EXPECT_EQ(counting.lazy.load(), 2);
  // Another replica object (a restart) knows nothing of what was accepted
  // before it: durable.
  LogReplica restarted(&counting, ReplicaType::kFull);
  ASSERT_TRUE(Apply(restarted, 5, Set("w5", "root/k", "five", 500)).ok());
  EXPECT_EQ(counting.durable.load(), 3);
  EXPECT_EQ(counting.lazy.load(), 2);
  absl::StatusOr<StateReply> st = State(restarted);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->applied().position(), 5u);
  EXPECT_EQ(counting.syncs.load(), 0);
  // The log clean-up's state is synced first; a plain one is not.
  st = Await<StateReply>([&](auto cb) { restarted.DurableState(Group(), std::move(cb)); });
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->applied().position(), 5u);
  EXPECT_EQ(counting.syncs.load(), 1);
  // A truncation of the log forgets what the log held durably: a position
  // accepted before it applies with a durable record.
  ASSERT_TRUE(Step(r, 6, true, 0, 0, "w6")->ok());
  ASSERT_TRUE(Step(r, 7, true, 0, 0, "w7")->ok());
  ASSERT_TRUE(Apply(r, 6, Set("w6", "root/k", "six", 600)).ok());
  EXPECT_EQ(counting.lazy.load(), 3);
  TruncateRequest keep;
  *keep.mutable_group() = Group();
  keep.set_keep_through(7);
  keep.set_apply(true);
  ASSERT_TRUE(Await<TruncateReply>([&](auto cb) { r.Truncate(keep, std::move(cb)); }).ok());
  ASSERT_TRUE(Apply(r, 7, Set("w7", "root/k", "seven", 700)).ok());
  EXPECT_EQ(counting.lazy.load(), 3);
  EXPECT_EQ(counting.durable.load(), 4);
  // While a truncation's removal is in flight, a position accepted here
  // meanwhile is not trusted: its top may be removed before it is synced.
  ASSERT_TRUE(Step(r, 8, true, 0, 0, "w8")->ok());
  ASSERT_TRUE(Step(r, 9, true, 0, 0, "w9")->ok());
  counting.HoldRemoval();
  keep.set_keep_through(8);
  absl::Notification truncated;
  absl::Status truncate_status;
  r.Truncate(keep, [&](absl::StatusOr<TruncateReply> reply) {
    truncate_status = reply.status();
    truncated.Notify();
  });
  for (int i = 0; i < 1000 && !counting.RemovalHeld(); ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(counting.RemovalHeld());
  ASSERT_TRUE(Step(r, 8, true, 0, 0, "w8")->ok());
  ASSERT_TRUE(Apply(r, 8, Set("w8", "root/k", "eight", 800)).ok());
  EXPECT_EQ(counting.lazy.load(), 3);
  EXPECT_EQ(counting.durable.load(), 5);
  counting.ReleaseRemoval();
  ASSERT_TRUE(truncated.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(truncate_status.ok()) << truncate_status;
  // A truncation that only lists what it would remove forgets nothing.
  ASSERT_TRUE(Step(r, 9, true, 0, 0, "w9")->ok());
  ASSERT_TRUE(Step(r, 10, true, 0, 0, "w10")->ok());
  keep.set_keep_through(9);
  keep.set_apply(false);
  absl::StatusOr<TruncateReply> listed =
      Await<TruncateReply>([&](auto cb) { r.Truncate(keep, std::move(cb)); });
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->positions_size(), 1);
  ASSERT_TRUE(Apply(r, 9, Set("w9", "root/k", "nine", 900)).ok());
  EXPECT_EQ(counting.lazy.load(), 4);
  EXPECT_EQ(counting.durable.load(), 5);
}

// An apply of position 2 that read the log state before position 3 was
// accepted, and writes 2's learned value only with its applied record,
// races an apply of 3 that finds 2 missing and stops: the first still
// applies 3, having seen the top move.
TEST_F(LogReplicaTest, AnApplyThatFindsTheNextPositionMissingIsNotLeftBehind) {
  HoldingBigtable holding(bigtable_.get());
  LogReplica r(&holding, ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Set("w1", "root/k", "one", 100)).ok());
  ASSERT_TRUE(Step(r, 2, true, 0, 0, "w2")->ok());
  holding.Hold();
  ApplyRequest req;
  *req.mutable_group() = Group();
  req.set_position(2);
  req.set_value(Set("w2", "root/k", "two", 200).SerializeAsString());
  absl::Notification first_done;
  absl::StatusOr<ApplyReply> first;
  r.Apply(req, [&](absl::StatusOr<ApplyReply> a) {
    first = std::move(a);
    first_done.Notify();
  });
  ASSERT_TRUE(holding.AwaitHeld());
  ASSERT_TRUE(Step(r, 3, true, 0, 0, "w3")->ok());
  absl::StatusOr<ApplyReply> second = Apply(r, 3, Set("w3", "root/k", "three", 300));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->applied().position(), 1u) << "position 2 was not known here yet";
  holding.Release();
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->applied().position(), 3u);
  EXPECT_EQ(Value(r, "root/k", 300), "three");
}

// A read can bring a range of the group's rows along, as of the same
// timestamp and held to the same position; a range outside the group is
// refused.
TEST_F(LogReplicaTest, AReadBringsAlongTheRowsOfARangeAsOfItsPosition) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Set("w1", "root/a", "one", 100)).ok());
  ASSERT_TRUE(Apply(r, 2, Set("w2", "root/p/1", "pending", 200)).ok());
  ASSERT_TRUE(Apply(r, 3, Set("w3", "root/p/2", "pending", 300)).ok());
  ReadRequest req;
  *req.mutable_group() = Group();
  req.set_row("root/a");
  req.set_family("e");
  req.set_timestamp(200);
  req.set_position(2);
  req.mutable_also_scan()->set_start("root/p/");
  req.mutable_also_scan()->set_end("root/p0");
  absl::StatusOr<ReadReply> reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->found());
  ASSERT_TRUE(reply->has_scan());
  ASSERT_EQ(reply->scan().rows_size(), 1) << "position 3's row is not there as of position 2";
  EXPECT_EQ(reply->scan().rows(0).key(), "root/p/1");
  EXPECT_FALSE(reply->scan().more());

  req.set_timestamp(300);
  req.set_position(3);
  req.mutable_also_scan()->set_limit(1);
  reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->scan().rows_size(), 1);
  EXPECT_TRUE(reply->scan().more()) << "the limit cut the range short";

  // Without also_scan, no scan in the reply: the caller can tell.
  req.clear_also_scan();
  reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->has_scan());

  // A position this replica has not applied refuses the whole request.
  req.set_position(4);
  req.mutable_also_scan()->set_start("root/p/");
  req.mutable_also_scan()->set_end("root/p0");
  EXPECT_EQ(Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); }).status().code(),
            absl::StatusCode::kAborted);

  req.set_position(3);
  req.mutable_also_scan()->set_start("other/");
  req.mutable_also_scan()->set_end("other0");
  reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument) << reply.status();
  req.mutable_also_scan()->set_start("root/p0");
  req.mutable_also_scan()->set_end("root/p/");
  EXPECT_EQ(Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "an empty range";
}

// repl.Read at_applied: the row as of the replica's applied position, and
// that position's log state with it (a transaction's first read and its
// position in one request).
TEST_F(LogReplicaTest, AReadAtTheAppliedPositionBringsItsLogStateAlong) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  ReadRequest req;
  *req.mutable_group() = Group();
  req.set_row("root/a");
  req.set_family("e");
  req.set_at_applied(true);
  // Nothing applied yet: position 0, nothing there.
  absl::StatusOr<ReadReply> reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->found());
  ASSERT_TRUE(reply->has_state());
  EXPECT_EQ(reply->state().applied().position(), 0u);

  ASSERT_TRUE(Apply(r, 1, Set("w1", "root/a", "one", 100)).ok());
  ASSERT_TRUE(Apply(r, 2, Set("w2", "root/a", "two", 200)).ok());
  ASSERT_TRUE(Apply(r, 3, Set("w3", "root/p/1", "pending", 300)).ok());
  req.mutable_also_scan()->set_start("root/p/");
  req.mutable_also_scan()->set_end("root/p0");
  reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_TRUE(reply->has_state());
  EXPECT_EQ(reply->state().applied().position(), 3u);
  EXPECT_EQ(reply->state().applied().timestamp(), 300);
  EXPECT_EQ(reply->state().top(), 3u);
  ASSERT_TRUE(reply->found());
  ASSERT_EQ(reply->values_size(), 1);
  EXPECT_EQ(reply->values(0), "two");
  ASSERT_EQ(reply->scan().rows_size(), 1) << "the range as of the same position";

  // A read at a position of its own brings no state.
  req.set_at_applied(false);
  req.set_position(2);
  req.set_timestamp(200);
  reply = Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->has_state());
  ASSERT_EQ(reply->scan().rows_size(), 0);

  // at_applied with a position, a timestamp or latest is refused.
  req.set_at_applied(true);
  EXPECT_EQ(Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  req.clear_position();
  req.clear_timestamp();
  req.set_latest(true);
  EXPECT_EQ(Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A group's entry writes only its schema's tables: a writer allowed one
// schema cannot write another's rows through its own group's log.
TEST_F(LogReplicaTest, AnEntryWritingAnotherSchemasTableIsRefused) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  LogEntry foreign = Set("w1", "root/k", "one", 100);
  foreign.mutable_changes(0)->set_table("other");
  absl::StatusOr<ApplyReply> a = Apply(r, 1, foreign);
  EXPECT_TRUE(absl::IsInvalidArgument(a.status())) << a.status();
  EXPECT_NE(a.status().message().find("writes table other"), std::string_view::npos) << a.status();
  PaxosRequest req;
  *req.mutable_group() = Group();
  req.set_position(1);
  req.set_accept(true);
  req.set_value(foreign.SerializeAsString());
  absl::StatusOr<PaxosReply> p = Await<PaxosReply>([&](auto cb) { r.Paxos(req, std::move(cb)); });
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  // The schema's own tables ("t.index", "t.outboxes") are the group's to write.
  LogEntry own = Set("w1", "root/k", "one", 100);
  own.mutable_changes(0)->set_table("t");
  EXPECT_TRUE(Apply(r, 1, own).ok());
  EXPECT_EQ(Value(r, "root/k", 100), "one");
  LogEntry lookalike = Set("w2", "root/k", "two", 200);
  lookalike.mutable_changes(0)->set_table("tt");
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(r, 2, lookalike).status()));
}

// A combined entry's members must account for its changes exactly and
// name themselves: anything else is refused, at accept and at apply.
TEST_F(LogReplicaTest, ACombinedEntryWhoseMembersDoNotAddUpIsRefused) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  LogEntry combined = Set("c1", "root/a", "one", 100);
  *combined.add_changes() = Set("c1", "root/b", "two", 100).changes(0);
  auto member = [&combined](const std::string& id, uint32_t changes) {
    LogEntry::Member* m = combined.add_members();
    m->set_id(id);
    m->set_changes(changes);
  };
  member("x", 1);
  member("y", 2);  // one change too many
  auto accept = [&](const LogEntry& e) {
    PaxosRequest req;
    *req.mutable_group() = Group();
    req.set_position(1);
    req.set_accept(true);
    req.set_value(e.SerializeAsString());
    return Await<PaxosReply>([&](auto cb) { r.Paxos(req, std::move(cb)); }).status();
  };
  absl::Status a = accept(combined);
  EXPECT_TRUE(absl::IsInvalidArgument(a)) << a;
  EXPECT_NE(a.message().find("has 2 changes but its members account for 3"), std::string::npos)
      << a;
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(r, 1, combined).status()));
  combined.mutable_members(1)->set_changes(1);
  combined.mutable_members(1)->clear_id();
  a = accept(combined);
  EXPECT_NE(a.message().find("a member with no id"), std::string::npos) << a;
  // Members that add up are applied like any entry: every change.
  combined.mutable_members(1)->set_id("y");
  ASSERT_TRUE(accept(combined).ok());
  ASSERT_TRUE(Apply(r, 1, combined).ok());
  EXPECT_EQ(Value(r, "root/a", 100), "one");
  EXPECT_EQ(Value(r, "root/b", 100), "two");
}

TEST_F(LogReplicaTest, ALateRepeatedApplyNeverHidesALaterPositionsData) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  const LogEntry del = Delete("d", "root/k", 200);
  ASSERT_TRUE(Apply(r, 1, Set("a", "root/k", "old", 100)).ok());
  ASSERT_TRUE(Apply(r, 2, del).ok());
  ASSERT_TRUE(Apply(r, 3, Set("b", "root/k", "new", 300)).ok());
  EXPECT_EQ(Value(r, "root/k", 250), std::nullopt);
  EXPECT_EQ(Value(r, "root/k", 300), "new");
  // A slow applier of position 2 writes its mutations again, late.
  std::optional<absl::Status> s;
  bigtable_->MutateRow("t", "root/k", *EntryMutations(del.changes(0), del.timestamp()),
                       del.timestamp(), [&](absl::Status st) { s = st; });
  ASSERT_TRUE(s && s->ok());
  EXPECT_EQ(Value(r, "root/k", 300), "new");
  EXPECT_EQ(Value(r, "root/k", 150), "old") << "snapshot reads below the delete still see it";
}

// The other order: position 1's cells land after position 2's delete (two
// apply loops of one replica, one of them slow; or a write replayed after a
// lost reply). Deleted data must not come back.
TEST_F(LogReplicaTest, ALateApplyOfAnEarlierPositionBringsNothingDeletedBack) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  const LogEntry set = Set("a", "root/k", "old", 100);
  ASSERT_TRUE(Apply(r, 1, set).ok());
  ASSERT_TRUE(Apply(r, 2, Delete("d", "root/k", 200)).ok());
  EXPECT_EQ(Value(r, "root/k", 250), std::nullopt);
  for (int i = 0; i < 2; ++i) {
    std::optional<absl::Status> s;
    bigtable_->MutateRow("t", "root/k", *EntryMutations(set.changes(0), set.timestamp()),
                         set.timestamp(), [&](absl::Status st) { s = st; });
    ASSERT_TRUE(s && s->ok());
  }
  EXPECT_EQ(Value(r, "root/k", 250), std::nullopt);
  EXPECT_EQ(Value(r, "root/k", 150), "old");
  ReadRequest latest;
  *latest.mutable_group() = Group();
  latest.set_row("root/k");
  latest.set_family("e");
  latest.set_latest(true);
  absl::StatusOr<ReadReply> reply =
      Await<ReadReply>([&](auto cb) { r.Read(latest, std::move(cb)); });
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(reply->found()) << "an inconsistent read sees the delete too";
}

TEST_F(LogReplicaTest, PositionsBeyondOnePastTheTopAreRefusedAndChangeNothing) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull, Env::Default());
  ASSERT_TRUE(Step(r, 1, true, 0, 0, "a")->ok());
  ASSERT_TRUE(Step(r, 2, true, 0, 0, "b")->ok());  // the fast path: the top is 1
  // A forged far position, on the fast path, the general path and apply.
  // Before, each was accepted and raised the top: current reads then had
  // to fill every position up to it.
  for (const absl::Status& s :
       {Step(r, 1000, true, 0, 0, "far").status(), Step(r, 4, false, 5, 5).status(),
        Step(r, 4, true, 5, 5, "far").status(),
        Apply(r, uint64_t{1} << 40, Set("far", "root/k", "x", 1)).status()}) {
    EXPECT_TRUE(IsBeyondTop(s)) << s;
    EXPECT_NE(s.message().find("highest position this replica knows (2)"), std::string_view::npos)
        << s;
  }
  absl::StatusOr<StateReply> state = State(r);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->top(), 2u);
  EXPECT_EQ(Value(r, "root/k", 1000), std::nullopt);
  // One past the top is the next position.
  EXPECT_TRUE(Step(r, 3, false, 1, 1).ok());
  // A replica that missed positions votes on the next one when the caller
  // learned from another replica that the group got that far.
  PaxosRequest vouched;
  *vouched.mutable_group() = Group();
  vouched.set_position(10);
  vouched.set_accept(true);
  vouched.set_value(EntryValue("ten"));
  absl::StatusOr<PaxosReply> p =
      Await<PaxosReply>([&](auto cb) { r.Paxos(vouched, 9, std::move(cb)); });
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->ok());
  EXPECT_EQ(State(r)->top(), 10u);
}

// What msadmin group repair does at each replica: a log pushed far ahead
// (as a forged position did before replicas refused one) is listed, then
// removed, and the top comes back so the next position is usable again.
TEST_F(LogReplicaTest, TruncateListsAndRemovesPositionsPushedFarAhead) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Set("a", "root/k", "one", 100)).ok());
  // The state a forged far commit left: accepted and learned at 1,000,000.
  const uint64_t far = 1'000'000;
  const LogEntry forged = Set("forged", "root/k", "far", 200);
  std::optional<absl::Status> planted;
  bigtable_->MutateRow(
      "t", "root",
      {storage::Mutation::SetCell(kLogFamily, AcceptorColumn(far), "acceptor", 0),
       storage::Mutation::SetCell(kLogFamily, LearnedColumn(far), forged.SerializeAsString(), 0),
       storage::Mutation::SetCell(
           kLogFamily, "S:top",
           [&] {
             std::string v;
             AppendOrderedUint64(&v, far);
             return v;
           }(),
           static_cast<int64_t>(far))},
      storage::kServerTimestamp, [&](absl::Status s) { planted = s; });
  ASSERT_TRUE(planted && planted->ok());
  ASSERT_EQ(State(r)->top(), far);
  auto truncate = [&](bool apply) {
    TruncateRequest req;
    *req.mutable_group() = Group();
    req.set_keep_through(2);
    req.set_apply(apply);
    return Await<TruncateReply>([&](auto cb) { r.Truncate(req, std::move(cb)); });
  };
  absl::StatusOr<TruncateReply> listed = truncate(false);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->positions_size(), 1);
  EXPECT_EQ(listed->positions(0), far);
  EXPECT_EQ(listed->learned(0), forged.SerializeAsString());
  EXPECT_EQ(State(r)->top(), far) << "a listing changes nothing";
  ASSERT_TRUE(truncate(true).ok());
  EXPECT_EQ(State(r)->top(), 2u);
  EXPECT_EQ(State(r)->applied().position(), 1u);
  EXPECT_EQ(truncate(false)->positions_size(), 0);
  // The next position works again (before: beyond nothing, the group had
  // to decide a million positions first).
  EXPECT_TRUE(Step(r, 2, false, 1, 1)->ok());
  EXPECT_TRUE(Step(r, 3, false, 1, 1).ok());
  // Nothing applied is ever removed.
  TruncateRequest below;
  *below.mutable_group() = Group();
  below.set_keep_through(0);
  below.set_apply(true);
  EXPECT_EQ(
      Await<TruncateReply>([&](auto cb) { r.Truncate(below, std::move(cb)); }).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(LogReplicaTest, EntriesTimestampedBeyondTheClockPlusTheSkewAreRefused) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull, Env::Default(), absl::Seconds(5));
  auto propose = [&](uint64_t pos, int64_t ts) {
    LogEntry e;
    e.set_id("e");
    e.set_timestamp(ts);
    PaxosRequest req;
    *req.mutable_group() = Group();
    req.set_position(pos);
    req.set_accept(true);
    req.set_value(e.SerializeAsString());
    return Await<PaxosReply>([&](auto cb) { r.Paxos(req, std::move(cb)); });
  };
  const int64_t now = Env::Default()->NowMicros();
  absl::StatusOr<PaxosReply> future = propose(1, now + 3600'000'000);
  EXPECT_EQ(future.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(future.status().message().find("plus the allowed skew (5000000 us)"),
            std::string_view::npos)
      << future.status();
  EXPECT_EQ(State(r)->top(), 0u) << "nothing stored";
  absl::StatusOr<PaxosReply> near = propose(1, now + 1'000'000);
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_TRUE(near->ok());
  PaxosRequest garbage;
  *garbage.mutable_group() = Group();
  garbage.set_position(2);
  garbage.set_accept(true);
  garbage.set_value("\xff\xff not an entry");
  EXPECT_EQ(Await<PaxosReply>([&](auto cb) { r.Paxos(garbage, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(LogReplicaTest, AWitnessKeepsTheLogButNoDataAndAReadOnlyReplicaDoesNotVote) {
  LogReplica witness(bigtable_.get(), ReplicaType::kWitness);
  absl::StatusOr<ApplyReply> a = Apply(witness, 1, Set("w", "root/k", "v", 100));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->applied().position(), 1u);
  LogReplica full(bigtable_.get(), ReplicaType::kFull);  // same storage, to look
  EXPECT_EQ(Value(full, "root/k", 100), std::nullopt);
  ReadRequest rr;
  *rr.mutable_group() = Group();
  rr.set_row("root/k");
  EXPECT_EQ(Await<ReadReply>([&](auto cb) { witness.Read(rr, std::move(cb)); }).status().code(),
            absl::StatusCode::kFailedPrecondition);

  LogReplica ro(bigtable_.get(), ReplicaType::kReadOnly);
  EXPECT_EQ(Step(ro, 2, false, 1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LogReplicaTest, BadRequestsAndCorruptStateAreReportedNotTrusted) {
  LogReplica r(bigtable_.get(), ReplicaType::kFull);
  EXPECT_EQ(Step(r, 0, false, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  PaxosRequest no_table;
  no_table.set_position(1);
  EXPECT_EQ(Await<PaxosReply>([&](auto cb) { r.Paxos(no_table, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  ApplyRequest bad;
  *bad.mutable_group() = Group();
  bad.set_position(1);
  bad.set_value("\xff\xff not an entry");
  EXPECT_EQ(Await<ApplyReply>([&](auto cb) { r.Apply(bad, std::move(cb)); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  ReadLogRequest backwards;
  *backwards.mutable_group() = Group();
  backwards.set_from(5);
  backwards.set_to(4);
  EXPECT_EQ(
      Await<ReadLogReply>([&](auto cb) { r.ReadLog(backwards, std::move(cb)); }).status().code(),
      absl::StatusCode::kInvalidArgument);

  // A damaged acceptor cell.
  ASSERT_TRUE(server_
                  ->MutateRow("t", "root",
                              {storage::Mutation::SetCell(kLogFamily, AcceptorColumn(3),
                                                          "\xff\xff\xff", 0)})
                  .ok());
  absl::StatusOr<PaxosReply> p = Step(r, 3, false, 5, 5);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(p.status().message().find("position 3"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace megastore::replication
