#include "server/access.h"

#include "coordinator/coordinator.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/replication.pb.h"
#include "storage/tabletserver/tablet_service.pb.h"

namespace megastore::server {
namespace {

using ::testing::HasSubstr;

AccessPolicy Policy() {
  AccessPolicy p;
  p.set_version(1);
  Member* ops = p.add_members();
  ops->set_principal("ops");
  ops->add_roles("admin");
  Member* dc = p.add_members();
  dc->set_principal("dc-A");
  dc->add_roles("replica");
  Member* app = p.add_members();
  app->set_principal("app");
  Grant* g = app->add_grants();
  g->set_object("PhotoApp");
  g->set_read(true);
  Grant* raw = app->add_grants();
  raw->set_object("scratch");
  raw->set_read(true);
  raw->set_write(true);
  return p;
}

rpc::CallContext As(const std::string& principal) {
  rpc::CallContext ctx;
  ctx.principal = principal;
  ctx.peer = "127.0.0.1:9";
  return ctx;
}

std::string Paxos(const std::string& table) {
  replication::PaxosRequest r;
  r.mutable_group()->set_table(table);
  r.mutable_group()->set_root("root");
  r.set_position(7);
  r.set_value(std::string(100, 'v'));
  return r.SerializeAsString();
}

std::string Read(const std::string& table) {
  replication::ReadRequest r;
  r.mutable_group()->set_table(table);
  return r.SerializeAsString();
}

std::string Check(const std::string& table) {
  coordinator::CoordinatorRequest r;
  r.set_table(table);
  return r.SerializeAsString();
}

std::string Mutate(const std::string& table) {
  storage::MutateRowRequest r;
  r.set_table(table);
  r.set_row("r");
  return r.SerializeAsString();
}

TEST(AccessTest, ActionsNameTheTableTheRequestCarries) {
  absl::StatusOr<Action> a = ActionOf("repl.Paxos", Paxos("PhotoApp"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Action::kWrite);
  EXPECT_EQ(a->object, "PhotoApp");
  a = ActionOf("repl.Read", Read("PhotoApp"));
  EXPECT_EQ(a->kind, Action::kRead);
  EXPECT_EQ(a->object, "PhotoApp");
  a = ActionOf("coord.Check", Check("PhotoApp"));
  EXPECT_EQ(a->kind, Action::kRead);
  a = ActionOf("tablet.MutateRow", Mutate("scratch"));
  EXPECT_EQ(a->kind, Action::kWrite);
  EXPECT_EQ(a->object, "scratch");
  EXPECT_EQ(ActionOf("lock.Acquire", "")->kind, Action::kReplica);
  EXPECT_EQ(ActionOf("tablet.DeleteTable", "")->kind, Action::kAdmin);
  EXPECT_EQ(ActionOf("dc.Status", "")->kind, Action::kAnyone);
  // A request that names no table, or garbage, is refused by name.
  EXPECT_THAT(ActionOf("repl.Paxos", "").status().message(), HasSubstr("names no table"));
  EXPECT_FALSE(ActionOf("repl.Paxos", "\xff\xff\xff").ok());
  EXPECT_FALSE(ActionOf("tablet.MutateRow", std::string("\x0a\x7f"
                                                        "ab",
                                                        4))
                   .ok())
      << "a length past the end";
}

// A field given twice is read as protobuf reads it (the last one; nested
// messages merge), so the check and the handler see the same table.
TEST(AccessTest, RepeatedFieldsAreReadAsTheHandlerReadsThem) {
  const std::string twice = Mutate("scratch") + Mutate("PhotoApp");
  storage::MutateRowRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(twice));
  ASSERT_EQ(parsed.table(), "PhotoApp");
  EXPECT_EQ(ActionOf("tablet.MutateRow", twice)->object, "PhotoApp");
  const std::string groups = Paxos("scratch") + Paxos("PhotoApp");
  replication::PaxosRequest paxos;
  ASSERT_TRUE(paxos.ParseFromString(groups));
  EXPECT_EQ(ActionOf("repl.Paxos", groups)->object, paxos.group().table());
  // A GroupRef split in two: its occurrences merge.
  replication::PaxosRequest with_table, with_root;
  with_table.mutable_group()->set_table("PhotoApp");
  with_root.mutable_group()->set_root("r");
  const std::string split = with_table.SerializeAsString() + with_root.SerializeAsString();
  ASSERT_TRUE(paxos.ParseFromString(split));
  EXPECT_EQ(ActionOf("repl.Paxos", split)->object, paxos.group().table());
  // force given twice: the last counts.
  storage::MutateRowRequest on, off;
  on.set_table("t");
  on.set_force(true);
  off.set_table("t");
  const std::string unforced_after =
      on.SerializeAsString() + std::string("\x78\x00", 2);  // force = false
  ASSERT_TRUE(parsed.ParseFromString(unforced_after));
  EXPECT_EQ(ActionOf("tablet.MutateRow", unforced_after)->kind,
            parsed.force() ? Action::kReplica : Action::kWrite);
  EXPECT_EQ(ActionOf("tablet.MutateRow", off.SerializeAsString() + on.SerializeAsString())->kind,
            Action::kReplica);
}

TEST(AccessTest, SchemasCoverTheirTables) {
  EXPECT_TRUE(Covers("PhotoApp", "PhotoApp"));
  EXPECT_TRUE(Covers("PhotoApp", "PhotoApp.PhotosByTag"));
  EXPECT_FALSE(Covers("PhotoApp", "PhotoAppOther"));
  EXPECT_FALSE(Covers("PhotoApp.PhotosByTag", "PhotoApp"));
  EXPECT_TRUE(Covers("*", "anything"));
}

TEST(AccessTest, EveryKindOfActionIsCheckedAndRefusalsSayWhoWhatAndWhere) {
  AccessControl ac;
  EXPECT_TRUE(ac.Authorize(As("anyone"), "lock.Acquire", "").ok())
      << "no policy: everything allowed";
  ASSERT_TRUE(ac.Install(Policy()));

  // The app: read PhotoApp, read and write "scratch".
  EXPECT_TRUE(ac.Authorize(As("app"), "repl.Read", Read("PhotoApp")).ok());
  EXPECT_TRUE(ac.Authorize(As("app"), "coord.Check", Check("PhotoApp.PhotosByTag")).ok());
  absl::Status s = ac.Authorize(As("app"), "repl.Paxos", Paxos("PhotoApp"));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("\"app\" may not write \"PhotoApp\" (repl.Paxos)"));
  EXPECT_TRUE(ac.Authorize(As("app"), "tablet.MutateRow", Mutate("scratch")).ok());
  EXPECT_TRUE(
      absl::IsPermissionDenied(ac.Authorize(As("app"), "tablet.MutateRow", Mutate("other"))));
  // Paxos and lock messages from a non-replica.
  s = ac.Authorize(As("app"), "lock.Acquire", "");
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_THAT(s.message(), HasSubstr("call the replica method lock.Acquire"));
  EXPECT_TRUE(absl::IsPermissionDenied(ac.Authorize(As("app"), "ls.Put", "")));
  // Admin methods: not for apps, not for replicas.
  EXPECT_TRUE(absl::IsPermissionDenied(ac.Authorize(As("app"), "dc.Replica", "")));
  s = ac.Authorize(As("dc-A"), "tablet.DeleteTable", "");
  EXPECT_THAT(s.message(), HasSubstr("\"dc-A\" may not call the admin method tablet.DeleteTable"));
  EXPECT_TRUE(ac.Authorize(As("dc-A"), "repl.Paxos", Paxos("PhotoApp")).ok());
  EXPECT_TRUE(ac.Authorize(As("dc-A"), "lock.Acquire", "").ok());
  EXPECT_TRUE(ac.Authorize(As("ops"), "tablet.DeleteTable", "").ok());
  // Strangers, and callers without a name.
  s = ac.Authorize(As("stranger"), "repl.Read", Read("PhotoApp"));
  EXPECT_THAT(s.message(), HasSubstr("not in the access policy"));
  EXPECT_TRUE(absl::IsPermissionDenied(ac.Authorize(As(""), "repl.Read", Read("PhotoApp"))));
  EXPECT_TRUE(ac.Authorize(As("stranger"), "dc.Status", "").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(ac.Authorize(As("app"), "acl.Get", "")))
      << "the policy is not an app's";
  EXPECT_TRUE(ac.Authorize(As("dc-A"), "acl.Get", "").ok());
  EXPECT_EQ(ac.Refusals().at("repl.Paxos"), 1u);
  EXPECT_EQ(ac.Refusals().at("repl.Read"), 2u);
}

TEST(AccessTest, ANewerPolicyAppliesAtOnceAndAnOlderOneIsIgnored) {
  AccessControl ac;
  ASSERT_TRUE(ac.Install(Policy()));
  AccessPolicy next = Policy();
  next.set_version(2);
  next.mutable_members(2)->mutable_grants(0)->set_write(true);
  ASSERT_TRUE(ac.Install(next));
  EXPECT_TRUE(ac.Authorize(As("app"), "repl.Paxos", Paxos("PhotoApp")).ok());
  EXPECT_FALSE(ac.Install(Policy())) << "version 1 after 2";
  EXPECT_TRUE(ac.Authorize(As("app"), "repl.Paxos", Paxos("PhotoApp")).ok());
}

// A process that reads the policy from its lock role refuses calls until
// it has: it must not allow everything because it does not know yet.
TEST(AccessTest, UntilThePolicyIsReadCallsAreRefusedNotAllowed) {
  AccessControl ac;
  ac.RequireKnown("10.0.0.1:7600");
  absl::Status s = ac.Authorize(As("anyone"), "dc.Replica", "");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("10.0.0.1:7600"));
  EXPECT_TRUE(ac.Authorize(As("anyone"), "dc.Status", "").ok());
  ac.NoPolicy();  // the lock role holds none: everything allowed, as there
  EXPECT_TRUE(ac.Authorize(As("anyone"), "dc.Replica", "").ok());
  AccessControl other;
  other.RequireKnown("x:1");
  ASSERT_TRUE(other.Install(Policy()));
  EXPECT_TRUE(other.Authorize(As("ops"), "dc.Replica", "").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(other.Authorize(As("app"), "dc.Replica", "")));
}

TEST(AccessTest, PoliciesThatWouldLockEveryoneOutAreRefused) {
  EXPECT_TRUE(ValidatePolicy(Policy()).ok());
  AccessPolicy p = Policy();
  p.mutable_members(0)->clear_roles();
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("names no admin"));
  p = Policy();
  p.mutable_members(1)->clear_roles();
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("names no replica"));
  p = Policy();
  p.mutable_members(1)->add_roles("root");
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("unknown role \"root\""));
  p = Policy();
  p.mutable_members(2)->mutable_grants(0)->set_read(false);
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("allows neither read nor write"));
  p = Policy();
  *p.add_members() = p.members(0);
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("listed twice"));
  p = Policy();
  p.set_version(~uint64_t{0});
  EXPECT_THAT(ValidatePolicy(p).message(), HasSubstr("past 2^62"));
}

}  // namespace
}  // namespace megastore::server
