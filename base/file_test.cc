#include "base/file.h"

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

}  // namespace
}  // namespace megastore
