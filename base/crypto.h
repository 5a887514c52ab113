// The symmetric cryptography encryption at rest is built from, on
// OpenSSL 3's EVP interfaces (nothing here implements a cipher itself):
// AES-256-GCM for sealing, HKDF-SHA256 for deriving keys, HMAC-SHA256 for
// deterministic tokens, and OpenSSL's RAND for keys and nonces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace megastore::crypto {

inline constexpr size_t kKeyBytes = 32;    // AES-256, HMAC and HKDF keys
inline constexpr size_t kNonceBytes = 12;  // GCM's recommended IV length
inline constexpr size_t kTagBytes = 16;    // GCM's full tag

// `n` bytes from OpenSSL's CSPRNG (aborts if it has none: nothing secret
// could be made safely without it).
std::string RandomBytes(size_t n);

// HKDF-SHA256 (RFC 5869): `n` bytes (at most 255 * 32) derived from `key`
// with `salt` and `info`.
absl::StatusOr<std::string> HkdfSha256(std::string_view key, std::string_view salt,
                                       std::string_view info, size_t n);

// SHA-256 of `data` (32 bytes).
std::string Sha256(std::string_view data);

// HMAC-SHA256 of `data` under `key` (32 bytes).
std::string HmacSha256(std::string_view key, std::string_view data);

// AES-256-GCM. Seal appends ciphertext || tag (plaintext size + kTagBytes)
// to `out`. `key` must be kKeyBytes and `nonce` kNonceBytes long
// (InvalidArgument otherwise); a nonce must never repeat under one key.
absl::Status SealAesGcm(std::string_view key, std::string_view nonce, std::string_view plaintext,
                        std::string_view aad, std::string* out);
// The plaintext of ciphertext || tag; DataLoss if the tag does not match
// (altered ciphertext, other associated data, or another key): nothing of
// an unauthenticated plaintext is ever returned.
absl::StatusOr<std::string> OpenAesGcm(std::string_view key, std::string_view nonce,
                                       std::string_view sealed, std::string_view aad);

// An AES-256-GCM key for sealing many messages: it keeps OpenSSL contexts
// with its expanded state between calls (as many as threads used it at
// once), so a call costs the cipher's work, not the key setup; they are
// freed with the key. Thread-safe. Seal appends ciphertext || tag to
// `out`; Open returns the plaintext or DataLoss, as SealAesGcm and
// OpenAesGcm do.
class AesGcm {
 public:
  // InvalidArgument unless `key` has kKeyBytes.
  static absl::StatusOr<AesGcm> Create(std::string_view key);
  AesGcm(AesGcm&&) noexcept;
  AesGcm& operator=(AesGcm&&) = delete;
  ~AesGcm();

  absl::Status Seal(std::string_view nonce, std::string_view plaintext, std::string_view aad,
                    std::string* out) const;
  absl::StatusOr<std::string> Open(std::string_view nonce, std::string_view sealed,
                                   std::string_view aad) const;

 private:
  struct Pool;
  class Lease;
  explicit AesGcm(std::string key);
  std::string key_;
  std::unique_ptr<Pool> pool_;
};

// Compares in time independent of where the bytes differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace megastore::crypto
