// A backup's data files and catalog: what is written reads back, and every
// kind of damage is refused naming the file.
#include "backup/backup_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "backup/backup_job.h"
#include "backup/backup_verify.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/strings.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace megastore::backup {
namespace {

FileHeader LogHeader() {
  FileHeader h;
  h.set_format(kFormat);
  h.mutable_group()->set_table("App");
  h.mutable_group()->set_root(std::string("r\0\x80", 3));
  h.set_schema("App");
  h.set_kind(LOG);
  h.set_from(5);
  h.set_to(7);
  h.set_timestamp(1234);
  h.set_datacenter("A");
  return h;
}

Chunk Entries(uint64_t from, uint64_t to) {
  Chunk c;
  for (uint64_t p = from; p <= to; ++p) {
    replication::LogEntry e;
    e.set_id(StrCat("w", p));
    e.set_timestamp(static_cast<int64_t>(100 * p));
    LogItem* item = c.add_entries();
    item->set_position(p);
    item->set_value(e.SerializeAsString());
  }
  return c;
}

// Writes a log file of positions 5..7 in two chunks; its catalog entry.
FileEntry WriteLogFile(const std::string& dir) {
  const FileHeader h = LogHeader();
  auto w = FileWriter::Create(dir + "/" + DataFileName(h), h);
  EXPECT_TRUE(w.ok()) << w.status();
  Record r;
  *r.mutable_chunk() = Entries(5, 6);
  EXPECT_TRUE((*w)->Add(r).ok());
  *r.mutable_chunk() = Entries(7, 7);
  EXPECT_TRUE((*w)->Add(r).ok());
  FileFooter footer;
  footer.set_chunks(2);
  footer.set_entries(3);
  absl::StatusOr<FileEntry> e = (*w)->Finish(footer);
  EXPECT_TRUE(e.ok()) << e.status();
  e->set_path(DataFileName(h));
  return *e;
}

// A full backup of the group at position 4, the base of the log file.
FileEntry WriteFullFile(const std::string& dir) {
  FileHeader h = LogHeader();
  h.set_kind(FULL);
  h.set_from(4);
  h.set_to(4);
  auto w = FileWriter::Create(dir + "/" + DataFileName(h), h);
  EXPECT_TRUE(w.ok()) << w.status();
  Record r;
  replication::SnapshotRow* row = r.mutable_chunk()->add_rows();
  row->set_key(h.group().root() + "/child");
  row->add_cells()->set_value("v");
  EXPECT_TRUE((*w)->Add(r).ok());
  FileFooter footer;
  footer.set_chunks(1);
  footer.set_rows(1);
  absl::StatusOr<FileEntry> e = (*w)->Finish(footer);
  EXPECT_TRUE(e.ok()) << e.status();
  e->set_path(DataFileName(h));
  return *e;
}

std::string Slurp(const std::string& path) { return *ReadFileToString(path); }
void Spill(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

absl::Status ReadAll(const std::string& dir, const FileEntry& e, uint64_t* entries = nullptr) {
  return ReadChunks(dir, e, nullptr, [&](Chunk& c) {
    if (entries != nullptr) *entries += static_cast<uint64_t>(c.entries_size());
    return absl::OkStatus();
  });
}

TEST(BackupFileTest, WhatIsWrittenReadsBack) {
  TestDir dir;
  const FileEntry e = WriteLogFile(dir.path());
  EXPECT_EQ(e.path(), DataFileName(LogHeader()));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + e.path() + ".tmp"));
  uint64_t entries = 0;
  ASSERT_TRUE(ReadAll(dir.path(), e, &entries).ok());
  EXPECT_EQ(entries, 3u);
  EXPECT_EQ(e.bytes(), std::filesystem::file_size(dir.path() + "/" + e.path()));

  Manifest m;
  m.set_format(kFormat);
  *m.add_files() = e;
  *m.add_files() = WriteFullFile(dir.path());
  ASSERT_TRUE(SaveManifest(dir.path(), m).ok());
  absl::StatusOr<Manifest> back = LoadManifest(dir.path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), m.SerializeAsString());
  absl::StatusOr<VerifyReport> v = VerifyBackup(VerifyOptions{.dir = dir.path()});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->problems.empty()) << v->problems[0];
  EXPECT_EQ(v->files, 2u);
  EXPECT_EQ(v->chunks, 3u);
  EXPECT_TRUE(v->strays.empty());
}

TEST(BackupFileTest, AnEmptyDirectoryHasAnEmptyCatalog) {
  TestDir dir;
  absl::StatusOr<Manifest> m = LoadManifest(dir.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->files_size(), 0);
  EXPECT_EQ(m->format(), kFormat);
}

TEST(BackupFileTest, EveryKindOfDamageIsRefusedNamingTheFile) {
  TestDir dir;
  const FileEntry e = WriteLogFile(dir.path());
  const std::string path = dir.path() + "/" + e.path();
  const std::string good = Slurp(path);
  auto expect_refused = [&](const std::string& bytes, const std::string& why) {
    Spill(path, bytes);
    absl::Status s = ReadAll(dir.path(), e);
    EXPECT_TRUE(absl::IsDataLoss(s)) << why << ": " << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << why << ": " << s;
    Spill(path, good);
  };
  // Each byte of the file, flipped, is caught (a record's checksum, the
  // frame, or the catalog's size and CRC).
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    expect_refused(bad, StrCat("byte ", i, " flipped"));
  }
  for (size_t cut : {size_t{0}, size_t{3}, size_t{12}, good.size() / 2, good.size() - 1})
    expect_refused(good.substr(0, cut), StrCat("cut at ", cut));
  expect_refused(good + std::string(8, '\0'), "bytes after the footer");
  std::string huge = good.substr(0, 5);
  PutFixed32(&huge, 0);
  PutFixed32(&huge, 0xfffffff0u);
  expect_refused(huge, "a record claiming 4 GiB");
  // A file moved under another group's or range's catalog entry.
  FileEntry other = e;
  other.mutable_header()->set_timestamp(99);
  absl::Status s = ReadAll(dir.path(), other);
  EXPECT_NE(s.message().find("does not match the catalog"), std::string::npos) << s;
  // A catalog pointing outside the directory (or anywhere but where the
  // file's header puts it) is refused before anything is opened.
  for (const char* forged : {"../../etc/passwd", "/etc/passwd", "groups/x/../../BACKUP"}) {
    FileEntry outside = e;
    outside.set_path(forged);
    s = ReadAll(dir.path(), outside);
    EXPECT_TRUE(absl::IsDataLoss(s)) << forged << ": " << s;
    EXPECT_NE(s.message().find("belongs"), std::string::npos) << s;
  }
  // A symlink or a FIFO where the file belongs is not followed or waited on.
  const std::string real = dir.path() + "/real.msb";
  std::filesystem::rename(path, real);
  std::filesystem::create_symlink(real, path);
  s = ReadAll(dir.path(), e);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s;
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  s = ReadAll(dir.path(), e);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s;
  std::filesystem::remove(path);
  std::filesystem::rename(real, path);
  // A file the catalog names that is not there.
  std::filesystem::remove(path);
  s = ReadAll(dir.path(), e);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
}

TEST(BackupFileTest, VerifyFindsGapsStraysAndDamage) {
  TestDir dir;
  Manifest m;
  m.set_format(kFormat);
  *m.add_files() = WriteLogFile(dir.path());  // positions 5..7, with no full backup before
  ASSERT_TRUE(SaveManifest(dir.path(), m).ok());
  Spill(dir.path() + "/" + GroupDirName(LogHeader().group()) + "/full-99.msb", "stray");
  absl::StatusOr<VerifyReport> v = VerifyBackup(VerifyOptions{.dir = dir.path()});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_NE(v->problems[0].find("no full backup of the group before them"), std::string::npos)
      << v->problems[0];
  ASSERT_EQ(v->strays.size(), 1u);
  EXPECT_NE(v->strays[0].find("full-99.msb"), std::string::npos);

  // A damaged catalog is refused as a whole.
  const std::string catalog = dir.path() + "/" + kManifestName;
  std::string bytes = Slurp(catalog);
  bytes[bytes.size() - 1] ^= 1;
  Spill(catalog, bytes);
  absl::StatusOr<VerifyReport> damaged = VerifyBackup(VerifyOptions{.dir = dir.path()});
  EXPECT_TRUE(absl::IsDataLoss(damaged.status())) << damaged.status();
  EXPECT_NE(damaged.status().message().find(catalog), std::string::npos) << damaged.status();
}

// A file of `kind` for positions [from, to] whose last commit was at `ts`.
FileEntry WriteFile(const std::string& dir, FileKind kind, uint64_t from, uint64_t to, int64_t ts) {
  FileHeader h = LogHeader();
  h.set_kind(kind);
  h.set_from(from);
  h.set_to(to);
  h.set_timestamp(ts);
  auto w = FileWriter::Create(dir + "/" + DataFileName(h), h);
  EXPECT_TRUE(w.ok()) << w.status();
  Record r;
  FileFooter footer;
  footer.set_chunks(1);
  if (kind == FULL) {
    replication::SnapshotRow* row = r.mutable_chunk()->add_rows();
    row->set_key(h.group().root());
    row->add_cells()->set_value("v");
    footer.set_rows(1);
  } else {
    *r.mutable_chunk() = Entries(from, to);
    footer.set_entries(to - from + 1);
  }
  EXPECT_TRUE((*w)->Add(r).ok());
  absl::StatusOr<FileEntry> e = (*w)->Finish(footer);
  EXPECT_TRUE(e.ok()) << e.status();
  e->set_path(DataFileName(h));
  return *e;
}

TEST(BackupFileTest, PruneKeepsWhatRestoresInsideTheWindowNeed) {
  TestDir dir;
  Manifest m;
  m.set_format(kFormat);
  *m.add_files() = WriteFile(dir.path(), FULL, 4, 4, 1000);
  *m.add_files() = WriteFile(dir.path(), LOG, 5, 7, 1300);
  *m.add_files() = WriteFile(dir.path(), FULL, 7, 7, 2000);
  *m.add_files() = WriteFile(dir.path(), LOG, 8, 9, 2500);
  Job* finished = m.add_jobs();
  finished->set_id("old");
  finished->set_finished_micros(900);
  Job* unfinished = m.add_jobs();
  unfinished->set_id("unfinished");
  ASSERT_TRUE(SaveManifest(dir.path(), m).ok());
  auto exists = [&](const std::string& name) {
    return std::filesystem::exists(dir.path() + "/" + GroupDirName(LogHeader().group()) + "/" +
                                   name);
  };
  // Restores to 1500 need the full backup at 4 and the log after it.
  absl::StatusOr<PruneReport> r = PruneBackup(dir.path(), 1500, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 0u);
  EXPECT_EQ(r->kept, 4u);
  EXPECT_EQ(r->jobs, 1u);
  // Restores to 2100 or later start from the full backup at 7: what came
  // before it goes — first only said (a dry run), then done.
  r = PruneBackup(dir.path(), 2100, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 2u);
  EXPECT_TRUE(exists("full-4.msb"));
  r = PruneBackup(dir.path(), 2100, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 2u);
  EXPECT_EQ(r->kept, 2u);
  EXPECT_FALSE(exists("full-4.msb"));
  EXPECT_FALSE(exists("log-5-7.msb"));
  EXPECT_TRUE(exists("full-7.msb"));
  EXPECT_TRUE(exists("log-8-9.msb"));
  absl::StatusOr<Manifest> after = LoadManifest(dir.path());
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->jobs_size(), 1);
  EXPECT_EQ(after->jobs(0).id(), "unfinished");
  absl::StatusOr<VerifyReport> v = VerifyBackup(VerifyOptions{.dir = dir.path()});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->problems.empty()) << v->problems[0];
  EXPECT_TRUE(v->strays.empty());

  // A forged catalog cannot make prune delete anything outside.
  const std::string victim = dir.path() + "/victim";
  Spill(victim, "keep me");
  Manifest forged = *after;
  FileEntry* older = forged.add_files();  // an old full backup, to be pruned
  *older = after->files(0);
  older->mutable_header()->set_kind(FULL);
  older->mutable_header()->set_from(3);
  older->mutable_header()->set_to(3);
  older->mutable_header()->set_timestamp(10);
  older->set_path("../" + std::filesystem::path(dir.path()).filename().string() + "/victim");
  ASSERT_TRUE(SaveManifest(dir.path(), forged).ok());
  r = PruneBackup(dir.path(), 1LL << 60, false);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_TRUE(std::filesystem::exists(victim));
}

TEST(BackupFileTest, TheLogChainEndsWhereTheLogFilesDo) {
  auto entry = [](FileKind kind, uint64_t from, uint64_t to, bool chain_start = false) {
    FileEntry e;
    *e.mutable_header() = LogHeader();
    e.mutable_header()->set_kind(kind);
    e.mutable_header()->set_from(from);
    e.mutable_header()->set_to(to);
    e.mutable_header()->set_chain_start(chain_start);
    return e;
  };
  const replication::GroupRef g = LogHeader().group();
  Manifest m;
  EXPECT_EQ(ChainEnd(m, g), std::nullopt);
  *m.add_files() = entry(FULL, 10, 10, true);
  *m.add_files() = entry(LOG, 11, 20);
  EXPECT_EQ(ChainEnd(m, g), 20u);
  // A later full backup does not move it: 21..31 are not shipped yet.
  *m.add_files() = entry(FULL, 32, 32);
  EXPECT_EQ(ChainEnd(m, g), 20u);
  *m.add_files() = entry(LOG, 21, 40);
  EXPECT_EQ(ChainEnd(m, g), 40u);
  // A full backup taken because the log was cleaned restarts it.
  *m.add_files() = entry(FULL, 60, 60, true);
  EXPECT_EQ(ChainEnd(m, g), 60u);
  // After a prune: a log file that began before the oldest full backup kept
  // still continues the chain.
  Manifest pruned;
  *pruned.add_files() = entry(LOG, 31, 40);
  *pruned.add_files() = entry(FULL, 32, 32);
  *pruned.add_files() = entry(LOG, 41, 50);
  EXPECT_EQ(ChainEnd(pruned, g), 50u);
  // Another group's files do not count.
  replication::GroupRef other = g;
  other.set_root("other");
  EXPECT_EQ(ChainEnd(pruned, other), std::nullopt);
}

}  // namespace
}  // namespace megastore::backup
