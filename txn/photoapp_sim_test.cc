// PhotoApp (the paper's example schema, through msc's classes) end to end
// on the simulator's three datacenters under faults: users' photos are
// created, retagged and deleted by clients in every datacenter; afterwards
// every group's local index (photos by time) and the global index (photos
// by tag) hold exactly the entries of the photos that exist, and every
// acknowledged change is there.
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "sim/deployment.h"
#include "txn/transaction.h"

namespace megastore::txn {
namespace {

using photoapp::Photo;
using photoapp::User;

constexpr int kUsers = 4;
const std::vector<std::string> kTags = {"beach", "sun", "city"};

class PhotoAppSimTest : public ::testing::Test {
 protected:
  void Open(uint64_t seed) {
    auto layout = schema::Layout::Create(photoapp::Schema());
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
  Context Ctx(int dc) { return Context{clients_[static_cast<size_t>(dc)].get(), layout_.get()}; }

  template <typename T>
  T Await(std::optional<T>& done) {
    cluster_->env().RunUntil(cluster_->env().now() + 120'000'000, [&] { return done.has_value(); });
    EXPECT_TRUE(done.has_value()) << "the operation never finished";
    return std::move(done).value_or(T(absl::UnknownError("never finished")));
  }

  std::vector<std::string> Tags(const Photo& p) {
    std::vector<std::string> out;
    for (int i = 0; i < p.tag_size(); ++i) out.push_back(p.tag(i));
    return out;
  }

  // A query's photos by (user, photo id).
  static std::map<std::pair<int64_t, int32_t>, Photo> ById(const std::vector<schema::Entity>& es) {
    std::map<std::pair<int64_t, int32_t>, Photo> out;
    for (const auto& e : es) {
      absl::StatusOr<Photo> p = Photo::FromEntity(e);
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) out[{p->user_id(), p->photo_id()}] = *p;
    }
    return out;
  }

  std::unique_ptr<schema::Layout> layout_;
  std::unique_ptr<sim::Cluster> cluster_;
  std::vector<std::unique_ptr<replication::GroupClient>> clients_;
};

// What a client did to one photo, and how it ended.
struct Change {
  bool deleted = false;
  std::vector<std::string> tags;
  int64_t time = 0;
  absl::Status status;
};

TEST_F(PhotoAppSimTest, IndexesFollowPhotosWrittenUnderFaults) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    clients_.clear();
    Open(seed);
    sim::SimEnv& env = cluster_->env();
    cluster_->StartChaos(6'000'000);

    // Per photo, its changes in order (each photo is changed by one client).
    std::map<std::pair<int64_t, int32_t>, std::vector<Change>> history;
    int running = 0;
    std::function<void(int, int)> work = [&](int client, int left) {
      if (left == 0) return;
      ++running;
      const int64_t user = 1 + static_cast<int64_t>(env.Uniform(kUsers));
      // New photos mostly; sometimes retag or delete one of this client's.
      std::vector<std::pair<int64_t, int32_t>> mine;
      for (const auto& [id, changes] : history)
        if (id.first == user && id.second / 1000 == client && !changes.back().deleted)
          mine.push_back(id);
      Change change;
      std::pair<int64_t, int32_t> id{user, client * 1000 + left};
      const uint64_t dice = env.Uniform(6);
      if (!mine.empty() && dice == 0) {
        id = mine[env.Uniform(mine.size())];
        change.deleted = true;
      } else if (!mine.empty() && dice <= 2) {
        id = mine[env.Uniform(mine.size())];
      }
      if (!change.deleted) {
        change.time = static_cast<int64_t>(env.Uniform(1'000'000));
        for (const std::string& t : kTags)
          if (env.Chance(0.5)) change.tags.push_back(t);
      }
      const size_t slot = history[id].size();
      history[id].push_back(change);
      TransactionOptions o;
      o.max_attempts = 20;
      txn::Run(
          Ctx(client), "User", {user}, o,
          [id, change](std::shared_ptr<Transaction> t,
                       absl::AnyInvocable<void(absl::Status)> done) {
            if (change.deleted) return done(t->Delete("Photo", {id.first, int64_t{id.second}}));
            User u;
            u.set_user_id(id.first);
            u.set_name(StrCat("user ", id.first));
            absl::Status s = t->Put("User", u.ToEntity());
            Photo p;
            p.set_user_id(id.first);
            p.set_photo_id(id.second);
            p.set_time(change.time);
            p.set_full_url(StrCat("https://photos.example/", id.first, "/", id.second));
            for (const std::string& tag : change.tags) p.add_tag(tag);
            if (s.ok()) s = t->Put("Photo", p.ToEntity());
            done(s);
          },
          [&, client, left, id, slot](absl::StatusOr<CommitInfo> r) {
            history[id][slot].status = r.status();
            --running;
            work(client, left - 1);
          });
    };
    for (int c = 0; c < 3; ++c) work(c, 12);
    env.RunUntil(env.now() + 300'000'000, [&] { return running == 0 && env.now() > 7'000'000; });
    ASSERT_EQ(running, 0) << "seed " << seed;
    cluster_->StopChaos();

    for (int dc = 0; dc < 3; ++dc) {
      std::map<std::pair<int64_t, int32_t>, Photo> all;
      for (int64_t user = 1; user <= kUsers; ++user) {
        std::optional<absl::StatusOr<std::shared_ptr<Transaction>>> began;
        Transaction::Begin(Ctx(dc), "User", {user}, {}, [&](auto t) { began = std::move(t); });
        absl::StatusOr<std::shared_ptr<Transaction>> t = Await(began);
        ASSERT_TRUE(t.ok()) << t.status();
        std::optional<absl::StatusOr<QueryResult>> photos, by_time;
        (*t)->Query("Photo", {user}, {}, [&](auto r) { photos = std::move(r); });
        absl::StatusOr<QueryResult> stored = Await(photos);
        ASSERT_TRUE(stored.ok()) << stored.status();
        (*t)->IndexQuery("PhotosByTime", {user}, {}, [&](auto r) { by_time = std::move(r); });
        absl::StatusOr<QueryResult> timed = Await(by_time);
        ASSERT_TRUE(timed.ok()) << timed.status();
        // The local index: exactly the stored photos, in time order.
        auto stored_by_id = ById(stored->entities);
        auto timed_by_id = ById(timed->entities);
        EXPECT_EQ(timed->entities.size(), stored->entities.size())
            << "seed " << seed << " dc " << dc << " user " << user;
        int64_t previous = -1;
        for (const schema::Entity& e : timed->entities) {
          const int64_t time = Photo::FromEntity(e)->time();
          EXPECT_GE(time, previous) << "PhotosByTime out of order, seed " << seed;
          previous = time;
        }
        all.insert(stored_by_id.begin(), stored_by_id.end());
      }
      // Acknowledged changes are there: a photo whose every change was
      // acknowledged is exactly as its last change left it.
      for (const auto& [id, changes] : history) {
        bool known = true;
        for (const Change& c : changes) known &= c.status.ok();
        if (!known) continue;
        auto it = all.find(id);
        if (changes.back().deleted) {
          EXPECT_TRUE(it == all.end()) << "seed " << seed << ": a deleted photo is back";
          continue;
        }
        ASSERT_TRUE(it != all.end()) << "seed " << seed << ": an acknowledged photo is missing";
        EXPECT_EQ(it->second.time(), changes.back().time);
        EXPECT_EQ(Tags(it->second), changes.back().tags);
      }
      // The global index, read at this datacenter after every group was read
      // (and so applied) here: exactly the photos with each tag.
      for (const std::string& tag : kTags) {
        std::map<std::pair<int64_t, int32_t>, Photo> want;
        for (const auto& [id, p] : all)
          for (const std::string& t : Tags(p))
            if (t == tag) want[id] = p;
        std::optional<absl::StatusOr<QueryResult>> tagged;
        GlobalIndexQuery(Ctx(dc), "PhotosByTag", {tag}, {}, replication::ReadLevel::kCurrent,
                         [&](auto r) { tagged = std::move(r); });
        absl::StatusOr<QueryResult> got = Await(tagged);
        ASSERT_TRUE(got.ok()) << got.status();
        auto got_by_id = ById(got->entities);
        std::set<std::pair<int64_t, int32_t>> want_ids, got_ids;
        for (const auto& [id, p] : want) want_ids.insert(id);
        for (const auto& [id, p] : got_by_id) got_ids.insert(id);
        EXPECT_EQ(got_ids, want_ids) << "seed " << seed << " dc " << dc << " tag " << tag;
      }
      if (dc == 0) std::cout << "seed " << seed << ": " << all.size() << " photos\n";
    }
  }
}

}  // namespace
}  // namespace megastore::txn
