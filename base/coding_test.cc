#include "base/coding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(CodingTest, VarintsRoundTripAtEveryLength) {
  std::vector<uint64_t> values = {
      0, 1, 127, 128, 16383, 16384, UINT32_MAX, uint64_t{1} << 56, UINT64_MAX};
  std::string buf;
  for (uint64_t v : values) PutVarint64(&buf, v);
  std::string_view in = buf;
  for (uint64_t v : values) {
    uint64_t got;
    ASSERT_TRUE(ConsumeVarint64(&in, &got));
    EXPECT_EQ(got, v);
  }
  EXPECT_TRUE(in.empty());
}

TEST(CodingTest, TruncatedOrOverlongVarintIsRejected) {
  std::string buf;
  PutVarint64(&buf, UINT64_MAX);
  std::string_view truncated(buf.data(), buf.size() - 1);
  uint64_t v;
  EXPECT_FALSE(ConsumeVarint64(&truncated, &v));
  std::string overlong(11, '\xff');
  std::string_view in = overlong;
  EXPECT_FALSE(ConsumeVarint64(&in, &v));
  std::string big;
  PutVarint64(&big, uint64_t{1} << 40);
  std::string_view in32 = big;
  uint32_t v32;
  EXPECT_FALSE(ConsumeVarint32(&in32, &v32));
}

TEST(CodingTest, LengthPrefixedRejectsShortInput) {
  std::string buf;
  PutLengthPrefixed(&buf, "hello");
  std::string_view in(buf.data(), buf.size() - 1);
  std::string_view s;
  EXPECT_FALSE(ConsumeLengthPrefixed(&in, &s));
  in = buf;
  ASSERT_TRUE(ConsumeLengthPrefixed(&in, &s));
  EXPECT_EQ(s, "hello");
}

template <typename T, typename Append>
void ExpectOrderPreserved(std::vector<T> values, Append append, SortOrder order) {
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    std::string a, b;
    append(&a, values[i], order);
    append(&b, values[i + 1], order);
    if (values[i] == values[i + 1]) {
      EXPECT_EQ(a, b);
    } else if (order == SortOrder::kAscending) {
      EXPECT_LT(a, b) << i;
    } else {
      EXPECT_GT(a, b) << i;
    }
  }
}

TEST(CodingTest, OrderedIntegersKeepOrderBothDirections) {
  std::vector<int64_t> ints = {INT64_MIN, INT64_MIN + 1, -1000,         -1,       0, 1,
                               255,       256,           INT64_MAX - 1, INT64_MAX};
  std::vector<uint64_t> uints = {0, 1, 255, 256, uint64_t{1} << 63, UINT64_MAX};
  for (SortOrder order : {SortOrder::kAscending, SortOrder::kDescending}) {
    ExpectOrderPreserved(ints, AppendOrderedInt64, order);
    ExpectOrderPreserved(uints, AppendOrderedUint64, order);
    for (int64_t v : ints) {
      std::string buf;
      AppendOrderedInt64(&buf, v, order);
      std::string_view in = buf;
      int64_t got;
      ASSERT_TRUE(ConsumeOrderedInt64(&in, &got, order));
      EXPECT_EQ(got, v);
    }
  }
}

TEST(CodingTest, OrderedDoublesFoldNegativeZeroAndSortNaNLast) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> values = {-inf, -1e300,
                                -1.5, -std::numeric_limits<double>::min(),
                                0.0,  std::numeric_limits<double>::denorm_min(),
                                1.5,  1e300,
                                inf};
  ExpectOrderPreserved(values, AppendOrderedDouble, SortOrder::kAscending);
  ExpectOrderPreserved(values, AppendOrderedDouble, SortOrder::kDescending);

  std::string neg_zero, zero, nan1, nan2, pos_inf;
  AppendOrderedDouble(&neg_zero, -0.0);
  AppendOrderedDouble(&zero, 0.0);
  EXPECT_EQ(neg_zero, zero);
  AppendOrderedDouble(&nan1, std::nan("1"));
  AppendOrderedDouble(&nan2, -std::nan("2"));
  AppendOrderedDouble(&pos_inf, inf);
  EXPECT_EQ(nan1, nan2);
  EXPECT_GT(nan1, pos_inf);

  for (double v : values) {
    std::string buf;
    AppendOrderedDouble(&buf, v, SortOrder::kDescending);
    std::string_view in = buf;
    double got;
    ASSERT_TRUE(ConsumeOrderedDouble(&in, &got, SortOrder::kDescending));
    EXPECT_EQ(got, v);
  }
}

TEST(CodingTest, OrderedBytesHandleZerosPrefixesAndEmpty) {
  std::vector<std::string> values = {"",
                                     std::string("\0", 1),
                                     std::string("\0\0", 2),
                                     std::string("\0\xff", 2),
                                     "\x01",
                                     "a",
                                     std::string("a\0", 2),
                                     std::string("a\0b", 3),
                                     "ab",
                                     "abc",
                                     "\xff",
                                     "\xff\xff"};
  for (SortOrder order : {SortOrder::kAscending, SortOrder::kDescending}) {
    ExpectOrderPreserved(values, AppendOrderedBytes, order);
    for (const std::string& v : values) {
      std::string buf;
      AppendOrderedBytes(&buf, v, order);
      buf += "trailing";
      std::string_view in = buf;
      std::string got;
      ASSERT_TRUE(ConsumeOrderedBytes(&in, &got, order));
      EXPECT_EQ(got, v);
      EXPECT_EQ(in, "trailing");
    }
  }
}

TEST(CodingTest, CompositeKeysSortLexicographically) {
  // (bytes, int64) pairs: the first component decides unless equal.
  Random rng(7);
  std::vector<std::pair<std::string, int64_t>> keys;
  for (int i = 0; i < 2000; ++i) {
    keys.emplace_back(rng.Bytes(rng.Uniform(4)), static_cast<int64_t>(rng.Next() % 7) - 3);
  }
  auto encode = [](const std::pair<std::string, int64_t>& k) {
    std::string s;
    AppendOrderedBytes(&s, k.first);
    AppendOrderedInt64(&s, k.second, SortOrder::kDescending);
    return s;
  };
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    const auto& a = keys[i];
    const auto& b = keys[i + 1];
    const bool less = a.first != b.first ? a.first < b.first : a.second > b.second;
    const bool equal = a == b;
    if (equal) {
      EXPECT_EQ(encode(a), encode(b));
    } else {
      EXPECT_EQ(encode(a) < encode(b), less);
    }
  }
}

TEST(CodingTest, MalformedOrderedBytesAreRejected) {
  std::string_view in("abc", 3);  // no terminator
  std::string out;
  EXPECT_FALSE(ConsumeOrderedBytes(&in, &out));
  std::string bad("a\0\x05", 3);  // 0x00 followed by neither 0x01 nor 0xff
  in = bad;
  EXPECT_FALSE(ConsumeOrderedBytes(&in, &out));
}

TEST(CodingTest, PrefixSuccessor) {
  EXPECT_EQ(PrefixSuccessor("abc"), "abd");
  EXPECT_EQ(PrefixSuccessor(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(PrefixSuccessor("\xff\xff"), "");
  EXPECT_EQ(PrefixSuccessor(""), "");
}

TEST(CodingTest, EscapeBytesIsReadable) {
  EXPECT_EQ(EscapeBytes(std::string("a\0\xff", 3)), "a\\x00\\xff");
  EXPECT_EQ(EscapeBytes("abcdef", 3), "abc...");
  EXPECT_EQ(HexEncode("\x01\xab"), "01ab");
}

}  // namespace
}  // namespace megastore
