#include "base/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/strings.h"

namespace megastore::crypto {

namespace {

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

absl::Status CheckKeyAndNonce(std::string_view key, std::string_view nonce) {
  if (key.size() != kKeyBytes)
    return absl::InvalidArgumentError(
        StrCat("an AES-256 key has ", kKeyBytes, " bytes, not ", key.size()));
  if (nonce.size() != kNonceBytes)
    return absl::InvalidArgumentError(
        StrCat("a GCM nonce has ", kNonceBytes, " bytes, not ", nonce.size()));
  return absl::OkStatus();
}

// OpenSSL's lengths are ints: refuse anything that does not fit.
bool FitsInt(size_t n) { return n <= static_cast<size_t>(1) << 30; }

}  // namespace

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0)
    MS_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1,
             "OpenSSL has no randomness");
  return out;
}

absl::StatusOr<std::string> HkdfSha256(std::string_view key, std::string_view salt,
                                       std::string_view info, size_t n) {
  if (n == 0 || n > 255 * 32)
    return absl::InvalidArgumentError(StrCat("HKDF-SHA256 cannot derive ", n, " bytes"));
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return absl::InternalError("OpenSSL has no HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return absl::InternalError("OpenSSL could not make an HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_KEY, const_cast<char*>(key.data()), key.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
                         OSSL_PARAM_construct_end()};
  std::string out(n, '\0');
  const int ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), n, params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return absl::InternalError("OpenSSL's HKDF-SHA256 failed");
  return out;
}

std::string Sha256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  MS_CHECK(EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) == 1 && n == 32,
           "OpenSSL's SHA-256 failed");
  return std::string(reinterpret_cast<const char*>(digest), n);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MS_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), Bytes(data), data.size(),
                out, &len) != nullptr &&
               len == 32,
           "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

namespace {

// The cipher, fetched from OpenSSL's provider once (an implicit fetch per
// use costs more than sealing a small cell).
const EVP_CIPHER* Aes256Gcm() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  MS_CHECK(cipher != nullptr, "OpenSSL has no AES-256-GCM");
  return cipher;
}

// A context with `key` set (its key schedule and GHASH table computed),
// ready for EVP_CipherInit_ex with only a nonce.
CipherCtx KeyedContext(std::string_view key, bool encrypt) {
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx != nullptr &&
      EVP_CipherInit_ex(ctx.get(), Aes256Gcm(), nullptr, Bytes(key), nullptr, encrypt ? 1 : 0) != 1)
    ctx.reset();
  return ctx;
}

absl::Status Check(std::string_view nonce, size_t data, size_t aad) {
  if (nonce.size() != kNonceBytes)
    return absl::InvalidArgumentError(
        StrCat("a GCM nonce has ", kNonceBytes, " bytes, not ", nonce.size()));
  if (!FitsInt(data) || !FitsInt(aad))
    return absl::InvalidArgumentError(StrCat("cannot seal or open ", data, " bytes in one piece"));
  return absl::OkStatus();
}

absl::Status SealWith(EVP_CIPHER_CTX* ctx, std::string_view nonce, std::string_view plaintext,
                      std::string_view aad, std::string* out) {
  if (ctx == nullptr) return absl::InternalError("OpenSSL could not make a cipher context");
  int len = 0;
  const size_t start = out->size();
  out->resize(start + plaintext.size() + kTagBytes);
  auto* dst = reinterpret_cast<unsigned char*>(out->data() + start);
  if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, Bytes(nonce)) != 1 ||
      (!aad.empty() &&
       EVP_EncryptUpdate(ctx, nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1) ||
      EVP_EncryptUpdate(ctx, dst, &len, Bytes(plaintext), static_cast<int>(plaintext.size())) !=
          1 ||
      EVP_EncryptFinal_ex(ctx, dst + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, dst + plaintext.size()) != 1) {
    out->resize(start);
    return absl::InternalError("OpenSSL's AES-256-GCM failed to seal");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> OpenWith(EVP_CIPHER_CTX* ctx, std::string_view nonce,
                                     std::string_view sealed, std::string_view aad) {
  if (ctx == nullptr) return absl::InternalError("OpenSSL could not make a cipher context");
  if (sealed.size() < kTagBytes)
    return absl::DataLossError(
        StrCat("sealed data of ", sealed.size(), " bytes is shorter than its tag"));
  const std::string_view ciphertext = sealed.substr(0, sealed.size() - kTagBytes);
  unsigned char tag[kTagBytes];
  std::memcpy(tag, sealed.data() + ciphertext.size(), kTagBytes);
  std::string out(ciphertext.size(), '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  int len = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, Bytes(nonce)) != 1 ||
      (!aad.empty() &&
       EVP_DecryptUpdate(ctx, nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1) ||
      EVP_DecryptUpdate(ctx, dst, &len, Bytes(ciphertext), static_cast<int>(ciphertext.size())) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) != 1) {
    return absl::InternalError("OpenSSL's AES-256-GCM failed to open");
  }
  if (EVP_DecryptFinal_ex(ctx, dst + len, &len) != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return absl::DataLossError("the authentication tag does not match");
  }
  return out;
}

}  // namespace

// The keyed contexts of one key, idle between calls. They hold the key's
// expanded schedule, so they live and die with the key: freed (and
// cleansed by OpenSSL) when the AesGcm is destroyed.
struct AesGcm::Pool {
  absl::Mutex mu;
  // Indexed by direction: [0] decrypt, [1] encrypt.
  std::vector<EVP_CIPHER_CTX*> idle[2] ABSL_GUARDED_BY(mu);
  ~Pool() {
    for (auto& list : idle)
      for (EVP_CIPHER_CTX* c : list) EVP_CIPHER_CTX_free(c);
  }
};

// A keyed context of `pool`, back in the pool when done (at most a few
// idle ones are kept: one per thread that used the key at once).
class AesGcm::Lease {
 public:
  Lease(const AesGcm& key, bool encrypt) : pool_(*key.pool_), encrypt_(encrypt) {
    {
      absl::MutexLock lock(&pool_.mu);
      auto& idle = pool_.idle[encrypt];
      if (!idle.empty()) {
        ctx_ = idle.back();
        idle.pop_back();
      }
    }
    if (ctx_ == nullptr) ctx_ = KeyedContext(key.key_, encrypt).release();
  }
  ~Lease() {
    if (ctx_ == nullptr) return;
    absl::MutexLock lock(&pool_.mu);
    auto& idle = pool_.idle[encrypt_];
    if (idle.size() < 16) {
      idle.push_back(ctx_);
    } else {
      EVP_CIPHER_CTX_free(ctx_);
    }
  }
  EVP_CIPHER_CTX* get() const { return ctx_; }

 private:
  Pool& pool_;
  const bool encrypt_;
  EVP_CIPHER_CTX* ctx_ = nullptr;
};

absl::StatusOr<AesGcm> AesGcm::Create(std::string_view key) {
  if (key.size() != kKeyBytes)
    return absl::InvalidArgumentError(
        StrCat("an AES-256 key has ", kKeyBytes, " bytes, not ", key.size()));
  return AesGcm(std::string(key));
}

AesGcm::AesGcm(std::string key) : key_(std::move(key)), pool_(std::make_unique<Pool>()) {}
AesGcm::AesGcm(AesGcm&&) noexcept = default;

AesGcm::~AesGcm() { OPENSSL_cleanse(key_.data(), key_.size()); }

absl::Status AesGcm::Seal(std::string_view nonce, std::string_view plaintext, std::string_view aad,
                          std::string* out) const {
  if (absl::Status s = Check(nonce, plaintext.size(), aad.size()); !s.ok()) return s;
  Lease ctx(*this, true);
  return SealWith(ctx.get(), nonce, plaintext, aad, out);
}

absl::StatusOr<std::string> AesGcm::Open(std::string_view nonce, std::string_view sealed,
                                         std::string_view aad) const {
  if (absl::Status s = Check(nonce, sealed.size(), aad.size()); !s.ok()) return s;
  Lease ctx(*this, false);
  return OpenWith(ctx.get(), nonce, sealed, aad);
}

absl::Status SealAesGcm(std::string_view key, std::string_view nonce, std::string_view plaintext,
                        std::string_view aad, std::string* out) {
  if (absl::Status s = CheckKeyAndNonce(key, nonce); !s.ok()) return s;
  if (absl::Status s = Check(nonce, plaintext.size(), aad.size()); !s.ok()) return s;
  return SealWith(KeyedContext(key, true).get(), nonce, plaintext, aad, out);
}

absl::StatusOr<std::string> OpenAesGcm(std::string_view key, std::string_view nonce,
                                       std::string_view sealed, std::string_view aad) {
  if (absl::Status s = CheckKeyAndNonce(key, nonce); !s.ok()) return s;
  if (absl::Status s = Check(nonce, sealed.size(), aad.size()); !s.ok()) return s;
  return OpenWith(KeyedContext(key, false).get(), nonce, sealed, aad);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace megastore::crypto
