#include "base/token_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  MS_CHECK(EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) == 1,
           "OpenSSL's SHA-256 failed");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), n));
}

std::string RandomToken() {
  unsigned char bytes[32];
  MS_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, "OpenSSL has no randomness");
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<TokenMac> TokenMac::FromSecret(std::string secret) {
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(StrCat("a token secret must hold ", kMinSecretBytes, " to ",
                                             kMaxSecretBytes, " bytes, not ", secret.size()));
  }
  return TokenMac(std::move(secret));
}

TokenMac TokenMac::Random() {
  std::string secret(kMinSecretBytes, '\0');
  MS_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                      static_cast<int>(secret.size())) == 1,
           "OpenSSL has no randomness");
  return TokenMac(std::move(secret));
}

absl::StatusOr<TokenMac> TokenMac::FromFile(const std::string& path, bool create) {
  absl::StatusOr<std::string> secret = ReadFileToString(path);
  if (absl::IsNotFound(secret.status()) && create) {
    std::string fresh(kMinSecretBytes, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(fresh.data()),
                   static_cast<int>(fresh.size())) != 1) {
      return absl::InternalError("OpenSSL has no randomness for a token secret");
    }
    MS_RETURN_IF_ERROR(WriteFileAtomically(path, fresh, 0600));  // private from its first byte
    // Two gateways creating it at once: both use what the file now holds.
    return FromFile(path, /*create=*/false);
  }
  if (!secret.ok()) return secret.status();
  absl::StatusOr<TokenMac> mac = FromSecret(std::move(*secret));
  if (!mac.ok()) return absl::InvalidArgumentError(StrCat(path, ": ", mac.status().message()));
  return mac;
}

void TokenMac::set_key_period(absl::Duration period) {
  period_seconds_ = std::max<int64_t>(1, absl::ToInt64Seconds(period));
}

uint64_t TokenMac::CurrentPeriod() const {
  const int64_t now = now_seconds_ ? now_seconds_() : absl::ToUnixSeconds(absl::Now());
  return static_cast<uint64_t>(std::max<int64_t>(0, now) / period_seconds_);
}

std::string TokenMac::Tag(uint64_t period, std::string_view payload_and_period) const {
  std::string label = "megastore token key v1|";
  PutFixed64(&label, period);
  unsigned char key[EVP_MAX_MD_SIZE];
  unsigned int key_len = 0;
  MS_CHECK(HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
                reinterpret_cast<const unsigned char*>(label.data()), label.size(), key,
                &key_len) != nullptr,
           "HMAC-SHA256 failed");
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MS_CHECK(HMAC(EVP_sha256(), key, static_cast<int>(key_len),
                reinterpret_cast<const unsigned char*>(payload_and_period.data()),
                payload_and_period.size(), out, &len) != nullptr &&
               len >= kTagBytes,
           "HMAC-SHA256 failed");
  OPENSSL_cleanse(key, sizeof(key));
  return std::string(reinterpret_cast<const char*>(out), kTagBytes);
}

std::string TokenMac::Seal(std::string_view payload) const {
  const uint64_t period = CurrentPeriod();
  std::string out(payload);
  PutFixed64(&out, period);
  out += Tag(period, out);
  return out;
}

absl::StatusOr<std::string> TokenMac::Open(std::string_view sealed) const {
  if (sealed.size() < kTrailerBytes)
    return absl::InvalidArgumentError("token too short to be authentic");
  const std::string_view payload_and_period = sealed.substr(0, sealed.size() - kTagBytes);
  const std::string_view payload =
      payload_and_period.substr(0, payload_and_period.size() - kPeriodBytes);
  const uint64_t period = DecodeFixed64(payload_and_period.data() + payload.size());
  const std::string tag = Tag(period, payload_and_period);
  if (CRYPTO_memcmp(tag.data(), sealed.data() + payload_and_period.size(), kTagBytes) != 0) {
    return absl::InvalidArgumentError(
        "token is not authentic (forged, altered, or issued under another secret)");
  }
  // Authentic: now its age. Its period and the next one (a token issued
  // just before a change stays good for a whole period).
  const uint64_t now = CurrentPeriod();
  if (period + 1 < now)
    return absl::InvalidArgumentError(StrCat("token expired (its key was retired ",
                                             (now - period - 1) * period_seconds_,
                                             "+ seconds ago): read again for a fresh one"));
  if (period > now + 1)
    return absl::InvalidArgumentError("token issued under a key of the future (clocks apart?)");
  return std::string(payload);
}

}  // namespace megastore
