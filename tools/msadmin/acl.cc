#include "tools/msadmin/acl.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdio>

#include "base/await.h"
#include "base/cli.h"
#include "base/file.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"
#include "base/token_mac.h"
#include "server/access.h"
#include "server/cluster.h"
#include "tools/msadmin/cluster_internal.h"

namespace megastore::tools {

void AddAclCommand(CLI::App& app, AclState& state) {
  CLI::App* acl =
      app.add_subcommand("acl",
                         "The access policy: who may read, write and administer what (enforced "
                         "over TLS; docs/security.md)");
  acl->require_subcommand(1);
  auto common = [&state](CLI::App* c) {
    AddConfigOption(c, state.config, "the cluster config", /*required=*/true);
    c->add_option("--timeout", state.timeout, "seconds to wait for each datacenter")
        ->capture_default_str();
  };
  CLI::App* show = acl->add_subcommand("show", "Print the policy each datacenter holds");
  common(show);
  AddOutputOption(show, state.json,
                  "{\"datacenters\": [{\"datacenter\", \"version\" or \"error\"}], \"policy\": "
                  "the newest policy}");
  show->callback([&state] { state.verb = "show"; });

  auto change = [&state, &common](CLI::App* c) {
    common(c);
    c->add_option("principal", state.principal, "a certificate's common name")->required();
    c->add_option("--role", state.roles,
                  "admin (everything) or replica (the cluster's own "
                  "processes); repeatable");
    c->add_option("--read", state.reads,
                  "read access to a schema (its entity groups, indexes, "
                  "queues), a Bigtable table, or *; repeatable");
    c->add_option("--write", state.writes,
                  "write access to the same (not implying read); repeatable");
  };
  CLI::App* grant =
      acl->add_subcommand("grant", "Give PRINCIPAL roles or grants (added to what it has)");
  change(grant);
  grant->callback([&state] { state.verb = "grant"; });
  CLI::App* revoke = acl->add_subcommand("revoke",
                                         "Take roles or grants from PRINCIPAL; with none "
                                         "named, remove PRINCIPAL from the policy");
  change(revoke);
  revoke->callback([&state] { state.verb = "revoke"; });
  CLI::App* token =
      acl->add_subcommand("token",
                          "Make a bearer token for the JSON gateway that stands for PRINCIPAL: "
                          "prints it once, and adds its SHA-256 "
                          "to --file (megastored --gateway-tokens-file; created owner-only)");
  token->add_option("principal", state.principal, "who the token stands for")->required();
  token->add_option("--file", state.file, "the gateway's tokens file")->required();
  AddOutputOption(token, state.json,
                  "one object: token, principal, file (the token is still shown only once)");
  token->callback([&state] { state.verb = "token"; });
  CLI::App* set = acl->add_subcommand("set",
                                      "Replace the whole policy with FILE "
                                      "(protobuf text format, access.proto)");
  common(set);
  set->add_option("file", state.file, "the policy")->required();
  set->callback([&state] { state.verb = "set"; });
}

namespace {

using server::AccessPolicy;
using server::Grant;
using server::Member;

std::string Text(const AccessPolicy& p) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(p, &out);
  return out;
}

Member* Find(AccessPolicy& p, const std::string& principal) {
  for (Member& m : *p.mutable_members())
    if (m.principal() == principal) return &m;
  return nullptr;
}

void Grant(Member& m, const std::string& object, bool read) {
  for (server::Grant& g : *m.mutable_grants()) {
    if (g.object() != object) continue;
    (read ? g.set_read(true) : g.set_write(true));
    return;
  }
  server::Grant* g = m.add_grants();
  g->set_object(object);
  (read ? g->set_read(true) : g->set_write(true));
}

// The change the flags ask for, applied to `p`; InvalidArgument for one
// that names nothing to change.
absl::Status Apply(const AclState& s, AccessPolicy& p) {
  if (s.verb == "grant") {
    if (s.roles.empty() && s.reads.empty() && s.writes.empty())
      return absl::InvalidArgumentError("grant what? give --role, --read or --write");
    Member* m = Find(p, s.principal);
    if (m == nullptr) {
      m = p.add_members();
      m->set_principal(s.principal);
    }
    for (const std::string& r : s.roles)
      if (std::find(m->roles().begin(), m->roles().end(), r) == m->roles().end()) m->add_roles(r);
    for (const std::string& o : s.reads) Grant(*m, o, true);
    for (const std::string& o : s.writes) Grant(*m, o, false);
    return absl::OkStatus();
  }
  // revoke
  Member* m = Find(p, s.principal);
  if (m == nullptr)
    return absl::NotFoundError(StrCat("\"", s.principal, "\" is not in the policy"));
  if (s.roles.empty() && s.reads.empty() && s.writes.empty()) {
    auto* members = p.mutable_members();
    members->erase(std::remove_if(members->begin(), members->end(),
                                  [&](const Member& x) { return x.principal() == s.principal; }),
                   members->end());
    return absl::OkStatus();
  }
  auto* roles = m->mutable_roles();
  for (const std::string& r : s.roles)
    roles->erase(std::remove(roles->begin(), roles->end(), r), roles->end());
  for (server::Grant& g : *m->mutable_grants()) {
    if (std::count(s.reads.begin(), s.reads.end(), g.object())) g.set_read(false);
    if (std::count(s.writes.begin(), s.writes.end(), g.object())) g.set_write(false);
  }
  auto* grants = m->mutable_grants();
  grants->erase(std::remove_if(grants->begin(), grants->end(),
                               [](const server::Grant& g) { return !g.read() && !g.write(); }),
                grants->end());
  return absl::OkStatus();
}

}  // namespace

int RunAcl(const AclState& s) {
  if (s.verb == "token") {
    if (s.principal.empty() || s.principal.find_first_of(" \t\r\n#") != std::string::npos ||
        s.principal.size() > 64) {
      std::fprintf(stderr,
                   "msadmin acl token: a principal is 1 to 64 bytes, without spaces or '#'\n");
      return 2;
    }
    absl::StatusOr<std::string> existing = ReadFileToString(s.file, 16 << 20);
    if (!existing.ok() && !absl::IsNotFound(existing.status())) {
      std::fprintf(stderr, "msadmin acl token: %s\n",
                   std::string(existing.status().message()).c_str());
      return 1;
    }
    std::string text =
        existing.ok() ? *existing : "# megastored --gateway-tokens-file: sha256:HEX PRINCIPAL\n";
    if (!text.empty() && text.back() != '\n') text += '\n';
    const std::string token = RandomToken();
    text += StrCat("sha256:", Sha256Hex(token), " ", s.principal, "\n");
    if (absl::Status st = WriteFileAtomically(s.file, text, 0600); !st.ok()) {
      std::fprintf(stderr, "msadmin acl token: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    if (s.json) {
      std::printf("{\"token\":\"%s\",\"principal\":\"%s\",\"file\":\"%s\"}\n", token.c_str(),
                  JsonEscape(s.principal).c_str(), JsonEscape(s.file).c_str());
      return 0;
    }
    std::printf("%s\n", token.c_str());
    std::fprintf(stderr,
                 "a bearer token for %s (shown once; %s keeps only its hash). Send it as "
                 "\"Authorization: Bearer TOKEN\"; restart the gateway to load it.\n",
                 s.principal.c_str(), s.file.c_str());
    return 0;
  }
  absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(s.config);
  if (!config.ok()) {
    std::fprintf(stderr, "msadmin acl: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  rpc::RpcTransport transport;
  const absl::Duration timeout = absl::Seconds(s.timeout);
  // What each datacenter holds.
  struct Held {
    std::string name, address;
    absl::StatusOr<AccessPolicy> policy;  // version 0, no members: none
  };
  std::vector<Held> held;
  AccessPolicy newest;
  for (const server::DatacenterConfig& dc : config->datacenters()) {
    Held h{dc.name(), server::AddressOf(dc, server::Role::kLock), AccessPolicy()};
    absl::StatusOr<std::string> raw = Await<std::string>(
        [&](auto cb) { transport.Call(h.address, "acl.Get", "", timeout, std::move(cb)); });
    AccessPolicy p;
    if (!raw.ok())
      h.policy = raw.status();
    else if (!p.ParseFromString(*raw))
      h.policy = absl::DataLossError("answered something that is not a policy");
    else
      h.policy = p;
    if (h.policy.ok() && h.policy->version() > newest.version()) newest = *h.policy;
    held.push_back(std::move(h));
  }

  if (s.verb == "show" && s.json) {
    int rc = 0;
    std::string dcs;
    for (const Held& h : held) {
      dcs += StrCat(dcs.empty() ? "" : ",", "{\"datacenter\":\"", JsonEscape(h.name), "\",");
      if (h.policy.ok()) {
        dcs += StrCat("\"version\":\"", h.policy->version(), "\"}");
      } else {
        dcs += StrCat("\"error\":\"", JsonEscape(h.policy.status().message()), "\"}");
        rc = 1;
      }
    }
    std::printf("{\"datacenters\":[%s],\"policy\":%s}\n", dcs.c_str(),
                newest.version() > 0 ? cluster_internal::Json(newest).c_str() : "null");
    return rc;
  }
  if (s.verb == "show") {
    int rc = 0;
    for (const Held& h : held) {
      if (!h.policy.ok()) {
        std::printf("%s (%s): %s\n", h.name.c_str(), h.address.c_str(),
                    std::string(h.policy.status().message()).c_str());
        rc = 1;
      } else if (h.policy->version() == 0) {
        std::printf(
            "%s: no policy: every caller with a certificate of the CA may call "
            "everything\n",
            h.name.c_str());
      } else {
        std::printf(
            "%s: version %llu%s\n", h.name.c_str(),
            static_cast<unsigned long long>(h.policy->version()),
            h.policy->version() < newest.version() ? " (OLDER than another datacenter's)" : "");
      }
    }
    if (newest.version() > 0) std::printf("\n%s", Text(newest).c_str());
    return rc;
  }

  for (const Held& h : held) {
    if (h.policy.ok()) continue;
    std::fprintf(
        stderr,
        "msadmin acl %s: %s (%s) did not answer (%s): a change needs every datacenter, or versions "
        "would diverge\n",
        s.verb.c_str(), h.name.c_str(), h.address.c_str(),
        std::string(h.policy.status().message()).c_str());
    return 1;
  }
  AccessPolicy next;
  if (s.verb == "set") {
    absl::StatusOr<std::string> text = ReadFileToString(s.file, 16 << 20);
    if (!text.ok()) {
      std::fprintf(stderr, "msadmin acl set: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    if (!google::protobuf::TextFormat::ParseFromString(*text, &next)) {
      std::fprintf(stderr,
                   "msadmin acl set: %s is not an access policy in protobuf "
                   "text format\n",
                   s.file.c_str());
      return 2;
    }
  } else {
    next = newest;
    if (absl::Status st = Apply(s, next); !st.ok()) {
      std::fprintf(stderr, "msadmin acl %s: %s\n", s.verb.c_str(),
                   std::string(st.message()).c_str());
      return 2;
    }
  }
  next.set_version(newest.version() + 1);
  if (absl::Status st = server::ValidatePolicy(next); !st.ok()) {
    std::fprintf(stderr, "msadmin acl %s: %s\n", s.verb.c_str(), std::string(st.message()).c_str());
    return 2;
  }
  int rc = 0;
  for (const Held& h : held) {
    absl::StatusOr<std::string> r = Await<std::string>([&](auto cb) {
      transport.Call(h.address, "acl.Set", next.SerializeAsString(), timeout, std::move(cb));
    });
    if (r.ok()) {
      std::printf("%s: policy version %llu installed\n", h.name.c_str(),
                  static_cast<unsigned long long>(next.version()));
    } else {
      std::printf("%s: NOT installed: %s\n", h.name.c_str(),
                  std::string(r.status().message()).c_str());
      rc = 1;
    }
  }
  if (!tls::DefaultTls().enabled())
    std::printf(
        "note: without TLS there are no principals, and the policy is not "
        "enforced (docs/security.md)\n");
  if (rc != 0)
    std::printf(
        "run it again once every datacenter answers: they must hold the same "
        "policy\n");
  return rc;
}

}  // namespace megastore::tools
