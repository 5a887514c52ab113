#include "base/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <memory>

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
    MS_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                        static_cast<int>(n)) == 1,
             "OpenSSL has no randomness");
  return out;
}

absl::StatusOr<std::string> HkdfSha256(std::string_view key,
                                       std::string_view salt,
                                       std::string_view info, size_t n) {
  if (n == 0 || n > 255 * 32)
    return absl::InvalidArgumentError(
        StrCat("HKDF-SHA256 cannot derive ", n, " bytes"));
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return absl::InternalError("OpenSSL has no HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr)
    return absl::InternalError("OpenSSL could not make an HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_KEY, const_cast<char*>(key.data()), key.size()),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
      OSSL_PARAM_construct_end()};
  std::string out(n, '\0');
  const int ok = EVP_KDF_derive(
      ctx, reinterpret_cast<unsigned char*>(out.data()), n, params);
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
  MS_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                Bytes(data), data.size(), out, &len) != nullptr &&
               len == 32,
           "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

absl::Status SealAesGcm(std::string_view key, std::string_view nonce,
                        std::string_view plaintext, std::string_view aad,
                        std::string* out) {
  if (absl::Status s = CheckKeyAndNonce(key, nonce); !s.ok()) return s;
  if (!FitsInt(plaintext.size()) || !FitsInt(aad.size()))
    return absl::InvalidArgumentError(
        StrCat("cannot seal ", plaintext.size(), " bytes in one piece"));
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr)
    return absl::InternalError("OpenSSL could not make a cipher context");
  int len = 0;
  const size_t start = out->size();
  out->resize(start + plaintext.size() + kTagBytes);
  auto* dst = reinterpret_cast<unsigned char*>(out->data() + start);
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key),
                         Bytes(nonce)) != 1 ||
      (!aad.empty() && EVP_EncryptUpdate(ctx.get(), nullptr, &len, Bytes(aad),
                                         static_cast<int>(aad.size())) != 1) ||
      EVP_EncryptUpdate(ctx.get(), dst, &len, Bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), dst + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          dst + plaintext.size()) != 1) {
    out->resize(start);
    return absl::InternalError("OpenSSL's AES-256-GCM failed to seal");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> OpenAesGcm(std::string_view key,
                                       std::string_view nonce,
                                       std::string_view sealed,
                                       std::string_view aad) {
  if (absl::Status s = CheckKeyAndNonce(key, nonce); !s.ok()) return s;
  if (sealed.size() < kTagBytes)
    return absl::DataLossError(StrCat("sealed data of ", sealed.size(),
                                      " bytes is shorter than its tag"));
  if (!FitsInt(sealed.size()) || !FitsInt(aad.size()))
    return absl::InvalidArgumentError(
        StrCat("cannot open ", sealed.size(), " bytes in one piece"));
  const std::string_view ciphertext =
      sealed.substr(0, sealed.size() - kTagBytes);
  std::string tag(sealed.substr(ciphertext.size()));
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr)
    return absl::InternalError("OpenSSL could not make a cipher context");
  std::string out(ciphertext.size(), '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  int len = 0;
  if (EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key),
                         Bytes(nonce)) != 1 ||
      (!aad.empty() && EVP_DecryptUpdate(ctx.get(), nullptr, &len, Bytes(aad),
                                         static_cast<int>(aad.size())) != 1) ||
      EVP_DecryptUpdate(ctx.get(), dst, &len, Bytes(ciphertext),
                        static_cast<int>(ciphertext.size())) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes,
                          tag.data()) != 1) {
    return absl::InternalError("OpenSSL's AES-256-GCM failed to open");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), dst + len, &len) != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return absl::DataLossError("the authentication tag does not match");
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace megastore::crypto
