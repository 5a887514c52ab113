#include "base/file.h"

#include <sys/stat.h>

#include <filesystem>

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(FileTest, AnAtomicWriteReplacesTheWholeFile) {
  TestDir dir;
  const std::string path = dir.path() + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "first version").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "2nd").ok());
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "2nd");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(FileTest, ErrorsNameThePath) {
  TestDir dir;
  absl::StatusOr<std::string> missing = ReadFileToString(dir.path() + "/nope");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(missing.status().message().find("/nope"), absl::string_view::npos);
  absl::Status bad = WriteFileAtomically(dir.path() + "/no/such/dir/f", "x");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/no/such/dir/f.tmp"), absl::string_view::npos);
}

TEST(FileTest, ChecksummedFilesRefuseEveryKindOfDamageNamingTheFile) {
  TestDir dir;
  const std::string path = dir.path() + "/state";
  ASSERT_TRUE(WriteChecksummedFile(path, "tables: t1, t2").ok());
  absl::StatusOr<std::string> read = ReadChecksummedFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "tables: t1, t2");
  ASSERT_TRUE(WriteChecksummedFile(path, "").ok());
  EXPECT_EQ(*ReadChecksummedFile(path), "") << "an empty payload is a valid state";
  ASSERT_TRUE(WriteChecksummedFile(path, "tables: t1, t2").ok());
  const std::string good = *ReadFileToString(path);
  // Every flipped bit, every truncation, and an emptied file.
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
      absl::StatusOr<std::string> r = ReadChecksummedFile(path);
      EXPECT_FALSE(r.ok()) << "byte " << i << " bit " << bit;
      EXPECT_NE(r.status().message().find(path), absl::string_view::npos) << r.status();
    }
  }
  for (size_t n = 0; n < good.size(); ++n) {
    ASSERT_TRUE(WriteFileAtomically(path, good.substr(0, n)).ok());
    absl::StatusOr<std::string> r = ReadChecksummedFile(path);
    EXPECT_FALSE(r.ok()) << "truncated to " << n;
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << n << ": " << r.status();
  }
  ASSERT_TRUE(WriteFileAtomically(path, "legacy bytes").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadChecksummedFile(path).status()));
  EXPECT_TRUE(absl::IsNotFound(ReadChecksummedFile(dir.path() + "/none").status()));
}

TEST(FileTest, AnEndlessFileIsRefusedNotRead) {
  absl::StatusOr<std::string> r = ReadFileToString("/dev/zero", 1 << 20);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
}

TEST(FileTest, PrivateDirectoriesAreOwnerOnly) {
  TestDir dir;
  const std::string nested = dir.path() + "/a/b/c";
  ASSERT_TRUE(CreatePrivateDirectories(nested).ok());
  for (const std::string& d : {dir.path() + "/a", dir.path() + "/a/b", nested}) {
    struct stat st;
    ASSERT_EQ(::stat(d.c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  EXPECT_TRUE(CreatePrivateDirectories(nested).ok()) << "existing: fine";
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/file", "x").ok());
  EXPECT_FALSE(CreatePrivateDirectories(dir.path() + "/file").ok());
  EXPECT_FALSE(CreatePrivateDirectories(dir.path() + "/file/sub").ok());
}

}  // namespace
}  // namespace megastore
