// Log clean-up and catch-up from a snapshot at one replica
// (LogReplica::Clean, SnapshotRows, InstallRows, FinishSnapshot), and what
// the replication server's background sweeps keep track of.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "base/await.h"
#include "base/logging.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "replication/log_replica.h"
#include "replication/replication_server.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::replication {
namespace {

// One datacenter's Bigtable: a tablet server with the group's table.
struct Store {
  TestDir dir;
  std::unique_ptr<storage::TabletServer> server;
  std::unique_ptr<storage::InProcessBigtable> bigtable;

  Store() {
    storage::TabletServerOptions o;
    o.data_dir = dir.path();
    o.sync_log = false;
    o.maintenance_interval = absl::ZeroDuration();
    auto s = storage::TabletServer::Open(o, Env::Default());
    MS_CHECK(s.ok(), "{}", s.status().ToString());
    server = std::move(*s);
    storage::TableSchema schema;
    schema.set_name("t");
    *schema.add_families() = LogFamilySchema();
    *schema.add_families() = DataFamilySchema("e");
    MS_CHECK(server->CreateTable(schema).ok(), "create table");
    bigtable = std::make_unique<storage::InProcessBigtable>(server.get());
  }
};

GroupRef Group() {
  GroupRef g;
  g.set_table("t");
  g.set_root("root");
  return g;
}

// Position `pos`'s entry: sets `row`'s column v (or deletes it if value is
// empty) at timestamp 100 * pos.
LogEntry Entry(uint64_t pos, const std::string& row, const std::string& value) {
  LogEntry e;
  e.set_id(StrCat("w", pos));
  e.set_timestamp(100 * static_cast<int64_t>(pos));
  e.set_next_leader(0);
  RowChange* rc = e.add_changes();
  rc->set_row(row);
  CellChange* cc = rc->add_cells();
  cc->set_family("e");
  cc->set_qualifier("v");
  if (value.empty()) {
    cc->set_delete_cells(true);
  } else {
    cc->set_value(value);
  }
  return e;
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

absl::StatusOr<CleanReply> Clean(LogReplica& r, uint64_t through) {
  return Await<CleanReply>([&](auto cb) { r.Clean(Group(), through, std::move(cb)); });
}

absl::StatusOr<PaxosReply> Prepare(LogReplica& r, uint64_t pos) {
  PaxosRequest req;
  *req.mutable_group() = Group();
  req.set_position(pos);
  req.mutable_ballot()->set_round(9);
  req.mutable_ballot()->set_proposer(9);
  return Await<PaxosReply>([&](auto cb) { r.Paxos(req, std::move(cb)); });
}

// Every row of the group with its column v as of `ts`, through SnapshotRows.
std::map<std::string, std::string> Rows(LogReplica& r, int64_t ts) {
  std::map<std::string, std::string> out;
  std::string after;
  do {
    SnapshotRowsRequest req;
    *req.mutable_group() = Group();
    req.set_timestamp(ts);
    req.set_after(after);
    absl::StatusOr<SnapshotRowsReply> page =
        Await<SnapshotRowsReply>([&](auto cb) { r.SnapshotRows(req, std::move(cb)); });
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (const SnapshotRow& row : page->rows())
      for (const SnapshotCell& c : row.cells()) out[row.key()] = c.value();
    after = page->after();
  } while (!after.empty());
  return out;
}

TEST(LogCleanupTest, CleanRemovesAppliedPositionsOnlyAndRefusesThemAfterwards) {
  Store store;
  LogReplica r(store.bigtable.get(), ReplicaType::kFull);
  for (uint64_t p = 1; p <= 10; ++p)
    ASSERT_TRUE(Apply(r, p, Entry(p, "root/a", StrCat("v", p))).ok());
  // Position 11 is accepted here but not chosen yet.
  PaxosRequest accept;
  *accept.mutable_group() = Group();
  accept.set_position(11);
  accept.set_accept(true);
  accept.set_value(Entry(11, "root/a", "v11").SerializeAsString());
  ASSERT_TRUE(Await<PaxosReply>([&](auto cb) { r.Paxos(accept, std::move(cb)); })->ok());

  absl::StatusOr<CleanReply> c = Clean(r, 50);  // beyond applied: stops at 10
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cleaned(), 10u);
  EXPECT_EQ(c->removed_positions(), 10u);
  EXPECT_GT(c->removed_bytes(), 0u);
  EXPECT_EQ(c->kept_positions(), 1u);
  EXPECT_GT(c->kept_bytes(), 0u) << "position 11's acceptor state stays";
  EXPECT_FALSE(c->more());

  absl::StatusOr<StateReply> s = State(r);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cleaned(), 10u);
  EXPECT_EQ(s->applied().position(), 10u);

  // A Paxos step on a cleaned position would find it empty: refused.
  absl::StatusOr<PaxosReply> p = Prepare(r, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(IsCleanedUp(p.status())) << p.status();
  EXPECT_TRUE(Prepare(r, 11).ok()) << "positions above the cleaned one still vote";

  ReadLogRequest rl;
  *rl.mutable_group() = Group();
  rl.set_from(1);
  rl.set_to(12);
  absl::StatusOr<ReadLogReply> log =
      Await<ReadLogReply>([&](auto cb) { r.ReadLog(rl, std::move(cb)); });
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->positions_size(), 0) << "position 11 is not learned here";
  EXPECT_EQ(log->cleaned(), 10u);

  // The data is untouched, and the log goes on.
  EXPECT_EQ(Rows(r, 1000)["root/a"], "v10");
  ASSERT_TRUE(Apply(r, 11, Entry(11, "root/a", "v11")).ok());
  EXPECT_EQ(State(r)->applied().position(), 11u);
  // Cleaning never goes back.
  c = Clean(r, 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cleaned(), 10u);
  EXPECT_EQ(c->removed_positions(), 0u);
}

TEST(LogCleanupTest, CleanGoesInBoundedSteps) {
  Store store;
  LogReplica r(store.bigtable.get(), ReplicaType::kFull);
  const uint64_t n = LogReplica::kMaxClean + 20;
  for (uint64_t p = 1; p <= n; ++p) ASSERT_TRUE(Apply(r, p, Entry(p, "root/a", "x")).ok());
  absl::StatusOr<CleanReply> c = Clean(r, n);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->more());
  EXPECT_EQ(c->cleaned(), LogReplica::kMaxClean);
  c = Clean(r, n);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->more());
  EXPECT_EQ(c->cleaned(), n);
  EXPECT_EQ(c->kept_positions(), 0u);
  EXPECT_EQ(c->kept_bytes(), 0u);
}

TEST(LogCleanupTest, EntryTimestampAndBackupMark) {
  Store store;
  LogReplica r(store.bigtable.get(), ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Entry(1, "root/a", "x")).ok());
  absl::StatusOr<int64_t> ts =
      Await<int64_t>([&](auto cb) { r.EntryTimestamp(Group(), 1, std::move(cb)); });
  ASSERT_TRUE(ts.ok());
  EXPECT_EQ(*ts, 100);
  ts = Await<int64_t>([&](auto cb) { r.EntryTimestamp(Group(), 2, std::move(cb)); });
  EXPECT_TRUE(absl::IsNotFound(ts.status()));
  for (uint64_t p = 2; p <= 7; ++p) ASSERT_TRUE(Apply(r, p, Entry(p, "root/a", "x")).ok());
  ASSERT_TRUE(Await<StateReply>([&](auto cb) { r.MarkBackup(Group(), 7, std::move(cb)); }).ok());
  absl::StatusOr<StateReply> s =
      Await<StateReply>([&](auto cb) { r.MarkBackup(Group(), 5, std::move(cb)); });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->backed_up(), 7u) << "the backup mark never moves back";
  // A backup cannot cover positions this replica's log never reached.
  s = Await<StateReply>([&](auto cb) { r.MarkBackup(Group(), 9, std::move(cb)); });
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("beyond this replica's log (top 7)"), std::string::npos)
      << s.status();
}

// The catch-up a GroupClient runs, by hand: pass one copies the source's
// rows, pass two reconciles the rows only the target has.
absl::Status BeginInstall(LogReplica& to, const std::string& id) {
  InstallRowsRequest begin;
  *begin.mutable_group() = Group();
  begin.set_begin(true);
  begin.set_install_id(id);
  return Await<InstallRowsReply>([&](auto cb) { to.InstallRows(begin, std::move(cb)); }).status();
}

absl::StatusOr<StateReply> FinishSnapshot(LogReplica& to, const AppliedRecord& at,
                                          const std::string& id) {
  FinishSnapshotRequest finish;
  *finish.mutable_group() = Group();
  *finish.mutable_applied() = at;
  finish.set_install_id(id);
  return Await<StateReply>([&](auto cb) { to.FinishSnapshot(finish, std::move(cb)); });
}

void CopySnapshot(LogReplica& from, LogReplica& to, const AppliedRecord& at) {
  ASSERT_TRUE(BeginInstall(to, "copy").ok());
  std::string after;
  do {
    SnapshotRowsRequest req;
    *req.mutable_group() = Group();
    req.set_timestamp(at.timestamp());
    req.set_after(after);
    absl::StatusOr<SnapshotRowsReply> page =
        Await<SnapshotRowsReply>([&](auto cb) { from.SnapshotRows(req, std::move(cb)); });
    ASSERT_TRUE(page.ok()) << page.status();
    InstallRowsRequest install;
    *install.mutable_group() = Group();
    install.set_timestamp(at.timestamp());
    *install.mutable_rows() = page->rows();
    ASSERT_TRUE(
        Await<InstallRowsReply>([&](auto cb) { to.InstallRows(install, std::move(cb)); }).ok());
    after = page->after();
  } while (!after.empty());
  do {
    SnapshotRowsRequest list;
    *list.mutable_group() = Group();
    list.set_latest(true);
    list.set_keys_only(true);
    list.set_after(after);
    absl::StatusOr<SnapshotRowsReply> keys =
        Await<SnapshotRowsReply>([&](auto cb) { to.SnapshotRows(list, std::move(cb)); });
    ASSERT_TRUE(keys.ok()) << keys.status();
    SnapshotRowsRequest ask;
    *ask.mutable_group() = Group();
    ask.set_timestamp(at.timestamp());
    for (const SnapshotRow& r : keys->rows()) {
      EXPECT_EQ(r.cells_size(), 0) << "keys only";
      ask.add_keys(r.key());
    }
    if (ask.keys_size() > 0) {
      absl::StatusOr<SnapshotRowsReply> rows =
          Await<SnapshotRowsReply>([&](auto cb) { from.SnapshotRows(ask, std::move(cb)); });
      ASSERT_TRUE(rows.ok()) << rows.status();
      InstallRowsRequest install;
      *install.mutable_group() = Group();
      install.set_timestamp(at.timestamp());
      *install.mutable_rows() = rows->rows();
      ASSERT_TRUE(
          Await<InstallRowsReply>([&](auto cb) { to.InstallRows(install, std::move(cb)); }).ok());
    }
    after = keys->after();
  } while (!after.empty());
  absl::StatusOr<StateReply> finished = FinishSnapshot(to, at, "copy");
  ASSERT_TRUE(finished.ok()) << finished.status();
  // A repeat (its first reply lost) finds the work done.
  finished = FinishSnapshot(to, at, "copy");
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_GE(finished->applied().position(), at.position());
}

TEST(LogCleanupTest, ASnapshotCatchUpYieldsTheSameRowsAsTheLog) {
  Store a_store, b_store, c_store;
  LogReplica a(a_store.bigtable.get(), ReplicaType::kFull);
  LogReplica b(b_store.bigtable.get(), ReplicaType::kFull);
  LogReplica c(c_store.bigtable.get(), ReplicaType::kFull);
  // More rows than one snapshot page, sets, overwrites and deletes.
  std::vector<LogEntry> entries;
  const int rows = LogReplica::kMaxSnapshotRows + 40;
  for (int i = 0; i < rows; ++i)
    entries.push_back(Entry(entries.size() + 1, StrCat("root/r", 1000 + i), StrCat("a", i)));
  for (int i = 0; i < rows; i += 3)
    entries.push_back(Entry(entries.size() + 1, StrCat("root/r", 1000 + i), ""));
  for (int i = 0; i < rows; i += 5)
    entries.push_back(Entry(entries.size() + 1, StrCat("root/r", 1000 + i), StrCat("b", i)));
  entries.push_back(Entry(entries.size() + 1, "root", "root's own data"));
  const uint64_t n = entries.size();
  const uint64_t lag = 150;  // b applied this far, then missed the rest
  for (uint64_t p = 1; p <= n; ++p) {
    ASSERT_TRUE(Apply(a, p, entries[p - 1]).ok());
    ASSERT_TRUE(Apply(c, p, entries[p - 1]).ok());
    if (p <= lag) {
      ASSERT_TRUE(Apply(b, p, entries[p - 1]).ok());
    }
  }
  // b has rows the later positions deleted: the copy's second pass must
  // delete them.
  ASSERT_TRUE(Clean(a, n).ok());
  const AppliedRecord at = State(a)->applied();
  ASSERT_EQ(at.position(), n);

  CopySnapshot(a, b, at);
  absl::StatusOr<StateReply> s = State(b);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->applied().position(), n);
  EXPECT_EQ(s->cleaned(), n);
  EXPECT_EQ(s->top(), n);
  EXPECT_EQ(Rows(b, at.timestamp()), Rows(c, at.timestamp()))
      << "the copy equals a replica that applied the whole log";
  EXPECT_EQ(Rows(b, at.timestamp()).size(), Rows(c, at.timestamp()).size());
  // b's old log at or below n is gone, and its Paxos refuses those positions.
  absl::StatusOr<PaxosReply> p = Prepare(b, 3);
  EXPECT_TRUE(IsCleanedUp(p.status())) << p.status();
  // b follows the log from there.
  const LogEntry next = Entry(n + 1, "root/r1000", "after");
  ASSERT_TRUE(Apply(b, n + 1, next).ok());
  ASSERT_TRUE(Apply(c, n + 1, next).ok());
  EXPECT_EQ(Rows(b, 100 * (n + 1)), Rows(c, 100 * (n + 1)));
  // Copying again changes nothing (every step is idempotent).
  CopySnapshot(a, b, at);
  EXPECT_EQ(Rows(b, 100 * (n + 1)), Rows(c, 100 * (n + 1)));
}

absl::StatusOr<ReadReply> ReadAt(LogReplica& r, const std::string& row, uint64_t position) {
  ReadRequest req;
  *req.mutable_group() = Group();
  req.set_row(row);
  req.set_family("e");
  req.set_timestamp(100 * static_cast<int64_t>(position));
  req.set_position(position);
  return Await<ReadReply>([&](auto cb) { r.Read(req, std::move(cb)); });
}

TEST(LogCleanupTest, ReadsAtAPositionTheReplicaDoesNotHoldAreAborted) {
  Store a_store, b_store;
  LogReplica a(a_store.bigtable.get(), ReplicaType::kFull);
  LogReplica b(b_store.bigtable.get(), ReplicaType::kFull);
  for (uint64_t p = 1; p <= 6; ++p) {
    const LogEntry e = Entry(p, "root/x", StrCat("v", p));
    ASSERT_TRUE(Apply(a, p, e).ok());
    if (p <= 3) {
      ASSERT_TRUE(Apply(b, p, e).ok());
    }
  }
  // Held: the value as of the position.
  absl::StatusOr<ReadReply> r = ReadAt(a, "root/x", 4);
  ASSERT_TRUE(r.ok()) << r.status();
  // Not applied here yet: the read would see stale data.
  r = ReadAt(b, "root/x", 5);
  EXPECT_TRUE(absl::IsAborted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("applied position 3, not 5"), std::string::npos)
      << r.status();
  // Before the snapshot a replica was caught up from: it has no history.
  ASSERT_TRUE(Clean(a, 6).ok());
  CopySnapshot(a, b, State(a)->applied());
  r = ReadAt(b, "root/x", 2);
  EXPECT_TRUE(absl::IsAborted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("no history before position 6"), std::string::npos)
      << r.status();
  r = ReadAt(b, "root/x", 6);
  EXPECT_TRUE(r.ok()) << r.status();
  // Position 0 is not checked (reads that do not name one).
  r = ReadAt(b, "root/x", 0);
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST(LogCleanupTest, AnInstallWhoseRecordIsGoneCannotBeFinished) {
  Store a_store, b_store;
  LogReplica a(a_store.bigtable.get(), ReplicaType::kFull);
  LogReplica b(b_store.bigtable.get(), ReplicaType::kFull);
  for (uint64_t p = 1; p <= 5; ++p) ASSERT_TRUE(Apply(a, p, Entry(p, "root/a", "x")).ok());
  const AppliedRecord at = State(a)->applied();
  ASSERT_TRUE(BeginInstall(b, "first").ok());
  // The rows would be copied here; then b's data is lost (its root row
  // with it), or another install begins: either way this one cannot finish.
  ASSERT_TRUE(BeginInstall(b, "second").ok());
  absl::StatusOr<StateReply> s = FinishSnapshot(b, at, "first");
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_EQ(State(b)->applied().position(), 0u) << "nothing recorded as applied";
  s = FinishSnapshot(b, at, "");
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_TRUE(FinishSnapshot(b, at, "second").ok());
  EXPECT_EQ(State(b)->applied().position(), 5u);
}

TEST(LogCleanupTest, HostileSnapshotRequestsAreRefused) {
  Store store;
  LogReplica r(store.bigtable.get(), ReplicaType::kFull);
  ASSERT_TRUE(Apply(r, 1, Entry(1, "root/a", "x")).ok());
  auto install = [&](InstallRowsRequest req) {
    return Await<InstallRowsReply>([&](auto cb) { r.InstallRows(req, std::move(cb)); }).status();
  };
  InstallRowsRequest req;
  *req.mutable_group() = Group();
  req.set_timestamp(500);
  SnapshotRow* row = req.add_rows();
  row->set_key("other/x");
  EXPECT_TRUE(absl::IsInvalidArgument(install(req))) << "a row outside the group";
  row->set_key("root/x");
  SnapshotCell* cell = row->add_cells();
  cell->set_family("p");
  cell->set_qualifier("S:applied");
  EXPECT_TRUE(absl::IsInvalidArgument(install(req))) << "the log family";
  cell->set_family("e");
  cell->set_timestamp(900);
  EXPECT_TRUE(absl::IsInvalidArgument(install(req))) << "a cell after the snapshot";
  cell->set_timestamp(400);
  EXPECT_TRUE(install(req).ok());

  SnapshotRowsRequest snap;
  *snap.mutable_group() = Group();
  snap.set_timestamp(500);
  snap.set_after("zzz");
  EXPECT_TRUE(absl::IsInvalidArgument(
      Await<SnapshotRowsReply>([&](auto cb) { r.SnapshotRows(snap, std::move(cb)); }).status()))
      << "a cursor outside the group";
  snap.clear_after();
  for (int i = 0; i <= LogReplica::kMaxSnapshotRows; ++i) snap.add_keys("root/k");
  EXPECT_TRUE(absl::IsInvalidArgument(
      Await<SnapshotRowsReply>([&](auto cb) { r.SnapshotRows(snap, std::move(cb)); }).status()))
      << "too many keys";

  LogReplica witness(store.bigtable.get(), ReplicaType::kWitness);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      Await<InstallRowsReply>([&](auto cb) { witness.InstallRows(req, std::move(cb)); }).status()));
}

TEST(LogCleanupTest, CleanLimitFollowsTheSlowestReplicaTheWitnessRuleAndTheBackup) {
  auto replicas = [](std::vector<ReplicaType> types) {
    std::vector<ReplicaInfo> out;
    for (ReplicaType t : types) out.push_back(ReplicaInfo{.type = t});
    return out;
  };
  auto state = [](uint64_t applied, uint64_t backed_up) {
    StateReply s;
    s.mutable_applied()->set_position(applied);
    s.set_backed_up(backed_up);
    return std::optional<StateReply>(s);
  };
  using T = ReplicaType;
  const auto fff = replicas({T::kFull, T::kFull, T::kReadOnly, T::kWitness});
  // A data replica: what every data replica (full and read-only) applied;
  // the witness's own progress does not count.
  EXPECT_EQ(CleanLimit(fff, 0, false, {state(9, 0), state(7, 0), state(5, 0), state(1, 0)}), 5u);
  // One data replica silent: held back (it may need anything).
  EXPECT_EQ(CleanLimit(fff, 0, false, {state(9, 0), std::nullopt, state(5, 0), state(9, 0)}),
            std::nullopt);
  // With backups required: no further than the newest backup anyone reports.
  EXPECT_EQ(CleanLimit(fff, 0, true, {state(9, 0), state(9, 4), state(9, 0), state(9, 0)}), 4u);
  EXPECT_EQ(CleanLimit(fff, 0, true, {state(9, 0), state(9, 0), state(9, 0), state(9, 0)}), 0u);
  // A witness: what a majority of the full replicas applied (two of two
  // here); read-only replicas and silent ones do not hold it back beyond that.
  EXPECT_EQ(CleanLimit(fff, 3, false, {state(9, 0), state(7, 0), state(2, 0), state(1, 0)}), 7u);
  EXPECT_EQ(CleanLimit(fff, 3, false, {state(9, 0), std::nullopt, state(2, 0), state(1, 0)}),
            std::nullopt);
  const auto three = replicas({T::kFull, T::kFull, T::kFull, T::kWitness});
  EXPECT_EQ(CleanLimit(three, 3, false, {state(9, 0), std::nullopt, state(6, 0), state(0, 0)}), 6u);
  // Malformed input is held back, never an out-of-range read.
  EXPECT_EQ(CleanLimit(three, 7, false, {state(9, 0), state(9, 0), state(9, 0), state(9, 0)}),
            std::nullopt);
  EXPECT_EQ(CleanLimit(three, 0, false, {state(9, 0)}), std::nullopt);
}

}  // namespace
}  // namespace megastore::replication

namespace megastore::replication {
namespace {

// A transport with nobody at the other end.
class NoNetwork : public Transport {
 public:
  void Call(std::string_view, std::string_view, std::string, absl::Duration,
            ReplyCallback done) override {
    done(absl::UnavailableError("no network in this test"));
  }
};

// A server of replica A of three, its log clean-up off.
ReplicationServerOptions ThreeReplicas() {
  ReplicationServerOptions o;
  for (const char* dc : {"A", "B", "C"}) {
    ReplicaInfo r;
    r.name = dc;
    r.replication = StrCat("repl-", dc);
    o.cluster.replicas.push_back(r);
  }
  o.cleanup.enabled = false;
  return o;
}

TEST(ReplicationServerSweepTest, AGroupAppliedThroughEveryPositionAskedIsLeftOutOfTheSweep) {
  Store store;
  NoNetwork net;
  ReplicationServerOptions o = ThreeReplicas();
  ReplicationServer server(Env::Default(), &net, store.bigtable.get(), o);
  auto serve = [&](std::string_view method, const google::protobuf::Message& req) {
    return Await<std::string>(
        [&](auto cb) { server.Serve(method, req.SerializeAsString(), std::move(cb)); });
  };
  auto accept = [&](uint64_t pos) {
    PaxosRequest req;
    *req.mutable_group() = Group();
    req.set_position(pos);
    req.set_accept(true);
    req.mutable_ballot()->set_round(1);
    req.mutable_ballot()->set_proposer(7);
    req.set_value(Entry(pos, "root/a", StrCat("v", pos)).SerializeAsString());
    return serve("repl.Paxos", req);
  };
  auto apply = [&](uint64_t pos) {
    ApplyRequest req;
    *req.mutable_group() = Group();
    req.set_position(pos);
    req.set_value(Entry(pos, "root/a", StrCat("v", pos)).SerializeAsString());
    return serve("repl.Apply", req);
  };

  ASSERT_TRUE(accept(1).ok());
  EXPECT_EQ(server.stats().sweep_pending, 1u) << "accepted here, not applied yet";
  ASSERT_TRUE(apply(1).ok());
  EXPECT_EQ(server.stats().sweep_pending, 0u) << "applied through every position asked";

  // Position 2 accepted; position 1 applied again does not cover it.
  ASSERT_TRUE(accept(2).ok());
  ASSERT_TRUE(apply(1).ok());
  EXPECT_EQ(server.stats().sweep_pending, 1u) << "position 2 is accepted here but not applied";
  ASSERT_TRUE(apply(2).ok());
  EXPECT_EQ(server.stats().sweep_pending, 0u);
}

// A Bigtable that, while `hold` is set, keeps each answer instead of
// delivering it: a server's Bigtable calls still in flight when it stops.
class HoldingBigtable : public storage::BigtableClient {
 public:
  explicit HoldingBigtable(storage::BigtableClient* inner) : inner_(inner) {}
  bool hold = false;
  int calls = 0;
  std::vector<std::function<void()>> held;

  void Release() {
    auto answers = std::move(held);
    hold = false;
    for (auto& a : answers) a();
  }
  void ReadRow(std::string table, std::string row, storage::ReadOptions options,
               Callback<absl::StatusOr<std::optional<storage::Row>>> done) override {
    ++calls;
    inner_->ReadRow(table, row, options, Keep(std::move(done)));
  }
  void ReadRows(std::string table, storage::RowRange range, storage::ReadOptions options,
                Callback<absl::StatusOr<std::vector<storage::Row>>> done) override {
    ++calls;
    inner_->ReadRows(table, range, options, Keep(std::move(done)));
  }
  void MutateRow(std::string table, std::string row, std::vector<storage::Mutation> mutations,
                 int64_t timestamp, Callback<absl::Status> done) override {
    ++calls;
    inner_->MutateRow(table, row, mutations, timestamp, Keep(std::move(done)));
  }
  void CheckAndMutateRow(std::string table, std::string row, storage::RowFilter predicate,
                         std::vector<storage::Mutation> if_true,
                         std::vector<storage::Mutation> if_false,
                         Callback<absl::StatusOr<bool>> done) override {
    ++calls;
    inner_->CheckAndMutateRow(table, row, predicate, if_true, if_false, Keep(std::move(done)));
  }

 private:
  template <typename T>
  Callback<T> Keep(Callback<T> done) {
    return [this, done = std::make_shared<Callback<T>>(std::move(done))](T r) mutable {
      if (!hold) return (*done)(std::move(r));
      held.push_back([done, r = std::make_shared<T>(std::move(r))] { (*done)(std::move(*r)); });
    };
  }
  storage::BigtableClient* const inner_;
};

TEST(ReplicationServerLifetimeTest, BigtableAnswersArrivingAfterTheServerIsGoneAreDropped) {
  Store store;
  HoldingBigtable bigtable(store.bigtable.get());
  NoNetwork net;
  ReplicationServerOptions o = ThreeReplicas();
  auto server = std::make_unique<ReplicationServer>(Env::Default(), &net, &bigtable, o);
  PaxosRequest accept;
  *accept.mutable_group() = Group();
  accept.set_position(1);
  accept.set_accept(true);
  accept.mutable_ballot()->set_round(1);
  accept.mutable_ballot()->set_proposer(7);
  accept.set_value(Entry(1, "root/a", "v1").SerializeAsString());
  ASSERT_TRUE(Await<std::string>([&](auto cb) {
                server->Serve("repl.Paxos", accept.SerializeAsString(), std::move(cb));
              }).ok());

  // An apply whose Bigtable answers are still in flight when the server
  // (and its replica) are destroyed: the answers must not run their
  // chains, which would continue in freed memory.
  bigtable.hold = true;
  ApplyRequest apply;
  *apply.mutable_group() = Group();
  apply.set_position(1);
  apply.set_value(Entry(1, "root/a", "v1").SerializeAsString());
  bool answered = false;
  server->Serve("repl.Apply", apply.SerializeAsString(),
                [&](absl::StatusOr<std::string>) { answered = true; });
  ASSERT_FALSE(bigtable.held.empty()) << "the apply is waiting for Bigtable";
  server.reset();
  const int calls = bigtable.calls;
  bigtable.Release();
  EXPECT_EQ(bigtable.calls, calls) << "an answer continued the dead replica's chain";
  EXPECT_FALSE(answered);
}

}  // namespace
}  // namespace megastore::replication
