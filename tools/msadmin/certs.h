// msadmin certs init|issue|show: a certificate authority for a deployment's
// TLS (docs/security.md): the CA, then one certificate per process,
// operator tool and application server.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace megastore::tools {

struct CertsState {
  std::string verb;  // "init", "issue", "show"
  std::string dir;   // the CA's directory
  std::string out;   // where issued files go (default: dir)
  std::string name;  // init: the CA's name; issue: the file name
  std::string common_name;
  std::vector<std::string> hosts;
  int days = 0;
  std::vector<std::string> files;  // show
  bool json = false;               // show: -o json
};

void AddCertsCommand(CLI::App& app, CertsState& state);
// Exit code: 0, 1 if it failed (the reason printed), 2 usage.
int RunCerts(const CertsState& state);

}  // namespace megastore::tools
