// msadmin acl show|grant|revoke|set: the access policy every datacenter's
// lock role keeps (docs/security.md). A change is written to every
// datacenter with a version above the highest any holds; processes take it
// within seconds, without a restart.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace megastore::tools {

struct AclState {
  std::string verb;  // "show", "grant", "revoke", "set"
  std::string config;
  std::string principal;            // grant, revoke
  std::vector<std::string> roles;   // grant, revoke: --role
  std::vector<std::string> reads;   // grant, revoke: --read=OBJECT
  std::vector<std::string> writes;  // grant, revoke: --write=OBJECT
  std::string file;                 // set: a policy in protobuf text format; token: the tokens file
  double timeout = 10;
  bool json = false;  // show: -o json
};

void AddAclCommand(CLI::App& app, AclState& state);
// Exit code: 0, 1 if it failed at some datacenter (each one's outcome
// printed), 2 usage.
int RunAcl(const AclState& state);

}  // namespace megastore::tools
