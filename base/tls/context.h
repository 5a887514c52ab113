// Mutual TLS 1.3 for every listener and connection of a process (RPC, the
// lock service, HTTP): the certificate files, the SSL contexts made from
// them, their reload without restart, and their expiry for status pages.
//
// Contexts are shared: every server and client of a process naming the same
// files uses one context per side, built on first use. ReloadTls() builds
// them all again from the files (after an operator replaced them, on
// SIGHUP); new connections get the new certificates, open ones keep theirs.
// Asio stays out of this header: the context type is only declared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl
struct ssl_st;

namespace megastore::tls {

// PEM files. With `ca` set, a server accepts only clients presenting a
// certificate that CA issued, and a client accepts only servers whose
// certificate that CA issued for the host it dials. Empty `ca`: plaintext.
struct TlsFiles {
  std::string ca;    // the CA certificate
  std::string cert;  // this process's certificate ...
  std::string key;   // ... and private key
  bool enabled() const { return !ca.empty(); }
  friend bool operator==(const TlsFiles&, const TlsFiles&) = default;
  friend auto operator<=>(const TlsFiles&, const TlsFiles&) = default;
};

// InvalidArgument naming the file that cannot be loaded (missing, not PEM,
// key not matching the certificate), or a set without all three files. OK
// for an empty set (plaintext).
absl::Status CheckTls(const TlsFiles& files);

// The TLS servers and clients get when their options do not say otherwise;
// a program sets it once from its flags before starting any (after
// CheckTls).
void SetDefaultTls(const TlsFiles& files);
TlsFiles DefaultTls();

// The context for one end (`server` or client) of mutual TLS 1.3 with
// `files`, shared process-wide. A server or client holds a ContextRef while
// it lives; ReloadTls rebuilds the contexts of held files.
class ContextRef {
 public:
  // Errors as CheckTls.
  static absl::StatusOr<ContextRef> Acquire(const TlsFiles& files, bool server);

  ContextRef() = default;
  ContextRef(ContextRef&& other) noexcept;
  ContextRef& operator=(ContextRef&& other) noexcept;
  ContextRef(const ContextRef&) = delete;
  ContextRef& operator=(const ContextRef&) = delete;
  ~ContextRef();

  bool held() const { return held_; }
  // The context built last from the files (a new connection's).
  std::shared_ptr<boost::asio::ssl::context> Current() const;

 private:
  void Release();
  TlsFiles files_;
  bool server_ = false;
  bool held_ = false;
};

// Builds every context in use again from its files. If any file cannot be
// loaded, nothing changes (the contexts in use stay) and the error names
// the file. Counted in TlsMetrics.
absl::Status ReloadTls();

// A certificate this process presents, for /status and /metrics.
struct CertificateInUse {
  std::string path;
  std::string principal;       // its common name
  int64_t not_after_unix = 0;  // when it expires
};
std::vector<CertificateInUse> CertificatesInUse();

struct ReloadStats {
  uint64_t reloads = 0;    // ReloadTls calls that took effect
  uint64_t failures = 0;   // calls refused for a file that cannot be loaded
  int64_t last_unix = 0;   // when the last call was made (0: never)
  std::string last_error;  // of the last call ("" if it took effect)
};
ReloadStats TlsReloadStats();

// Prometheus text: megastore_tls_certificate_expiry_timestamp_seconds per
// certificate in use, and the reload counters.
std::string TlsMetrics();
// The same for a status page: one line per certificate, and the last
// reload's outcome; "" without TLS.
std::string TlsStatusText();

// The common name of the certificate the peer of `ssl` presented, or "".
std::string PeerPrincipal(ssl_st* ssl);

}  // namespace megastore::tls
