// Backups of entity groups against three datacenters in this process:
// `msadmin backup create|log|list|verify`, taken while a writer commits,
// and the backup library's cancel and resume.
#include <google/protobuf/text_format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "api/database.h"
#include "backup/backup_file.h"
#include "backup/backup_job.h"
#include "backup/backup_verify.h"
#include "backup/restore.h"
#include "backup/schedule.h"
#include "base/await.h"
#include "base/file.h"
#include "base/rpc/rpc_transport.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "replication/replication_server.h"
#include "schema/compiler.h"
#include "server/datacenter.h"
#include "storage/tabletserver/tablet_server.h"
#include "tests/subprocess.h"
#include "txn/transaction.h"

namespace megastore {
namespace {

using testing::RunCommand;

constexpr char kSchema[] = R"(
CREATE SCHEMA Shop
CREATE TABLE Customer {
  required int64 id;
  optional string name;
} PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE Order {
  required int64 id;
  required int64 number;
  required int64 amount;
  optional string note;
} PRIMARY KEY(id, number), ENTITY GROUP KEY(id) REFERENCES Customer;
CREATE LOCAL INDEX OrdersByAmount ON Order(id, amount);
)";
// Encrypted schemas have no global indexes.
constexpr char kGlobalIndex[] = "CREATE GLOBAL INDEX OrdersByNote ON Order(note);\n";

// Three datacenters (full, full, witness) with the Shop schema, recorded as
// megastored records it, an app server at A, and the config in a file.
class BackupTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    std::string ddl = kSchema;
    if (encrypted()) {
      ddl.replace(ddl.find("ENTITY GROUP ROOT;"), 18, "ENTITY GROUP ROOT, ENCRYPTED;");
    } else {
      ddl += kGlobalIndex;
    }
    schema::CompileResult compiled = schema::CompileSchema(ddl);
    ASSERT_TRUE(compiled.ok());
    descriptor_ = compiled.descriptor;
    auto layout = schema::Layout::Create(descriptor_);
    ASSERT_TRUE(layout.ok());
    auto cluster = server::LocalCluster::Start(
        &env_, dir_.path() + "/data",
        {replication::ReplicaType::kFull, replication::ReplicaType::kFull,
         replication::ReplicaType::kWitness},
        txn::TablesFor(*layout), /*sync_log=*/false);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(cluster_->WaitUntilServing(absl::Seconds(5)));
    for (int i = 0; i < cluster_->size(); ++i) {
      storage::TabletServer* tablets = cluster_->datacenter(i).tablets();
      storage::TableSchema schemas;
      schemas.set_name(replication::kSchemaTable);
      schemas.add_families()->set_name(replication::kSchemaFamily);
      schemas.set_replicated(true);
      absl::Status s = tablets->CreateTable(schemas);
      ASSERT_TRUE(s.ok() || absl::IsAlreadyExists(s)) << s;
      ASSERT_TRUE(tablets
                      ->MutateRow(replication::kSchemaTable, descriptor_.name(),
                                  {storage::Mutation::SetCell(replication::kSchemaFamily,
                                                              replication::kSchemaColumn,
                                                              descriptor_.SerializeAsString())})
                      .ok());
    }
    config_path_ = dir_.path() + "/cluster.textproto";
    std::string text;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(cluster_->config(), &text));
    std::ofstream(config_path_) << text;
    schema_path_ = dir_.path() + "/Shop.schema.pb";
    std::ofstream(schema_path_, std::ios::binary) << descriptor_.SerializeAsString();
    DatabaseOptions o;
    o.replicas = cluster_->replicas();
    o.local = "A";
    o.schema = descriptor_;
    auto db = Database::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
  }

  bool encrypted() const { return GetParam(); }

  // Orders number .. number + count - 1 of `customer`, in one transaction.
  // The commit (its position) or why it failed.
  absl::StatusOr<CommitInfo> PutOrder(int64_t customer, int64_t number, int64_t amount,
                                      int64_t count = 1) {
    return db_->Run("Customer", {customer}, [&](Transaction& t) -> absl::Status {
      schema::Entity c;
      const schema::TableDescriptor* ct = db_->layout().schema().FindTable("Customer");
      const schema::TableDescriptor* ot = db_->layout().schema().FindTable("Order");
      for (const auto& f : ct->fields()) {
        if (f.name() == "id") c.fields[f.number()] = {customer};
        if (f.name() == "name") c.fields[f.number()] = {std::string("secret-name")};
      }
      MS_RETURN_IF_ERROR(t.Put("Customer", std::move(c)));
      for (int64_t n = number; n < number + count; ++n) {
        schema::Entity e;
        for (const auto& f : ot->fields()) {
          if (f.name() == "id") e.fields[f.number()] = {customer};
          if (f.name() == "number") e.fields[f.number()] = {n};
          if (f.name() == "amount") e.fields[f.number()] = {amount};
          if (f.name() == "note") e.fields[f.number()] = {std::string("plaintext-note")};
        }
        MS_RETURN_IF_ERROR(t.Put("Order", std::move(e)));
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<CommitInfo> DeleteOrder(int64_t customer, int64_t number) {
    return db_->Run("Customer", {customer}, [&](Transaction& t) {
      return t.Delete("Order", {customer, number});
    });
  }

  // number -> amount of each order of `customer`, as a transaction reads them.
  std::map<int64_t, int64_t> Orders(int64_t customer) {
    std::map<int64_t, int64_t> out;
    const schema::TableDescriptor* ot = db_->layout().schema().FindTable("Order");
    auto r = db_->Run("Customer", {customer}, [&](Transaction& t) -> absl::Status {
      out.clear();
      absl::StatusOr<txn::QueryResult> q = t.Query("Order", {customer});
      if (!q.ok()) return q.status();
      for (const schema::Entity& e : q->entities) {
        int64_t number = 0, amount = 0;
        for (const auto& f : ot->fields()) {
          const auto* v = e.Find(f.number());
          if (v == nullptr) continue;
          if (f.name() == "number") number = std::get<int64_t>(v->front());
          if (f.name() == "amount") amount = std::get<int64_t>(v->front());
        }
        out[number] = amount;
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(r.ok()) << r.status();
    return out;
  }

  replication::GroupRef Group(int64_t customer) {
    replication::GroupRef g;
    g.set_table(descriptor_.name());
    const schema::TableDescriptor* ct = db_->layout().schema().FindTable("Customer");
    g.set_root(*db_->layout().GroupRow(*ct, {customer}));
    return g;
  }

  std::string Repl(int dc) { return cluster_->replicas()[static_cast<size_t>(dc)].replication; }

  template <typename Reply, typename Request>
  absl::StatusOr<Reply> Call(int dc, const std::string& method, const Request& req) {
    absl::StatusOr<std::string> raw = Await<std::string>([&](auto cb) {
      transport_.Call(Repl(dc), method, req.SerializeAsString(), absl::Seconds(10), std::move(cb));
    });
    if (!raw.ok()) return raw.status();
    Reply r;
    if (!r.ParseFromString(*raw)) return absl::DataLossError("unparsable");
    return r;
  }

  // Every row of `group` as of (timestamp, position) at datacenter `dc`,
  // retried while the replica has not applied the position yet.
  std::map<std::string, std::string> RowsAt(int dc, const replication::GroupRef& group,
                                            int64_t timestamp, uint64_t position) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::map<std::string, std::string> out;
      std::string after;
      absl::Status failed;
      do {
        replication::SnapshotRowsRequest req;
        *req.mutable_group() = group;
        req.set_timestamp(timestamp);
        req.set_position(position);
        req.set_after(after);
        auto page = Call<replication::SnapshotRowsReply>(dc, "repl.SnapshotRows", req);
        if (!page.ok()) {
          failed = page.status();
          break;
        }
        for (const auto& r : page->rows()) out[r.key()] = r.SerializeAsString();
        after = page->after();
      } while (!after.empty());
      if (failed.ok()) return out;
      EXPECT_TRUE(absl::IsAborted(failed)) << failed;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "datacenter " << dc << " never applied position " << position;
    return {};
  }

  // The latest values of every row of `group` at datacenter `dc`.
  std::map<std::string, backup::GroupState::Columns> Values(int dc,
                                                            const replication::GroupRef& group) {
    std::map<std::string, backup::GroupState::Columns> out;
    std::string after;
    do {
      replication::SnapshotRowsRequest req;
      *req.mutable_group() = group;
      req.set_latest(true);
      req.set_after(after);
      auto page = Call<replication::SnapshotRowsReply>(dc, "repl.SnapshotRows", req);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      for (const auto& r : page->rows())
        for (const auto& c : r.cells()) out[r.key()][{c.family(), c.qualifier()}] = c.value();
      after = page->after();
    } while (!after.empty());
    return out;
  }

  // The rows a catalog file holds, opened at datacenter A if sealed.
  std::map<std::string, std::string> RowsIn(const std::string& dir, const backup::FileEntry& f) {
    std::map<std::string, std::string> out;
    absl::Status s = backup::ReadChunks(
        dir, f, backup::OpenAt(&transport_, Repl(0), absl::Seconds(10)), [&](backup::Chunk& c) {
          for (const auto& r : c.rows()) out[r.key()] = r.SerializeAsString();
          return absl::OkStatus();
        });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string Msadmin(const std::string& args) { return StrCat(MSADMIN, " ", args); }

  RealEnv env_{7};
  TestDir dir_;
  schema::SchemaDescriptor descriptor_;
  std::unique_ptr<server::LocalCluster> cluster_;
  std::unique_ptr<Database> db_;
  rpc::RpcTransport transport_;
  std::string config_path_, schema_path_;
};

TEST_P(BackupTest, TakenUnderWritesEachGroupEqualsItsStateAtThePositionAndTheLogFollows) {
  for (int64_t c = 1; c <= 4; ++c) ASSERT_TRUE(PutOrder(c, 1, 10 * c).ok());
  // Customer 1's group is several snapshot pages long, so the writer's
  // commits land between the pages of its backup.
  ASSERT_TRUE(PutOrder(1, 1000, 7, 700).ok());
  // A writer keeps committing to customers 1 and 2 while the backup runs.
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int64_t i = 2; !stop.load(); ++i) {
      if (PutOrder(1 + i % 2, i % 2 == 0 ? 2000 + i : i, i).ok()) written++;
    }
  });
  while (written.load() < 20) absl::SleepFor(absl::Milliseconds(5));
  const std::string dir = dir_.path() + "/backup";
  testing::Result created =
      RunCommand(Msadmin(StrCat("backup create --quiet --config=", config_path_, " --to=", dir, " ",
                                schema_path_, " Customer:1 Customer:2 Customer:3")));
  EXPECT_EQ(created.exit_code, 0) << created.out;
  EXPECT_NE(created.out.find("3 group(s)"), std::string::npos) << created.out;
  while (written.load() < 60) absl::SleepFor(absl::Milliseconds(5));
  stop = true;
  writer.join();

  absl::StatusOr<backup::Manifest> m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files_size(), 3);
  ASSERT_EQ(m->schemas_size(), 1);
  EXPECT_EQ(m->schemas(0).name(), "Shop");
  for (const backup::FileEntry& f : m->files()) {
    EXPECT_EQ(f.header().kind(), backup::FULL);
    EXPECT_TRUE(f.header().chain_start()) << "a group's first backup starts its log chain";
    EXPECT_EQ(f.header().sealed(), encrypted());
    // The rows the backup holds are the group's rows at its position, as
    // the other full replica has them.
    const auto backed_up = RowsIn(dir, f);
    EXPECT_GE(backed_up.size(), 2u);
    EXPECT_EQ(backed_up, RowsAt(1, f.header().group(), f.header().timestamp(), f.header().to()))
        << f.path();
    // And clean-up may now remove the log through it.
    replication::StateRequest sreq;
    *sreq.mutable_group() = f.header().group();
    auto st = Call<replication::StateReply>(0, "repl.State", sreq);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_GE(st->backed_up(), f.header().to());
  }
  if (encrypted()) {
    // Sealed under the group's key: no value shows in the files.
    for (const backup::FileEntry& f : m->files()) {
      auto bytes = ReadFileToString(dir + "/" + f.path());
      ASSERT_TRUE(bytes.ok());
      EXPECT_EQ(bytes->find("plaintext-note"), std::string::npos) << f.path();
      EXPECT_EQ(bytes->find("secret-name"), std::string::npos) << f.path();
    }
  }

  // The log since: one file per written group, consecutive positions.
  testing::Result logged = RunCommand(Msadmin(
      StrCat("backup log --quiet --config=", config_path_, " --to=", dir, " ", schema_path_)));
  EXPECT_EQ(logged.exit_code, 0) << logged.out;
  EXPECT_NE(logged.out.find("nothing new since position"), std::string::npos) << logged.out;
  m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok());
  int logs = 0;
  for (const backup::FileEntry& f : m->files()) {
    if (f.header().kind() != backup::LOG) continue;
    ++logs;
    uint64_t next = f.header().from();
    absl::Status s = backup::ReadChunks(
        dir, f, backup::OpenAt(&transport_, Repl(0), absl::Seconds(10)), [&](backup::Chunk& c) {
          for (const auto& e : c.entries()) EXPECT_EQ(e.position(), next++);
          return absl::OkStatus();
        });
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(next, f.header().to() + 1);
  }
  EXPECT_EQ(logs, 2);  // customers 1 and 2 were written; 3 was not

  // Restoring customer 2 to the position of its full backup, taken while
  // the writer went on, gives back exactly the rows that backup holds: its
  // entities and their index entries (with new timestamps).
  const backup::FileEntry* full2 = nullptr;
  for (const backup::FileEntry& f : m->files())
    if (f.header().kind() == backup::FULL && f.header().group().root() == Group(2).root())
      full2 = &f;
  ASSERT_NE(full2, nullptr);
  testing::Result restored =
      RunCommand(Msadmin(StrCat("restore --config=", config_path_, " --from=", dir,
                                " Shop Customer:2 --to-position=", full2->header().to())));
  EXPECT_EQ(restored.exit_code, 0) << restored.out;
  absl::StatusOr<backup::GroupState> want =
      backup::FullState(dir, *full2, backup::OpenAt(&transport_, Repl(0), absl::Seconds(10)));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(Values(0, Group(2)), want->rows);
  // B applies the restore's commits too (maybe a moment later).
  for (int i = 0; i < 100 && Values(1, Group(2)) != want->rows; ++i)
    absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Values(1, Group(2)), want->rows);

  testing::Result verified = RunCommand(Msadmin(
      StrCat("backup verify --from=", dir, encrypted() ? StrCat(" --config=", config_path_) : "")));
  EXPECT_EQ(verified.exit_code, 0) << verified.out;
  EXPECT_NE(verified.out.find("5 file(s)"), std::string::npos) << verified.out;
  EXPECT_NE(verified.out.find("0 problem(s)"), std::string::npos) << verified.out;
  if (encrypted()) {
    EXPECT_NE(verified.out.find("sealed chunk(s) opened at the datacenter"), std::string::npos)
        << verified.out;
  }
  testing::Result listed = RunCommand(Msadmin(StrCat("backup list --from=", dir)));
  EXPECT_EQ(listed.exit_code, 0) << listed.out;
  EXPECT_NE(listed.out.find("3 group(s), 5 file(s)"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("  log   positions "), std::string::npos) << listed.out;

  // The restore's own commit goes into the log backup too.
  logged = RunCommand(Msadmin(StrCat("backup log --quiet --config=", config_path_, " --to=", dir,
                                     " ", schema_path_, " Customer:2")));
  EXPECT_EQ(logged.exit_code, 0) << logged.out;

  // --all finds the fourth customer; the third, unchanged since its full
  // backup, is not taken again.
  testing::Result all = RunCommand(Msadmin(
      StrCat("backup create --quiet --all --config=", config_path_, " --to=", dir, " Shop")));
  EXPECT_EQ(all.exit_code, 0) << all.out;
  EXPECT_NE(all.out.find("3 group(s)"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("already backed up at position"), std::string::npos) << all.out;

  // Customers 1 and 2 now have two full backups with their log between:
  // replaying the log onto the first gives the second.
  testing::Result replayed = RunCommand(
      Msadmin(StrCat("backup verify --replay --from=", dir, " --config=", config_path_)));
  EXPECT_EQ(replayed.exit_code, 0) << replayed.out;
  EXPECT_NE(replayed.out.find("2 replay(s) of "), std::string::npos) << replayed.out;
  EXPECT_NE(replayed.out.find("; 0 problem(s)"), std::string::npos) << replayed.out;

  // A damaged file is named by verify.
  m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok());
  const std::string victim = dir + "/" + m->files(0).path();
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  testing::Result damaged = RunCommand(Msadmin(StrCat("backup verify --from=", dir)));
  EXPECT_EQ(damaged.exit_code, 1) << damaged.out;
  EXPECT_NE(damaged.out.find(victim), std::string::npos) << damaged.out;
}

TEST_P(BackupTest, ACancelledBackupResumesWhereItStopped) {
  std::vector<replication::GroupRef> groups;
  for (int64_t c = 1; c <= 5; ++c) {
    ASSERT_TRUE(PutOrder(c, 1, c).ok());
    groups.push_back(Group(c));
  }
  const std::string dir = dir_.path() + "/backup";
  std::atomic<bool> cancel{false};
  backup::JobOptions o;
  o.dir = dir;
  o.transport = &transport_;
  o.datacenter = "A";
  o.replication = Repl(0);
  o.schema = descriptor_;
  o.groups = groups;
  o.cancel = &cancel;
  // Cancelled once two groups are in.
  o.on_progress = [&](const backup::Progress& p) {
    if (p.groups_done >= 2) cancel = true;
  };
  absl::StatusOr<backup::JobReport> r = backup::RunBackup(o);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  absl::StatusOr<backup::Manifest> m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->files_size(), 2);
  ASSERT_EQ(m->jobs_size(), 1);
  EXPECT_EQ(m->jobs(0).finished_micros(), 0);
  // No partial file stays behind.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();

  // The same job again resumes: only the three missing groups are taken.
  cancel = false;
  o.on_progress = nullptr;
  o.groups = {};
  o.groups.push_back(groups[0]);  // already done: not taken twice
  r = backup::RunBackup(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->resumed);
  m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok());
  std::set<std::string> backed_up;
  for (const backup::FileEntry& f : m->files())
    backed_up.insert(replication::GroupKey(f.header().group()));
  EXPECT_EQ(backed_up.size(), 5u);
  EXPECT_EQ(m->jobs(0).finished_micros() > 0, true);
  absl::StatusOr<backup::VerifyReport> v = backup::VerifyBackup(
      backup::VerifyOptions{.dir = dir, .transport = &transport_, .replication = Repl(0)});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->problems.empty()) << v->problems[0];
  // Another writer of the directory meanwhile is refused.
  EXPECT_TRUE(std::filesystem::exists(dir + "/LOCK"));
}

TEST_P(BackupTest, BadArgumentsAreUsageErrors) {
  const std::string base = StrCat("--config=", config_path_, " ");
  auto expect_usage = [&](const std::string& args, const std::string& says) {
    testing::Result r = RunCommand(Msadmin(args));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
  };
  expect_usage(StrCat("backup create ", base, schema_path_, " Customer:1"), "--to");
  expect_usage(StrCat("backup create ", base, "--to=", dir_.path(), "/b ", schema_path_),
               "name the groups");
  expect_usage(StrCat("backup create ", base, "--to=", dir_.path(), "/b ", schema_path_, " Nope:1"),
               "Nope:1");
  expect_usage(StrCat("backup create ", base, "--to=", dir_.path(), "/b --datacenter=C ",
                      schema_path_, " Customer:1"),
               "witness");
  expect_usage(StrCat("backup create ", base, "--to=", dir_.path(), "/b --datacenter=Z ",
                      schema_path_, " Customer:1"),
               "no datacenter Z");
  testing::Result missing =
      RunCommand(Msadmin(StrCat("backup verify --from=", dir_.path(), "/none")));
  EXPECT_EQ(missing.exit_code, 0) << missing.out;  // an empty directory holds nothing wrong
  EXPECT_NE(missing.out.find("0 file(s)"), std::string::npos) << missing.out;
}

TEST_P(BackupTest, RestoreBringsBackAPositionATimeAndLeavesOutAnAccidentalDelete) {
  for (int64_t n = 1; n <= 5; ++n) ASSERT_TRUE(PutOrder(1, n, 100 + n).ok());
  ASSERT_EQ(Orders(1).size(), 5u);  // applied at A, where the backups are taken
  const std::string dir = dir_.path() + "/backup";
  const std::string take = StrCat("--quiet --config=", config_path_, " --to=", dir, " Shop");
  testing::Result full = RunCommand(Msadmin(StrCat("backup create ", take, " Customer:1")));
  ASSERT_EQ(full.exit_code, 0) << full.out;
  // The history: put 6, delete 2 (the mistake), put 7, change 3.
  absl::StatusOr<CommitInfo> put6 = PutOrder(1, 6, 106);
  ASSERT_TRUE(put6.ok()) << put6.status();
  const uint64_t after_put6 = put6->position;
  absl::StatusOr<CommitInfo> deleted = DeleteOrder(1, 2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  const uint64_t the_delete = deleted->position;
  ASSERT_TRUE(PutOrder(1, 7, 107).ok());
  absl::SleepFor(absl::Milliseconds(5));
  const int64_t before_change = absl::ToUnixMicros(absl::Now());
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(PutOrder(1, 3, 999).ok());
  // (A read from the writer's client waits for its commits' local applies,
  // so the backup below, of what datacenter A applied, has them all.)
  const std::map<int64_t, int64_t> latest = {{1, 101}, {3, 999}, {4, 104},
                                             {5, 105}, {6, 106}, {7, 107}};
  ASSERT_EQ(Orders(1), latest);
  testing::Result log = RunCommand(Msadmin(StrCat("backup log ", take)));
  ASSERT_EQ(log.exit_code, 0) << log.out;

  const std::string restore =
      StrCat("restore --config=", config_path_, " --from=", dir, " Shop Customer:1");
  auto index_check = [&] {
    testing::Result r =
        RunCommand(Msadmin(StrCat("index check --config=", config_path_,
                                  " --local=A --schema=", schema_path_, " Customer:1")));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("0 problem(s)"), std::string::npos) << r.out;
  };

  // A dry run changes nothing.
  testing::Result dry =
      RunCommand(Msadmin(StrCat(restore, " --dry-run --to-position=", after_put6)));
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would restore to position"), std::string::npos) << dry.out;
  EXPECT_EQ(Orders(1), latest);

  // Back to the position right after order 6 was put.
  testing::Result to_pos = RunCommand(Msadmin(StrCat(restore, " --to-position=", after_put6)));
  EXPECT_EQ(to_pos.exit_code, 0) << to_pos.out;
  EXPECT_EQ(Orders(1), (std::map<int64_t, int64_t>{
                           {1, 101}, {2, 102}, {3, 103}, {4, 104}, {5, 105}, {6, 106}}));
  index_check();

  // The latest state without the delete: order 2 is back, the later writes stay.
  testing::Result skipped = RunCommand(Msadmin(StrCat(restore, " --skip=", the_delete)));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.out;
  EXPECT_NE(skipped.out.find("1 left out"), std::string::npos) << skipped.out;
  std::map<int64_t, int64_t> undone = latest;
  undone[2] = 102;
  EXPECT_EQ(Orders(1), undone);
  index_check();
  // Again: nothing left to change.
  testing::Result again = RunCommand(Msadmin(StrCat(restore, " --skip=", the_delete)));
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find(": 0 put, 0 deleted"), std::string::npos) << again.out;

  // To a time: before order 3 changed.
  testing::Result to_time =
      RunCommand(Msadmin(StrCat(restore, " --json --to-time=", before_change)));
  EXPECT_EQ(to_time.exit_code, 0) << to_time.out;
  EXPECT_EQ(Orders(1), (std::map<int64_t, int64_t>{
                           {1, 101}, {3, 103}, {4, 104}, {5, 105}, {6, 106}, {7, 107}}));
  index_check();

  // Points the backup cannot reach are refused, naming why.
  testing::Result past = RunCommand(Msadmin(StrCat(restore, " --to-position=100000")));
  EXPECT_EQ(past.exit_code, 1) << past.out;
  EXPECT_NE(past.out.find("through position"), std::string::npos) << past.out;
  testing::Result early = RunCommand(Msadmin(StrCat(restore, " --to-position=1")));
  EXPECT_EQ(early.exit_code, 1) << early.out;
  EXPECT_NE(early.out.find("first full backup"), std::string::npos) << early.out;
  testing::Result bad_skip = RunCommand(Msadmin(StrCat(restore, " --skip=x")));
  EXPECT_EQ(bad_skip.exit_code, 2) << bad_skip.out;
}

TEST_P(BackupTest, ARestoreStopsWhenSomeoneElseWritesTheGroupUnlessForced) {
  for (int64_t n = 1; n <= 30; ++n) ASSERT_TRUE(PutOrder(1, n, n).ok());
  ASSERT_EQ(Orders(1).size(), 30u);  // and applied at A (the writer's read waits for it)
  const std::string dir = dir_.path() + "/backup";
  backup::JobOptions jo;
  jo.dir = dir;
  jo.transport = &transport_;
  jo.datacenter = "A";
  jo.replication = Repl(0);
  jo.schema = descriptor_;
  jo.groups = {Group(1)};
  ASSERT_TRUE(backup::RunBackup(jo).ok());
  // Everything changes after the backup, so the restore has 30 writes to do.
  ASSERT_TRUE(PutOrder(1, 1, 7, 30).ok());

  backup::RestoreOptions o;
  o.state.dir = dir;
  o.state.group = Group(1);
  o.state.open = backup::OpenAt(&transport_, Repl(0), absl::Seconds(10));
  o.root_table = "Customer";
  o.root_key = {int64_t{1}};
  o.db = db_.get();
  o.batch = 3;  // ten commits
  // Another writer commits right after each of the restore's first three
  // commits.
  int64_t other = 1000;
  o.on_commit = [&](const backup::RestoreReport& progress) {
    if (progress.commits <= 3) {
      EXPECT_TRUE(PutOrder(1, other++, 1).ok());
    }
  };
  absl::StatusOr<backup::RestoreReport> r = backup::RestoreGroup(o);
  EXPECT_TRUE(absl::IsAborted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("written by someone else"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("3 puts and 0 deletes of "), std::string::npos) << r.status();
  // Forced, it goes on through the concurrent writes: those after its
  // commits, and a writer running beside it.
  o.force = true;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int64_t i = 0; !stop.load() && i < 20; ++i) {
      (void)PutOrder(1, 2000 + i, i);
      absl::SleepFor(absl::Milliseconds(3));
    }
  });
  r = backup::RestoreGroup(o);
  stop = true;
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status();
  o.on_commit = nullptr;
  // Once the writer is gone the group holds exactly the backup's orders.
  r = backup::RestoreGroup(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<int64_t, int64_t> want;
  for (int64_t n = 1; n <= 30; ++n) want[n] = n;
  EXPECT_EQ(Orders(1), want);
}

TEST_P(BackupTest, TheScheduleTakesFullAndLogBackupsAndPrunesWhatTheWindowNoLongerNeeds) {
  ASSERT_TRUE(PutOrder(1, 1, 1).ok());
  const std::string dir = dir_.path() + "/scheduled";
  backup::ScheduleOptions o;
  o.dir = dir;
  o.transport = &transport_;
  o.datacenter = "A";
  o.replication = Repl(0);
  o.schemas = [this]() -> absl::StatusOr<std::vector<schema::SchemaDescriptor>> {
    return std::vector<schema::SchemaDescriptor>{descriptor_};
  };
  o.full_interval = absl::Milliseconds(1500);
  o.log_interval = absl::Milliseconds(300);
  o.retention = absl::Milliseconds(500);
  o.first_delay = absl::ZeroDuration();
  auto scheduler = backup::BackupScheduler::Start(o);
  // Writes go on; the schedule follows them with log backups, and takes a
  // second full backup after its interval.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int64_t n = 2;
  while (absl::Now() < deadline) {
    ASSERT_TRUE(PutOrder(1, n, n).ok());
    ++n;
    absl::SleepFor(absl::Milliseconds(50));
    const backup::BackupScheduler::Status st = scheduler->status();
    if (st.jobs_ok >= 6 && st.pruned_files > 0 && st.last_full_micros > 0 && st.last_log_micros > 0)
      break;
  }
  const backup::BackupScheduler::Status st = scheduler->status();
  scheduler.reset();
  EXPECT_GE(st.jobs_ok, 6u);
  EXPECT_EQ(st.jobs_failed, 0u) << st.last_error;
  EXPECT_GT(st.pruned_files, 0u);
  absl::StatusOr<backup::Manifest> m = backup::LoadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  int fulls = 0, logs = 0;
  for (const backup::FileEntry& f : m->files())
    (f.header().kind() == backup::FULL ? fulls : logs)++;
  EXPECT_GE(fulls, 1);
  EXPECT_GE(logs, 1);
  // What is left restores: verify finds a whole chain.
  absl::StatusOr<backup::VerifyReport> v = backup::VerifyBackup(
      backup::VerifyOptions{.dir = dir, .transport = &transport_, .replication = Repl(0)});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->problems.empty()) << v->problems[0];
}

INSTANTIATE_TEST_SUITE_P(PlainAndEncrypted, BackupTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Encrypted" : "Plain"; });

}  // namespace
}  // namespace megastore
