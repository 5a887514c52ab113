#include "base/tls/certs.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>

#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::tls {

namespace {

namespace fs = std::filesystem;

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using Names = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;

constexpr size_t kMaxCertificateFileBytes = 1 << 20;

// The error OpenSSL queued, after `what`.
absl::Status OpenSslError(std::string_view what) {
  std::string detail;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!detail.empty()) detail += "; ";
    detail += buf;
  }
  return absl::InternalError(StrCat(what, detail.empty() ? "" : ": ", detail));
}

absl::Status CheckCommonName(std::string_view cn) {
  if (cn.empty() || cn.size() > 64)
    return absl::InvalidArgumentError("a common name holds 1 to 64 bytes");
  for (char c : cn) {
    if (c < 0x20 || c > 0x7e) return absl::InvalidArgumentError("a common name is printable ASCII");
  }
  return absl::OkStatus();
}

absl::Status CheckFileName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "ca" || name[0] == '.')
    return absl::InvalidArgumentError(
        StrCat("\"", name,
               "\" is not a certificate name (1 to 64 letters, digits, "
               "'_', '-', '.'; not \"ca\")"));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return absl::InvalidArgumentError(StrCat("\"", name, "\" is not a certificate name"));
  }
  return absl::OkStatus();
}

// "IP:1.2.3.4" or "DNS:name" for a subjectAltName, or an error.
absl::StatusOr<std::string> AltName(const std::string& host) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1)
    return StrCat("IP:", host);
  if (host.empty() || host.size() > 253)
    return absl::InvalidArgumentError(StrCat("\"", host, "\" is no host name"));
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok)
      return absl::InvalidArgumentError(
          StrCat("\"", host, "\" is neither an IP address nor a host name"));
  }
  return StrCat("DNS:", host);
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("generate an EC P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(StrCat("make extension ", OBJ_nid2sn(nid), "=", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError(StrCat("add extension ", OBJ_nid2sn(nid)));
  return absl::OkStatus();
}

// A certificate for `key` named `cn`, valid `days` from five minutes ago
// (clocks differ), not yet signed nor given its issuer.
absl::StatusOr<Cert> NewCertificate(EVP_PKEY* key, const std::string& cn, int days) {
  if (days < 1 || days > 36500)
    return absl::InvalidArgumentError("a certificate is valid 1 to 36500 days");
  Cert cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), 2) != 1)
    return OpenSslError("make a certificate");
  Bignum serial(BN_new());
  if (serial == nullptr || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr)
    return OpenSslError("draw a serial number");
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -300) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400) == nullptr)
    return OpenSslError("set the validity");
  if (X509_set_pubkey(cert.get(), key) != 1) return OpenSslError("set the public key");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("megastore"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return OpenSslError("set the subject");
  return cert;
}

std::string Pem(const std::function<int(BIO*)>& write) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : "";
}

absl::Status WriteKeyAndCertificate(const std::string& key_path, const std::string& cert_path,
                                    EVP_PKEY* key, X509* cert) {
  const std::string key_pem = Pem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
  const std::string cert_pem = Pem([&](BIO* b) { return PEM_write_bio_X509(b, cert); });
  if (key_pem.empty() || cert_pem.empty()) return OpenSslError("encode PEM");
  MS_RETURN_IF_ERROR(WriteFileAtomically(key_path, key_pem, 0600));
  return WriteFileAtomically(cert_path, cert_pem, 0644);
}

// The first PEM object `read` finds in the file at `path` (at most
// kMaxCertificateFileBytes), or InvalidArgument saying the file holds no
// `what`.
template <typename Ptr, typename Read>
absl::StatusOr<Ptr> ReadPem(const std::string& path, Read read, std::string_view what) {
  MS_ASSIGN_OR_RETURN(std::string pem, ReadFileToString(path, kMaxCertificateFileBytes));
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr p(bio ? read(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (p == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(StrCat(path, " holds no ", what));
  }
  return p;
}

absl::StatusOr<Cert> ReadCertificate(const std::string& path) {
  return ReadPem<Cert>(path, PEM_read_bio_X509, "PEM certificate");
}

absl::StatusOr<Key> ReadKey(const std::string& path) {
  return ReadPem<Key>(path, PEM_read_bio_PrivateKey, "PEM private key (or an encrypted one)");
}

absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return absl::InternalError(StrCat("cannot create ", dir, ": ", ec.message()));
    ::chmod(dir.c_str(), 0700);
  }
  return absl::OkStatus();
}

std::string CommonName(X509_NAME* name) {
  const int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (at < 0) return "";
  ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

int64_t UnixTime(const ASN1_TIME* t) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

absl::Status CreateCa(const std::string& dir, const std::string& common_name, int days) {
  MS_RETURN_IF_ERROR(CheckCommonName(common_name));
  const std::string key_path = StrCat(dir, "/ca.key");
  std::error_code ec;
  if (fs::exists(key_path, ec))
    return absl::AlreadyExistsError(StrCat(key_path, " exists: a CA is never replaced"));
  MS_RETURN_IF_ERROR(MakeDir(dir));
  MS_ASSIGN_OR_RETURN(Key key, NewKey());
  MS_ASSIGN_OR_RETURN(Cert cert, NewCertificate(key.get(), common_name, days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    return OpenSslError("set the issuer");
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  MS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    return OpenSslError("sign the CA certificate");
  return WriteKeyAndCertificate(key_path, StrCat(dir, "/ca.crt"), key.get(), cert.get());
}

absl::Status IssueCertificate(const std::string& ca_dir, const std::string& out_dir,
                              const std::string& name, const CertificateRequest& request) {
  MS_RETURN_IF_ERROR(CheckFileName(name));
  MS_RETURN_IF_ERROR(CheckCommonName(request.common_name));
  std::string alt_names;
  for (const std::string& h : request.hosts) {
    MS_ASSIGN_OR_RETURN(std::string alt, AltName(h));
    alt_names += (alt_names.empty() ? "" : ",") + alt;
  }
  const std::string key_path = StrCat(out_dir, "/", name, ".key");
  std::error_code ec;
  if (fs::exists(key_path, ec)) return absl::AlreadyExistsError(StrCat(key_path, " exists"));
  MS_ASSIGN_OR_RETURN(Cert ca, ReadCertificate(StrCat(ca_dir, "/ca.crt")));
  MS_ASSIGN_OR_RETURN(Key ca_key, ReadKey(StrCat(ca_dir, "/ca.key")));
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        StrCat(ca_dir, "/ca.key is not the key of ", ca_dir, "/ca.crt"));
  }
  MS_RETURN_IF_ERROR(MakeDir(out_dir));
  MS_ASSIGN_OR_RETURN(Key key, NewKey());
  MS_ASSIGN_OR_RETURN(Cert cert, NewCertificate(key.get(), request.common_name, request.days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())) != 1)
    return OpenSslError("set the issuer");
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE"));
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature"));
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  MS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_subject_key_identifier, "hash"));
  MS_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always"));
  if (!alt_names.empty())
    MS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_subject_alt_name, alt_names));
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0)
    return OpenSslError("sign the certificate");
  return WriteKeyAndCertificate(key_path, StrCat(out_dir, "/", name, ".crt"), key.get(),
                                cert.get());
}

absl::StatusOr<CertificateInfo> ReadCertificateInfo(const std::string& path) {
  MS_ASSIGN_OR_RETURN(Cert cert, ReadCertificate(path));
  CertificateInfo info;
  info.subject_common_name = CommonName(X509_get_subject_name(cert.get()));
  info.issuer_common_name = CommonName(X509_get_issuer_name(cert.get()));
  info.not_before_unix = UnixTime(X509_get0_notBefore(cert.get()));
  info.not_after_unix = UnixTime(X509_get0_notAfter(cert.get()));
  Names names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names.get(), i);
    if (g->type == GEN_DNS) {
      const ASN1_STRING* s = g->d.dNSName;
      info.hosts.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                              static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (g->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = g->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = {};
      const int family = ASN1_STRING_length(s) == 4 ? AF_INET : AF_INET6;
      if (inet_ntop(family, ASN1_STRING_get0_data(s), buf, sizeof(buf)) != nullptr)
        info.hosts.emplace_back(buf);
    }
  }
  return info;
}

absl::Status VerifyCertificate(const std::string& ca_path, const std::string& cert_path) {
  MS_ASSIGN_OR_RETURN(Cert ca, ReadCertificate(ca_path));
  MS_ASSIGN_OR_RETURN(Cert cert, ReadCertificate(cert_path));
  std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>> ctx(
      X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1)
    return OpenSslError("set up verification");
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::PermissionDeniedError(StrCat(cert_path, " does not verify against ", ca_path, ": ",
                                              X509_verify_cert_error_string(err)));
  }
  return absl::OkStatus();
}

}  // namespace megastore::tls
