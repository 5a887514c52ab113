// Authenticating what a server hands a client and later gets back (the
// gateway's read tokens): an HMAC-SHA256 (OpenSSL) under a secret only the
// servers hold, truncated to 16 bytes and appended to the payload. A
// client can read a sealed token but cannot forge or alter one; every
// server sharing the secret accepts the others' tokens.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace megastore {

// The SHA-256 of `data`, in lowercase hex (for keeping bearer tokens as
// hashes: a leaked file gives no token).
std::string Sha256Hex(std::string_view data);
// A fresh random bearer token: 32 bytes from OpenSSL's RAND, in hex.
std::string RandomToken();

// The key rotates by itself: the tag of a token issued in key period E is
// under HMAC-SHA256(secret, "megastore token key v1" | E), E counted in
// key_period() since the Unix epoch, and E travels in the token. A token
// opens during its own period and the next one, never later — so every
// server sharing the secret rotates in step without talking to the others,
// and a key (or a token) outlives its period by one period at most.
class TokenMac {
 public:
  static constexpr size_t kMinSecretBytes = 32;
  static constexpr size_t kMaxSecretBytes = 4096;
  static constexpr size_t kTagBytes = 16;
  static constexpr size_t kPeriodBytes = 8;
  // What Seal appends to the payload: the key period and the tag.
  static constexpr size_t kTrailerBytes = kPeriodBytes + kTagBytes;

  // How often the key changes (default 1 hour; at least 1 second).
  void set_key_period(absl::Duration period);
  absl::Duration key_period() const { return absl::Seconds(period_seconds_); }
  // The clock, in Unix seconds (tests).
  void set_clock(std::function<int64_t()> now_seconds) { now_seconds_ = std::move(now_seconds); }

  // InvalidArgument for a secret shorter than kMinSecretBytes or longer
  // than kMaxSecretBytes.
  static absl::StatusOr<TokenMac> FromSecret(std::string secret);
  // A fresh random secret (tokens then die with this object).
  static TokenMac Random();
  // The secret kept in `path`: created (kMinSecretBytes random bytes, mode
  // 0600, written atomically) if missing and `create` is set. Errors name
  // the file and what is wrong with it.
  static absl::StatusOr<TokenMac> FromFile(const std::string& path, bool create);

  // `payload` followed by its key period and tag.
  std::string Seal(std::string_view payload) const;
  // The payload of a sealed token; InvalidArgument if it is too short, its
  // key period is over (expired) or not yet begun, or its tag does not
  // match (forged, altered, or sealed under another secret). The
  // comparison takes constant time.
  absl::StatusOr<std::string> Open(std::string_view sealed) const;

 private:
  explicit TokenMac(std::string secret) : secret_(std::move(secret)) {}
  std::string Tag(uint64_t period, std::string_view payload_and_period) const;
  uint64_t CurrentPeriod() const;
  std::string secret_;
  int64_t period_seconds_ = 3600;
  std::function<int64_t()> now_seconds_;
};

}  // namespace megastore
