#include "base/crypto.h"

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"

namespace megastore::crypto {
namespace {

std::string Hex(std::string_view hex) {
  return absl::HexStringToBytes(absl::string_view(hex.data(), hex.size()));
}

TEST(CryptoTest, HkdfMatchesRfc5869) {
  // RFC 5869, test case 1.
  absl::StatusOr<std::string> okm = HkdfSha256(
      std::string(22, '\x0b'), Hex("000102030405060708090a0b0c"), Hex("f0f1f2f3f4f5f6f7f8f9"), 42);
  ASSERT_TRUE(okm.ok()) << okm.status();
  EXPECT_EQ(absl::BytesToHexString(*okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34"
            "007208d5b887185865");
  EXPECT_FALSE(HkdfSha256("k", "", "", 0).ok());
  EXPECT_FALSE(HkdfSha256("k", "", "", 255 * 32 + 1).ok());
}

TEST(CryptoTest, HmacMatchesRfc4231) {
  EXPECT_EQ(absl::BytesToHexString(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(CryptoTest, AesGcmMatchesTheStandardVector) {
  // The GCM specification's test case 14: AES-256, zero key, IV and block.
  std::string out;
  ASSERT_TRUE(
      SealAesGcm(std::string(32, '\0'), std::string(12, '\0'), std::string(16, '\0'), "", &out)
          .ok());
  EXPECT_EQ(absl::BytesToHexString(out),
            "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919");
  absl::StatusOr<std::string> back =
      OpenAesGcm(std::string(32, '\0'), std::string(12, '\0'), out, "");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, std::string(16, '\0'));
}

TEST(CryptoTest, AnyChangeFailsToOpen) {
  const std::string key = RandomBytes(kKeyBytes), nonce = RandomBytes(kNonceBytes);
  std::string sealed;
  ASSERT_TRUE(SealAesGcm(key, nonce, "attack at dawn", "row 1", &sealed).ok());
  EXPECT_EQ(sealed.size(), 14 + kTagBytes);
  EXPECT_EQ(*OpenAesGcm(key, nonce, sealed, "row 1"), "attack at dawn");
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string flipped = sealed;
    flipped[i] ^= 0x01;
    EXPECT_TRUE(absl::IsDataLoss(OpenAesGcm(key, nonce, flipped, "row 1").status()))
        << "byte " << i;
  }
  EXPECT_TRUE(absl::IsDataLoss(OpenAesGcm(key, nonce, sealed, "row 2").status()));
  EXPECT_TRUE(
      absl::IsDataLoss(OpenAesGcm(RandomBytes(kKeyBytes), nonce, sealed, "row 1").status()));
  EXPECT_TRUE(absl::IsDataLoss(OpenAesGcm(key, nonce, sealed.substr(0, 5), "row 1").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(OpenAesGcm("short", nonce, sealed, "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SealAesGcm(key, "short", "x", "", &sealed)));
}

TEST(CryptoTest, RandomBytesDiffer) {
  EXPECT_EQ(RandomBytes(32).size(), 32u);
  EXPECT_NE(RandomBytes(32), RandomBytes(32));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
}

}  // namespace
}  // namespace megastore::crypto
