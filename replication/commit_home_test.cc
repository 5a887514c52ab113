// A replication server's side of commits, on the simulated deployment: as
// the home of hot groups (replication/commit_home.h), repl.Commit requests
// sent to it straight; as an acceptor, an accept that completes a majority.
#include "replication/commit_home.h"

#include <optional>

#include "base/proto_call.h"
#include "gtest/gtest.h"
#include "sim/deployment.h"

namespace megastore::replication {
namespace {

class CommitHomeTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  // A deployment of `replicas` (default: three full).
  void Start(std::vector<ReplicaType> replicas) {
    sim::SimOptions o;
    o.seed = 7;
    if (!replicas.empty()) o.replicas = std::move(replicas);
    client_.reset();
    cluster_ = std::make_unique<sim::Cluster>(o);
    ASSERT_TRUE(cluster_->Open().ok());
    cluster_->net().AddNode("app", 1);
    transport_ = cluster_->net().TransportFor("app");
    client_ =
        std::make_unique<GroupClient>(&cluster_->env(), transport_, cluster_->ClientOptions(1));
    home_ = cluster_->ClientOptions(1).replicas[0].replication;
  }

  template <typename T>
  T Await(std::optional<T>& done) {
    sim::SimEnv& env = cluster_->env();
    env.RunUntil(env.now() + 60'000'000, [&] { return done.has_value(); });
    EXPECT_TRUE(done.has_value()) << "the operation never finished";
    return std::move(done).value_or(T(absl::UnknownError("never finished")));
  }

  static GroupRef Group() {
    GroupRef g;
    g.set_table(sim::kTable);
    g.set_root("g1");
    return g;
  }

  LogPosition ReadAt() {
    std::optional<absl::StatusOr<LogPosition>> p;
    client_->ReadPosition(Group(), ReadLevel::kCurrent, [&](auto r) { p = std::move(r); });
    absl::StatusOr<LogPosition> at = Await(p);
    EXPECT_TRUE(at.ok()) << at.status();
    return at.value_or(LogPosition());
  }
  uint64_t Position() { return ReadAt().position; }

  // A commit of `id` writing row `row`, read at `position`, having read `read`.
  CommitRequest Request(const std::string& id, const std::string& row, uint64_t position,
                        std::vector<std::string> read = {}) {
    CommitRequest r;
    *r.mutable_group() = Group();
    r.set_position(position);
    r.set_next_leader(-1);
    r.mutable_entry()->set_id(id);
    RowChange* rc = r.mutable_entry()->add_changes();
    rc->set_row(row);
    CellChange* cc = rc->add_cells();
    cc->set_family(sim::kDataFamily);
    cc->set_qualifier("v");
    cc->set_value(id);
    for (std::string& row : read) r.mutable_reads()->add_rows(std::move(row));
    r.set_budget_micros(5'000'000);
    r.set_origin(42);
    r.set_sent(cluster_->env().MonotonicMicros());
    r.set_sent_wall(cluster_->env().NowMicros());
    return r;
  }

  void Send(const CommitRequest& r, std::optional<absl::StatusOr<CommitReply>>* out) {
    CallProto<CommitReply>(transport_, home_, "repl.Commit", r, absl::Seconds(10),
                           [out](absl::StatusOr<CommitReply> reply) { *out = std::move(reply); });
  }

  absl::StatusOr<CommitReply> Commit(const CommitRequest& r) {
    std::optional<absl::StatusOr<CommitReply>> out;
    Send(r, &out);
    return Await(out);
  }

  std::unique_ptr<sim::Cluster> cluster_;
  Transport* transport_ = nullptr;
  std::unique_ptr<GroupClient> client_;
  std::string home_;
};

TEST_F(CommitHomeTest, ACommitIsProposedAtTheNextPositionAndAnswered) {
  const uint64_t p = Position();
  absl::StatusOr<CommitReply> r = Commit(Request("one", "g1/a", p));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code(), 0) << r->message();
  EXPECT_EQ(r->position(), p + 1);
  EXPECT_GT(r->timestamp(), 0);
  EXPECT_FALSE(r->contended());  // nobody else sent this group's commits here
  EXPECT_EQ(Position(), p + 1);
}

// An accept that completes a majority (after the leader's fast-path
// accept, of three voters) is learned and applied by the replica that
// accepts it, without the writer's apply (lost here) — but only when every
// full replica then holds the value: with three full replicas the third
// may have missed it, and its coordinator must be invalidated (by the
// writer, after the decision) before the value is read anywhere.
TEST_F(CommitHomeTest, AnAcceptThatCompletesAMajorityIsAppliedWithoutTheWritersApply) {
  for (bool witness : {true, false}) {
    SCOPED_TRACE(witness ? "full, full, witness" : "three full");
    Start({ReplicaType::kFull, ReplicaType::kFull,
           witness ? ReplicaType::kWitness : ReplicaType::kFull});
    auto commit = [&](const std::string& id) {
      LogEntry e = Request(id, "g1/" + id, 0).entry();
      std::optional<absl::StatusOr<CommitResult>> done;
      client_->Commit(Group(), ReadAt(), std::move(e), [&](auto r) { done = std::move(r); });
      absl::StatusOr<CommitResult> r = Await(done);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? r->position : 0;
    };
    // The first nominates the writer's replica (datacenter 1) leader of the next.
    const uint64_t first = commit("first");
    ASSERT_GT(first, 0u);
    cluster_->net().set_method_loss("repl.Apply", 1.0, /*to_dc=*/0);
    const uint64_t second = commit("second");
    ASSERT_EQ(second, first + 1);
    StateRequest req;
    *req.mutable_group() = Group();
    std::optional<absl::StatusOr<StateReply>> state;
    CallProto<StateReply>(transport_, home_, "repl.State", req, absl::Seconds(10),
                          [&](absl::StatusOr<StateReply> r) { state = std::move(r); });
    absl::StatusOr<StateReply> s = Await(state);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->applied().position(), witness ? second : first);
    EXPECT_EQ(cluster_->HomeStats().learned_on_accept > 0, witness);
  }
}

// Two copies of one request (a network that delivers twice) commit once:
// the copy gets the first one's answer.
TEST_F(CommitHomeTest, ACopyOfACommitGetsTheFirstOnesAnswerAndCommitsNothingMore) {
  const uint64_t p = Position();
  const CommitRequest r = Request("twice", "g1/a", p);
  std::optional<absl::StatusOr<CommitReply>> first, copy;
  Send(r, &first);
  Send(r, &copy);
  absl::StatusOr<CommitReply> a = Await(first), b = Await(copy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->code(), 0) << a->message();
  EXPECT_EQ(b->code(), 0) << b->message();
  EXPECT_EQ(a->position(), p + 1);
  EXPECT_EQ(b->position(), p + 1);
  // ... and again once answered.
  absl::StatusOr<CommitReply> late = Commit(r);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->position(), p + 1);
  EXPECT_EQ(Position(), p + 1);
  EXPECT_EQ(cluster_->HomeStats().home_commits, 1u);
}

// Promotion at the home judges the reads the request carries: a commit
// whose read another commit wrote since is refused; one that read nothing
// of it goes on to the next position.
TEST_F(CommitHomeTest, ACommitWhoseReadAnotherWroteSinceIsRefusedAndOthersArePromoted) {
  const uint64_t p = Position();
  absl::StatusOr<CommitReply> w = Commit(Request("writer", "g1/a", p));
  ASSERT_TRUE(w.ok() && w->code() == 0);
  absl::StatusOr<CommitReply> stale = Commit(Request("stale", "g1/b", p, {"g1/a"}));
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->code(), static_cast<int>(absl::StatusCode::kAborted)) << stale->message();
  absl::StatusOr<CommitReply> fine = Commit(Request("fine", "g1/c", p, {"g1/b"}));
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->code(), 0) << fine->message();
  EXPECT_EQ(fine->position(), p + 2);
  EXPECT_EQ(Position(), p + 2);
}

// A commit that finds itself in a position it lost — a copy took it —
// is committed there, not promoted past itself (which would write it
// twice).
TEST_F(CommitHomeTest, ACommitFoundInTheLogIsCommittedThereNotPromotedPastItself) {
  const LogPosition at = ReadAt();
  absl::StatusOr<CommitReply> first = Commit(Request("same", "g1/a", at.position));
  ASSERT_TRUE(first.ok() && first->code() == 0);
  for (bool combine : {true, false}) {
    GroupClientOptions o = cluster_->ClientOptions(1);
    o.combine = combine;  // through a lane, or proposed on its own
    GroupClient client(&cluster_->env(), transport_, o);
    std::optional<absl::StatusOr<CommitResult>> r;
    client.Commit(
        Group(), at, Request("same", "g1/a", at.position).entry(),
        [&](auto x) { r = std::move(x); }, 0, std::make_shared<ReadSet>());
    absl::StatusOr<CommitResult> again = Await(r);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->position, first->position());
    EXPECT_EQ(again->timestamp, first->timestamp());
  }
  EXPECT_EQ(Position(), at.position + 1);
}

// An entry that names a commit's id as a member without carrying its
// changes (forged by another writer) does not make the commit committed:
// it is judged as any winner, and here promoted past it.
TEST_F(CommitHomeTest, AnEntryNamingACommitWithoutItsChangesIsNotTakenForIt) {
  const LogPosition at = ReadAt();
  LogEntry forged = Request("forger", "g1/z", at.position).entry();
  LogEntry::Member* victim = forged.add_members();
  victim->set_id("victim");
  victim->set_changes(0);
  LogEntry::Member* forger = forged.add_members();
  forger->set_id("forger");
  forger->set_changes(1);
  std::optional<absl::StatusOr<CommitResult>> f;
  client_->Commit(Group(), at, forged, [&](auto x) { f = std::move(x); });
  absl::StatusOr<CommitResult> taken = Await(f);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->position, at.position + 1);
  GroupClientOptions o = cluster_->ClientOptions(1);
  o.combine = false;
  GroupClient client(&cluster_->env(), transport_, o);
  std::optional<absl::StatusOr<CommitResult>> r;
  client.Commit(
      Group(), at, Request("victim", "g1/a", at.position).entry(),
      [&](auto x) { r = std::move(x); }, 0, std::make_shared<ReadSet>());
  absl::StatusOr<CommitResult> mine = Await(r);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->position, at.position + 2);  // promoted past it, not "committed" in it
}

// Turns at the home: two commits that lost to a writer of the row they
// read each keep a turn. The older gets it, and once its retry is proposed
// the younger's is given at once, naming that proposal's position, before
// the older's commit is decided. The home knows a retry by its sender's
// `since` whatever it learned of the sender's clock in between (the
// retry's request shows less time on the way than the first ones), and a
// turn asked for twice is one turn.
TEST_F(CommitHomeTest, TheNextTurnIsGivenOnceTheTurnsRetryIsProposedNamingItsPosition) {
  const uint64_t p = Position();
  CommitRequest writer = Request("writer", "g1/a", p);
  writer.set_origin(44);
  ASSERT_TRUE(Commit(writer).ok());  // at p + 1
  const int64_t now = cluster_->env().MonotonicMicros();
  const int64_t old_since = now - 2000, young_since = now - 1000;
  auto lose = [&](const std::string& id, int64_t since) {
    CommitRequest r = Request(id, "g1/a", p, {"g1/a"});
    r.set_since(since);
    r.set_sent(r.sent() - 5000);  // as if 5 ms on the way
    absl::StatusOr<CommitReply> reply = Commit(r);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->code(), static_cast<int>(absl::StatusCode::kAborted)) << reply->message();
    EXPECT_TRUE(reply->turn());
  };
  lose("old", old_since);
  lose("young", young_since);
  auto ask = [&](int64_t since, std::optional<absl::StatusOr<TurnReply>>* out) {
    TurnRequest t;
    *t.mutable_group() = Group();
    t.set_origin(42);
    t.set_since(since);
    t.set_sent(cluster_->env().MonotonicMicros() - 5000);
    t.set_budget_micros(5'000'000);
    CallProto<TurnReply>(transport_, home_, "repl.AwaitTurn", t, absl::Seconds(10),
                         [out](absl::StatusOr<TurnReply> r) { *out = std::move(r); });
  };
  // (Asked twice — a request delivered twice — it is one turn.)
  std::optional<absl::StatusOr<TurnReply>> old_turn, old_copy, young_turn;
  ask(old_since, &old_turn);
  ask(old_since, &old_copy);
  absl::StatusOr<TurnReply> first = Await(old_turn);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->granted());
  absl::StatusOr<TurnReply> copy = Await(old_copy);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(copy->granted());
  // The older's retry, read after the writer (sent now: no time on the
  // way); the younger asks for its turn meanwhile.
  CommitRequest retry = Request("old, again", "g1/a", p + 1, {"g1/a"});
  retry.set_since(old_since);
  std::optional<absl::StatusOr<CommitReply>> retried;
  Send(retry, &retried);
  ask(young_since, &young_turn);
  absl::StatusOr<TurnReply> second = Await(young_turn);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->granted());
  EXPECT_EQ(second->after(), p + 2);
  EXPECT_FALSE(retried.has_value()) << "the next turn waited for the decision";
  absl::StatusOr<CommitReply> done = Await(retried);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->code(), 0) << done->message();
  EXPECT_EQ(done->position(), p + 2);
}

// An app server whose own lane kept a place for a retry that then went to
// the group's home (the group turned hot meanwhile) gives that place up:
// its other retries do not wait for it.
TEST_F(CommitHomeTest, APlaceKeptHereForARetryThatWentHomeIsGivenUp) {
  GroupClientOptions o = cluster_->ClientOptions(1);
  o.hot_for = absl::Milliseconds(1);
  GroupClient client(&cluster_->env(), transport_, o);
  sim::SimEnv& env = cluster_->env();
  auto commit = [&](const std::string& id, const LogPosition& at, int64_t since) {
    std::optional<absl::StatusOr<CommitResult>> r;
    auto reads = std::make_shared<ReadSet>();
    reads->add_rows("g1/a");
    client.Commit(
        Group(), at, Request(id, "g1/a", 0).entry(), [&](auto x) { r = std::move(x); }, 0,
        std::move(reads), since);
    return Await(r);
  };
  const LogPosition at = ReadAt();
  ASSERT_TRUE(commit("writer", at, 0).ok());
  const int64_t old_since = env.MonotonicMicros();
  absl::StatusOr<CommitResult> lost = commit("lost", at, old_since);  // read before the writer
  ASSERT_TRUE(GroupClient::HasTurn(lost.status())) << lost.status();
  const int64_t kept = env.MonotonicMicros();  // its place is kept from about now
  client.NoteHot(Group());
  std::optional<absl::StatusOr<bool>> went_home, here;
  client.AwaitTurn(Group(), old_since, [&](auto r) { went_home = std::move(r); });
  ASSERT_TRUE(Await(went_home).ok());
  EXPECT_EQ(client.stats().turns, 0u);  // given at the home, not here
  // Cooled down: a younger retry's turn is kept here again, and is given
  // at once rather than after the older's place expires.
  env.RunUntil(env.now() + 2'000, [] { return false; });
  client.AwaitTurn(Group(), old_since + 1, [&](auto r) { here = std::move(r); });
  ASSERT_TRUE(Await(here).ok());
  EXPECT_EQ(client.stats().turns, 1u);
  EXPECT_LT(env.MonotonicMicros() - kept, absl::ToInt64Microseconds(GroupClient::kTurnHold) / 2);
}

TEST_F(CommitHomeTest, AnotherSendersCommitsMakeTheGroupContended) {
  const uint64_t p = Position();
  ASSERT_TRUE(Commit(Request("mine", "g1/a", p)).ok());
  CommitRequest other = Request("theirs", "g1/b", p);
  other.set_origin(43);
  absl::StatusOr<CommitReply> r = Commit(other);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->code(), 0) << r->message();
  EXPECT_TRUE(r->contended());
}

// An app server that never lost a position learns that a group is hot
// from the home's answer to its accept, and sends its next commit there.
TEST_F(CommitHomeTest, TheHomeOfAHotGroupAsksProposersForTheirCommits) {
  const uint64_t p = Position();
  CommitRequest theirs = Request("theirs", "g1/a", p);
  theirs.set_origin(43);
  ASSERT_TRUE(Commit(theirs).ok());
  auto commit = [&](const std::string& id, const std::string& row) {
    LogEntry e = Request(id, row, 0).entry();
    std::optional<absl::StatusOr<CommitResult>> r;
    client_->Commit(
        Group(), ReadAt(), std::move(e), [&](auto x) { r = std::move(x); }, 0,
        std::make_shared<ReadSet>());
    absl::StatusOr<CommitResult> done = Await(r);
    EXPECT_TRUE(done.ok()) << done.status();
  };
  commit("mine", "g1/b");
  EXPECT_EQ(client_->stats().forwarded, 0u);  // proposed here: nobody said otherwise yet
  commit("mine again", "g1/c");
  EXPECT_EQ(client_->stats().forwarded, 1u);
  EXPECT_EQ(Position(), p + 3);
}

TEST_F(CommitHomeTest, MalformedStaleOrOutOfGroupRequestsAreRefusedUnproposed) {
  const uint64_t p = Position();
  std::optional<absl::StatusOr<std::string>> garbage;
  transport_->Call(home_, "repl.Commit", std::string("\xff\xff\xff garbage", 12), absl::Seconds(5),
                   [&](absl::StatusOr<std::string> r) { garbage = std::move(r); });
  EXPECT_EQ(Await(garbage).status().code(), absl::StatusCode::kInvalidArgument);

  auto refused = [&](CommitRequest r, absl::StatusCode code, std::string_view why) {
    absl::StatusOr<CommitReply> reply = Commit(r);
    ASSERT_TRUE(reply.ok()) << why << ": " << reply.status();
    EXPECT_EQ(reply->code(), static_cast<int>(code)) << why << ": " << reply->message();
    EXPECT_FALSE(reply->message().empty()) << why;
  };
  CommitRequest other_table = Request("x1", "g1/a", p);
  other_table.mutable_entry()->mutable_changes(0)->set_table("an_index");
  refused(other_table, absl::StatusCode::kInvalidArgument, "another table");
  CommitRequest no_id = Request("", "g1/a", p);
  refused(no_id, absl::StatusCode::kInvalidArgument, "no id");
  CommitRequest payload = Request("x2", "g1/a", p);
  payload.mutable_entry()->set_payload("opaque");
  refused(payload, absl::StatusCode::kInvalidArgument, "a payload");
  CommitRequest empty = Request("x3", "g1/a", p);
  empty.mutable_entry()->clear_changes();
  refused(empty, absl::StatusCode::kInvalidArgument, "no changes");
  CommitRequest no_budget = Request("x4", "g1/a", p);
  no_budget.set_budget_micros(0);
  refused(no_budget, absl::StatusCode::kInvalidArgument, "no budget");
  CommitRequest no_group = Request("x5", "g1/a", p);
  no_group.mutable_group()->clear_root();
  refused(no_group, absl::StatusCode::kInvalidArgument, "no group");
  CommitRequest huge = Request("x6", "g1/a", p);
  for (int i = 0; i <= CommitHome::kMaxReadRows; ++i) huge.mutable_reads()->add_rows("r");
  refused(huge, absl::StatusCode::kInvalidArgument, "a huge read set");
  EXPECT_EQ(Position(), p);  // nothing was proposed
  CommitRequest long_id = Request(std::string(CommitHome::kMaxIdBytes + 1, 'i'), "g1/a", p);
  refused(long_id, absl::StatusCode::kInvalidArgument, "a long id");
  // Sent longer ago (by the sender's wall clock) than its budget plus the
  // clock skew allowed: its sender gave up.
  CommitRequest stale = Request("x8", "g1/b", p);
  stale.set_budget_micros(1'000'000);
  stale.set_sent_wall(stale.sent_wall() - 1'000'000 -
                      absl::ToInt64Microseconds(cluster_->ClientOptions(0).max_clock_skew) - 1);
  refused(stale, absl::StatusCode::kDeadlineExceeded, "stale");
  CommitRequest undated = Request("x9", "g1/b", p);
  undated.clear_sent_wall();
  refused(undated, absl::StatusCode::kDeadlineExceeded, "no send time");
  EXPECT_EQ(Position(), p);  // nothing was proposed
}

}  // namespace
}  // namespace megastore::replication
