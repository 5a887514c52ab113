// Authenticating what a server hands a client and later gets back (the
// gateway's read tokens): an HMAC-SHA256 (OpenSSL) under a secret only the
// servers hold, truncated to 16 bytes and appended to the payload. A
// client can read a sealed token but cannot forge or alter one; every
// server sharing the secret accepts the others' tokens.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace megastore {

// The SHA-256 of `data`, in lowercase hex (for keeping bearer tokens as
// hashes: a leaked file gives no token).
std::string Sha256Hex(std::string_view data);
// A fresh random bearer token: 32 bytes from OpenSSL's RAND, in hex.
std::string RandomToken();

class TokenMac {
 public:
  static constexpr size_t kMinSecretBytes = 32;
  static constexpr size_t kMaxSecretBytes = 4096;
  static constexpr size_t kTagBytes = 16;

  // InvalidArgument for a secret shorter than kMinSecretBytes or longer
  // than kMaxSecretBytes.
  static absl::StatusOr<TokenMac> FromSecret(std::string secret);
  // A fresh random secret (tokens then die with this object).
  static TokenMac Random();
  // The secret kept in `path`: created (kMinSecretBytes random bytes, mode
  // 0600, written atomically) if missing and `create` is set. Errors name
  // the file and what is wrong with it.
  static absl::StatusOr<TokenMac> FromFile(const std::string& path,
                                           bool create);

  // `payload` followed by its tag.
  std::string Seal(std::string_view payload) const;
  // The payload of a sealed token; InvalidArgument if it is too short or
  // its tag does not match (forged, altered, or sealed under another
  // secret). The comparison takes constant time.
  absl::StatusOr<std::string> Open(std::string_view sealed) const;

 private:
  explicit TokenMac(std::string secret) : secret_(std::move(secret)) {}
  std::string Tag(std::string_view payload) const;
  std::string secret_;
};

}  // namespace megastore
