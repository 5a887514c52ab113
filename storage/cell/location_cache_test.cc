#include "storage/cell/location_cache.h"

#include <map>

#include "gtest/gtest.h"

namespace megastore::storage::cell {
namespace {

TabletLocation Tablet(std::string table, std::string start, std::string end, std::string server) {
  return TabletLocation{std::move(table), std::move(start), std::move(end), "id-" + server,
                        std::move(server)};
}

TEST(MetadataKeyTest, ATablesTabletsSortByEndRowWithTheLastOneAfterAll) {
  const std::vector<std::string> ordered = {
      *MetadataKey("t", "b"), *MetadataKey("t", std::string("b\0", 2)),
      *MetadataKey("t", "m"), *MetadataKey("t", "\xff\xff"),
      *MetadataKey("t", ""),  *MetadataKey("t2", "a"),
      *MetadataKey("t2", "")};
  for (size_t i = 1; i < ordered.size(); ++i) EXPECT_LT(ordered[i - 1], ordered[i]) << i;
  for (const auto& [table, end] : std::vector<std::pair<std::string, std::string>>{
           {"t", "b"}, {"t", ""}, {"users", std::string("x\0y", 3)}}) {
    auto parsed = ParseMetadataKey(*MetadataKey(table, end));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed->first, table);
    EXPECT_EQ(parsed->second, end);
  }
  EXPECT_FALSE(MetadataKey("", "x").ok());
  EXPECT_FALSE(MetadataKey(std::string("a\0b", 3), "x").ok());
  for (const std::string& bad :
       {std::string("nokey"), std::string("t\0", 2), std::string("t\0\1x", 4),
        std::string("t\0\2x", 4), std::string("\0\0x", 3)})
    EXPECT_FALSE(ParseMetadataKey(bad).ok()) << bad.size();
}

// A METADATA scan from MetadataSearchKey finds the tablet holding the row:
// tablets hold [start, end), so a tablet ending at the row does not.
TEST(MetadataKeyTest, TheSearchKeyFindsTheTabletHoldingARow) {
  std::map<std::string, std::string> metadata;  // key -> tablet name
  metadata[*MetadataKey("t", "b")] = "[,b)";
  metadata[*MetadataKey("t", "m")] = "[b,m)";
  metadata[*MetadataKey("t", "")] = "[m,)";
  metadata[*MetadataKey("s", "")] = "s";
  metadata[*MetadataKey("u", "")] = "u";
  auto holder = [&](const std::string& row) {
    return metadata.lower_bound(MetadataSearchKey("t", row))->second;
  };
  EXPECT_EQ(holder(""), "[,b)");
  EXPECT_EQ(holder("a"), "[,b)");
  EXPECT_EQ(holder(std::string("a\xff\xff", 3)), "[,b)");
  EXPECT_EQ(holder("b"), "[b,m)");
  EXPECT_EQ(holder(std::string("b\0", 2)), "[b,m)");
  EXPECT_EQ(holder("l"), "[b,m)");
  EXPECT_EQ(holder("m"), "[m,)");
  EXPECT_EQ(holder("\xff\xff\xff"), "[m,)");
}

TEST(LocationCacheTest, LookupsHitTheCachedTabletHoldingTheRow) {
  LocationCache cache;
  EXPECT_FALSE(cache.Lookup("t", "a").has_value());
  cache.Insert(Tablet("t", "", "b", "ts1"));
  cache.Insert(Tablet("t", "b", "m", "ts2"));
  cache.Insert(Tablet("t", "m", "", "ts3"));
  cache.Insert(Tablet("t2", "", "", "ts9"));
  EXPECT_EQ(cache.Lookup("t", "")->server, "ts1");
  EXPECT_EQ(cache.Lookup("t", "az")->server, "ts1");
  EXPECT_EQ(cache.Lookup("t", "b")->server, "ts2");
  EXPECT_EQ(cache.Lookup("t", "zzz")->server, "ts3");
  EXPECT_EQ(cache.Lookup("t2", "b")->server, "ts9");
  EXPECT_FALSE(cache.Lookup("t3", "b").has_value());
  EXPECT_EQ(cache.size(), 4u);
}

TEST(LocationCacheTest, ASplitReplacesTheParentAndAMissIsAMiss) {
  LocationCache cache;
  cache.Insert(Tablet("t", "b", "m", "ts2"));
  EXPECT_FALSE(cache.Lookup("t", "a").has_value()) << "only [b,m) is known";
  EXPECT_FALSE(cache.Lookup("t", "m").has_value());
  // [b,m) split into [b,f) and [f,m), the second moved to ts4.
  cache.Insert(Tablet("t", "b", "f", "ts2"));
  cache.Insert(Tablet("t", "f", "m", "ts4"));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Lookup("t", "c")->server, "ts2");
  EXPECT_EQ(cache.Lookup("t", "g")->server, "ts4");
  // A merge of everything into one tablet replaces both.
  cache.Insert(Tablet("t", "", "", "ts5"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Lookup("t", "g")->server, "ts5");
}

TEST(LocationCacheTest, InvalidationForgetsOnlyTheTabletHoldingTheRow) {
  LocationCache cache;
  cache.Insert(Tablet("t", "", "m", "ts1"));
  cache.Insert(Tablet("t", "m", "", "ts2"));
  cache.Invalidate("t", "x");
  EXPECT_FALSE(cache.Lookup("t", "x").has_value());
  EXPECT_EQ(cache.Lookup("t", "a")->server, "ts1");
  cache.Invalidate("other", "a");
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace megastore::storage::cell
