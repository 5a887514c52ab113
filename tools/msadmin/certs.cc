#include "tools/msadmin/certs.h"

#include <cstdio>
#include <ctime>

#include "absl/strings/str_join.h"
#include "base/cli.h"
#include "base/strings.h"
#include "base/tls/certs.h"

namespace megastore::tools {

void AddCertsCommand(CLI::App& app, CertsState& state) {
  CLI::App* certs =
      app.add_subcommand("certs", "A certificate authority for TLS between megastore's processes");
  certs->require_subcommand(1);
  CLI::App* init =
      certs->add_subcommand("init",
                            "Make a CA in --dir: ca.key (keep it apart from the data, owner-only) "
                            "and ca.crt (give it to every "
                            "process)");
  init->add_option("--dir", state.dir, "the CA's directory (created owner-only)")->required();
  init->add_option("--name", state.name, "the CA's common name")->capture_default_str();
  init->add_option("--days", state.days, "valid for this many days (default 3650)")
      ->check(CLI::Range(1, 36500));
  AddOutputOption(init, state.json, "one object: name, certificate, key");
  init->callback([&state] { state.verb = "init"; });

  CLI::App* issue =
      certs->add_subcommand("issue",
                            "Issue NAME.crt and NAME.key under the CA in --dir: a certificate a "
                            "process, an operator's tool or "
                            "an application server presents (its common name is its principal)");
  issue->add_option("--dir", state.dir, "the CA's directory")->required();
  issue
      ->add_option("name", state.name,
                   "file name of the certificate and key (letters, digits, "
                   "'_', '-', '.')")
      ->required();
  issue->add_option("--cn", state.common_name,
                    "the principal: the certificate's common name (default: NAME)");
  issue->add_option("--host", state.hosts,
                    "an IP address or DNS name it serves on (repeat for more)");
  issue->add_option("--out", state.out, "where to write them (default: --dir)");
  issue->add_option("--days", state.days, "valid for this many days (default 825)")
      ->check(CLI::Range(1, 36500));
  AddOutputOption(issue, state.json, "one object: certificate, key, principal, hosts");
  issue->callback([&state] { state.verb = "issue"; });

  CLI::App* show =
      certs->add_subcommand("show",
                            "Print who a certificate names, who issued it, where it serves "
                            "and until when");
  show->add_option("files", state.files, "certificate files (PEM)")->required();
  AddOutputOption(show, state.json,
                  "one object per file: file, principal, issuer, notBefore, notAfter (UTC), "
                  "hosts");
  show->callback([&state] { state.verb = "show"; });
}

namespace {

std::string Date(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

int Fail(const char* verb, const absl::Status& s) {
  std::fprintf(stderr, "msadmin certs %s: %s\n", verb, std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int RunCerts(const CertsState& s) {
  if (s.verb == "init") {
    const std::string name = s.name.empty() ? "megastore CA" : s.name;
    if (absl::Status st = tls::CreateCa(s.dir, name, s.days > 0 ? s.days : 3650); !st.ok())
      return Fail("init", st);
    if (s.json) {
      std::printf("{\"name\":\"%s\",\"certificate\":\"%s\",\"key\":\"%s\"}\n",
                  JsonEscape(name).c_str(), JsonEscape(s.dir + "/ca.crt").c_str(),
                  JsonEscape(s.dir + "/ca.key").c_str());
      return 0;
    }
    std::printf(
        "CA \"%s\": %s/ca.crt (give it to every process), %s/ca.key "
        "(owner-only; keep it off the "
        "servers)\n",
        name.c_str(), s.dir.c_str(), s.dir.c_str());
    return 0;
  }
  if (s.verb == "issue") {
    tls::CertificateRequest r;
    r.common_name = s.common_name.empty() ? s.name : s.common_name;
    r.hosts = s.hosts;
    if (s.days > 0) r.days = s.days;
    const std::string out = s.out.empty() ? s.dir : s.out;
    if (absl::Status st = tls::IssueCertificate(s.dir, out, s.name, r); !st.ok())
      return Fail("issue", st);
    if (s.json) {
      std::string hosts;
      for (const std::string& h : r.hosts)
        hosts += StrCat(hosts.empty() ? "" : ",", "\"", JsonEscape(h), "\"");
      std::printf("{\"certificate\":\"%s\",\"key\":\"%s\",\"principal\":\"%s\",\"hosts\":[%s]}\n",
                  JsonEscape(StrCat(out, "/", s.name, ".crt")).c_str(),
                  JsonEscape(StrCat(out, "/", s.name, ".key")).c_str(),
                  JsonEscape(r.common_name).c_str(), hosts.c_str());
      return 0;
    }
    std::printf("%s/%s.crt and %s/%s.key (owner-only): principal \"%s\"%s%s\n", out.c_str(),
                s.name.c_str(), out.c_str(), s.name.c_str(), r.common_name.c_str(),
                r.hosts.empty() ? "" : ", serving on ", absl::StrJoin(r.hosts, ", ").c_str());
    return 0;
  }
  if (s.verb == "show") {
    int rc = 0;
    for (const std::string& f : s.files) {
      absl::StatusOr<tls::CertificateInfo> info = tls::ReadCertificateInfo(f);
      if (!info.ok()) {
        rc = Fail("show", info.status());
        continue;
      }
      if (s.json) {
        std::string hosts;
        for (const std::string& h : info->hosts)
          hosts += StrCat(hosts.empty() ? "" : ",", "\"", JsonEscape(h), "\"");
        std::printf(
            "{\"file\":\"%s\",\"principal\":\"%s\",\"issuer\":\"%s\",\"notBefore\":\"%s\","
            "\"notAfter\":\"%s\",\"hosts\":[%s]}\n",
            JsonEscape(f).c_str(), JsonEscape(info->subject_common_name).c_str(),
            JsonEscape(info->issuer_common_name).c_str(), Date(info->not_before_unix).c_str(),
            Date(info->not_after_unix).c_str(), hosts.c_str());
        continue;
      }
      std::printf(
          "%s\n  principal  %s\n  issued by  %s\n  valid      %s to %s\n  "
          "hosts      %s\n",
          f.c_str(), info->subject_common_name.c_str(), info->issuer_common_name.c_str(),
          Date(info->not_before_unix).c_str(), Date(info->not_after_unix).c_str(),
          info->hosts.empty() ? "(any)" : absl::StrJoin(info->hosts, ", ").c_str());
    }
    return rc;
  }
  return 2;
}

}  // namespace megastore::tools
