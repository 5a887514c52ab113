#include "base/token_mac.h"

#include <sys/stat.h>

#include "base/file.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(TokenMacTest, SealedTokensOpenAndAlteredOnesDoNot) {
  const TokenMac mac = TokenMac::Random();
  const std::string sealed = mac.Seal("position=12");
  absl::StatusOr<std::string> opened = mac.Open(sealed);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, "position=12");
  // Every single-bit change anywhere is caught.
  for (size_t i = 0; i < sealed.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string altered = sealed;
      altered[i] = static_cast<char>(altered[i] ^ (1 << bit));
      EXPECT_FALSE(mac.Open(altered).ok()) << "byte " << i << " bit " << bit;
    }
  }
  EXPECT_FALSE(mac.Open("").ok());
  EXPECT_FALSE(mac.Open("short").ok());
  EXPECT_FALSE(TokenMac::Random().Open(sealed).ok()) << "another secret";
}

TEST(TokenMacTest, TheKeyRotatesEveryPeriodAndOldTokensExpire) {
  int64_t now = 600 * 1000;  // the start of a key period
  TokenMac mac = TokenMac::Random();
  mac.set_key_period(absl::Minutes(10));
  mac.set_clock([&] { return now; });
  const std::string sealed = mac.Seal("position=7");
  ASSERT_EQ(sealed.size(), 10 + TokenMac::kTrailerBytes);
  now += 599;  // the same period, or the next: still good
  EXPECT_TRUE(mac.Open(sealed).ok());
  now += 600;
  EXPECT_TRUE(mac.Open(sealed).ok());
  const std::string later = mac.Seal("position=7");
  EXPECT_NE(later, sealed) << "a new period seals under a new key";
  now += 600;  // two periods on: its key is retired
  absl::StatusOr<std::string> expired = mac.Open(sealed);
  EXPECT_TRUE(absl::IsInvalidArgument(expired.status()));
  EXPECT_NE(expired.status().message().find("expired"), std::string_view::npos) << expired.status();
  EXPECT_TRUE(mac.Open(later).ok());
  // Moving the period forward does not help a forger: the period is under
  // the tag, and the key depends on it.
  std::string moved = sealed;
  moved[10] = static_cast<char>(moved[10] + 3);
  EXPECT_FALSE(mac.Open(moved).ok());
  // A token from a clock far ahead is refused.
  now -= 3600;
  absl::StatusOr<std::string> future = mac.Open(later);
  EXPECT_NE(future.status().message().find("future"), std::string_view::npos) << future.status();
}

TEST(TokenMacTest, SecretsComeFromAFileThatIsCreatedPrivate) {
  TestDir dir;
  const std::string path = dir.path() + "/token.key";
  absl::StatusOr<TokenMac> none = TokenMac::FromFile(path, /*create=*/false);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  absl::StatusOr<TokenMac> made = TokenMac::FromFile(path, /*create=*/true);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<TokenMac> again = TokenMac::FromFile(path, /*create=*/true);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->Open(made->Seal("x")).ok()) << "the same secret after a restart";
  ASSERT_TRUE(WriteFileAtomically(path, "too short").ok());
  absl::StatusOr<TokenMac> bad = TokenMac::FromFile(path, true);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string_view::npos) << bad.status();
}

}  // namespace
}  // namespace megastore

namespace megastore {
namespace {

TEST(Sha256HexTest, MatchesTheStandardVectorAndTokensAreFresh) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string a = RandomToken(), b = RandomToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace megastore
