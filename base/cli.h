// Command-line parsing shared by our tools: CLI11, with our exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/rpc/rpc.h"

namespace megastore {

// --tls-ca, --tls-cert and --tls-key into `tls`; `who` says whose
// certificate it is ("this process's", "this tool's").
inline void AddTlsFlags(CLI::App& app, rpc::TlsFiles& tls, const std::string& who) {
  app.add_option("--tls-ca", tls.ca,
                 "mutual TLS 1.3 for RPC and HTTP: the CA certificate peers' "
                 "certificates must be issued by "
                 "(docs/security.md; with --tls-cert and --tls-key)");
  app.add_option("--tls-cert", tls.cert,
                 who +
                     " certificate (PEM), issued by --tls-ca; its common name is the "
                     "principal");
  app.add_option("--tls-key", tls.key, "the key of --tls-cert (PEM)");
}

// Parses argv into `app`. Returns -1 to continue, or the exit code to return
// now: 0 after --help, 2 for a usage error (CLI11 prints the reason).
inline int ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace megastore
