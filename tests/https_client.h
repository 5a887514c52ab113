// HTTPS over mutual TLS for tests of processes that serve it (megastored
// --local makes throwaway certificates in DATA/tls).
#pragma once

#include <string>

#include "base/tls/context.h"

namespace megastore::testing {

// One HTTP/1.1 request to 127.0.0.1:`port` over TLS with `files`; the whole
// response (status line, headers, body) as testing::Http returns it, or ""
// if the connection or the handshake failed. Empty cert and key: no client
// certificate.
// `headers`: more header lines, each ending in "\r\n".
std::string Https(int port, const tls::TlsFiles& files, const std::string& method,
                  const std::string& path, const std::string& body = "",
                  const std::string& headers = "");

// The client certificate megastored --local writes in `data`/tls.
tls::TlsFiles LocalAdminTls(const std::string& data);

}  // namespace megastore::testing
