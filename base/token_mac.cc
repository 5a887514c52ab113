#include "base/token_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "absl/strings/escaping.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  MS_CHECK(EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) == 1, "OpenSSL's SHA-256 failed");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), n));
}

std::string RandomToken() {
  unsigned char bytes[32];
  MS_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, "OpenSSL has no randomness");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<TokenMac> TokenMac::FromSecret(std::string secret) {
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        StrCat("a token secret must hold ", kMinSecretBytes, " to ",
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

absl::StatusOr<TokenMac> TokenMac::FromFile(const std::string& path,
                                            bool create) {
  absl::StatusOr<std::string> secret = ReadFileToString(path);
  if (absl::IsNotFound(secret.status()) && create) {
    std::string fresh(kMinSecretBytes, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(fresh.data()),
                   static_cast<int>(fresh.size())) != 1) {
      return absl::InternalError(
          "OpenSSL has no randomness for a token secret");
    }
    MS_RETURN_IF_ERROR(
        WriteFileAtomically(path, fresh, 0600));  // private from its first byte
    // Two gateways creating it at once: both use what the file now holds.
    return FromFile(path, /*create=*/false);
  }
  if (!secret.ok()) return secret.status();
  absl::StatusOr<TokenMac> mac = FromSecret(std::move(*secret));
  if (!mac.ok())
    return absl::InvalidArgumentError(
        StrCat(path, ": ", mac.status().message()));
  return mac;
}

std::string TokenMac::Tag(std::string_view payload) const {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MS_CHECK(HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
                reinterpret_cast<const unsigned char*>(payload.data()),
                payload.size(), out, &len) != nullptr &&
               len >= kTagBytes,
           "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), kTagBytes);
}

std::string TokenMac::Seal(std::string_view payload) const {
  return StrCat(payload, Tag(payload));
}

absl::StatusOr<std::string> TokenMac::Open(std::string_view sealed) const {
  if (sealed.size() < kTagBytes)
    return absl::InvalidArgumentError("token too short to be authentic");
  const std::string_view payload = sealed.substr(0, sealed.size() - kTagBytes);
  const std::string tag = Tag(payload);
  if (CRYPTO_memcmp(tag.data(), sealed.data() + payload.size(), kTagBytes) !=
      0) {
    return absl::InvalidArgumentError(
        "token is not authentic (forged, altered, or issued under another "
        "secret)");
  }
  return std::string(payload);
}

}  // namespace megastore
