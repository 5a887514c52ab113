#include "base/checksum.h"

#include <string>

#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(Crc32cTest, MatchesKnownVectors) {
  // From RFC 3720 (iSCSI) B.4.
  EXPECT_EQ(crc32c::Value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c::Value(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c::Value(ascending), 0x46dd794eu);
  EXPECT_EQ(crc32c::Value("123456789"), 0xe3069283u);
}

TEST(Crc32cTest, ExtendEqualsWholeValue) {
  const std::string s = "hello, megastore! a string longer than eight bytes";
  for (size_t split = 0; split <= s.size(); ++split) {
    const uint32_t first = crc32c::Value(s.substr(0, split));
    EXPECT_EQ(crc32c::Extend(first, s.data() + split, s.size() - split), crc32c::Value(s));
  }
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  const uint32_t crc = crc32c::Value("foo");
  EXPECT_NE(crc32c::Mask(crc), crc);
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(crc)), crc);
}

}  // namespace
}  // namespace megastore
