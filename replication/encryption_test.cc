// Encryption at rest: the cell format (cell_crypto.h), the key store
// (key_store.h) and a replica storing an ENCRYPTED schema's groups
// (at_rest.h with LogReplica) on a real tablet server.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "base/await.h"
#include "base/coding.h"
#include "base/crypto.h"
#include "base/file.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "replication/at_rest.h"
#include "replication/cell_crypto.h"
#include "replication/key_store.h"
#include "replication/log_replica.h"
#include "schema/schema.pb.h"
#include "storage/tabletserver/in_process_bigtable.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::replication {
namespace {

std::string IndexRow(const std::string& root, const std::string& index, const std::string& values) {
  std::string row = root + '\x02';
  AppendOrderedBytes(&row, index);
  row += values;
  return row;
}

// ---- the cell format
// ---------------------------------------------------------------

TEST(GroupCipherTest, CellsRoundTripAndHideIndexedValues) {
  auto cipher = GroupCipher::Create(crypto::RandomBytes(32), "Clinic", "r1");
  ASSERT_TRUE(cipher.ok()) << cipher.status();
  const GroupCipher& c = **cipher;
  // Entity rows and field columns keep their names; index entries and
  // inline index columns become tokens.
  EXPECT_EQ(c.StoredRow("r1\x01visit"), "r1\x01visit");
  EXPECT_EQ(c.StoredQualifier("Visit.diagnosis"), "Visit.diagnosis");
  const std::string index_row = IndexRow("r1", "bydiagnosis", "influenza|r1|7");
  const std::string stored_row = c.StoredRow(index_row);
  EXPECT_TRUE(c.TokenizedRow(index_row));
  EXPECT_EQ(stored_row.find("influenza"), std::string::npos);
  EXPECT_EQ(stored_row, c.StoredRow(index_row));  // deterministic
  EXPECT_GE(stored_row, c.TokenizedStart());
  EXPECT_LT(stored_row, c.TokenizedEnd());
  const std::string stored_q = c.StoredQualifier("ByTag:influenza|7");
  EXPECT_EQ(stored_q.find("influenza"), std::string::npos);

  for (const auto& [row, q] : {std::pair<std::string, std::string>{"r1", "Visit.diagnosis"},
                               {index_row, ""},
                               {"r1", "ByTag:influenza|7"}}) {
    absl::StatusOr<std::string> sealed = c.SealCell(row, "e", q, 42, "influenza");
    ASSERT_TRUE(sealed.ok()) << sealed.status();
    EXPECT_EQ(sealed->find("influenza"), std::string::npos);
    absl::StatusOr<GroupCipher::Opened> opened =
        c.OpenCell(c.StoredRow(row), "e", c.StoredQualifier(q), 42, *sealed);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(opened->row, row);
    EXPECT_EQ(opened->qualifier, q);
    EXPECT_EQ(opened->value, "influenza");
  }
}

TEST(GroupCipherTest, AnyTamperingIsDataLossNamingTheCell) {
  auto cipher = GroupCipher::Create(crypto::RandomBytes(32), "Clinic", "r1");
  ASSERT_TRUE(cipher.ok());
  const GroupCipher& c = **cipher;
  const std::string sealed = *c.SealCell("r1", "e", "Patient.notes", 42, "allergic to penicillin");
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string flipped = sealed;
    flipped[i] ^= 0x20;
    absl::StatusOr<GroupCipher::Opened> opened =
        c.OpenCell("r1", "e", "Patient.notes", 42, flipped);
    ASSERT_TRUE(absl::IsDataLoss(opened.status())) << "byte " << i;
    EXPECT_NE(opened.status().message().find("Patient.notes"), std::string::npos)
        << opened.status();
    EXPECT_NE(opened.status().message().find("table Clinic row r1"), std::string::npos)
        << opened.status();
  }
  // Moved to another row, column, time, or sealed under another group's key.
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r2", "e", "Patient.notes", 42, sealed).status()));
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r1", "e", "Patient.name", 42, sealed).status()));
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r1", "e", "Patient.notes", 43, sealed).status()));
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r1", "i", "Patient.notes", 42, sealed).status()));
  auto other = GroupCipher::Create(crypto::RandomBytes(32), "Clinic", "r1");
  EXPECT_TRUE(
      absl::IsDataLoss((*other)->OpenCell("r1", "e", "Patient.notes", 42, sealed).status()));
  // Plaintext where a sealed cell belongs, and truncations.
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r1", "e", "Patient.notes", 42, "plain").status()));
  EXPECT_TRUE(absl::IsDataLoss(c.OpenCell("r1", "e", "Patient.notes", 42, "").status()));
  EXPECT_TRUE(
      absl::IsDataLoss(c.OpenCell("r1", "e", "Patient.notes", 42, sealed.substr(0, 20)).status()));
  // Log cells are bound to their column (position).
  const std::string log = *c.SealLog("L1a", "entry");
  EXPECT_EQ(*c.OpenLog("L1a", log), "entry");
  EXPECT_TRUE(absl::IsDataLoss(c.OpenLog("L2a", log).status()));
}

// ---- the key store
// -------------------------------------------------------------------

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every byte of every file under `dir`.
std::string AllFiles(const std::string& dir) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) all += Slurp(e.path().string());
  return all;
}

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(GroupKeyStoreTest, SecretsPersistAndFilesAreOwnerOnly) {
  TestDir dir;
  const std::string keys = dir.path() + "/keys";
  std::string s1;
  {
    auto store = GroupKeyStore::Open(keys);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(absl::IsNotFound((*store)->Secret("T", "r1", false).status()));
    s1 = *(*store)->Secret("T", "r1", true);
    EXPECT_EQ(s1.size(), 32u);
    EXPECT_EQ(*(*store)->Secret("T", "r1", false), s1);
    EXPECT_NE(*(*store)->Secret("T", "r2", true), s1);
    // One owner at a time.
    auto second = GroupKeyStore::Open(keys);
    EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  }
  EXPECT_EQ(Mode(keys), 0700);
  EXPECT_EQ(Mode(keys + "/kek"), 0600);
  EXPECT_EQ(Mode(keys + "/group-keys.log"), 0600);
  // The secret itself is never stored, only wrapped.
  EXPECT_EQ(AllFiles(keys).find(s1), std::string::npos);
  auto store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Secret("T", "r1", false), s1);
  EXPECT_EQ(Mode(keys + "/group-keys"), 0600);
  EXPECT_EQ((*store)->stats().groups, 2u);
}

TEST(GroupKeyStoreTest, AKeyFileOthersCanReadIsRefused) {
  TestDir dir;
  const std::string keys = dir.path() + "/keys";
  ASSERT_TRUE(GroupKeyStore::Open(keys).ok());
  ASSERT_EQ(::chmod((keys + "/kek").c_str(), 0644), 0);
  auto store = GroupKeyStore::Open(keys);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("kek"), std::string::npos);
}

TEST(GroupKeyStoreTest, DestroyedKeysLeaveEveryFileAndNeverComeBack) {
  TestDir dir;
  const std::string keys = dir.path() + "/keys";
  auto store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok());
  const std::string s1 = *(*store)->Secret("T", "r1", true);
  const std::string s2 = *(*store)->Secret("T", "r2", true);
  // What wraps r1's secret, as stored.
  std::string wrapped_before = AllFiles(keys);
  EXPECT_TRUE(*(*store)->Destroy("T", "r1"));
  EXPECT_FALSE(*(*store)->Destroy("T", "r1"));
  EXPECT_TRUE(absl::IsFailedPrecondition((*store)->Secret("T", "r1", false).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition((*store)->Secret("T", "r1", true).status()));
  EXPECT_EQ(*(*store)->Secret("T", "r2", false), s2);
  store->reset();
  store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(absl::IsFailedPrecondition((*store)->Secret("T", "r1", true).status()));
  EXPECT_EQ(*(*store)->Secret("T", "r2", false), s2);
  EXPECT_EQ((*store)->stats().destroyed, 1u);
  // No file holds r1's wrapped secret any more: the snapshot was rewritten
  // and the log emptied. (Its record was the only one naming root "r1"
  // with a wrapped value; the tombstone has none.)
  GroupKeySnapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(*ReadChecksummedFile(keys + "/group-keys")));
  for (const GroupKeyRecord& r : snapshot.groups()) {
    if (r.root() == "r1") {
      EXPECT_TRUE(r.destroyed());
      EXPECT_TRUE(r.wrapped().empty());
    }
  }
  EXPECT_EQ(Slurp(keys + "/group-keys.log"), "");
}

TEST(GroupKeyStoreTest, RotationRewrapsWithoutChangingSecrets) {
  TestDir dir;
  const std::string keys = dir.path() + "/keys";
  auto store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok());
  const std::string s1 = *(*store)->Secret("T", "r1", true);
  const std::string old_kek = Slurp(keys + "/kek");
  EXPECT_EQ((*store)->provider().active(), 1u);
  absl::StatusOr<uint64_t> rewrapped = (*store)->Rotate();
  ASSERT_TRUE(rewrapped.ok()) << rewrapped.status();
  EXPECT_EQ(*rewrapped, 1u);
  EXPECT_EQ((*store)->provider().active(), 2u);
  EXPECT_EQ((*store)->provider().keks(), 1);  // the old one is forgotten
  EXPECT_EQ(*(*store)->Secret("T", "r1", false), s1);
  store->reset();
  // The old KEK alone opens nothing now: put it back and the store cannot
  // unwrap the re-wrapped secret.
  store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Secret("T", "r1", false), s1);
  store->reset();
  ASSERT_TRUE(WriteFileAtomically(keys + "/kek", old_kek, 0600).ok());
  store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> with_old = (*store)->Secret("T", "r1", false);
  EXPECT_TRUE(absl::IsDataLoss(with_old.status())) << with_old.status();
}

TEST(GroupKeyStoreTest, DamagedFilesAreNamedAndATornTailIsDropped) {
  TestDir dir;
  const std::string keys = dir.path() + "/keys";
  {
    auto store = GroupKeyStore::Open(keys);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Secret("T", "r1", true).ok());
    ASSERT_TRUE((*store)->Secret("T", "r2", true).ok());
  }
  const std::string log = Slurp(keys + "/group-keys.log");
  ASSERT_FALSE(log.empty());
  // A torn last record (a crash while appending): dropped, the rest kept.
  ASSERT_TRUE(
      WriteFileAtomically(keys + "/group-keys.log", log.substr(0, log.size() - 3), 0600).ok());
  {
    auto store = GroupKeyStore::Open(keys);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE((*store)->Secret("T", "r1", false).ok());
    EXPECT_TRUE(absl::IsNotFound((*store)->Secret("T", "r2", false).status()));
    ASSERT_TRUE((*store)->Secret("T", "r3", true).ok());
  }
  // The torn log was kept aside, not thrown away.
  bool kept = false;
  for (const auto& e : std::filesystem::directory_iterator(keys))
    kept |= e.path().filename().string().rfind("group-keys.log.torn-", 0) == 0;
  EXPECT_TRUE(kept);
  // A flipped byte inside a record: refused, naming the file and offset.
  std::string damaged = Slurp(keys + "/group-keys.log");
  ASSERT_GT(damaged.size(), 12u);
  damaged[10] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(keys + "/group-keys.log", damaged, 0600).ok());
  auto store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(absl::IsDataLoss(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("group-keys.log: the record at offset 0"),
            std::string::npos)
      << store.status();
  // A length no record has, even as the last record: damage, not a torn
  // append.
  std::string huge = Slurp(keys + "/group-keys.log");
  ASSERT_TRUE(WriteFileAtomically(keys + "/group-keys.log",
                                  log.substr(0, 0) + std::string("\xff\xff\xff\x7f") + huge, 0600)
                  .ok());
  store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(absl::IsDataLoss(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("claims"), std::string::npos) << store.status();
  // A damaged key file.
  std::string kek = Slurp(keys + "/kek");
  kek[kek.size() - 1] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(keys + "/kek", kek, 0600).ok());
  store = GroupKeyStore::Open(keys);
  ASSERT_TRUE(absl::IsDataLoss(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("kek"), std::string::npos) << store.status();
}

// ---- a replica storing an encrypted schema
// -----------------------------------------

class EncryptedReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start() {
    storage::TabletServerOptions o;
    o.data_dir = data_dir();
    o.sync_log = false;
    o.maintenance_interval = absl::ZeroDuration();
    auto s = storage::TabletServer::Open(o, Env::Default());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    bigtable_ = std::make_unique<storage::InProcessBigtable>(server_.get());
    if (server_->GetTable("Clinic").ok()) {
      encryption_ = std::make_unique<AtRestEncryption>(Env::Default(), bigtable_.get(), key_dir());
      replica_ = std::make_unique<LogReplica>(bigtable_.get(), ReplicaType::kFull, nullptr,
                                              kDefaultMaxClockSkew, encryption_.get());
      return;
    }
    storage::TableSchema table;
    table.set_name("Clinic");
    *table.add_families() = LogFamilySchema();
    *table.add_families() = DataFamilySchema("e");
    *table.add_families() = DataFamilySchema("i");
    ASSERT_TRUE(server_->CreateTable(table).ok());
    storage::TableSchema schemas;
    schemas.set_name(kSchemaTable);
    schemas.add_families()->set_name(kSchemaFamily);
    ASSERT_TRUE(server_->CreateTable(schemas).ok());
    schema::SchemaDescriptor d;
    d.set_name("Clinic");
    schema::TableDescriptor* t = d.add_tables();
    t->set_name("Patient");
    t->set_entity_group_root(true);
    t->set_encrypted(true);
    ASSERT_TRUE(server_
                    ->MutateRow(kSchemaTable, "Clinic",
                                {storage::Mutation::SetCell(kSchemaFamily, kSchemaColumn,
                                                            d.SerializeAsString())})
                    .ok());
    encryption_ = std::make_unique<AtRestEncryption>(Env::Default(), bigtable_.get(), key_dir());
    replica_ = std::make_unique<LogReplica>(bigtable_.get(), ReplicaType::kFull, nullptr,
                                            kDefaultMaxClockSkew, encryption_.get());
  }

  void Stop() {
    replica_.reset();
    encryption_.reset();
    bigtable_.reset();
    server_.reset();
  }

  std::string data_dir() const { return dir_.path() + "/data"; }
  std::string key_dir() const { return dir_.path() + "/keys"; }

  static GroupRef Group(const std::string& root = "r1") {
    GroupRef g;
    g.set_table("Clinic");
    g.set_root(root);
    return g;
  }

  // Accepts and applies `entry` at `pos` (one replica: chosen).
  absl::Status Commit(uint64_t pos, LogEntry entry, const std::string& root = "r1") {
    entry.set_id("w" + std::to_string(pos));
    PaxosRequest req;
    *req.mutable_group() = Group(root);
    req.set_position(pos);
    req.set_accept(true);
    req.set_value(entry.SerializeAsString());
    absl::StatusOr<PaxosReply> p =
        Await<PaxosReply>([&](auto cb) { replica_->Paxos(req, std::move(cb)); });
    if (!p.ok()) return p.status();
    if (!p->ok()) return absl::AbortedError("not accepted");
    ApplyRequest apply;
    *apply.mutable_group() = Group(root);
    apply.set_position(pos);
    apply.set_value(entry.SerializeAsString());
    return Await<ApplyReply>([&](auto cb) { replica_->Apply(apply, std::move(cb)); }).status();
  }

  static CellChange Set(const std::string& family, const std::string& q, const std::string& v) {
    CellChange c;
    c.set_family(family);
    c.set_qualifier(q);
    c.set_value(v);
    return c;
  }

  absl::StatusOr<ReadReply> Read(const std::string& row, const std::string& family, int64_t ts,
                                 const std::string& root = "r1") {
    ReadRequest req;
    *req.mutable_group() = Group(root);
    req.set_row(row);
    req.set_family(family);
    req.set_timestamp(ts);
    return Await<ReadReply>([&](auto cb) { replica_->Read(req, std::move(cb)); });
  }

  absl::StatusOr<ScanReply> Scan(const std::string& start, const std::string& end,
                                 const std::string& family, int64_t limit = 0) {
    ScanRequest req;
    *req.mutable_group() = Group();
    req.set_start(start);
    req.set_end(end);
    req.set_family(family);
    req.set_latest(true);
    req.set_limit(limit);
    return Await<ScanReply>([&](auto cb) { replica_->Scan(req, std::move(cb)); });
  }

  // One entry writing an entity, three local index entries and an inline
  // index cell, all holding `secret` somewhere.
  LogEntry Entry(int64_t ts, const std::string& secret) {
    LogEntry e;
    e.set_timestamp(ts);
    RowChange* root = e.add_changes();
    root->set_row("r1");
    *root->add_cells() = Set("e", "Patient.notes", "notes: " + secret);
    *root->add_cells() = Set("e", "ByTag:" + secret, "");
    for (const std::string& v : {"b-" + secret, "a-" + secret, "c-" + secret}) {
      RowChange* entry = e.add_changes();
      entry->set_row(IndexRow("r1", "bynote", v));
      *entry->add_cells() = Set("i", "", "");
    }
    return e;
  }

  TestDir dir_;
  std::unique_ptr<storage::TabletServer> server_;
  std::unique_ptr<storage::InProcessBigtable> bigtable_;
  std::unique_ptr<AtRestEncryption> encryption_;
  std::unique_ptr<LogReplica> replica_;
};

TEST_F(EncryptedReplicaTest, NothingWrittenShowsInTheDataDirectoryAndReadsSeePlaintext) {
  const std::string secret = "Zebra-Pancreas-4417";
  ASSERT_TRUE(Commit(1, Entry(100, secret)).ok());

  absl::StatusOr<ReadReply> root = Read("r1", "e", 100);
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_EQ(root->qualifiers_size(), 2);
  EXPECT_EQ(root->qualifiers(0), "ByTag:" + secret);  // plaintext order
  EXPECT_EQ(root->qualifiers(1), "Patient.notes");
  EXPECT_EQ(root->values(1), "notes: " + secret);
  // The index entries come back in their plaintext order, inside the
  // range asked for.
  absl::StatusOr<ScanReply> index =
      Scan(IndexRow("r1", "bynote", ""), IndexRow("r1", "bynote", "c"), "i");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->rows_size(), 2);
  EXPECT_EQ(index->rows(0).key(), IndexRow("r1", "bynote", "a-" + secret));
  EXPECT_EQ(index->rows(1).key(), IndexRow("r1", "bynote", "b-" + secret));
  // Paging across the whole group: root row, then the sorted entries.
  absl::StatusOr<ScanReply> page = Scan("r1", PrefixSuccessor("r1"), "i", 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->rows_size(), 2);
  EXPECT_TRUE(page->more());
  EXPECT_EQ(page->rows(1).key(), IndexRow("r1", "bynote", "b-" + secret));
  // The log reads back in the clear too (for other replicas' catch-up).
  ReadLogRequest log;
  *log.mutable_group() = Group();
  log.set_from(1);
  log.set_to(1);
  absl::StatusOr<ReadLogReply> entries =
      Await<ReadLogReply>([&](auto cb) { replica_->ReadLog(log, std::move(cb)); });
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->values_size(), 1);
  LogEntry back;
  ASSERT_TRUE(back.ParseFromString(entries->values(0)));
  EXPECT_EQ(back.changes(0).cells(0).value(), "notes: " + secret);

  // On disk: nothing, in any file, with the tablets compacted and not —
  // while a control value written in the clear next to it is found.
  storage::TableSchema plain;
  plain.set_name("Plain");
  *plain.add_families() = DataFamilySchema("e");
  ASSERT_TRUE(server_->CreateTable(plain).ok());
  ASSERT_TRUE(
      server_
          ->MutateRow("Plain", "k", {storage::Mutation::SetCell("e", "q", "Control-Marker-7781")})
          .ok());
  Stop();
  EXPECT_NE(AllFiles(data_dir()).find("Control-Marker-7781"), std::string::npos);
  EXPECT_EQ(AllFiles(data_dir()).find(secret), std::string::npos);
  Start();
  for (const storage::TabletEntry& t : server_->ListTablets())
    ASSERT_TRUE(server_->CompactTablet(t.id()).ok());
  Stop();
  EXPECT_NE(AllFiles(data_dir()).find("Control-Marker-7781"), std::string::npos);
  EXPECT_EQ(AllFiles(data_dir()).find(secret), std::string::npos);
  EXPECT_EQ(AllFiles(key_dir()).find(secret), std::string::npos);
}

TEST_F(EncryptedReplicaTest, AFlippedByteOnDiskIsDataLossNamingTheCell) {
  ASSERT_TRUE(Commit(1, Entry(100, "x")).ok());
  std::vector<storage::Row> rows;
  ASSERT_TRUE(server_
                  ->ReadRows("Clinic", storage::RowSet{{"r1"}, {}}, {},
                             [&](storage::Row& r) {
                               rows.push_back(r);
                               return true;
                             })
                  .ok());
  ASSERT_EQ(rows.size(), 1u);
  for (const storage::Cell& c : rows[0].cells) {
    if (c.qualifier != "Patient.notes") continue;
    std::string flipped = c.value;
    flipped[flipped.size() / 2] ^= 0x04;
    ASSERT_TRUE(
        server_
            ->MutateRow("Clinic", "r1",
                        {storage::Mutation::SetCell("e", c.qualifier, flipped, c.timestamp)})
            .ok());
  }
  absl::StatusOr<ReadReply> read = Read("r1", "e", 100);
  ASSERT_TRUE(absl::IsDataLoss(read.status())) << read.status();
  EXPECT_NE(read.status().message().find("row r1 column e:Patient.notes at timestamp 100"),
            std::string::npos)
      << read.status();
}

TEST_F(EncryptedReplicaTest, ALostKeyDirectoryOrAnotherKeyOpensNothing) {
  ASSERT_TRUE(Commit(1, Entry(100, "x")).ok());
  Stop();
  std::filesystem::rename(key_dir(), dir_.path() + "/keys-old");
  Start();
  // A fresh key directory: no key for the group, which has data.
  absl::StatusOr<ReadReply> read = Read("r1", "e", 100);
  ASSERT_TRUE(absl::IsDataLoss(read.status())) << read.status();
  EXPECT_NE(read.status().message().find("no key"), std::string::npos) << read.status();
  // Nor does the log open (it would be replicated elsewhere in the clear).
  ReadLogRequest log;
  *log.mutable_group() = Group();
  log.set_from(1);
  log.set_to(1);
  EXPECT_TRUE(absl::IsDataLoss(
      Await<ReadLogReply>([&](auto cb) { replica_->ReadLog(log, std::move(cb)); }).status()));
  // A group that never had data reads as empty, and gets no key for it.
  absl::StatusOr<ReadReply> empty = Read("r9", "e", 100, "r9");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->found());
  EXPECT_EQ(encryption_->Status().groups(), 0u);
  // Nor does the group get a second key that would open none of its
  // cells: writes are refused too.
  LogEntry e;
  e.set_timestamp(200);
  *e.add_changes()->add_cells() = Set("e", "Patient.name", "n");
  e.mutable_changes(0)->set_row("r1");
  absl::Status write = Commit(2, e);
  EXPECT_TRUE(absl::IsDataLoss(write)) << write;
  EXPECT_EQ(encryption_->Status().groups(), 0u);
  // With the old directory back, everything opens again.
  Stop();
  std::filesystem::remove_all(key_dir());
  std::filesystem::rename(dir_.path() + "/keys-old", key_dir());
  Start();
  read = Read("r1", "e", 100);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->found());
}

TEST_F(EncryptedReplicaTest, DestroyingAGroupsKeyShredsItAndOnlyIt) {
  ASSERT_TRUE(Commit(1, Entry(100, "x")).ok());
  LogEntry other;
  other.set_timestamp(100);
  other.add_changes()->set_row("r2");
  *other.mutable_changes(0)->add_cells() = Set("e", "Patient.name", "Ada");
  ASSERT_TRUE(Commit(1, other, "r2").ok());
  absl::StatusOr<KeysDestroyReply> destroyed = encryption_->Destroy("Clinic", "r1");
  ASSERT_TRUE(destroyed.ok()) << destroyed.status();
  EXPECT_TRUE(destroyed->had_key());
  absl::StatusOr<ReadReply> read = Read("r1", "e", 100);
  ASSERT_TRUE(absl::IsFailedPrecondition(read.status())) << read.status();
  EXPECT_NE(read.status().message().find("destroyed"), std::string::npos);
  // Writes are refused too: the group never gets a new key.
  EXPECT_TRUE(absl::IsFailedPrecondition(Commit(2, Entry(200, "y"))));
  // The other group is untouched, also after a restart.
  Stop();
  Start();
  absl::StatusOr<ReadReply> r2 = Read("r2", "e", 100, "r2");
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->values(0), "Ada");
  EXPECT_TRUE(absl::IsFailedPrecondition(Read("r1", "e", 100).status()));
  EXPECT_EQ(encryption_->Status().destroyed(), 1u);
}

TEST_F(EncryptedReplicaTest, EntriesLeakingValuesOutOfTheGroupAreRefused) {
  LogEntry e;
  e.set_timestamp(100);
  RowChange* out = e.add_changes();
  out->set_table("Clinic.outboxes");
  out->set_row("r1");
  *out->add_cells() = Set("i", "listed", "a value in the clear");
  absl::Status s = Commit(1, e);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  // Markers are fine.
  e.mutable_changes(0)->mutable_cells(0)->set_value("");
  storage::TableSchema outboxes;
  outboxes.set_name("Clinic.outboxes");
  *outboxes.add_families() = DataFamilySchema("i");
  ASSERT_TRUE(server_->CreateTable(outboxes).ok());
  EXPECT_TRUE(Commit(1, e).ok());
  // No entry writes the log's own family.
  LogEntry forged;
  forged.set_timestamp(100);
  forged.add_changes()->set_row("r1");
  *forged.mutable_changes(0)->add_cells() = Set("p", "S:applied", "");
  EXPECT_TRUE(absl::IsInvalidArgument(Commit(2, forged)));
}

TEST_F(EncryptedReplicaTest, WithoutAKeyDirectoryEncryptedGroupsAreRefusedNotWrittenInTheClear) {
  replica_.reset();
  encryption_ = std::make_unique<AtRestEncryption>(Env::Default(), bigtable_.get(), "");
  replica_ = std::make_unique<LogReplica>(bigtable_.get(), ReplicaType::kFull, nullptr,
                                          kDefaultMaxClockSkew, encryption_.get());
  absl::Status s = Commit(1, Entry(100, "x"));
  ASSERT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("--key-dir"), std::string::npos) << s;
  EXPECT_EQ(AllFiles(data_dir()).find("notes: x"), std::string::npos);
}

TEST_F(EncryptedReplicaTest, ATableWithNoRecordedSchemaIsNotServed) {
  // The schema table exists (schemas are recorded here), but not for this
  // table: a replica cannot tell whether to seal, so it does nothing.
  storage::TableSchema other;
  other.set_name("Other");
  *other.add_families() = LogFamilySchema();
  *other.add_families() = DataFamilySchema("e");
  ASSERT_TRUE(server_->CreateTable(other).ok());
  PaxosRequest req;
  req.mutable_group()->set_table("Other");
  req.mutable_group()->set_root("r1");
  req.set_position(1);
  req.set_accept(true);
  req.set_value(LogEntry().SerializeAsString());
  absl::StatusOr<PaxosReply> p =
      Await<PaxosReply>([&](auto cb) { replica_->Paxos(req, std::move(cb)); });
  ASSERT_TRUE(absl::IsUnavailable(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("no schema of table Other is recorded"), std::string::npos)
      << p.status();
}

TEST_F(EncryptedReplicaTest, AnEntryWritingRowsOutsideTheGroupIsRefusedAlsoAtApply) {
  LogEntry e;
  e.set_timestamp(100);
  RowChange* c = e.add_changes();
  c->set_row("r2-not-mine");
  *c->add_cells() = Set("e", "Patient.notes", "x");
  absl::Status s = Commit(1, e);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ApplyRequest apply;
  *apply.mutable_group() = Group();
  apply.set_position(1);
  apply.set_value(e.SerializeAsString());
  absl::Status applied =
      Await<ApplyReply>([&](auto cb) { replica_->Apply(apply, std::move(cb)); }).status();
  EXPECT_TRUE(absl::IsInvalidArgument(applied)) << applied;
}

TEST_F(EncryptedReplicaTest, AMissingKekBesideGroupKeysIsNotReplaced) {
  ASSERT_TRUE(Commit(1, Entry(100, "x")).ok());
  Stop();
  std::filesystem::remove(key_dir() + "/kek");
  auto store = GroupKeyStore::Open(key_dir());
  ASSERT_TRUE(absl::IsDataLoss(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("kek is missing"), std::string::npos) << store.status();
  EXPECT_FALSE(std::filesystem::exists(key_dir() + "/kek"));
}

TEST_F(EncryptedReplicaTest, ALostSchemaTableKeepsEncryptedTablesEncryptedAndRefusesTheRest) {
  ASSERT_TRUE(Commit(1, Entry(100, "x")).ok());
  storage::TableSchema other;
  other.set_name("Other");
  *other.add_families() = LogFamilySchema();
  *other.add_families() = DataFamilySchema("e");
  ASSERT_TRUE(server_->CreateTable(other).ok());
  ASSERT_TRUE(server_->DeleteTable(kSchemaTable).ok());
  Stop();
  Start();
  // Clinic has keys here: still encrypted, still readable.
  absl::StatusOr<ReadReply> read = Read("r1", "e", 100);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->found());
  // Other has none, but keys exist: nobody can tell, so nothing goes.
  ReadRequest req;
  req.mutable_group()->set_table("Other");
  req.mutable_group()->set_root("r1");
  req.set_row("r1");
  req.set_family("e");
  absl::StatusOr<ReadReply> refused =
      Await<ReadReply>([&](auto cb) { replica_->Read(req, std::move(cb)); });
  ASSERT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("key directory holds keys"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace megastore::replication
