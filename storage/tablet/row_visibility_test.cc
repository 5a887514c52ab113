#include "storage/tablet/row_visibility.h"

#include <deque>

#include "gtest/gtest.h"
#include "storage/model/data_model.h"

namespace megastore::storage {
namespace {

using key_format::ParsedKey;
using Verdict = RowVisibility::Verdict;

class RowVisibilityTest : public ::testing::Test {
 protected:
  RowVisibilityTest() {
    TableSchema s;
    auto* f = s.add_families();
    f->set_name("f");
    f->mutable_gc_rule()->set_max_versions(1);
    schema_ = *CompiledSchema::Compile(s);
  }

  Verdict Add(RowVisibility& v, const std::string& key, uint64_t seq) {
    keys_.push_back(key);
    ParsedKey p;
    EXPECT_TRUE(key_format::ParseKey(keys_.back(), &p));
    return v.Add(p, seq);
  }
  std::string Cell(const std::string& family, int64_t ts) {
    std::string k;
    key_format::AppendCellKey(&k, "r", family, "q", ts);
    return k;
  }

  std::shared_ptr<const CompiledSchema> schema_;
  std::deque<std::string> keys_;
};

TEST_F(RowVisibilityTest, TombstoneMasksOnlyEarlierWritesAndOnlyFromItsTime) {
  RowVisibility at_latest(schema_.get(), kMaxTimestamp, 0);
  at_latest.StartRow();
  EXPECT_EQ(Add(at_latest, key_format::RowTombstoneKey("r", 100), 5), Verdict::kGarbage);
  EXPECT_EQ(Add(at_latest, Cell("f", 50), 9), Verdict::kVisible);  // written after
  EXPECT_EQ(Add(at_latest, Cell("f", 40), 3), Verdict::kGarbage);  // masked

  RowVisibility below(schema_.get(), 99, 0);
  below.StartRow();
  Add(below, key_format::RowTombstoneKey("r", 100), 5);
  // Rank 0 among non-masked cells is the ts-50 cell; the masked one does not
  // count against max_versions and is readable below the delete.
  EXPECT_EQ(Add(below, Cell("f", 50), 9), Verdict::kVisible);
  EXPECT_EQ(Add(below, Cell("f", 40), 3), Verdict::kVisible);
}

TEST_F(RowVisibilityTest, VersionsBeyondTheLimitAreGarbage) {
  RowVisibility v(schema_.get(), kMaxTimestamp, 0);
  v.StartRow();
  EXPECT_EQ(Add(v, Cell("f", 3), 1), Verdict::kVisible);
  EXPECT_EQ(Add(v, Cell("f", 2), 2), Verdict::kGarbage);
}

TEST_F(RowVisibilityTest, CellsOfUnknownFamiliesAreGarbage) {
  RowVisibility v(schema_.get(), kMaxTimestamp, 0);
  v.StartRow();
  EXPECT_EQ(Add(v, Cell("gone", 3), 1), Verdict::kGarbage);
}

TEST_F(RowVisibilityTest, CellsNewerThanTheReadAreHiddenNotGarbage) {
  RowVisibility v(schema_.get(), 10, 0);
  v.StartRow();
  EXPECT_EQ(Add(v, Cell("f", 30), 1), Verdict::kHidden);
}

}  // namespace
}  // namespace megastore::storage
