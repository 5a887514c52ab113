// A small certificate authority for megastore deployments, on OpenSSL 3:
// a CA key and self-signed certificate, and certificates it issues to
// processes, operators' tools and application servers. Keys are EC P-256,
// signatures ECDSA-SHA256; every issued certificate serves both ends of a
// mutually authenticated TLS connection (serverAuth and clientAuth).
//
// Files (PEM): <dir>/ca.crt, <dir>/ca.key; <dir>/<name>.crt, <dir>/<name>.key.
// Keys are written owner-only (0600).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace megastore::tls {

struct CertificateRequest {
  // The principal: the certificate's subject common name (a process,
  // "admin", an application). Printable ASCII, at most 64 bytes.
  std::string common_name;
  // Where it may serve: subjectAltName entries, IP addresses ("127.0.0.1")
  // or DNS names ("db1.example.com").
  std::vector<std::string> hosts;
  int days = 825;
};

// Makes a CA in `dir` (created 0700 if missing): ca.key and ca.crt.
// AlreadyExists if ca.key is there (a CA is never overwritten).
absl::Status CreateCa(const std::string& dir, const std::string& common_name, int days = 3650);

// Issues `request` under the CA in `ca_dir`, writing <out_dir>/<name>.crt
// and <name>.key (`name` is a file name: letters, digits, '_', '-', '.').
// AlreadyExists if the key file is there.
absl::Status IssueCertificate(const std::string& ca_dir, const std::string& out_dir,
                              const std::string& name, const CertificateRequest& request);

// What a certificate file says, for status pages and `msadmin certs`.
struct CertificateInfo {
  std::string subject_common_name;
  std::string issuer_common_name;
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
  std::vector<std::string> hosts;
};
absl::StatusOr<CertificateInfo> ReadCertificateInfo(const std::string& path);

// OK if the certificate at `cert_path` was issued by the CA certificate at
// `ca_path` and is valid now; otherwise an error naming why.
absl::Status VerifyCertificate(const std::string& ca_path, const std::string& cert_path);

}  // namespace megastore::tls
