// The HTTP/JSON gateway end to end: PhotoApp over three datacenters in this
// process, through JSON requests (and once over real HTTP).
#include "api/gateway.h"

#include <google/protobuf/util/json_util.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/escaping.h"
#include "api/gateway.pb.h"
#include "base/file.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "base/token_mac.h"
#include "gtest/gtest.h"
#include "photoapp/PhotoApp.schema.h"
#include "server/datacenter.h"
#include "txn/transaction.h"

namespace megastore {
namespace {

// The string value of `"field":"..."` in a reply's JSON ("" if absent).
std::string StringField(const std::string& json, const std::string& field) {
  const std::string key = StrCat("\"", field, "\":\"");
  const size_t at = json.find(key);
  if (at == std::string::npos) return "";
  return json.substr(at + key.size(), json.find('"', at + key.size()) - at - key.size());
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto layout = schema::Layout::Create(photoapp::Schema());
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto cluster = server::LocalCluster::Start(
        &env_, dir_.path(),
        {replication::ReplicaType::kFull, replication::ReplicaType::kFull,
         replication::ReplicaType::kWitness},
        txn::TablesFor(*layout), /*sync_log=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(cluster_->WaitUntilServing(absl::Seconds(5)));
    DatabaseOptions o;
    o.replicas = cluster_->replicas();
    o.local = "A";
    o.schema = photoapp::Schema();
    auto db = Database::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    gateway_ = std::make_unique<Gateway>(db_.get(), GatewayOptions{});
  }

  Gateway::Reply Post(const std::string& path, const std::string& json) {
    return gateway_->Handle(path, json);
  }

  RealEnv env_{11};
  TestDir dir_;
  std::unique_ptr<server::LocalCluster> cluster_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayTest, EntitiesGoInAndComeOutAsJson) {
  Gateway::Reply put = Post("/v1/commit", R"({
    "root_table": "User", "root_key": ["7"],
    "mutations": [
      {"table": "User", "put": {"user_id": "7", "name": "Ada"}},
      {"table": "Photo", "put": {"user_id": 7, "photo_id": 1, "time": "100",
                                 "full_url": "https://p/1", "tag": ["beach", "sun"]}},
      {"table": "Photo", "put": {"user_id": 7, "photo_id": 2, "time": "50",
                                 "full_url": "https://p/2", "tag": ["city"]}}
    ]})");
  ASSERT_EQ(put.status, 200) << put.json;
  EXPECT_NE(put.json.find("\"position\""), std::string::npos) << put.json;

  Gateway::Reply got = Post("/v1/get", R"({"table": "Photo", "key": [7, 1]})");
  ASSERT_EQ(got.status, 200) << got.json;
  EXPECT_NE(got.json.find(R"("found":true)"), std::string::npos) << got.json;
  EXPECT_NE(got.json.find(R"("tag":["beach","sun"])"), std::string::npos) << got.json;
  EXPECT_NE(got.json.find(R"("time":"100")"), std::string::npos)
      << "int64 as a string: " << got.json;
  EXPECT_NE(got.json.find(R"("photo_id":1)"), std::string::npos)
      << "int32 as a number: " << got.json;

  Gateway::Reply missing = Post("/v1/get", R"({"table": "Photo", "key": [7, 99]})");
  ASSERT_EQ(missing.status, 200) << missing.json;
  EXPECT_EQ(missing.json.find("\"found\":true"), std::string::npos) << missing.json;

  // Ancestor query, local index query (by time), global index query (by tag).
  Gateway::Reply photos = Post("/v1/query", R"({"table": "Photo", "key_prefix": ["7"]})");
  ASSERT_EQ(photos.status, 200) << photos.json;
  EXPECT_LT(photos.json.find("https://p/1"), photos.json.find("https://p/2"))
      << "key order: " << photos.json;
  Gateway::Reply by_time = Post("/v1/query", R"({"root_table": "User", "root_key": ["7"],
                                                 "index": "PhotosByTime", "values": ["7"]})");
  ASSERT_EQ(by_time.status, 200) << by_time.json;
  EXPECT_LT(by_time.json.find("https://p/2"), by_time.json.find("https://p/1"))
      << "time order: " << by_time.json;
  Gateway::Reply beach =
      Post("/v1/query", R"({"index": "PhotosByTag", "values": ["beach"], "level": "current"})");
  ASSERT_EQ(beach.status, 200) << beach.json;
  EXPECT_NE(beach.json.find("https://p/1"), std::string::npos) << beach.json;
  EXPECT_EQ(beach.json.find("https://p/2"), std::string::npos) << beach.json;

  Gateway::Reply del = Post("/v1/commit", R"({"root_table": "User", "root_key": ["7"],
      "mutations": [{"table": "Photo", "delete_key": ["7", 2]}]})");
  ASSERT_EQ(del.status, 200) << del.json;
  Gateway::Reply after = Post("/v1/query", R"({"table": "Photo", "key_prefix": ["7"]})");
  EXPECT_EQ(after.json.find("https://p/2"), std::string::npos) << after.json;
}

// Each read names the datacenter whose replica served it and the position;
// a request may pick the replica; a batch get reads several keys, one
// transaction per group; a commit that changed nothing says so.
TEST_F(GatewayTest, ReadsNameTheirReplicaAndBatchGetsReadManyKeys) {
  ASSERT_EQ(Post("/v1/commit", R"({"root_table": "User", "root_key": ["4"], "mutations": [
      {"table": "User", "put": {"user_id": "4", "name": "Di"}},
      {"table": "Photo", "put": {"user_id": 4, "photo_id": 1, "time": "1", "full_url": "u1"}}]})")
                .status,
            200);
  ASSERT_EQ(Post("/v1/commit", R"({"root_table": "User", "root_key": ["5"], "mutations": [
      {"table": "User", "put": {"user_id": "5", "name": "Ed"}}]})")
                .status,
            200);
  Gateway::Reply local = Post("/v1/get", R"({"table": "User", "key": ["4"]})");
  ASSERT_EQ(local.status, 200) << local.json;
  EXPECT_EQ(StringField(local.json, "replica"), "A") << local.json;
  EXPECT_EQ(StringField(local.json, "position"), "1") << local.json;
  for (const char* level : {"current", "snapshot"}) {
    Gateway::Reply at_b =
        Post("/v1/get",
             StrCat(R"({"table": "User", "key": ["4"], "replica": "B", "level": ")", level, "\"}"));
    ASSERT_EQ(at_b.status, 200) << at_b.json;
    EXPECT_EQ(StringField(at_b.json, "replica"), "B") << at_b.json;
    EXPECT_NE(at_b.json.find("\"Di\""), std::string::npos) << level << ": " << at_b.json;
  }
  // A token from B commits like one from A.
  Gateway::Reply at_b = Post("/v1/get", R"({"table": "User", "key": ["4"], "replica": "B"})");
  Gateway::Reply renamed = Post("/v1/commit", StrCat(R"({"root_table": "User", "root_key": ["4"],
      "read_token": ")",
                                                     StringField(at_b.json, "readToken"), R"(",
      "mutations": [{"table": "User", "put": {"user_id": "4", "name": "Dee"}}]})"));
  ASSERT_EQ(renamed.status, 200) << renamed.json;
  EXPECT_NE(renamed.json.find(R"("wrote":true)"), std::string::npos) << renamed.json;
  EXPECT_EQ(StringField(renamed.json, "position"), "2") << renamed.json;
  // The same put again changes nothing: no log position is used.
  Gateway::Reply again = Post("/v1/commit", R"({"root_table": "User", "root_key": ["4"],
      "mutations": [{"table": "User", "put": {"user_id": "4", "name": "Dee"}}]})");
  ASSERT_EQ(again.status, 200) << again.json;
  EXPECT_NE(again.json.find(R"("wrote":false)"), std::string::npos) << again.json;
  EXPECT_EQ(StringField(again.json, "position"), "2") << again.json;
  // "nearest" is the gateway's own datacenter when it holds data.
  Gateway::Reply nearest =
      Post("/v1/query", R"({"table": "Photo", "key_prefix": ["4"], "replica": "nearest"})");
  ASSERT_EQ(nearest.status, 200) << nearest.json;
  EXPECT_EQ(StringField(nearest.json, "replica"), "A") << nearest.json;
  EXPECT_EQ(StringField(nearest.json, "position"), "2") << nearest.json;
  // A witness holds no data; unknown names are listed against the real ones.
  Gateway::Reply witness = Post("/v1/get", R"({"table": "User", "key": ["4"], "replica": "C"})");
  EXPECT_EQ(witness.status, 400) << witness.json;
  EXPECT_NE(witness.json.find("witness"), std::string::npos) << witness.json;
  Gateway::Reply nowhere = Post("/v1/get", R"({"table": "User", "key": ["4"], "replica": "Z"})");
  EXPECT_EQ(nowhere.status, 400) << nowhere.json;
  EXPECT_NE(nowhere.json.find("A, B, C"), std::string::npos) << nowhere.json;
  Gateway::Reply global =
      Post("/v1/query", R"({"index": "PhotosByTag", "values": ["x"], "replica": "B"})");
  EXPECT_EQ(global.status, 400) << global.json;

  // Batch get: in request order, found or not, each saying where it was read.
  Gateway::Reply batch = Post("/v1/batchGet", R"({"gets": [
      {"table": "User", "key": ["5"]},
      {"table": "Photo", "key": [4, 1]},
      {"table": "User", "key": ["4"], "replica": "B"},
      {"table": "User", "key": ["6"]}]})");
  ASSERT_EQ(batch.status, 200) << batch.json;
  gateway::BatchGetReply parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(batch.json, &parsed).ok()) << batch.json;
  ASSERT_EQ(parsed.replies_size(), 4) << batch.json;
  EXPECT_TRUE(parsed.replies(0).found());
  EXPECT_EQ(parsed.replies(0).entity().fields().at("name").string_value(), "Ed");
  EXPECT_EQ(parsed.replies(1).entity().fields().at("full_url").string_value(), "u1");
  EXPECT_EQ(parsed.replies(2).replica(), "B");
  EXPECT_EQ(parsed.replies(2).entity().fields().at("name").string_value(), "Dee");
  EXPECT_FALSE(parsed.replies(3).found());
  EXPECT_EQ(parsed.replies(3).replica(), "A");
  // One failing key fails the batch, naming it.
  Gateway::Reply bad = Post("/v1/batchGet", R"({"gets": [{"table": "User", "key": ["5"]},
      {"table": "Nope", "key": [1]}]})");
  EXPECT_EQ(bad.status, 404) << bad.json;
  EXPECT_NE(bad.json.find("gets[1].table: no table Nope"), std::string::npos) << bad.json;
  EXPECT_EQ(Post("/v1/batchGet", R"({"gets": []})").status, 400);
}

// Query cursors are sealed like read tokens: pages follow one another, and
// a cursor altered, made up or swapped for a read token is refused.
TEST_F(GatewayTest, QueryCursorsPageAndCannotBeForged) {
  ASSERT_EQ(Post("/v1/commit", R"({"root_table": "User", "root_key": ["9"], "mutations": [
      {"table": "User", "put": {"user_id": "9", "name": "Cy"}},
      {"table": "Photo", "put": {"user_id": 9, "photo_id": 1, "time": "1", "full_url": "u1"}},
      {"table": "Photo", "put": {"user_id": 9, "photo_id": 2, "time": "2", "full_url": "u2"}}]})")
                .status,
            200);
  auto cursor_of = [](const std::string& json) { return StringField(json, "cursor"); };
  Gateway::Reply first =
      Post("/v1/query", R"({"table": "Photo", "key_prefix": ["9"], "limit": 1})");
  ASSERT_EQ(first.status, 200) << first.json;
  EXPECT_NE(first.json.find(R"("full_url":"u1")"), std::string::npos) << first.json;
  const std::string cursor = cursor_of(first.json);
  ASSERT_FALSE(cursor.empty()) << first.json;
  Gateway::Reply second =
      Post("/v1/query", StrCat(R"({"table": "Photo", "key_prefix": ["9"], "limit": 1, "cursor": ")",
                               cursor, R"("})"));
  ASSERT_EQ(second.status, 200) << second.json;
  // (By the field: a read token's random bytes may spell "u1" too.)
  EXPECT_NE(second.json.find(R"("full_url":"u2")"), std::string::npos) << second.json;
  EXPECT_EQ(second.json.find(R"("full_url":"u1")"), std::string::npos) << second.json;
  std::string altered = cursor;
  altered[altered.size() / 2] = altered[altered.size() / 2] == 'A' ? 'B' : 'A';
  const std::string read_token = [&] {
    Gateway::Reply got = Post("/v1/get", R"({"table": "User", "key": [9]})");
    const std::string key = "\"readToken\":\"";
    const size_t at = got.json.find(key) + key.size();
    return got.json.substr(at, got.json.find('"', at) - at);
  }();
  for (const std::string& bad :
       {altered, std::string("AAAA"), std::string("not base64!"), read_token}) {
    Gateway::Reply r =
        Post("/v1/query",
             StrCat(R"({"table": "Photo", "key_prefix": ["9"], "cursor": ")", bad, R"("})"));
    EXPECT_EQ(r.status, 400) << bad << ": " << r.json;
    EXPECT_NE(r.json.find("cursor"), std::string::npos) << r.json;
  }
}

// Every kind of query pages to its end, one entity a page, each entity
// once (the keys hold 0x00 and 0x80 bytes: int keys encode so).
TEST_F(GatewayTest, EveryQueryKindPagesToItsEnd) {
  std::string mutations = R"({"table": "User", "put": {"user_id": "-3", "name": "Di"}})";
  for (int i = 1; i <= 5; ++i)
    mutations +=
        StrCat(R"(, {"table": "Photo", "put": {"user_id": -3, "photo_id": )", i * 128,
               R"(, "time": ")", 1000 - i, R"(", "full_url": "p)", i, R"(", "tag": ["t0"]}})");
  ASSERT_EQ(
      Post("/v1/commit",
           StrCat(R"({"root_table": "User", "root_key": ["-3"], "mutations": [)", mutations, "]}"))
          .status,
      200);
  auto cursor_of = [](const std::string& json) { return StringField(json, "cursor"); };
  // The full_url of each entity, page after page.
  auto page_through = [&](const std::string& query) {
    std::vector<std::string> seen;
    std::string cursor;
    for (int page = 0; page < 20; ++page) {
      Gateway::Reply r = Post(
          "/v1/query", StrCat("{", query, R"(, "limit": 1)",
                              cursor.empty() ? "" : StrCat(R"(, "cursor": ")", cursor, "\""), "}"));
      EXPECT_EQ(r.status, 200) << query << ": " << r.json;
      if (r.status != 200) break;
      for (size_t at = r.json.find("\"full_url\":\""); at != std::string::npos;
           at = r.json.find("\"full_url\":\"", at + 1)) {
        const size_t from = at + 12;
        seen.push_back(r.json.substr(from, r.json.find('"', from) - from));
      }
      cursor = cursor_of(r.json);
      if (cursor.empty()) return seen;
    }
    ADD_FAILURE() << query << " did not end after 20 pages";
    return seen;
  };
  const std::vector<std::string> by_key = {"p1", "p2", "p3", "p4", "p5"};
  const std::vector<std::string> by_time = {"p5", "p4", "p3", "p2", "p1"};
  EXPECT_EQ(page_through(R"("table": "Photo", "key_prefix": ["-3"])"), by_key);
  EXPECT_EQ(page_through(R"("root_table": "User", "root_key": ["-3"], "index": "PhotosByTime",
                            "values": ["-3"])"),
            by_time);
  std::vector<std::string> tagged =
      page_through(R"("index": "PhotosByTag", "values": ["t0"], "level": "current")");
  std::sort(tagged.begin(), tagged.end());
  EXPECT_EQ(tagged, by_key);
}

TEST_F(GatewayTest, AReadTokenMakesACommitConditionalOnNothingChangingSince) {
  ASSERT_EQ(Post("/v1/commit", R"({"root_table": "User", "root_key": ["8"],
      "mutations": [{"table": "User", "put": {"user_id": "8", "name": "v1"}}]})")
                .status,
            200);
  auto token_of = [](const std::string& json) { return StringField(json, "readToken"); };
  const std::string first = token_of(Post("/v1/get", R"({"table": "User", "key": ["8"]})").json);
  const std::string second = token_of(Post("/v1/get", R"({"table": "User", "key": ["8"]})").json);
  ASSERT_FALSE(first.empty());
  auto commit = [&](const std::string& token, const std::string& name) {
    return Post("/v1/commit",
                StrCat(R"({"root_table": "User", "root_key": ["8"], "read_token": ")", token,
                       R"(", "mutations": [{"table": "User", "put": {"user_id": "8", "name": ")",
                       name, R"("}}]})"));
  };
  Gateway::Reply won = commit(first, "v2");
  EXPECT_EQ(won.status, 200) << won.json;
  Gateway::Reply lost = commit(second, "v3");
  EXPECT_EQ(lost.status, 409) << "the group changed since that read: " << lost.json;
  EXPECT_NE(lost.json.find("ABORTED"), std::string::npos) << lost.json;
  Gateway::Reply now = Post("/v1/get", R"({"table": "User", "key": ["8"]})");
  EXPECT_NE(now.json.find("\"v2\""), std::string::npos) << now.json;
  // Conditional on the whole group, not only on the rows it writes: a
  // token-conditioned write of another entity, after a commit in the group,
  // is refused too (never promoted past it).
  const std::string before_other = token_of(now.json);
  ASSERT_EQ(
      commit(token_of(Post("/v1/get", R"({"table": "User", "key": ["8"]})").json), "v5").status,
      200);
  Gateway::Reply skewed =
      Post("/v1/commit",
           StrCat(R"({"root_table": "User", "root_key": ["8"], "read_token": ")", before_other,
                  R"(", "mutations": [{"table": "Photo", "put": {"user_id": 8, "photo_id": 1,
             "time": "1", "full_url": "u"}}]})"));
  EXPECT_EQ(skewed.status, 409) << "the group changed since that read: " << skewed.json;

  Gateway::Reply other_group = Post(
      "/v1/commit",
      StrCat(R"({"root_table": "User", "root_key": ["9"], "read_token": ")", token_of(now.json),
             R"(", "mutations": [{"table": "User", "put": {"user_id": "9", "name": "x"}}]})"));
  EXPECT_EQ(other_group.status, 400) << other_group.json;
  Gateway::Reply forged = commit("bm90IGEgdG9rZW4", "x");
  EXPECT_EQ(forged.status, 400) << forged.json;

  // An inconsistent read saw no position: its token cannot make a commit
  // conditional (412), and nothing is written.
  const std::string loose =
      token_of(Post("/v1/get", R"({"table": "User", "key": ["8"], "level": "inconsistent"})").json);
  ASSERT_FALSE(loose.empty());
  Gateway::Reply refused = commit(loose, "v4");
  EXPECT_EQ(refused.status, 412) << refused.json;
  EXPECT_NE(refused.json.find("inconsistent read"), std::string::npos) << refused.json;
  EXPECT_NE(Post("/v1/get", R"({"table": "User", "key": ["8"]})").json.find("\"v5\""),
            std::string::npos);
}

// /v1/commitAcross writes several groups atomically (two-phase commit):
// conditional on every read token given, all or nothing.
TEST_F(GatewayTest, CommitAcrossWritesSeveralGroupsAtomically) {
  auto user = [](const std::string& id, const std::string& name, const std::string& token = "") {
    return StrCat(R"({"root_table": "User", "root_key": [")", id, R"("],)",
                  token.empty() ? "" : StrCat(R"( "read_token": ")", token, R"(",)"),
                  R"( "mutations": [{"table": "User", "put": {"user_id": ")", id, R"(", "name": ")",
                  name, R"("}}]})");
  };
  Gateway::Reply blind = Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("20", "a1"), ",",
                                                         user("21", "b1"), "]}"));
  ASSERT_EQ(blind.status, 200) << blind.json;
  EXPECT_NE(blind.json.find(R"("wrote":true)"), std::string::npos) << blind.json;
  auto name_of = [&](const std::string& id) {
    return StringField(Post("/v1/get", StrCat(R"({"table": "User", "key": [")", id, R"("]})")).json,
                       "name");
  };
  EXPECT_EQ(name_of("20"), "a1");
  EXPECT_EQ(name_of("21"), "b1");

  // Conditional on both reads: a commit in one group since makes the
  // whole commit 409, and neither group is written.
  auto token_of = [&](const std::string& id) {
    return StringField(Post("/v1/get", StrCat(R"({"table": "User", "key": [")", id, R"("]})")).json,
                       "readToken");
  };
  const std::string t20 = token_of("20"), t21 = token_of("21");
  ASSERT_EQ(Post("/v1/commit", user("21", "b2")).status, 200);
  Gateway::Reply stale = Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("20", "a3", t20),
                                                         ",", user("21", "b3", t21), "]}"));
  EXPECT_EQ(stale.status, 409) << stale.json;
  EXPECT_EQ(name_of("20"), "a1") << "an aborted two-phase commit wrote its other group";
  EXPECT_EQ(name_of("21"), "b2");
  Gateway::Reply fresh =
      Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("20", "a4", token_of("20")), ",",
                                      user("21", "b4", token_of("21")), "]}"));
  ASSERT_EQ(fresh.status, 200) << fresh.json;
  EXPECT_EQ(name_of("20"), "a4");
  EXPECT_EQ(name_of("21"), "b4");
  // A part that changes nothing (a guard: it rewrites what it read) is
  // conditional all the same.
  const std::string guard = token_of("20");
  ASSERT_EQ(Post("/v1/commit", user("20", "a5")).status, 200);
  ASSERT_EQ(Post("/v1/commit", user("20", "a4")).status, 200);  // back as the guard read it
  Gateway::Reply guarded =
      Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("20", "a4", guard), ",",
                                      user("21", "b5", token_of("21")), "]}"));
  EXPECT_EQ(guarded.status, 409) << "the guard's group changed since its read: " << guarded.json;
  EXPECT_EQ(name_of("21"), "b4");
  // A guard on a fresh read commits with the other group, and leaves its
  // own group free for the next writer (its empty prepared row is gone).
  Gateway::Reply fresh_guard =
      Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("20", "a4", token_of("20")), ",",
                                      user("21", "b6", token_of("21")), "]}"));
  ASSERT_EQ(fresh_guard.status, 200) << fresh_guard.json;
  EXPECT_EQ(name_of("21"), "b6");
  Gateway::Reply after_guard = Post("/v1/commit", user("20", "a6", token_of("20")));
  EXPECT_EQ(after_guard.status, 200) << "the guard's group is not blocked: " << after_guard.json;
  EXPECT_EQ(name_of("20"), "a6");

  // One group, once: the same as /v1/commit (no two-phase commit).
  Gateway::Reply one = Post("/v1/commitAcross", StrCat(R"({"commits": [)", user("22", "c"), "]}"));
  ASSERT_EQ(one.status, 200) << one.json;
  EXPECT_NE(StringField(one.json, "position"), "0") << one.json;

  std::string seventeen;
  for (int i = 0; i < 17; ++i) seventeen += StrCat(i ? "," : "", user(StrCat(100 + i), "x"));
  struct Case {
    std::string body, expect;
    int status;
  };
  const std::vector<Case> bad = {
      {R"({"commits": []})", "commits: none given", 400},
      {StrCat(R"({"commits": [)", user("20", "d"), ",", user("20", "e"), "]}"),
       "commits[1]: the entity group of commits[0]", 400},
      {StrCat(R"({"commits": [)", seventeen, "]}"), "at most 16", 400},
      {StrCat(R"({"commits": [)", user("20", "d"), R"(, {"root_table": "Nope", "root_key": [1],
          "mutations": [{"table": "User", "put": {"user_id": "1"}}]}]})"),
       "commits[1].root_table: no table Nope", 404},
      {StrCat(R"({"commits": [)", user("20", "d"), ",", user("21", "e", "bm90IGEgdG9rZW4"), "]}"),
       "commits[1].read_token", 400},
      {StrCat(R"({"commits": [)", user("20", "d"), R"(, {"root_table": "User", "root_key": ["21"],
          "mutations": [{"table": "User", "put": {"user_id": "21", "age": 3}}]}]})"),
       "commits[1].mutations[0]", 400},
  };
  for (const Case& c : bad) {
    Gateway::Reply r = Post("/v1/commitAcross", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.json;
    EXPECT_NE(r.json.find(c.expect), std::string::npos) << c.body << " -> " << r.json;
  }
  EXPECT_EQ(name_of("20"), "a6") << "a refused commit wrote";
  EXPECT_EQ(name_of("21"), "b6") << "a refused commit wrote";
}

// Queues: a commit sends messages (atomically with its writes, delivered
// once); /v1/readQueue reads them with a token; a commit carrying that
// token consumes them, and only one commit can.
TEST_F(GatewayTest, QueuesSendReadAndConsumeExactlyOnce) {
  Gateway::Reply sent = Post("/v1/commit", R"({"root_table": "User", "root_key": ["30"],
      "mutations": [{"table": "User", "put": {"user_id": "30", "name": "sender"}}],
      "sends": [{"root_table": "User", "root_key": ["31"], "queue": "inbox", "body": "aGVsbG8="},
                {"root_table": "User", "root_key": ["31"], "queue": "inbox", "body": "d29ybGQ="}]})");
  ASSERT_EQ(sent.status, 200) << sent.json;
  const std::string read_31 = R"({"root_table": "User", "root_key": ["31"], "queue": "inbox"})";
  Gateway::Reply waiting = Post("/v1/readQueue", read_31);
  ASSERT_EQ(waiting.status, 200) << waiting.json;
  EXPECT_NE(waiting.json.find(R"("body":"aGVsbG8=")"), std::string::npos) << waiting.json;
  EXPECT_NE(waiting.json.find(R"("body":"d29ybGQ=")"), std::string::npos) << waiting.json;
  const std::string id = StringField(waiting.json, "id");
  const std::string token = StringField(waiting.json, "readToken");
  ASSERT_FALSE(id.empty()) << waiting.json;
  auto consume = [&](const std::string& tok, const std::string& message_id) {
    return Post("/v1/commit",
                StrCat(R"({"root_table": "User", "root_key": ["31"], )",
                       tok.empty() ? "" : StrCat(R"("read_token": ")", tok, R"(", )"),
                       R"("consumes": [{"queue": "inbox", "id": ")", message_id, R"("}]})"));
  };
  Gateway::Reply blind = consume("", id);
  EXPECT_EQ(blind.status, 400) << blind.json;
  EXPECT_NE(blind.json.find("consumes: give the read_token"), std::string::npos) << blind.json;
  Gateway::Reply bad_id = consume(token, "../x");
  EXPECT_EQ(bad_id.status, 400) << bad_id.json;
  EXPECT_NE(bad_id.json.find("consumes[0].id"), std::string::npos) << bad_id.json;
  Gateway::Reply first = consume(token, id);
  ASSERT_EQ(first.status, 200) << first.json;
  Gateway::Reply twice = consume(token, id);
  EXPECT_EQ(twice.status, 409) << "one read, two consumers: " << twice.json;
  // A later read's token does not make a consumed message consumable again,
  // nor does naming one message twice in a commit.
  const std::string later = StringField(Post("/v1/readQueue", read_31).json, "readToken");
  Gateway::Reply again = consume(later, id);
  EXPECT_EQ(again.status, 412) << again.json;
  EXPECT_NE(again.json.find("is not waiting in queue"), std::string::npos) << again.json;
  const std::string other_id = StringField(Post("/v1/readQueue", read_31).json, "id");
  ASSERT_FALSE(other_id.empty());
  Gateway::Reply doubled =
      Post("/v1/commit", StrCat(R"({"root_table": "User", "root_key": ["31"], "read_token": ")",
                                later, R"(", "consumes": [{"queue": "inbox", "id": ")", other_id,
                                R"("}, {"queue": "inbox", "id": ")", other_id, R"("}]})"));
  EXPECT_EQ(doubled.status, 412) << doubled.json;
  EXPECT_NE(doubled.json.find("consumes[1]"), std::string::npos) << doubled.json;
  Gateway::Reply left = Post("/v1/readQueue", read_31);
  ASSERT_EQ(left.status, 200) << left.json;
  EXPECT_EQ(left.json.find(id), std::string::npos) << left.json;
  EXPECT_NE(left.json.find(R"("id":")"), std::string::npos) << "the other one waits: " << left.json;

  // Sent by a part of a two-phase commit: delivered once it commits.
  Gateway::Reply across = Post("/v1/commitAcross", R"({"commits": [
      {"root_table": "User", "root_key": ["32"],
       "mutations": [{"table": "User", "put": {"user_id": "32", "name": "p"}}],
       "sends": [{"root_table": "User", "root_key": ["31"], "queue": "other", "body": "eA=="}]},
      {"root_table": "User", "root_key": ["33"],
       "mutations": [{"table": "User", "put": {"user_id": "33", "name": "q"}}]}]})");
  ASSERT_EQ(across.status, 200) << across.json;
  Gateway::Reply other =
      Post("/v1/readQueue",
           R"({"root_table": "User", "root_key": ["31"], "queue": "other", "limit": 5})");
  ASSERT_EQ(other.status, 200) << other.json;
  EXPECT_NE(other.json.find(R"("body":"eA==")"), std::string::npos) << other.json;

  struct Case {
    std::string path, body, expect;
    int status;
  };
  const std::vector<Case> bad = {
      {"/v1/readQueue", R"({"root_table": "User", "root_key": ["31"]})", "queue: missing", 400},
      {"/v1/readQueue",
       StrCat(R"({"root_table": "User", "root_key": ["31"], "queue": ")", std::string(300, 'q'),
              R"("})"),
       "300 bytes", 400},
      {"/v1/readQueue", R"({"root_table": "User", "root_key": ["31"], "queue": "q", "limit": -2})",
       "limit: -2", 400},
      {"/v1/commit", R"({"root_table": "User", "root_key": ["30"],
          "sends": [{"root_table": "Nope", "root_key": [1], "queue": "q"}]})",
       "sends[0].root_table: no table Nope", 404},
      {"/v1/commit", R"({"root_table": "User", "root_key": ["30"],
          "sends": [{"root_table": "User", "root_key": ["31"], "queue": ""}]})",
       "sends[0].queue: missing", 400},
      {"/v1/commit", R"({"root_table": "User", "root_key": ["30"]})", "none given", 400},
  };
  for (const Case& c : bad) {
    Gateway::Reply r = Post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.json;
    EXPECT_NE(r.json.find(c.expect), std::string::npos) << c.body << " -> " << r.json;
  }
  std::string many = R"({"root_table": "User", "root_key": ["30"], "sends": [)";
  for (int i = 0; i < 101; ++i)
    many += StrCat(i ? "," : "", R"({"root_table": "User", "root_key": ["31"], "queue": "q"})");
  Gateway::Reply too_many = Post("/v1/commit", many + "]}");
  EXPECT_EQ(too_many.status, 400) << too_many.json;
  EXPECT_NE(too_many.json.find("at most 100"), std::string::npos) << too_many.json;
  Gateway::Reply empty =
      Post("/v1/readQueue", R"({"root_table": "User", "root_key": ["31"], "queue": "q"})");
  EXPECT_NE(empty.json.find(R"("messages":[])"), std::string::npos)
      << "refused sends sent nothing: " << empty.json;
}

// A read token carries the position and timestamp a commit builds on; a
// client that re-encodes one (say, with a far-future position) must get
// nothing committed. Before tokens were sealed, such a commit succeeded at
// that position and the group's current reads failed from then on.
TEST_F(GatewayTest, AlteredOrForeignReadTokensAreRefused) {
  ASSERT_EQ(Post("/v1/commit", R"({"root_table": "User", "root_key": ["4"],
      "mutations": [{"table": "User", "put": {"user_id": "4", "name": "v1"}}]})")
                .status,
            200);
  const std::string got = Post("/v1/get", R"({"table": "User", "key": ["4"]})").json;
  const std::string key = "\"readToken\":\"";
  const size_t at = got.find(key) + key.size();
  const std::string token = got.substr(at, got.find('"', at) - at);
  std::string sealed;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(token, &sealed));
  auto commit = [&](const std::string& t) {
    return Post(
        "/v1/commit",
        StrCat(R"({"root_table": "User", "root_key": ["4"], "read_token": ")", t,
               R"(", "mutations": [{"table": "User", "put": {"user_id": "4", "name": "x"}}]})"));
  };
  // The same token with its position pushed far ahead (field 2, a varint).
  gateway::ReadToken forged;
  ASSERT_TRUE(forged.ParseFromString(sealed.substr(0, sealed.size() - TokenMac::kTrailerBytes)));
  forged.set_position(forged.position() + 1000000);
  forged.set_timestamp(forged.timestamp() + 3600'000'000);
  const std::string re_encoded = absl::WebSafeBase64Escape(
      forged.SerializeAsString() + sealed.substr(sealed.size() - TokenMac::kTrailerBytes));
  for (const std::string& bad :
       {re_encoded, absl::WebSafeBase64Escape(forged.SerializeAsString())}) {
    Gateway::Reply r = commit(bad);
    EXPECT_EQ(r.status, 400) << r.json;
    EXPECT_NE(r.json.find("read_token"), std::string::npos) << r.json;
  }
  // A token of another gateway (another secret).
  Gateway other(db_.get(), GatewayOptions{});
  const std::string theirs = other.Handle("/v1/get", R"({"table": "User", "key": ["4"]})").json;
  const size_t at2 = theirs.find(key) + key.size();
  EXPECT_EQ(commit(theirs.substr(at2, theirs.find('"', at2) - at2)).status, 400);
  EXPECT_EQ(gateway_->stats().bad_read_token, 3u);
  // Nothing was written; the genuine token still commits.
  EXPECT_NE(Post("/v1/get", R"({"table": "User", "key": ["4"]})").json.find("\"v1\""),
            std::string::npos);
  Gateway::Reply ok = commit(token);
  EXPECT_EQ(ok.status, 200) << ok.json;
}

// Bearer tokens name principals; the access check sees them and the action.
TEST_F(GatewayTest, BearerTokensAndTheAccessCheckDecideWhoMayDoWhat) {
  GatewayOptions o;
  o.tokens[Sha256Hex("reader-token")] = "reader";
  std::vector<std::string> asked;
  o.authorize = [&](const std::string& principal, bool write, const std::string& object) {
    asked.push_back(StrCat(principal, write ? " write " : " read ", object));
    return write && principal == "reader" ? absl::PermissionDeniedError("\"reader\" may not write")
                                          : absl::OkStatus();
  };
  Gateway g(db_.get(), o);
  const std::string put =
      R"({"rootTable": "User", "rootKey": ["9"], "mutations": [{"table": "User", "put": {"user_id": "9", "name": "Z"}}]})";
  EXPECT_EQ(g.Handle("/v1/get", R"({"table": "User", "key": ["9"]})", "Bearer reader-token").status,
            200);
  Gateway::Reply denied = g.Handle("/v1/commit", put, "Bearer reader-token");
  EXPECT_EQ(denied.status, 403) << denied.json;
  EXPECT_NE(denied.json.find("PERMISSION_DENIED"), std::string::npos) << denied.json;
  Gateway::Reply denied_across =
      g.Handle("/v1/commitAcross", StrCat(R"({"commits": [)", put, "]}"), "Bearer reader-token");
  EXPECT_EQ(denied_across.status, 403) << denied_across.json;
  EXPECT_EQ(g.Handle("/v1/readQueue", R"({"rootTable": "User", "rootKey": ["9"], "queue": "q"})",
                     "Bearer reader-token")
                .status,
            200);
  EXPECT_EQ(g.Handle("/v1/commit", put, "Bearer wrong").status, 401);
  EXPECT_EQ(g.Handle("/v1/commit", put, "Basic cmVhZGVy").status, 401);
  EXPECT_EQ(g.Handle("/v1/commit", put, "", "tls-writer").status, 200)
      << "without a token: the TLS principal";
  EXPECT_EQ(asked, (std::vector<std::string>{"reader read PhotoApp", "reader write PhotoApp",
                                             "reader write PhotoApp", "reader read PhotoApp",
                                             "tls-writer write PhotoApp"}));
  EXPECT_EQ(g.stats().unauthenticated, 2u);
  EXPECT_EQ(g.stats().denied, 2u);
}

TEST(GatewayTokens, TheFileHoldsHashesAndItsMistakesAreNamedByLine) {
  TestDir dir;
  const std::string path = dir.path() + "/tokens";
  ASSERT_TRUE(
      WriteFileAtomically(path, StrCat("# comment\n\nsha256:", Sha256Hex("t1"), " app-1\n")).ok());
  absl::StatusOr<std::map<std::string, std::string>> tokens = LoadGatewayTokens(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->at(Sha256Hex("t1")), "app-1");
  ASSERT_TRUE(
      WriteFileAtomically(path, StrCat("sha256:", Sha256Hex("t1"), " app-1\nt2 app-2\n")).ok());
  EXPECT_NE(LoadGatewayTokens(path).status().message().find("tokens:2: not"), std::string::npos)
      << LoadGatewayTokens(path).status();
  EXPECT_TRUE(absl::IsNotFound(LoadGatewayTokens(dir.path() + "/none").status()));
}

TEST_F(GatewayTest, BadRequestsGetAClearErrorAndWriteNothing) {
  struct Case {
    std::string path, body, expect;
    int status;
  };
  const std::vector<Case> cases = {
      {"/v1/get", "{not json", "not valid JSON", 400},
      {"/v1/get", R"({"table": "User", "key": ["8"], "colour": 1})", "colour", 400},
      {"/v1/get", R"({"table": "Nope", "key": [1]})", "no table Nope", 404},
      {"/v1/get", R"({"table": "User", "key": ["eight"]})", "is not an integer", 400},
      {"/v1/get", R"({"table": "Photo", "key": [1]})", "2 key parts", 400},
      {"/v1/get", R"({"table": "User", "key": [1], "level": "eventual"})", "eventual", 400},
      {"/v1/query", R"({"index": "Nope", "values": [1]})", "no index Nope", 404},
      {"/v1/commit", R"({"root_table": "User", "root_key": [5],
          "mutations": [{"table": "Photo", "put": {"user_id": 5, "photo_id": 1, "full_url": "u"}}]})",
       "time", 400},  // a required field is missing
      {"/v1/commit", R"({"root_table": "User", "root_key": [5],
          "mutations": [{"table": "Photo", "put": {"user_id": 5, "photo_id": 99999999999, "time": 1, "full_url": "u"}}]})",
       "out of range for int32", 400},
      {"/v1/commit", R"({"root_table": "User", "root_key": [5],
          "mutations": [{"table": "User", "put": {"user_id": 5, "name": "n", "age": 3}}]})",
       "User.age: no such field", 400},
      {"/v1/commit", R"({"root_table": "User", "root_key": [5],
          "mutations": [{"table": "User", "put": {"user_id": 6, "name": "n"}}]})",
       "another entity group", 400},
      {"/v1/commit", R"({"root_table": "User", "root_key": [5], "mutations": []})", "none given",
       400},
      {"/v1/nothing", "{}", "no endpoint", 404},
      // Bounded before parsing: 20,000 levels once cost the parser 38 s.
      {"/v1/get",
       R"({"table": "User", "key": [)" + std::string(20000, '[') + std::string(20000, ']') + "]}",
       "deeper than 32", 400},
      {"/v1/get", R"({"table": "User", "key": 8})", "not valid JSON", 400},
      {"/v1/get", R"({"table": "User", "key": {"a": 1}})", "not valid JSON", 400},
      {"/v1/query", R"({"table": "Photo", "key_prefix": [5], "limit": -1})", "limit: -1", 400},
      {"/v1/query", R"({"table": "Photo", "key_prefix": [5], "limit": 1000000})", "limit: 1000000",
       400},
  };
  for (const Case& c : cases) {
    Gateway::Reply r = Post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.json;
    EXPECT_NE(r.json.find(c.expect), std::string::npos) << c.body << " -> " << r.json;
    // One error shape: {"error": {"code": HTTP status, "status", "message", "details"}}.
    EXPECT_EQ(r.json.rfind(StrCat(R"({"error":{"code":)", c.status, R"(,"status":")"), 0), 0u)
        << r.json;
    EXPECT_NE(r.json.find(R"(,"details":[)"), std::string::npos) << r.json;
  }
  // Each limit's refusals are counted apart, for /metrics.
  const GatewayStats st = gateway_->stats();
  EXPECT_EQ(st.too_deep, 1u);
  EXPECT_EQ(st.page_too_large, 2u);
  EXPECT_EQ(st.bad_read_token, 0u);
  EXPECT_EQ(st.replies.at({"other", 404}), 1u);
  EXPECT_EQ(st.replies.at({"/v1/commit", 400}), 5u);
  const std::string text = GatewayStatsMetrics(st);
  EXPECT_NE(text.find("megastore_gateway_refusals_total{reason=\"json_depth\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("megastore_gateway_replies_total{endpoint=\"/v1/get\",code=\"404\"} 1\n"),
            std::string::npos)
      << text;
  Gateway::Reply none = Post("/v1/query", R"({"table": "Photo", "key_prefix": [5]})");
  ASSERT_EQ(none.status, 200) << none.json;
  EXPECT_NE(none.json.find(R"("entities":[])"), std::string::npos)
      << "nothing was written: " << none.json;
}

// The same over HTTP: status codes and JSON bodies.
TEST_F(GatewayTest, ServesOverHttp) {
  ASSERT_TRUE(gateway_->Start().ok());
  namespace beast = boost::beast;
  namespace bhttp = beast::http;
  std::string allow, content_type;  // of the last response
  auto request = [&](bhttp::verb verb, const std::string& path, const std::string& body) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"),
                    static_cast<unsigned short>(gateway_->port())});
    bhttp::request<bhttp::string_body> req{verb, path, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    bhttp::write(socket, req);
    beast::flat_buffer buffer;
    bhttp::response<bhttp::string_body> res;
    bhttp::read(socket, buffer, res);
    allow = std::string(res[bhttp::field::allow]);
    content_type = std::string(res[bhttp::field::content_type]);
    return std::make_pair(res.result_int(), res.body());
  };
  auto put = request(bhttp::verb::post, "/v1/commit", R"({"rootTable": "User", "rootKey": ["3"],
      "mutations": [{"table": "User", "put": {"user_id": "3", "name": "Grace"}}]})");
  EXPECT_EQ(put.first, 200u) << put.second;
  auto got = request(bhttp::verb::post, "/v1/get", R"({"table": "User", "key": ["3"]})");
  EXPECT_EQ(got.first, 200u) << got.second;
  EXPECT_NE(got.second.find("Grace"), std::string::npos) << got.second;
  auto bad = request(bhttp::verb::post, "/v1/get", R"({"table": 7})");
  EXPECT_EQ(bad.first, 400u) << bad.second;
  auto wrong_verb = request(bhttp::verb::get, "/v1/get", "");
  EXPECT_EQ(wrong_verb.first, 405u) << wrong_verb.second;
  EXPECT_EQ(allow, "POST");
  auto post_schema = request(bhttp::verb::post, "/v1/schema", "{}");
  EXPECT_EQ(post_schema.first, 405u) << post_schema.second;
  EXPECT_EQ(allow, "GET, HEAD");
  EXPECT_EQ(gateway_->stats().wrong_method, 2u);
  // An unknown path, any method: 404 in the gateway's JSON error shape.
  for (bhttp::verb verb : {bhttp::verb::get, bhttp::verb::post, bhttp::verb::delete_}) {
    auto unknown = request(verb, "/v2/nothing", "{}");
    EXPECT_EQ(unknown.first, 404u) << unknown.second;
    EXPECT_EQ(content_type, "application/json");
    EXPECT_NE(unknown.second.find(R"({"error":{"code":404,"status":"NOT_FOUND","message":)"),
              std::string::npos)
        << unknown.second;
    EXPECT_NE(unknown.second.find("/v1/query"), std::string::npos) << unknown.second;
  }
  // Liveness and readiness for load balancers and orchestrators.
  for (const char* probe : {"/healthz", "/readyz"}) {
    auto r = request(bhttp::verb::get, probe, "");
    EXPECT_EQ(r.first, 200u) << probe << ": " << r.second;
    EXPECT_NE(r.second.find(R"("status":"ok")"), std::string::npos) << r.second;
  }
  auto schema = request(bhttp::verb::get, "/v1/schema", "");
  EXPECT_EQ(schema.first, 200u);
  EXPECT_NE(schema.second.find("PhotosByTag"), std::string::npos) << schema.second;
  gateway_->Stop();
}

}  // namespace
}  // namespace megastore
