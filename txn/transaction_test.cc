// Transactions on the simulated three-datacenter deployment (sim/):
// the API's rules, then bank transfers under faults.
#include "txn/transaction.h"

#include "absl/cleanup/cleanup.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"
#include "sim/deployment.h"

namespace megastore::txn {
namespace {

constexpr char kBank[] = R"(
CREATE SCHEMA Bank
CREATE TABLE Branch {
  required int64 id;
  optional string name;
} PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE Account {
  required int64 branch;
  required int64 id;
  required int64 balance;
  optional string owner;
} PRIMARY KEY(branch, id), ENTITY GROUP KEY(branch) REFERENCES Branch;
CREATE TABLE Tally {
  required int64 branch;
  required int64 id;
  required int64 count;
} PRIMARY KEY(branch, id), ENTITY GROUP KEY(branch) REFERENCES Branch;
CREATE LOCAL INDEX AccountsByOwner ON Account(branch, owner);
CREATE GLOBAL INDEX AccountsByBalance ON Account(balance);
CREATE LOCAL INDEX AccountsByLocalBalance ON Account(branch, balance);
)";

Entity Account(const schema::Layout& layout, int64_t branch, int64_t id, int64_t balance,
               std::optional<std::string> owner = std::nullopt) {
  const schema::TableDescriptor* t = layout.schema().FindTable("Account");
  Entity e;
  for (const auto& f : t->fields()) {
    if (f.name() == "branch") e.fields[f.number()] = {branch};
    if (f.name() == "id") e.fields[f.number()] = {id};
    if (f.name() == "balance") e.fields[f.number()] = {balance};
    if (f.name() == "owner" && owner) e.fields[f.number()] = {*owner};
  }
  return e;
}

// A tally: a row of the group that no global index covers, so a commit
// that writes only tallies writes only its group's rows.
Entity Tally(const schema::Layout& layout, int64_t branch, int64_t id, int64_t count) {
  Entity e;
  for (const auto& f : layout.schema().FindTable("Tally")->fields()) {
    if (f.name() == "branch") e.fields[f.number()] = {branch};
    if (f.name() == "id") e.fields[f.number()] = {id};
    if (f.name() == "count") e.fields[f.number()] = {count};
  }
  return e;
}

int64_t Count(const schema::Layout& layout, const Entity& e) {
  for (const auto& f : layout.schema().FindTable("Tally")->fields())
    if (f.name() == "count") return std::get<int64_t>(e.fields.at(f.number()).at(0));
  return -1;
}

int64_t Balance(const schema::Layout& layout, const Entity& e) {
  for (const auto& f : layout.schema().FindTable("Account")->fields())
    if (f.name() == "balance") return std::get<int64_t>(e.fields.at(f.number()).at(0));
  return -1;
}

class TransactionTest : public ::testing::Test {
 protected:
  void Open(uint64_t seed = 1) {
    schema::CompileResult compiled = schema::CompileSchema(kBank);
    ASSERT_TRUE(compiled.ok());
    auto layout = schema::Layout::Create(compiled.descriptor);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<schema::Layout>(std::move(*layout));
    sim::SimOptions o;
    o.seed = seed;
    cluster_ = std::make_unique<sim::Cluster>(o);
    ASSERT_TRUE(cluster_->Open(TablesFor(*layout_)).ok());
    for (int dc = 0; dc < 3; ++dc) {
      const std::string node = StrCat("app", dc);
      cluster_->net().AddNode(node, dc);
      clients_.push_back(std::make_unique<replication::GroupClient>(
          &cluster_->env(), cluster_->net().TransportFor(node), cluster_->ClientOptions(dc)));
    }
  }

  Context Ctx(int dc = 0) { return Context{clients_[dc].get(), layout_.get()}; }

  // Runs the simulation until `done` is set.
  template <typename T>
  T Await(std::optional<T>& done) {
    cluster_->env().RunUntil(cluster_->env().now() + 120'000'000, [&] { return done.has_value(); });
    EXPECT_TRUE(done.has_value()) << "the operation never finished";
    return std::move(done).value_or(T(absl::UnknownError("never finished")));
  }

  std::shared_ptr<Transaction> Begin(int64_t branch, TransactionOptions o = {}, int dc = 0,
                                     bool deferred = false) {
    std::optional<absl::StatusOr<std::shared_ptr<Transaction>>> t;
    Transaction::Begin(
        Ctx(dc), "Branch", {branch}, o, [&](auto r) { t = std::move(r); }, deferred);
    absl::StatusOr<std::shared_ptr<Transaction>> r = Await(t);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nullptr;
  }

  absl::StatusOr<std::optional<Entity>> Get(Transaction& t, int64_t branch, int64_t id) {
    std::optional<absl::StatusOr<std::optional<Entity>>> r;
    t.Get("Account", {branch, id}, [&](auto x) { r = std::move(x); });
    return Await(r);
  }

  absl::StatusOr<std::optional<Entity>> GetTally(Transaction& t, int64_t id) {
    std::optional<absl::StatusOr<std::optional<Entity>>> r;
    t.Get("Tally", {int64_t{1}, id}, [&](auto x) { r = std::move(x); });
    return Await(r);
  }

  // Runs `writers` transactions at once, writer w's body body(w) at
  // datacenter dc(w), its first attempt dated begun(w), with three attempts
  // each (too few to survive a race among eight by chance): each commits
  // by its second attempt — the first to arrive at once, the others after
  // losing to it, taking turns in the order they began.
  void TakeTurns(int writers, const std::function<int(int)>& dc,
                 const std::function<int64_t(int)>& begun, const std::function<Body(int)>& body) {
    sim::SimEnv& env = cluster_->env();
    std::vector<int> order;  // which writer committed, in log order
    std::vector<int> attempts(static_cast<size_t>(writers), 0);
    for (int w = 0; w < writers; ++w) {
      TransactionOptions o;
      o.max_attempts = 3;
      o.first_attempt = begun(w);
      txn::Run(Ctx(dc(w)), "Branch", {int64_t{1}}, o, body(w),
               [&, w](absl::StatusOr<CommitInfo> r) {
                 EXPECT_TRUE(r.ok()) << "writer " << w << ": " << r.status();
                 if (r.ok()) attempts[static_cast<size_t>(w)] = r->attempts;
                 order.push_back(w);
               });
    }
    env.RunUntil(env.now() + 120'000'000,
                 [&] { return order.size() == static_cast<size_t>(writers); });
    ASSERT_EQ(order.size(), static_cast<size_t>(writers));
    for (int w = 0; w < writers; ++w)
      EXPECT_LE(attempts[static_cast<size_t>(w)], 2) << "writer " << w;
    std::vector<int> rest(order.begin() + 1, order.end());
    EXPECT_TRUE(std::is_sorted(rest.begin(), rest.end())) << ::testing::PrintToString(order);
  }

  absl::StatusOr<CommitInfo> Commit(Transaction& t) {
    std::optional<absl::StatusOr<CommitInfo>> r;
    t.Commit([&](auto x) { r = std::move(x); });
    return Await(r);
  }

  std::unique_ptr<schema::Layout> layout_;
  std::unique_ptr<sim::Cluster> cluster_;
  std::vector<std::unique_ptr<replication::GroupClient>> clients_;
};

TEST_F(TransactionTest, WritesAreSeenByTheirOwnTransactionAndAfterCommitByOthers) {
  Open();
  auto t = Begin(1);
  ASSERT_TRUE(t);
  EXPECT_EQ(*Get(*t, 1, 7), std::nullopt);
  ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, 7, 100, "ann")).ok());
  absl::StatusOr<std::optional<Entity>> own = Get(*t, 1, 7);
  ASSERT_TRUE(own.ok() && own->has_value());
  EXPECT_EQ(Balance(*layout_, **own), 100);
  absl::StatusOr<CommitInfo> c = Commit(*t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->wrote);
  EXPECT_EQ(c->position, 1u);

  auto at_b = Begin(1, {}, 1);  // another datacenter, current read
  absl::StatusOr<std::optional<Entity>> seen = Get(*at_b, 1, 7);
  ASSERT_TRUE(seen.ok() && seen->has_value());
  EXPECT_EQ(Balance(*layout_, **seen), 100);
  ASSERT_TRUE(at_b->Delete("Account", {int64_t{1}, int64_t{7}}).ok());
  EXPECT_EQ(*Get(*at_b, 1, 7), std::nullopt) << "its own delete";
  absl::StatusOr<CommitInfo> deleted = Commit(*at_b);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  auto after = Begin(1, {}, 2);
  EXPECT_EQ(*Get(*after, 1, 7), std::nullopt);
  absl::StatusOr<CommitInfo> ro = Commit(*after);
  ASSERT_TRUE(ro.ok());
  EXPECT_FALSE(ro->wrote) << "a read-only transaction commits nothing";
  EXPECT_EQ(ro->position, 2u);
}

std::vector<int64_t> Ids(const schema::Layout& layout, const std::vector<Entity>& es) {
  std::vector<int64_t> out;
  for (const Entity& e : es)
    for (const auto& f : layout.schema().FindTable("Account")->fields())
      if (f.name() == "id") out.push_back(std::get<int64_t>(e.fields.at(f.number()).at(0)));
  return out;
}

TEST_F(TransactionTest, QueriesPageThroughAGroupAndSeeTheirOwnWrites) {
  Open();
  {
    auto t = Begin(1);
    for (int64_t id = 1; id <= 7; ++id)
      ASSERT_TRUE(
          t->Put("Account", Account(*layout_, 1, id, 10 * id, id % 2 ? "odd" : "even")).ok());
    ASSERT_TRUE(t->Put("Account", Account(*layout_, 2, 1, 5)).code() ==
                absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(Commit(*t).ok());
    auto other = Begin(2);  // another group, which queries of group 1 never see
    ASSERT_TRUE(other->Put("Account", Account(*layout_, 2, 4, 5, "odd")).ok());
    ASSERT_TRUE(Commit(*other).ok());
  }
  auto t = Begin(1, {}, 1);
  ASSERT_TRUE(t->Delete("Account", {int64_t{1}, int64_t{3}}).ok());
  ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, 9, 90, "odd")).ok());
  auto query = [&](QueryOptions o) {
    std::optional<absl::StatusOr<QueryResult>> r;
    t->Query("Account", {int64_t{1}}, o, [&](auto x) { r = std::move(x); });
    return Await(r);
  };
  std::vector<int64_t> all;
  QueryOptions o;
  o.limit = 3;
  int pages = 0;
  do {
    absl::StatusOr<QueryResult> page = query(o);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->entities.size(), 3u);
    for (int64_t id : Ids(*layout_, page->entities)) all.push_back(id);
    o.cursor = page->cursor;
    ++pages;
  } while (!o.cursor.empty() && pages < 10);
  EXPECT_EQ(all, (std::vector<int64_t>{1, 2, 4, 5, 6, 7, 9})) << "key order, own delete and insert";
  EXPECT_GE(pages, 3);

  std::optional<absl::StatusOr<QueryResult>> r;
  t->IndexQuery("AccountsByOwner", {int64_t{1}, std::string("odd")}, {},
                [&](auto x) { r = std::move(x); });
  absl::StatusOr<QueryResult> odd = Await(r);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(Ids(*layout_, odd->entities), (std::vector<int64_t>{1, 5, 7}))
      << "the index as of the read position; 3 is deleted by this transaction";
  EXPECT_TRUE(odd->cursor.empty());
  // Intersections: odd owners with balance 70 (just 7), odd with 20 (none).
  std::optional<absl::StatusOr<std::vector<Entity>>> both;
  t->IndexIntersect({{"AccountsByOwner", {int64_t{1}, std::string("odd")}},
                     {"AccountsByLocalBalance", {int64_t{1}, int64_t{70}}}},
                    [&](auto x) { both = std::move(x); });
  absl::StatusOr<std::vector<Entity>> seven = Await(both);
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(Ids(*layout_, *seven), (std::vector<int64_t>{7}));
  both.reset();
  t->IndexIntersect({{"AccountsByOwner", {int64_t{1}, std::string("odd")}},
                     {"AccountsByLocalBalance", {int64_t{1}, int64_t{20}}}},
                    [&](auto x) { both = std::move(x); });
  absl::StatusOr<std::vector<Entity>> none = Await(both);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  both.reset();
  t->IndexIntersect({{"AccountsByOwner", {int64_t{1}}}, {"AccountsByLocalBalance", {int64_t{1}}}},
                    [&](auto x) { both = std::move(x); });
  absl::StatusOr<std::vector<Entity>> all_of_group = Await(both);
  ASSERT_TRUE(all_of_group.ok());
  EXPECT_EQ(Ids(*layout_, *all_of_group), (std::vector<int64_t>{1, 2, 4, 5, 6, 7}))
      << "every account with both entries, as of the read position, minus this transaction's "
         "delete";
  ASSERT_TRUE(Commit(*t).ok());
  auto later = Begin(1, {}, 2);
  r.reset();
  later->IndexQuery("AccountsByOwner", {int64_t{1}, std::string("odd")}, {},
                    [&](auto x) { r = std::move(x); });
  absl::StatusOr<QueryResult> after = Await(r);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(Ids(*layout_, after->entities), (std::vector<int64_t>{1, 5, 7, 9}))
      << "index entries follow the committed writes";
  r.reset();
  later->IndexQuery("AccountsByBalance", {int64_t{10}}, {}, [&](auto x) { r = std::move(x); });
  EXPECT_EQ(Await(r).status().code(), absl::StatusCode::kInvalidArgument) << "a global index";
  r.reset();
  QueryOptions foreign;
  foreign.cursor = "elsewhere";
  later->Query("Account", {int64_t{1}}, foreign, [&](auto x) { r = std::move(x); });
  EXPECT_EQ(Await(r).status().code(), absl::StatusCode::kInvalidArgument);
}

// 300 accounts: odd owners with balance 0 are ids 3, 9, 15, ... (50 of
// them), found by merge-joining two index scans page by page, and the same
// in pages of 7 through the cursor.
TEST_F(TransactionTest, AnIntersectionMergeJoinsIndexScansInKeyOrderAndPages) {
  Open();
  {
    auto t = Begin(2);
    for (int64_t i = 0; i < 300; ++i) {
      Entity e = Account(*layout_, 2, i, i % 3, i % 2 ? "odd" : "even");
      ASSERT_TRUE(t->Put("Account", e).ok());
    }
    ASSERT_TRUE(Commit(*t).ok());
  }
  std::vector<int64_t> want;
  for (int64_t i = 3; i < 300; i += 6) want.push_back(i);
  const std::vector<std::pair<std::string, std::vector<KeyValue>>> conditions = {
      {"AccountsByOwner", {int64_t{2}, std::string("odd")}},
      {"AccountsByLocalBalance", {int64_t{2}, int64_t{0}}}};
  auto t = Begin(2);
  std::optional<absl::StatusOr<std::vector<Entity>>> all;
  t->IndexIntersect(conditions, [&](auto x) { all = std::move(x); });
  absl::StatusOr<std::vector<Entity>> joined = Await(all);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(Ids(*layout_, *joined), want);

  std::vector<int64_t> paged;
  QueryOptions page;
  page.limit = 7;
  int pages = 0;
  do {
    std::optional<absl::StatusOr<QueryResult>> r;
    t->IndexIntersect(conditions, page, [&](auto x) { r = std::move(x); });
    absl::StatusOr<QueryResult> got = Await(r);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(got->entities.size(), 7u);
    for (int64_t id : Ids(*layout_, got->entities)) paged.push_back(id);
    page.cursor = got->cursor;
    ASSERT_LT(++pages, 20);
  } while (!page.cursor.empty());
  EXPECT_EQ(paged, want);
  EXPECT_EQ(pages, 8) << "50 matches in pages of 7";

  // A condition on part of an index's columns is not in key order: the
  // in-memory intersection answers it, and pages the same way.
  std::optional<absl::StatusOr<QueryResult>> partial;
  QueryOptions first10;
  first10.limit = 10;
  t->IndexIntersect({{"AccountsByOwner", {int64_t{2}, std::string("odd")}},
                     {"AccountsByLocalBalance", {int64_t{2}}}},
                    first10, [&](auto x) { partial = std::move(x); });
  absl::StatusOr<QueryResult> odd = Await(partial);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(Ids(*layout_, odd->entities),
            (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}));
  EXPECT_FALSE(odd->cursor.empty());
}

TEST_F(TransactionTest, BadWritesAreRefusedNamingWhatIsWrong) {
  Open();
  auto t = Begin(1);
  Entity missing = Account(*layout_, 1, 8, 5);
  for (const auto& f : layout_->schema().FindTable("Account")->fields())
    if (f.name() == "balance") missing.fields.erase(f.number());
  absl::Status s = t->Put("Account", missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("balance"), std::string::npos) << s;
  s = t->Put("Account", Account(*layout_, 2, 8, 5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("another entity group"), std::string::npos) << s;
  EXPECT_EQ(t->Put("Acount", Account(*layout_, 1, 8, 5)).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<CommitInfo> c = Commit(*t);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->wrote) << "nothing refused was committed";
  EXPECT_EQ(Commit(*t).status().code(), absl::StatusCode::kFailedPrecondition);

  TransactionOptions inconsistent;
  inconsistent.level = replication::ReadLevel::kInconsistent;
  auto i = Begin(1, inconsistent);
  ASSERT_TRUE(i->Put("Account", Account(*layout_, 1, 9, 5)).ok());
  EXPECT_EQ(Commit(*i).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TransactionTest, TheLoserOfAPositionGetsAConflict) {
  Open();
  auto a = Begin(1);
  auto b = Begin(1, {}, 1);
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 1, 20)).ok());
  absl::StatusOr<CommitInfo> first = Commit(*a);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Commit(*b).status().code(), absl::StatusCode::kAborted);
}

// Promotion: a loser whose reads the winner did not write goes on to the
// next position, unchanged; one whose read (a row, or a scanned range) the
// winner wrote is aborted, as is every loser with promotion off.
TEST_F(TransactionTest, ALoserWhoseReadsTheWinnerDidNotWriteIsPromotedToTheNextPosition) {
  Open();
  auto a = Begin(1);
  auto b = Begin(1, {}, 1);
  ASSERT_TRUE(Get(*a, 1, 1).ok());
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10, "ann")).ok());
  ASSERT_TRUE(Get(*b, 1, 2).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 2, 20, "bob")).ok());
  absl::StatusOr<CommitInfo> first = Commit(*a);
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t promoted_before = clients_[1]->stats().promotions;
  absl::StatusOr<CommitInfo> second = Commit(*b);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->position, first->position + 1);
  EXPECT_GT(second->timestamp, first->timestamp);
  EXPECT_EQ(clients_[1]->stats().promotions, promoted_before + 1);
  // Both writes are there, in the order of the log.
  auto after = Begin(1, {}, 2);
  absl::StatusOr<std::optional<Entity>> one = Get(*after, 1, 1), two = Get(*after, 1, 2);
  ASSERT_TRUE(one.ok() && one->has_value() && two.ok() && two->has_value());
  EXPECT_EQ(Balance(*layout_, **one), 10);
  EXPECT_EQ(Balance(*layout_, **two), 20);
  EXPECT_EQ(after->position().position, second->position);
}

TEST_F(TransactionTest, PromotionNeverPassesAWinnerThatWroteARowTheLoserRead) {
  Open();
  auto a = Begin(1);
  auto b = Begin(1, {}, 1);
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  // b read account 1 (absent then) and writes account 2 from it.
  ASSERT_TRUE(Get(*b, 1, 1).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 2, 20)).ok());
  ASSERT_TRUE(Commit(*a).ok());
  EXPECT_EQ(Commit(*b).status().code(), absl::StatusCode::kAborted);
}

TEST_F(TransactionTest, PromotionNeverPassesAWinnerThatWroteIntoARangeTheLoserScanned) {
  Open();
  auto a = Begin(1);
  auto b = Begin(1, {}, 1);
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 5, 10)).ok());
  // b counts the branch's accounts (none yet) and records the count
  // elsewhere in the group: account 5 appearing would change it.
  std::optional<absl::StatusOr<QueryResult>> q;
  b->Query("Account", {int64_t{1}}, {}, [&](auto x) { q = std::move(x); });
  absl::StatusOr<QueryResult> seen = Await(q);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(seen->entities.empty());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 99, 0, "count")).ok());
  ASSERT_TRUE(Commit(*a).ok());
  EXPECT_EQ(Commit(*b).status().code(), absl::StatusCode::kAborted);
}

TEST_F(TransactionTest, WithPromotionOffEveryLoserAborts) {
  Open();
  TransactionOptions off;
  off.promote = false;
  auto a = Begin(1);
  auto b = Begin(1, off, 1);
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 2, 20)).ok());
  ASSERT_TRUE(Commit(*a).ok());
  EXPECT_EQ(Commit(*b).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(clients_[1]->stats().promotions, 0u);
}

// Combined entries: commits of one group from one client that wait behind
// its proposal in flight go together in the next entry when none read what
// another before it writes; one that did, or that read what a position
// decided since wrote, ends Aborted without a round trip of its own.
TEST_F(TransactionTest, CommitsWaitingBehindOneClientsProposalShareTheNextLogEntry) {
  Open();
  std::vector<std::shared_ptr<Transaction>> txns;
  for (int64_t id = 1; id <= 4; ++id) {
    txns.push_back(Begin(1));
    ASSERT_TRUE(Get(*txns.back(), 1, id).ok());
    ASSERT_TRUE(txns.back()->Put("Account", Account(*layout_, 1, id, 10 * id)).ok());
  }
  const replication::GroupClient::Stats before = clients_[0]->stats();
  std::vector<std::optional<absl::StatusOr<CommitInfo>>> done(txns.size());
  for (size_t i = 0; i < txns.size(); ++i)
    txns[i]->Commit([&done, i](auto r) { done[i] = std::move(r); });
  for (auto& d : done) ASSERT_TRUE(Await(d).ok()) << d->status();
  // The first went alone; the other three waited for it and went together.
  EXPECT_EQ((*done[1])->position, (*done[0])->position + 1);
  for (size_t i = 2; i < done.size(); ++i) {
    EXPECT_EQ((*done[i])->position, (*done[1])->position);
    EXPECT_EQ((*done[i])->timestamp, (*done[1])->timestamp);
  }
  const replication::GroupClient::Stats after = clients_[0]->stats();
  EXPECT_EQ(after.commits - before.commits, 4u);
  EXPECT_EQ(after.entries - before.entries, 2u);
  EXPECT_EQ(after.combined - before.combined, 3u);
  auto reader = Begin(1, {}, 2);
  for (int64_t id = 1; id <= 4; ++id) {
    absl::StatusOr<std::optional<Entity>> e = Get(*reader, 1, id);
    ASSERT_TRUE(e.ok() && e->has_value()) << id;
    EXPECT_EQ(Balance(*layout_, **e), 10 * id);
  }
}

TEST_F(TransactionTest, ACommitThatReadWhatAnEarlierOneWritesNeverSharesOrFollowsItsEntry) {
  Open();
  // a goes first, alone. b writes account 5; c read account 5 (absent)
  // and writes account 6 from it: c may not follow b. d read account 1,
  // which a writes: d may not follow a. e is independent of all of them.
  auto a = Begin(1), b = Begin(1), c = Begin(1), d = Begin(1), e = Begin(1);
  ASSERT_TRUE(Get(*a, 1, 1).ok());
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(Get(*b, 1, 5).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 5, 50)).ok());
  ASSERT_TRUE(Get(*c, 1, 5).ok());
  ASSERT_TRUE(c->Put("Account", Account(*layout_, 1, 6, 60)).ok());
  ASSERT_TRUE(Get(*d, 1, 1).ok());
  ASSERT_TRUE(d->Put("Account", Account(*layout_, 1, 7, 70)).ok());
  ASSERT_TRUE(Get(*e, 1, 8).ok());
  ASSERT_TRUE(e->Put("Account", Account(*layout_, 1, 8, 80)).ok());
  std::optional<absl::StatusOr<CommitInfo>> ra, rb, rc, rd, re;
  a->Commit([&](auto r) { ra = std::move(r); });
  b->Commit([&](auto r) { rb = std::move(r); });
  c->Commit([&](auto r) { rc = std::move(r); });
  d->Commit([&](auto r) { rd = std::move(r); });
  e->Commit([&](auto r) { re = std::move(r); });
  ASSERT_TRUE(Await(ra).ok());
  ASSERT_TRUE(Await(rb).ok());
  ASSERT_TRUE(Await(re).ok());
  EXPECT_EQ(Await(rc).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Await(rd).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*rb)->position, (*ra)->position + 1);
  EXPECT_EQ((*re)->position, (*rb)->position);
  auto reader = Begin(1, {}, 2);
  for (int64_t id : {6, 7}) {
    absl::StatusOr<std::optional<Entity>> gone = Get(*reader, 1, id);
    ASSERT_TRUE(gone.ok());
    EXPECT_FALSE(gone->has_value()) << "account " << id << " was written by an aborted commit";
  }
}

// Writers of one entity on one app server take turns: each that lost to
// another's commit waits for its turn (oldest first) and commits on its
// next attempt, instead of racing the others after a random pause.
TEST_F(TransactionTest, OneAppServersWritersOfOneEntityTakeTurnsOldestFirst) {
  Open();
  sim::SimEnv& env = cluster_->env();
  auto increment = [&](int w) -> Body {
    return [&, w](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
      auto parked = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
      t->Get("Account", {int64_t{1}, int64_t{1}}, [this, t, parked, w](auto a) {
        if (!a.ok()) return (*parked)(a.status());
        const int64_t b = a->has_value() ? Balance(*layout_, **a) : 0;
        (*parked)(t->Put("Account", Account(*layout_, 1, 1, b + 1, StrCat("w", w))));
      });
    };
  };
  const int writers = 8;
  const int64_t now = env.MonotonicMicros();
  TakeTurns(
      writers, [](int) { return 0; }, [now](int w) { return now + 1 + w; }, increment);
  EXPECT_EQ(clients_[0]->stats().turns, static_cast<uint64_t>(writers - 1));
  auto t = Begin(1);
  absl::StatusOr<std::optional<Entity>> e = Get(*t, 1, 1);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ(Balance(*layout_, **e), writers);
}

// App servers at two datacenters writing one group: once each lost a
// position to the other's entry, both send the group's commits to its home,
// which combines writes of different entities into shared entries (nobody
// aborts) and has writers of one entity take turns, oldest first, across
// both app servers.
TEST_F(TransactionTest, WritersAtTwoDatacentersOfAHotGroupCommitThroughItsHome) {
  Open();
  sim::SimEnv& env = cluster_->env();
  // One conflict each way, in turn: the loser of each saw the other's entry.
  for (int winner : {1, 0}) {
    const int loser = 1 - winner;
    auto lose = Begin(1, {}, loser), win = Begin(1, {}, winner);
    ASSERT_TRUE(GetTally(*lose, 9).ok());
    ASSERT_TRUE(GetTally(*win, 9).ok());
    ASSERT_TRUE(lose->Put("Tally", Tally(*layout_, 1, 9, 10 + loser)).ok());
    ASSERT_TRUE(win->Put("Tally", Tally(*layout_, 1, 9, 20 + winner)).ok());
    ASSERT_TRUE(Commit(*win).ok());
    EXPECT_EQ(Commit(*lose).status().code(), absl::StatusCode::kAborted);
  }
  // Its second commit went to the home: it was hot after the first round.
  EXPECT_EQ(clients_[0]->stats().forwarded, 1u);

  auto increment = [&](int64_t id) {
    return [&, id](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
      auto parked = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
      t->Get("Tally", {int64_t{1}, id}, [this, t, parked, id](auto a) {
        if (!a.ok()) return (*parked)(a.status());
        const int64_t n = a->has_value() ? Count(*layout_, **a) : 0;
        (*parked)(t->Put("Tally", Tally(*layout_, 1, id, n + 1)));
      });
    };
  };
  // Eight writers at each datacenter, each of its own entity: every one
  // commits on its first attempt, in entries shared across app servers.
  const uint64_t forwarded_before = clients_[0]->stats().forwarded + clients_[1]->stats().forwarded;
  const uint64_t combined_before = cluster_->HomeStats().home_combined;
  int finished = 0;
  for (int w = 0; w < 16; ++w) {
    TransactionOptions o;
    o.max_attempts = 1;
    txn::Run(Ctx(w % 2), "Branch", {int64_t{1}}, o, increment(100 + w),
             [&, w](absl::StatusOr<CommitInfo> r) {
               EXPECT_TRUE(r.ok()) << "writer " << w << ": " << r.status();
               ++finished;
             });
  }
  env.RunUntil(env.now() + 120'000'000, [&] { return finished == 16; });
  ASSERT_EQ(finished, 16);
  EXPECT_EQ(clients_[0]->stats().forwarded + clients_[1]->stats().forwarded, forwarded_before + 16);
  EXPECT_GT(cluster_->HomeStats().home_combined, combined_before);

  // Four writers at each datacenter, all of one entity: they take turns at
  // the home, each committing by its second attempt, oldest first after
  // the first. (The home orders two app servers' writers by when they
  // began only to within the one-way delay between them: 30 ms apart.)
  const int writers = 8;
  const int64_t now = env.MonotonicMicros();
  TakeTurns(
      writers, [](int w) { return w % 2; },
      [now](int w) { return now - 300'000 + w * 30'000; },  // begun before, in this order
      [&](int) { return increment(1); });
  auto t = Begin(1);
  absl::StatusOr<std::optional<Entity>> e = GetTally(*t, 1);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ(Count(*layout_, **e), writers);
}

TEST_F(TransactionTest, WithCombiningOffEveryCommitProposesOnItsOwn) {
  Open();
  replication::GroupClientOptions o = cluster_->ClientOptions(0);
  o.combine = false;
  cluster_->net().AddNode("solo", 0);
  clients_[0] = std::make_unique<replication::GroupClient>(&cluster_->env(),
                                                           cluster_->net().TransportFor("solo"), o);
  auto a = Begin(1), b = Begin(1);
  ASSERT_TRUE(Get(*a, 1, 1).ok());
  ASSERT_TRUE(a->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(Get(*b, 1, 2).ok());
  ASSERT_TRUE(b->Put("Account", Account(*layout_, 1, 2, 20)).ok());
  std::optional<absl::StatusOr<CommitInfo>> ra, rb;
  a->Commit([&](auto r) { ra = std::move(r); });
  b->Commit([&](auto r) { rb = std::move(r); });
  ASSERT_TRUE(Await(ra).ok());
  ASSERT_TRUE(Await(rb).ok());
  EXPECT_NE((*ra)->position, (*rb)->position);
  EXPECT_EQ(clients_[0]->stats().combined, 0u);
  EXPECT_EQ(clients_[0]->stats().entries, 2u);
}

// A transaction's first read brings along the group's undecided two-phase
// transactions, so its commit needs no scan of its own: with every
// repl.Scan request lost, a read-modify-write still commits, and one in a
// group holding an undecided prepared transaction still finds it.
TEST_F(TransactionTest, TheFirstReadBringsAlongTheScanForUndecidedTwoPhaseTransactions) {
  Open();
  auto setup = Begin(1);
  ASSERT_TRUE(setup->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(setup->Put("Account", Account(*layout_, 1, 2, 10)).ok());
  ASSERT_TRUE(Commit(*setup).ok());

  cluster_->net().set_method_loss("repl.Scan", 1.0);
  auto t = Begin(1);
  absl::StatusOr<std::optional<Entity>> a = Get(*t, 1, 1);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, 1, 11)).ok());
  absl::StatusOr<CommitInfo> c = Commit(*t);
  ASSERT_TRUE(c.ok()) << c.status();

  // A prepared transaction in the group, undecided (its decision would be
  // in branch 3's group).
  absl::StatusOr<std::string> decision_root =
      layout_->GroupRow(*layout_->schema().FindTable("Branch"), {int64_t{3}});
  ASSERT_TRUE(decision_root.ok()) << decision_root.status();
  auto p = Begin(1);
  ASSERT_TRUE(Get(*p, 1, 2).ok());
  ASSERT_TRUE(p->Put("Account", Account(*layout_, 1, 2, 5)).ok());
  std::optional<absl::StatusOr<CommitInfo>> prepared;
  p->Prepare("txid-1", *decision_root, [&](auto r) { prepared = std::move(r); });
  absl::StatusOr<CommitInfo> prepare_result = Await(prepared);
  ASSERT_TRUE(prepare_result.ok()) << prepare_result.status();

  auto u = Begin(1);
  ASSERT_TRUE(Get(*u, 1, 1).ok());
  ASSERT_TRUE(u->Put("Account", Account(*layout_, 1, 1, 12)).ok());
  c = Commit(*u);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_NE(c.status().message().find("two-phase"), std::string::npos) << c.status();

  // A transaction that read nothing scans on its own.
  cluster_->net().ClearMethodLoss();
  auto blind = Begin(1);
  ASSERT_TRUE(blind->Put("Account", Account(*layout_, 1, 1, 13)).ok());
  c = Commit(*blind);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_NE(c.status().message().find("two-phase"), std::string::npos) << c.status();
}

int64_t BalanceOf(const schema::Layout& layout, const Entity& e) {
  for (const auto& f : layout.schema().FindTable("Account")->fields())
    if (f.name() == "balance") return std::get<int64_t>(e.fields.at(f.number()).at(0));
  return -1;
}

// A transaction begun deferred finds its position with its first read: in
// one request when the local replica is vouched for and applied up to its
// top; otherwise as a Begin would (coordinator, majority, catch-up), then
// the row again. Either way the read sees every commit before it.
TEST_F(TransactionTest, ADeferredTransactionFindsItsPositionWithItsFirstRead) {
  Open();
  auto setup = Begin(1);
  ASSERT_TRUE(setup->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  absl::StatusOr<CommitInfo> first = Commit(*setup);
  ASSERT_TRUE(first.ok()) << first.status();
  auto balance = [&](Transaction& t) -> int64_t {
    absl::StatusOr<std::optional<Entity>> e = Get(t, 1, 1);
    EXPECT_TRUE(e.ok() && e->has_value()) << e.status();
    return e.ok() && e->has_value() ? BalanceOf(*layout_, **e) : -1;
  };

  // Once the local coordinator holds its locks and a read has validated
  // the group here, the replica is up to date here: one request, at the
  // position of the last commit.
  cluster_->env().RunUntil(cluster_->env().now() + 5'000'000, [] { return false; });
  auto validating = Begin(1);
  ASSERT_NE(validating, nullptr);
  cluster_->env().RunUntil(cluster_->env().now() + 100'000, [] { return false; });
  replication::GroupClient::Stats before = clients_[0]->stats();
  auto t = Begin(1, {}, 0, /*deferred=*/true);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->datacenter(), cluster_->ClientOptions(0).replicas[0].name);
  EXPECT_EQ(balance(*t), 10);
  EXPECT_EQ(t->position().position, first->position);
  EXPECT_EQ(clients_[0]->stats().first_reads, before.first_reads + 1);
  EXPECT_EQ(clients_[0]->stats().first_reads_again, before.first_reads_again);
  ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, 1, 11)).ok());
  absl::StatusOr<CommitInfo> second = Commit(*t);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->position, first->position + 1);

  // Another datacenter's commit whose apply here is lost: the replica here
  // accepted it but has not applied it (its top is beyond what is applied),
  // so the first read cannot stand at the applied position; it catches up
  // and reads again, and sees the commit.
  cluster_->net().set_method_loss("repl.Apply", 1.0, 0);
  auto remote = Begin(1, {}, 1);
  ASSERT_EQ(balance(*remote), 11);
  ASSERT_TRUE(remote->Put("Account", Account(*layout_, 1, 1, 12)).ok());
  absl::StatusOr<CommitInfo> third = Commit(*remote);
  ASSERT_TRUE(third.ok()) << third.status();
  cluster_->net().set_method_loss("repl.Apply", 0, 0);
  before = clients_[0]->stats();
  auto behind = Begin(1, {}, 0, /*deferred=*/true);
  EXPECT_EQ(balance(*behind), 12);
  EXPECT_EQ(behind->position().position, third->position);
  EXPECT_EQ(clients_[0]->stats().first_reads_again, before.first_reads_again + 1);

  // A deferred transaction that writes without reading commits after the
  // position it finds at its commit.
  auto blind = Begin(1, {}, 0, /*deferred=*/true);
  ASSERT_TRUE(blind->Put("Account", Account(*layout_, 1, 2, 5)).ok());
  absl::StatusOr<CommitInfo> fourth = Commit(*blind);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->position, third->position + 1);

  // Every kind of read finds the position first when it is the first: an
  // intersection of index scans on part of an index's columns (answered in
  // memory), in a group other datacenters wrote.
  auto other = Begin(2, {}, 1);
  for (int64_t i = 0; i < 6; ++i)
    ASSERT_TRUE(other->Put("Account", Account(*layout_, 2, i, i % 3, i % 2 ? "odd" : "even")).ok());
  ASSERT_TRUE(Commit(*other).ok());
  auto index_first = Begin(2, {}, 0, /*deferred=*/true);
  std::optional<absl::StatusOr<std::vector<Entity>>> matched;
  index_first->IndexIntersect({{"AccountsByOwner", {int64_t{2}, std::string("odd")}},
                               {"AccountsByLocalBalance", {int64_t{2}}}},
                              [&](auto x) { matched = std::move(x); });
  absl::StatusOr<std::vector<Entity>> odd = Await(matched);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(Ids(*layout_, *odd), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_GT(index_first->position().position, 0u);

  // A snapshot read stands at what is applied here, in one request too.
  TransactionOptions snapshot;
  snapshot.level = replication::ReadLevel::kSnapshot;
  before = clients_[0]->stats();
  auto s = Begin(1, snapshot, 0, /*deferred=*/true);
  EXPECT_EQ(balance(*s), 12);
  EXPECT_EQ(clients_[0]->stats().first_reads, before.first_reads + 1);

  // Where the position cannot be found (no replica answers), every read
  // and the commit report why, and position_failure() names it.
  cluster_->net().set_method_loss("repl.Read", 1.0);
  cluster_->net().set_method_loss("repl.State", 1.0);
  TransactionOptions quick;
  quick.deadline = absl::Seconds(2);
  auto lost = Begin(1, quick, 0, /*deferred=*/true);
  absl::StatusOr<std::optional<Entity>> e = Get(*lost, 1, 1);
  EXPECT_FALSE(e.ok());
  EXPECT_FALSE(lost->position_failure().ok());
  EXPECT_TRUE(PositionFailure(lost->position_failure())) << lost->position_failure();
  EXPECT_FALSE(Commit(*lost).ok());
  cluster_->net().ClearMethodLoss();
}

// A commit that writes only its group's rows is answered once visible,
// before its local apply has landed; a read right after the answer — from
// its own client (which waits for that apply) or from another app server
// in the datacenter (which catches the replica up) — sees the write. A
// commit that also writes a global index is answered only once applied
// here, so that index is current here.
TEST_F(TransactionTest, ACommitIsAnsweredBeforeItsLocalApplyYetEveryReadAfterItSeesIt) {
  Open();
  const std::string node = "app0b";
  cluster_->net().AddNode(node, 0);
  replication::GroupClient other(&cluster_->env(), cluster_->net().TransportFor(node),
                                 cluster_->ClientOptions(0));
  // Applied records written at datacenter 0 so far.
  uint64_t applied_here = 0;
  cluster_->bigtable(0)->set_write_observer(
      [&](const std::string&, const std::string&, const std::vector<storage::Mutation>& ms) {
        for (const storage::Mutation& m : ms) applied_here += m.qualifier == "S:applied";
      });
  absl::Cleanup unobserve = [&] { cluster_->bigtable(0)->set_write_observer(nullptr); };
  const schema::TableDescriptor* branch = layout_->schema().FindTable("Branch");
  auto named = [&](int64_t id, const std::string& name) {
    Entity e;
    for (const auto& f : branch->fields()) {
      if (f.name() == "id") e.fields[f.number()] = {id};
      if (f.name() == "name") e.fields[f.number()] = {name};
    }
    return e;
  };
  auto name_of = [&](const Entity& e) {
    for (const auto& f : branch->fields())
      if (f.name() == "name") return std::get<std::string>(e.fields.at(f.number()).at(0));
    return std::string();
  };
  // Commits `t` and, from its answer, reads branch 1 through `ctx`; whether
  // the local apply had landed when the answer came.
  struct Outcome {
    std::string seen;
    bool applied_before_answer = false;
    absl::Duration read_took;  // from the answer to the read's result
  };
  auto commit_then_read = [&](Transaction& t, Context ctx,
                              std::function<void()> on_answer = nullptr,
                              TransactionOptions read_options = {}) {
    Outcome out;
    std::optional<absl::StatusOr<std::optional<Entity>>> seen;
    const uint64_t applied_before = applied_here;
    t.Commit([&, ctx](absl::StatusOr<CommitInfo> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      if (on_answer) on_answer();
      out.applied_before_answer = applied_here > applied_before;
      const int64_t answered = cluster_->env().MonotonicMicros();
      Transaction::Begin(ctx, "Branch", {int64_t{1}}, read_options, [&, answered](auto b) {
        if (!b.ok()) {
          seen = b.status();
          return;
        }
        (*b)->Get("Branch", {int64_t{1}}, [&, answered, keep = *b](auto e) {
          out.read_took = absl::Microseconds(cluster_->env().MonotonicMicros() - answered);
          seen = std::move(e);
        });
      });
    });
    absl::StatusOr<std::optional<Entity>> read = Await(seen);
    EXPECT_TRUE(read.ok()) << read.status();
    out.seen = read.ok() && read->has_value() ? name_of(**read) : std::string("(none)");
    return out;
  };

  auto t = Begin(1);
  ASSERT_TRUE(t->Put("Branch", named(1, "first")).ok());
  Outcome o = commit_then_read(*t, Ctx(0));
  EXPECT_FALSE(o.applied_before_answer);
  EXPECT_EQ(o.seen, "first") << "its own client read after the apply";

  t = Begin(1);
  ASSERT_TRUE(t->Put("Branch", named(1, "second")).ok());
  o = commit_then_read(*t, Context{&other, layout_.get()});
  EXPECT_FALSE(o.applied_before_answer);
  EXPECT_EQ(o.seen, "second") << "another app server's current read caught the replica up";

  t = Begin(1);
  ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, 1, 10)).ok());
  ASSERT_TRUE(t->Put("Branch", named(1, "third")).ok());
  o = commit_then_read(*t, Context{&other, layout_.get()});
  EXPECT_TRUE(o.applied_before_answer) << "a global index entry is applied here before the answer";
  EXPECT_EQ(o.seen, "third");

  // The commit's local apply lost: its own client's read waits out the
  // apply's request, then catches the replica up.
  cluster_->net().set_method_loss("repl.Apply", 1.0, 0);
  t = Begin(1);
  ASSERT_TRUE(t->Put("Branch", named(1, "fourth")).ok());
  o = commit_then_read(*t, Ctx(0), [&] {
    cluster_->env().Schedule(absl::Milliseconds(50),
                             [&] { cluster_->net().set_method_loss("repl.Apply", 0, 0); });
  });
  EXPECT_FALSE(o.applied_before_answer);
  EXPECT_EQ(o.seen, "fourth");
  EXPECT_GE(cluster_->net().messages_dropped(), 1u);

  // The same for a snapshot read, which reads what is applied locally: it
  // catches the replica up to the commit whose apply failed first.
  const uint64_t dropped = cluster_->net().messages_dropped();
  cluster_->net().set_method_loss("repl.Apply", 1.0, 0);
  t = Begin(1);
  ASSERT_TRUE(t->Put("Branch", named(1, "fifth")).ok());
  TransactionOptions snapshot;
  snapshot.level = replication::ReadLevel::kSnapshot;
  o = commit_then_read(
      *t, Ctx(0),
      [&] {
        cluster_->env().Schedule(absl::Milliseconds(50),
                                 [&] { cluster_->net().set_method_loss("repl.Apply", 0, 0); });
      },
      snapshot);
  EXPECT_FALSE(o.applied_before_answer);
  EXPECT_EQ(o.seen, "fifth");
  EXPECT_GT(cluster_->net().messages_dropped(), dropped);

  // Another app server's read settles a commit whose local apply was lost,
  // with datacenter 2 unreachable from here: the catch-up takes the value
  // from datacenter 1's log without waiting out datacenter 2's silence.
  cluster_->net().set_method_loss("repl.Apply", 1.0, 0);
  t = Begin(1);
  ASSERT_TRUE(t->Put("Branch", named(1, "sixth")).ok());
  o = commit_then_read(*t, Context{&other, layout_.get()}, [&] {
    cluster_->net().set_method_loss("repl.Apply", 0, 0);  // the commit's was lost
    cluster_->net().Block(0, 2, true);
    cluster_->net().Block(2, 0, true);
  });
  cluster_->net().HealAll();
  EXPECT_EQ(o.seen, "sixth");
  EXPECT_LT(o.read_took, cluster_->ClientOptions(0).rpc_timeout) << o.read_took;
}

// A transaction's deadline bounds all of it, retries included: cut off
// from the other datacenters, a Run gives up when its deadline passes, not
// after the client's 10 s per-step default; reconnected, it commits.
TEST_F(TransactionTest, ADeadlineBoundsTheWholeTransaction) {
  Open();
  sim::SimEnv& env = cluster_->env();
  for (int other : {1, 2}) {
    cluster_->net().Block(0, other, true);
    cluster_->net().Block(other, 0, true);
  }
  auto put = [&](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
    done(t->Put("Account", Account(*layout_, 1, 1, 5)));
  };
  TransactionOptions o;
  o.deadline = absl::Milliseconds(300);
  const int64_t start = env.now();
  std::optional<absl::StatusOr<CommitInfo>> cut;
  txn::Run(Ctx(0), "Branch", {int64_t{1}}, o, put, [&](auto r) { cut = std::move(r); });
  absl::StatusOr<CommitInfo> r = Await(cut);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status()))
      << r.status();
  EXPECT_LE(env.now() - start, 320'000) << "it ran on past its deadline";

  cluster_->net().HealAll();
  o.deadline = absl::Seconds(5);
  std::optional<absl::StatusOr<CommitInfo>> healed;
  txn::Run(Ctx(0), "Branch", {int64_t{1}}, o, put, [&](auto r) { healed = std::move(r); });
  r = Await(healed);
  EXPECT_TRUE(r.ok()) << r.status();
}

// Eight writers from all datacenters incrementing one group's counter at
// once: unlocked, most lose Paxos races and retry; with the advisory lock
// they take turns — no conflicts — and every increment lands exactly once.
// With every coordinator down the lock cannot be had, and they go ahead
// without it.
TEST_F(TransactionTest, AdvisoryLocksLetAHotGroupsWritersTakeTurns) {
  Open();
  sim::SimEnv& env = cluster_->env();
  auto increment = [&](std::shared_ptr<Transaction> t,
                       absl::AnyInvocable<void(absl::Status)> done) {
    auto parked = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
    t->Get("Account", {int64_t{1}, int64_t{1}}, [this, t, parked](auto a) {
      if (!a.ok()) return (*parked)(a.status());
      const int64_t b = a->has_value() ? Balance(*layout_, **a) : 0;
      (*parked)(t->Put("Account", Account(*layout_, 1, 1, b + 1)));
    });
  };
  // Runs `writers` increments at once; returns the conflicts they met.
  auto race = [&](bool locked, int writers) {
    uint64_t conflicts_before = 0;
    for (auto& c : clients_) conflicts_before += c->stats().conflicts;
    int finished = 0;
    for (int w = 0; w < writers; ++w) {
      TransactionOptions o;
      o.advisory_lock = locked;
      o.max_attempts = 100;
      txn::Run(Ctx(w % 3), "Branch", {int64_t{1}}, o, increment, [&](absl::StatusOr<CommitInfo> r) {
        EXPECT_TRUE(r.ok()) << r.status();
        ++finished;
      });
    }
    env.RunUntil(env.now() + 120'000'000, [&] { return finished == writers; });
    EXPECT_EQ(finished, writers);
    uint64_t conflicts = 0;
    for (auto& c : clients_) conflicts += c->stats().conflicts;
    return conflicts - conflicts_before;
  };
  auto balance = [&] {
    auto t = Begin(1);
    absl::StatusOr<std::optional<Entity>> e = Get(*t, 1, 1);
    return e.ok() && e->has_value() ? Balance(*layout_, **e) : -1;
  };
  EXPECT_GT(race(false, 8), 0u) << "unlocked writers to one group conflict";
  EXPECT_EQ(balance(), 8);
  EXPECT_EQ(race(true, 8), 0u) << "locked writers take turns";
  EXPECT_EQ(balance(), 16);
  uint64_t granted = 0;
  for (auto& c : clients_) granted += c->stats().locks_granted;
  EXPECT_EQ(granted, 8u);
  for (int dc = 0; dc < 3; ++dc) cluster_->CrashCoordinator(dc);
  race(true, 3);
  EXPECT_EQ(balance(), 19) << "without coordinators they went ahead unlocked";
}

// Transfers between the accounts of one branch by clients in all three
// datacenters, with message loss, duplication and server crashes: every
// transfer is atomic, so the total never changes.
TEST_F(TransactionTest, BankTransfersInOneGroupConserveMoneyUnderFaults) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    clients_.clear();
    Open(seed);
    constexpr int kAccounts = 5;
    constexpr int64_t kInitial = 100;
    {
      auto t = Begin(1);
      for (int i = 0; i < kAccounts; ++i)
        ASSERT_TRUE(t->Put("Account", Account(*layout_, 1, i, kInitial)).ok());
      ASSERT_TRUE(Commit(*t).ok());
    }
    sim::SimEnv& env = cluster_->env();
    cluster_->StartChaos(8'000'000);

    int committed = 0, failed = 0, running = 0;
    std::function<void(int, int)> transfer = [&](int client, int left) {
      if (left == 0) return;
      ++running;
      const int from = static_cast<int>(env.Uniform(kAccounts));
      const int to = (from + 1 + static_cast<int>(env.Uniform(kAccounts - 1))) % kAccounts;
      const int64_t amount = static_cast<int64_t>(env.Uniform(30));
      TransactionOptions o;
      o.max_attempts = 20;
      txn::Run(
          Ctx(client), "Branch", {int64_t{1}}, o,
          [&, from, to, amount](std::shared_ptr<Transaction> t,
                                absl::AnyInvocable<void(absl::Status)> done) {
            auto shared_done =
                std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
            t->Get("Account", {int64_t{1}, int64_t{from}}, [&, t, to, amount, shared_done](auto a) {
              if (!a.ok()) return (*shared_done)(a.status());
              t->Get("Account", {int64_t{1}, int64_t{to}},
                     [&, t, a, from = **a, amount, shared_done](auto b) {
                       if (!b.ok()) return (*shared_done)(b.status());
                       const int64_t fb = Balance(*layout_, from), tb = Balance(*layout_, **b);
                       if (fb < amount)
                         return (*shared_done)(absl::OkStatus());  // insufficient: commit nothing
                       Entity nf = from, nt = **b;
                       for (const auto& fd : layout_->schema().FindTable("Account")->fields()) {
                         if (fd.name() != "balance") continue;
                         nf.fields[fd.number()] = {fb - amount};
                         nt.fields[fd.number()] = {tb + amount};
                       }
                       absl::Status s = t->Put("Account", nf);
                       if (s.ok()) s = t->Put("Account", nt);
                       (*shared_done)(s);
                     });
            });
          },
          [&, client, left](absl::StatusOr<CommitInfo> r) {
            --running;
            (r.ok() ? committed : failed)++;
            if (!r.ok() && getenv("MS_VERBOSE")) std::cout << r.status() << "\n";
            EXPECT_TRUE(r.ok() || absl::IsAborted(r.status()) || absl::IsUnavailable(r.status()) ||
                        absl::IsDeadlineExceeded(r.status()))
                << r.status();
            transfer(client, left - 1);
          });
    };
    for (int c = 0; c < 3; ++c) transfer(c, 12);
    env.RunUntil(env.now() + 300'000'000, [&] { return running == 0 && env.now() > 9'000'000; });
    ASSERT_EQ(running, 0) << "seed " << seed << ": transfers still running";
    cluster_->StopChaos();
    // Read every account at each datacenter, current level.
    for (int dc = 0; dc < 3; ++dc) {
      auto t = Begin(1, {}, dc);
      ASSERT_TRUE(t) << "seed " << seed;
      int64_t total = 0;
      for (int i = 0; i < kAccounts; ++i) {
        absl::StatusOr<std::optional<Entity>> e = Get(*t, 1, i);
        ASSERT_TRUE(e.ok() && e->has_value()) << "seed " << seed << " account " << i;
        const int64_t b = Balance(*layout_, **e);
        EXPECT_GE(b, 0);
        total += b;
      }
      EXPECT_EQ(total, kAccounts * kInitial) << "seed " << seed << " at datacenter " << dc;
    }
    EXPECT_GT(committed, 10) << "seed " << seed << " (" << failed << " failed)";
    std::cout << "seed " << seed << ": " << committed << " transfers committed, " << failed
              << " failed or unknown\n";
  }
}

// Transfers between three branches (entity groups) by clients in all three
// datacenters, half through two-phase commit and half through queues,
// under message loss, duplication and server crashes. Once in-doubt
// transactions are settled and the queues drained, no money was created
// or lost, at every datacenter. Half the queued senders never deliver
// themselves; the queue sweeper must.
TEST_F(TransactionTest, TransfersAcrossGroupsByTwoPhaseCommitAndQueuesConserveMoneyUnderFaults) {
  constexpr int kBranches = 3, kAccounts = 3;
  constexpr int64_t kInitial = 100;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    clients_.clear();
    Open(seed);
    sim::SimEnv& env = cluster_->env();
    using Done = std::shared_ptr<absl::AnyInvocable<void(absl::Status)>>;
    auto park = [](absl::AnyInvocable<void(absl::Status)> done) {
      return std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
    };
    auto set_balance = [this](Entity e, int64_t balance) {
      for (const auto& f : layout_->schema().FindTable("Account")->fields())
        if (f.name() == "balance") e.fields[f.number()] = {balance};
      return e;
    };
    // Runs a transaction to the end, on virtual time.
    auto run = [&](int64_t branch, Body body) {
      std::optional<absl::StatusOr<CommitInfo>> r;
      TransactionOptions o;
      o.max_attempts = 50;
      txn::Run(Ctx(static_cast<int>(branch) % 3), "Branch", {branch}, o, std::move(body),
               [&](auto x) { r = std::move(x); });
      return Await(r);
    };
    for (int64_t b = 1; b <= kBranches; ++b) {
      ASSERT_TRUE(run(b, [&, b](std::shared_ptr<Transaction> t,
                                absl::AnyInvocable<void(absl::Status)> done) {
                    absl::Status s;
                    for (int a = 0; s.ok() && a < kAccounts; ++a)
                      s = t->Put("Account", Account(*layout_, b, a, kInitial));
                    done(s);
                  }).ok());
    }
    cluster_->StartChaos(8'000'000);

    // One two-phase transfer: both groups read, both written, CommitAcross;
    // a conflict starts over (an unknown outcome does not: it may have
    // committed).
    std::function<void(int, int64_t, int64_t, int64_t, int, Done)> two_phase = [&](int client,
                                                                                   int64_t from,
                                                                                   int64_t to,
                                                                                   int64_t amount,
                                                                                   int attempt,
                                                                                   Done done) {
      Transaction::Begin(
          Ctx(client), "Branch", {from}, {}, [&, client, from, to, amount, attempt, done](auto a) {
            if (!a.ok()) return (*done)(a.status());
            Transaction::Begin(
                Ctx(client), "Branch", {to}, {},
                [&, client, from, to, amount, attempt, done, a = *a](auto b) {
                  if (!b.ok()) return (*done)(b.status());
                  auto tb = *b;
                  a->Get(
                      "Account", {from, int64_t{0}},
                      [&, client, from, to, amount, attempt, done, a, tb](auto x) {
                        if (!x.ok() || !x->has_value())
                          return (*done)(x.ok() ? absl::NotFoundError("account") : x.status());
                        tb->Get(
                            "Account", {to, int64_t{0}},
                            [&, client, from, to, amount, attempt, done, a, tb, x = **x](auto y) {
                              if (!y.ok() || !y->has_value())
                                return (*done)(y.ok() ? absl::NotFoundError("account")
                                                      : y.status());
                              const int64_t fb = Balance(*layout_, x);
                              if (fb < amount) return (*done)(absl::OkStatus());
                              absl::Status s = a->Put("Account", set_balance(x, fb - amount));
                              if (s.ok())
                                s = tb->Put("Account",
                                            set_balance(**y, Balance(*layout_, **y) + amount));
                              if (!s.ok()) return (*done)(s);
                              CommitAcross(Ctx(client), {a, tb},
                                           [&, client, from, to, amount, attempt, done](auto r) {
                                             if (absl::IsAborted(r.status()) && attempt < 20) {
                                               env.Schedule(
                                                   absl::Milliseconds(1 + env.Uniform(50)),
                                                   [&, client, from, to, amount, attempt, done] {
                                                     two_phase(client, from, to, amount,
                                                               attempt + 1, done);
                                                   });
                                               return;
                                             }
                                             (*done)(r.status());
                                           });
                            });
                      });
                });
          });
    };
    // One queued transfer: debit and send in the sender's group, then deliver.
    auto queued = [&](int client, int64_t from, int64_t to, int64_t amount, Done done) {
      TransactionOptions o;
      o.max_attempts = 20;
      txn::Run(
          Ctx(client), "Branch", {from}, o,
          [&, from, to, amount](std::shared_ptr<Transaction> t,
                                absl::AnyInvocable<void(absl::Status)> body_done) {
            auto bd = park(std::move(body_done));
            t->Get("Account", {from, int64_t{1}}, [&, t, to, amount, bd](auto x) {
              if (!x.ok() || !x->has_value())
                return (*bd)(x.ok() ? absl::NotFoundError("account") : x.status());
              const int64_t fb = Balance(*layout_, **x);
              if (fb < amount) return (*bd)(absl::OkStatus());
              absl::Status s = t->Put("Account", set_balance(**x, fb - amount));
              if (s.ok()) s = t->Send("Branch", {to}, "credits", StrCat(amount));
              (*bd)(s);
            });
          },
          [&, client, from, done](absl::StatusOr<CommitInfo> r) {
            if (!r.ok()) return (*done)(r.status());
            // Every other sender "dies" before delivering: the sweeper's job.
            if (env.Chance(0.5)) return (*done)(absl::OkStatus());
            absl::StatusOr<std::string> root =
                layout_->GroupRow(*layout_->schema().FindTable("Branch"), {from});
            DeliverPending(Ctx(client), *root,
                           [done](absl::StatusOr<int>) { (*done)(absl::OkStatus()); });
          });
    };
    int ok = 0, failed = 0, running = 0;
    std::function<void(int, int)> work = [&](int client, int left) {
      if (left == 0) return;
      ++running;
      const int64_t from = 1 + static_cast<int64_t>(env.Uniform(kBranches));
      const int64_t to = 1 + (from + static_cast<int64_t>(env.Uniform(kBranches - 1))) % kBranches;
      const int64_t amount = 1 + static_cast<int64_t>(env.Uniform(20));
      Done done = park([&, client, left](absl::Status s) {
        --running;
        (s.ok() ? ok : failed)++;
        EXPECT_TRUE(s.ok() || absl::IsAborted(s) || absl::IsUnavailable(s) ||
                    absl::IsDeadlineExceeded(s))
            << s;
        work(client, left - 1);
      });
      if (left % 2 == 0)
        two_phase(client, from, to, amount, 1, done);
      else
        queued(client, from, to, amount, done);
    };
    for (int c = 0; c < 3; ++c) work(c, 8);
    env.RunUntil(env.now() + 300'000'000, [&] { return running == 0 && env.now() > 9'000'000; });
    ASSERT_EQ(running, 0) << "seed " << seed << ": transfers still running";

    // Settle: heal, let in-doubt transactions time out, then one write in
    // each group resolves them; deliver every outbox; collect every credit.
    cluster_->StopChaos();
    env.RunUntil(env.now() + absl::ToInt64Microseconds(kPreparedTimeout) + 1'000'000,
                 [] { return false; });
    for (int64_t b = 1; b <= kBranches; ++b) {
      ASSERT_TRUE(
          run(b,
              [&, b](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
                Entity branch;
                for (const auto& fd : layout_->schema().FindTable("Branch")->fields())
                  if (fd.name() == "id") branch.fields[fd.number()] = {b};
                done(t->Put("Branch", branch));
              })
              .ok())
          << "seed " << seed << " branch " << b;
    }
    // The sweeper finds every outbox a failed or interrupted sender left.
    for (int sweep = 0; sweep < 2; ++sweep) {
      std::optional<absl::StatusOr<int>> delivered;
      SweepQueues(Ctx(sweep), [&](auto r) { delivered = std::move(r); });
      absl::StatusOr<int> n = Await(delivered);
      ASSERT_TRUE(n.ok()) << "seed " << seed << ": " << n.status();
      if (sweep == 1) {
        EXPECT_EQ(*n, 0) << "seed " << seed << ": the first sweep left messages behind";
      }
    }
    for (int64_t b = 1; b <= kBranches; ++b) {
      absl::StatusOr<std::string> root =
          layout_->GroupRow(*layout_->schema().FindTable("Branch"), {b});
      std::optional<absl::StatusOr<int>> delivered;
      DeliverPending(Ctx(0), *root, [&](auto r) { delivered = std::move(r); });
      absl::StatusOr<int> n = Await(delivered);
      ASSERT_TRUE(n.ok()) << "seed " << seed;
      EXPECT_EQ(*n, 0) << "seed " << seed << ": branch " << b << "'s outbox was not swept";
    }
    int credits = 0;
    for (int64_t b = 1; b <= kBranches; ++b) {
      for (bool more = true; more;) {
        more = false;
        ASSERT_TRUE(run(b,
                        [&, b](std::shared_ptr<Transaction> t,
                               absl::AnyInvocable<void(absl::Status)> done) {
                          auto d = park(std::move(done));
                          t->ReadQueue("credits", 1, [&, b, t, d](auto msgs) {
                            if (!msgs.ok()) return (*d)(msgs.status());
                            if (msgs->empty()) return (*d)(absl::OkStatus());
                            const QueueMessage m = msgs->front();
                            t->Get("Account", {b, int64_t{0}}, [&, t, d, m](auto x) {
                              if (!x.ok() || !x->has_value())
                                return (*d)(x.ok() ? absl::NotFoundError("account") : x.status());
                              absl::Status s = t->Put(
                                  "Account", set_balance(**x, Balance(*layout_, **x) +
                                                                  std::atoll(m.body.c_str())));
                              if (s.ok()) s = t->Consume(m);
                              more = s.ok();
                              (*d)(s);
                            });
                          });
                        })
                        .ok())
            << "seed " << seed;
        credits += more ? 1 : 0;
      }
    }
    for (int dc = 0; dc < 3; ++dc) {
      int64_t total = 0;
      for (int64_t b = 1; b <= kBranches; ++b) {
        auto t = Begin(b, {}, dc);
        ASSERT_TRUE(t) << "seed " << seed;
        for (int a = 0; a < kAccounts; ++a) {
          absl::StatusOr<std::optional<Entity>> e = Get(*t, b, a);
          ASSERT_TRUE(e.ok() && e->has_value()) << "seed " << seed;
          EXPECT_GE(Balance(*layout_, **e), 0);
          total += Balance(*layout_, **e);
        }
      }
      EXPECT_EQ(total, kBranches * kAccounts * kInitial)
          << "seed " << seed << " at datacenter " << dc;
    }
    EXPECT_GT(ok, 12) << "seed " << seed << " (" << failed << " failed)";
    std::cout << "seed " << seed << ": " << ok << " transfers done, " << failed
              << " failed or unknown, " << credits << " queued credits collected\n";
  }
}

}  // namespace
}  // namespace megastore::txn
