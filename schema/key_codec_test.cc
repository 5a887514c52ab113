#include "schema/key_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "base/random.h"
#include "gtest/gtest.h"

namespace megastore::schema {
namespace {

constexpr FieldType kKeyTypes[] = {INT32, INT64, UINT64, BOOL, DOUBLE, STRING, BYTES};

// Values that stress each type's encoding: extremes, signs, zeros, NaN,
// infinities, empty strings, embedded 0x00 and 0xFF, prefixes of each other.
KeyValue RandomValue(Random& rng, FieldType type) {
  switch (type) {
    case INT32: {
      static constexpr int64_t kEdges[] = {0, 1, -1, std::numeric_limits<int32_t>::min(),
                                           std::numeric_limits<int32_t>::max()};
      if (rng.OneIn(4)) return kEdges[rng.Uniform(5)];
      return static_cast<int64_t>(static_cast<int32_t>(rng.Next()));
    }
    case INT64: {
      static constexpr int64_t kEdges[] = {0, 1, -1, std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()};
      if (rng.OneIn(4)) return kEdges[rng.Uniform(5)];
      return static_cast<int64_t>(rng.Next() >> rng.Uniform(64));
    }
    case UINT64:
      if (rng.OneIn(4)) return rng.OneIn(2) ? uint64_t{0} : std::numeric_limits<uint64_t>::max();
      return rng.Next() >> rng.Uniform(64);
    case BOOL:
      return rng.OneIn(2);
    case DOUBLE: {
      static const double kEdges[] = {0.0,
                                      -0.0,
                                      1.0,
                                      -1.0,
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::denorm_min(),
                                      -std::numeric_limits<double>::denorm_min(),
                                      std::numeric_limits<double>::max(),
                                      std::numeric_limits<double>::lowest()};
      if (rng.OneIn(3)) return kEdges[rng.Uniform(std::size(kEdges))];
      const uint64_t bits = rng.Next();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
    default: {
      // Short strings over a tiny alphabet, so prefixes and equal values are common.
      static constexpr char kAlphabet[] = {'\0', '\x01', 'a', 'b', '\xff'};
      std::string s;
      const size_t n = rng.Uniform(5);
      for (size_t i = 0; i < n; ++i) s.push_back(kAlphabet[rng.Uniform(5)]);
      return s;
    }
  }
}

// -1, 0, 1 by the declared order of the type (NaN last, -0.0 == +0.0).
int Compare(const KeyValue& a, const KeyValue& b) {
  if (const double* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    if (std::isnan(*x) || std::isnan(y)) return std::isnan(*x) - std::isnan(y);
    return (*x > y) - (*x < y);
  }
  if (const std::string* x = std::get_if<std::string>(&a)) {
    // Bytes compare unsigned (std::string::compare may use signed char).
    const std::string& y = std::get<std::string>(b);
    const size_t n = std::min(x->size(), y.size());
    const int m = std::memcmp(x->data(), y.data(), n);
    if (m != 0) return m < 0 ? -1 : 1;
    return (x->size() > y.size()) - (x->size() < y.size());
  }
  return (a > b) - (a < b);
}

bool SameValue(const KeyValue& a, const KeyValue& b) {
  if (const double* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return std::isnan(*x) ? std::isnan(y) : *x == y;
  }
  return a == b;
}

TEST(KeyCodecTest, EncodedOrderIsDeclaredOrderAndDecodeInvertsEncode) {
  Random rng(20261130);
  for (FieldType type : kKeyTypes) {
    for (bool descending : {false, true}) {
      const KeyColumn column{type, descending, false};
      for (int i = 0; i < 3000; ++i) {
        const KeyValue a = RandomValue(rng, type), b = RandomValue(rng, type);
        std::string ea, eb;
        ASSERT_TRUE(AppendKeyPart(&ea, column, a).ok());
        ASSERT_TRUE(AppendKeyPart(&eb, column, b).ok());
        const int want = descending ? -Compare(a, b) : Compare(a, b);
        const int got = (ea > eb) - (ea < eb);
        ASSERT_EQ(got, want) << FieldType_Name(type) << (descending ? " DESC" : " ASC") << " case "
                             << i;
        std::string_view in = ea;
        auto back = ConsumeKeyPart(&in, column);
        ASSERT_TRUE(back.ok()) << back.status();
        EXPECT_TRUE(in.empty());
        EXPECT_TRUE(SameValue(*back, a)) << FieldType_Name(type) << " case " << i;
      }
    }
  }
}

TEST(KeyCodecTest, CompositeKeysOrderLexicographicallyAndShareTheirPrefixes) {
  Random rng(7);
  const std::vector<KeyColumn> columns = {
      {STRING, false, false}, {INT64, true, false}, {BYTES, false, false}};
  for (int i = 0; i < 3000; ++i) {
    std::vector<KeyValue> a, b;
    for (const KeyColumn& c : columns) {
      a.push_back(RandomValue(rng, c.type));
      b.push_back(RandomValue(rng, c.type));
    }
    if (rng.OneIn(2)) b[0] = a[0];  // often share the first parts
    if (rng.OneIn(2)) b[1] = a[1];
    int want = 0;
    for (size_t k = 0; k < columns.size() && want == 0; ++k) {
      want = columns[k].descending ? -Compare(a[k], b[k]) : Compare(a[k], b[k]);
    }
    auto ea = EncodeKey(columns, a), eb = EncodeKey(columns, b);
    ASSERT_TRUE(ea.ok() && eb.ok());
    ASSERT_EQ((*ea > *eb) - (*ea < *eb), want) << "case " << i;
    auto prefix = EncodeKey(columns, {a[0], a[1]});
    ASSERT_TRUE(prefix.ok());
    EXPECT_EQ(ea->compare(0, prefix->size(), *prefix), 0);
    auto back = DecodeKey(columns, *ea);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, a);
  }
}

TEST(KeyCodecTest, ScatterPrefixesTwoHashBytesAndStillRoundTrips) {
  const KeyColumn scattered{INT64, false, true};
  std::set<std::string> prefixes;
  for (int64_t v = 0; v < 256; ++v) {
    std::string e;
    ASSERT_TRUE(AppendKeyPart(&e, scattered, v).ok());
    ASSERT_EQ(e.size(), 10u);
    prefixes.insert(e.substr(0, 2));
    std::string_view in = e;
    auto back = ConsumeKeyPart(&in, scattered);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(std::get<int64_t>(*back), v);
  }
  // Consecutive ids land all over the key space.
  EXPECT_GT(prefixes.size(), 200u);
  // A damaged prefix is caught.
  std::string e;
  ASSERT_TRUE(AppendKeyPart(&e, scattered, int64_t{42}).ok());
  e[0] ^= 1;
  std::string_view in = e;
  EXPECT_TRUE(absl::IsDataLoss(ConsumeKeyPart(&in, scattered).status()));
}

TEST(KeyCodecTest, WrongKindsAndRangesAndDamageAreErrorsNotCrashes) {
  std::string out;
  EXPECT_TRUE(
      absl::IsInvalidArgument(AppendKeyPart(&out, {INT64, false, false}, std::string("x"))));
  EXPECT_TRUE(
      absl::IsInvalidArgument(AppendKeyPart(&out, {INT32, false, false}, int64_t{1} << 40)));
  EXPECT_TRUE(absl::IsInvalidArgument(AppendKeyPart(&out, {MESSAGE, false, false}, int64_t{1})));
  const std::vector<KeyColumn> columns = {{STRING, false, false}, {BOOL, false, false}};
  EXPECT_TRUE(absl::IsDataLoss(DecodeKey(columns, "abc").status()));  // unterminated string
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeKey(columns, std::string("a\0\x01\x07", 4)).status()));  // bool byte 7
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeKey(columns, std::string("a\0\x01\x01z", 5)).status()));  // trailing byte
  Random rng(3);
  for (int i = 0; i < 2000; ++i) (void)DecodeKey(columns, rng.Bytes(rng.Uniform(12)));
}

}  // namespace
}  // namespace megastore::schema
