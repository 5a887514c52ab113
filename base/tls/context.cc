#include "base/tls/context.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl.hpp>
#include <map>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/process_default.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/tls/certs.h"

namespace megastore::tls {
namespace {

namespace ssl = boost::asio::ssl;
using boost::system::error_code;

ProcessDefault<TlsFiles>& TlsDefault() {
  static auto* d = new ProcessDefault<TlsFiles>;
  return *d;
}

absl::StatusOr<std::shared_ptr<ssl::context>> MakeContext(const TlsFiles& files, bool server) {
  if (files.ca.empty() || files.cert.empty() || files.key.empty())
    return absl::InvalidArgumentError(
        "TLS needs all three files: the CA certificate, a certificate and its "
        "key");
  auto ctx =
      std::make_shared<ssl::context>(server ? ssl::context::tls_server : ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_3_VERSION);
  error_code ec;
  auto refuse = [&](const std::string& what, const std::string& file) {
    return absl::InvalidArgumentError(StrCat("TLS ", what, " ", file, ": ", ec.message()));
  };
  if (ctx->load_verify_file(files.ca, ec); ec) return refuse("CA certificate", files.ca);
  if (ctx->use_certificate_chain_file(files.cert, ec); ec) return refuse("certificate", files.cert);
  ctx->use_private_key_file(files.key, ssl::context::pem, ec);
  if ((ec && ec.message().find("mismatch") != std::string::npos) ||
      (!ec && SSL_CTX_check_private_key(ctx->native_handle()) != 1))
    return absl::InvalidArgumentError(
        StrCat("TLS key ", files.key, " is not the key of ", files.cert));
  if (ec) return refuse("key", files.key);
  ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  return ctx;
}

struct Contexts {
  struct Entry {
    std::shared_ptr<ssl::context> context;
    int holders = 0;
  };
  absl::Mutex mu;
  std::map<std::pair<TlsFiles, bool>, Entry> by_files ABSL_GUARDED_BY(mu);
  std::map<std::string, CertificateInUse> certificates ABSL_GUARDED_BY(mu);  // by path
  ReloadStats reload ABSL_GUARDED_BY(mu);
};

Contexts& Shared() {
  static auto* c = new Contexts;
  return *c;
}

CertificateInUse Describe(const std::string& path) {
  CertificateInUse c;
  c.path = path;
  if (absl::StatusOr<CertificateInfo> info = ReadCertificateInfo(path); info.ok()) {
    c.principal = info->subject_common_name;
    c.not_after_unix = info->not_after_unix;
  }
  return c;
}

// A label value for Prometheus text: quotes, backslashes and newlines escaped.
std::string Label(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

}  // namespace

absl::Status CheckTls(const TlsFiles& files) {
  if (!files.enabled() && files.cert.empty() && files.key.empty()) return absl::OkStatus();
  return MakeContext(files, /*server=*/true).status();
}

void SetDefaultTls(const TlsFiles& files) { TlsDefault().Set(files); }

TlsFiles DefaultTls() { return TlsDefault().Get(); }

absl::StatusOr<ContextRef> ContextRef::Acquire(const TlsFiles& files, bool server) {
  Contexts& c = Shared();
  ContextRef ref;
  ref.files_ = files;
  ref.server_ = server;
  {
    absl::MutexLock lock(&c.mu);
    auto it = c.by_files.find({files, server});
    if (it != c.by_files.end()) {
      ++it->second.holders;
      ref.held_ = true;
      return ref;
    }
  }
  // Built outside the lock (it reads files); a racing builder's copy is as
  // good as ours.
  MS_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> made, MakeContext(files, server));
  CertificateInUse described = Describe(files.cert);
  absl::MutexLock lock(&c.mu);
  Contexts::Entry& e = c.by_files[{files, server}];
  if (e.context == nullptr) e.context = std::move(made);
  ++e.holders;
  c.certificates[files.cert] = std::move(described);
  ref.held_ = true;
  return ref;
}

ContextRef::ContextRef(ContextRef&& other) noexcept
    : files_(std::move(other.files_)),
      server_(other.server_),
      held_(std::exchange(other.held_, false)) {}

ContextRef& ContextRef::operator=(ContextRef&& other) noexcept {
  if (this != &other) {
    Release();
    files_ = std::move(other.files_);
    server_ = other.server_;
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

ContextRef::~ContextRef() { Release(); }

void ContextRef::Release() {
  if (!std::exchange(held_, false)) return;
  Contexts& c = Shared();
  absl::MutexLock lock(&c.mu);
  auto it = c.by_files.find({files_, server_});
  if (it == c.by_files.end() || --it->second.holders > 0) return;
  c.by_files.erase(it);
  // The certificate stays listed while another context presents it.
  for (const auto& [key, entry] : c.by_files)
    if (key.first.cert == files_.cert) return;
  c.certificates.erase(files_.cert);
}

std::shared_ptr<ssl::context> ContextRef::Current() const {
  if (!held_) return nullptr;
  Contexts& c = Shared();
  absl::MutexLock lock(&c.mu);
  auto it = c.by_files.find({files_, server_});
  return it == c.by_files.end() ? nullptr : it->second.context;
}

absl::Status ReloadTls() {
  Contexts& c = Shared();
  std::vector<std::pair<TlsFiles, bool>> keys;
  {
    absl::MutexLock lock(&c.mu);
    for (const auto& [key, ctx] : c.by_files) keys.push_back(key);
  }
  std::map<std::pair<TlsFiles, bool>, std::shared_ptr<ssl::context>> rebuilt;
  std::map<std::string, CertificateInUse> certificates;
  absl::Status failed = absl::OkStatus();
  for (const auto& key : keys) {
    absl::StatusOr<std::shared_ptr<ssl::context>> made = MakeContext(key.first, key.second);
    if (!made.ok()) {
      failed = made.status();
      break;
    }
    rebuilt[key] = *std::move(made);
    certificates[key.first.cert] = Describe(key.first.cert);
  }
  absl::MutexLock lock(&c.mu);
  c.reload.last_unix = absl::ToUnixSeconds(absl::Now());
  if (!failed.ok()) {
    ++c.reload.failures;
    c.reload.last_error = std::string(failed.message());
    return absl::Status(failed.code(), StrCat("kept the certificates in use: ", failed.message()));
  }
  ++c.reload.reloads;
  c.reload.last_error.clear();
  // Contexts first acquired while we rebuilt stay as they were built.
  for (auto& [key, ctx] : rebuilt) {
    auto it = c.by_files.find(key);
    if (it != c.by_files.end()) it->second.context = std::move(ctx);  // unless released meanwhile
  }
  for (auto& [path, cert] : certificates) c.certificates[path] = std::move(cert);
  return absl::OkStatus();
}

std::vector<CertificateInUse> CertificatesInUse() {
  Contexts& c = Shared();
  absl::MutexLock lock(&c.mu);
  std::vector<CertificateInUse> out;
  for (const auto& [path, cert] : c.certificates) out.push_back(cert);
  return out;
}

ReloadStats TlsReloadStats() {
  Contexts& c = Shared();
  absl::MutexLock lock(&c.mu);
  return c.reload;
}

std::string TlsMetrics() {
  const ReloadStats r = TlsReloadStats();
  std::string out =
      "# HELP megastore_tls_certificate_expiry_timestamp_seconds When a "
      "certificate this process presents expires "
      "(Unix time).\n"
      "# TYPE megastore_tls_certificate_expiry_timestamp_seconds gauge\n";
  for (const CertificateInUse& c : CertificatesInUse())
    out += StrCat("megastore_tls_certificate_expiry_timestamp_seconds{path=\"", Label(c.path),
                  "\",principal=\"", Label(c.principal), "\"} ", c.not_after_unix, "\n");
  out += StrCat(
      "# HELP megastore_tls_reloads_total Certificate reloads (SIGHUP): ok "
      "took effect, failed kept the old ones.\n"
      "# TYPE megastore_tls_reloads_total counter\n"
      "megastore_tls_reloads_total{result=\"ok\"} ",
      r.reloads, "\nmegastore_tls_reloads_total{result=\"failed\"} ", r.failures, "\n");
  return out;
}

std::string TlsStatusText() {
  const std::vector<CertificateInUse> certs = CertificatesInUse();
  if (certs.empty()) return "";
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  std::string out;
  for (const CertificateInUse& c : certs) {
    const int64_t left = c.not_after_unix - now;
    out += StrCat("certificate ", c.path, " (principal ", c.principal, "): expires ",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(c.not_after_unix),
                                   absl::UTCTimeZone()),
                  left < 0 ? " -- EXPIRED" : StrCat(", in ", left / 86400, " days"), "\n");
  }
  const ReloadStats r = TlsReloadStats();
  if (r.last_unix != 0)
    out += StrCat("last reload at ",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(r.last_unix),
                                   absl::UTCTimeZone()),
                  r.last_error.empty()
                      ? ": ok"
                      : StrCat(": FAILED, kept the certificates in use: ", r.last_error),
                  "\n");
  return out;
}

std::string PeerPrincipal(ssl_st* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return "";
  std::string cn;
  X509_NAME* name = X509_get_subject_name(cert);
  const int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (at >= 0) {
    ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at));
    cn.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
              static_cast<size_t>(ASN1_STRING_length(s)));
  }
  X509_free(cert);
  return cn;
}

}  // namespace megastore::tls
