#include "storage/tablet/key_format.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace megastore::storage::key_format {
namespace {

TEST(KeyFormatTest, EntriesOfARowSortTombstonesFirstAndNewestCellsFirst) {
  std::vector<std::string> keys;
  std::string cell_new, cell_old, other_column, other_family;
  AppendCellKey(&cell_new, "row", "f", "q", 20);
  AppendCellKey(&cell_old, "row", "f", "q", 10);
  AppendCellKey(&other_column, "row", "f", "r", 30);
  AppendCellKey(&other_family, "row", "g", "", 30);
  const std::vector<std::string> in_order = {
      RowTombstoneKey("row", 9),
      RowTombstoneKey("row", 5),
      FamilyTombstoneKey("row", "f", 3),
      ColumnTombstoneKey("row", "f", "q", 1, 0, 0),
      cell_new,
      cell_old,
      other_column,
      other_family,
  };
  std::vector<std::string> sorted = in_order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, in_order);
}

TEST(KeyFormatTest, RowsSortBytewiseEvenWithZeroBytesAndPrefixes) {
  std::vector<std::string> rows = {"a", std::string("a\0", 2), "a\x01", "ab", "\xff"};
  std::vector<std::string> keys;
  for (const auto& r : rows) {
    std::string k;
    AppendCellKey(&k, r, "f", "q", 1);
    keys.push_back(k);
  }
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
}

TEST(KeyFormatTest, ParseRecoversEveryPart) {
  std::string k;
  const std::string row("r\0w", 3), qual("\0", 1);
  AppendCellKey(&k, row, "fam", qual, 12345);
  ParsedKey p;
  ASSERT_TRUE(ParseKey(k, &p));
  EXPECT_EQ(p.kind, EntryKind::kCell);
  EXPECT_EQ(p.family, "fam");
  EXPECT_EQ(p.timestamp, 12345);
  std::string decoded_row, decoded_qual;
  ASSERT_TRUE(DecodeRow(p.row_prefix, &decoded_row));
  ASSERT_TRUE(DecodeQualifier(p, &decoded_qual));
  EXPECT_EQ(decoded_row, row);
  EXPECT_EQ(decoded_qual, qual);

  ASSERT_TRUE(ParseKey(ColumnTombstoneKey("r", "f", "q", 7, 2, 9), &p));
  EXPECT_EQ(p.kind, EntryKind::kColumnTombstone);
  EXPECT_EQ(p.timestamp, 7);
  EXPECT_EQ(p.range_start, 2);
  EXPECT_EQ(p.range_end, 9);
  ASSERT_TRUE(ParseKey(FamilyTombstoneKey("r", "f", 8), &p));
  EXPECT_EQ(p.kind, EntryKind::kFamilyTombstone);
  ASSERT_TRUE(ParseKey(RowTombstoneKey("r", 8), &p));
  EXPECT_EQ(p.kind, EntryKind::kRowTombstone);
}

TEST(KeyFormatTest, MalformedKeysAreRejected) {
  ParsedKey p;
  EXPECT_FALSE(ParseKey("", &p));
  EXPECT_FALSE(ParseKey("no-terminator", &p));
  std::string k;
  AppendCellKey(&k, "r", "f", "q", 1);
  EXPECT_FALSE(ParseKey(k.substr(0, k.size() - 1), &p));
  EXPECT_FALSE(ParseKey(k + "x", &p));
  uint64_t seq;
  std::string_view v;
  EXPECT_FALSE(ParseValue("\xff", &seq, &v));
  std::string value;
  AppendValue(&value, 300, "abc");
  ASSERT_TRUE(ParseValue(value, &seq, &v));
  EXPECT_EQ(seq, 300u);
  EXPECT_EQ(v, "abc");
}

}  // namespace
}  // namespace megastore::storage::key_format
