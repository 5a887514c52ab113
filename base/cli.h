// Command-line parsing shared by our tools: CLI11, with our exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/rpc/rpc.h"
#include "base/version.h"

namespace megastore {

// --tls-ca, --tls-cert and --tls-key into `tls`; `who` says whose
// certificate it is ("this process's", "this tool's"). A tool's
// (`from_environment`) default to MEGASTORE_TLS_CA, _CERT and _KEY
// (base/tool_defaults.h).
inline void AddTlsFlags(CLI::App& app, rpc::TlsFiles& tls, const std::string& who,
                        bool from_environment = false) {
  CLI::Option* ca = app.add_option("--tls-ca", tls.ca,
                                   "mutual TLS 1.3 for RPC and HTTP: the CA certificate peers' "
                                   "certificates must be issued by "
                                   "(docs/security.md; with --tls-cert and --tls-key)");
  CLI::Option* cert = app.add_option(
      "--tls-cert", tls.cert,
      who + " certificate (PEM), issued by --tls-ca; its common name is the principal");
  CLI::Option* key = app.add_option("--tls-key", tls.key, "the key of --tls-cert (PEM)");
  if (from_environment) {
    ca->envname("MEGASTORE_TLS_CA");
    cert->envname("MEGASTORE_TLS_CERT");
    key->envname("MEGASTORE_TLS_KEY");
  }
}

// A tool's --config (the cluster config), defaulting to $MEGASTORE_CONFIG
// (or the rc file's `config`, base/tool_defaults.h: LoadToolDefaults must
// run first). `required`: a usage error if neither gives one. The default
// is set here, not through CLI11's envname: verbs share the variable, and
// CLI11 would apply the environment to every verb's option.
inline CLI::Option* AddConfigOption(CLI::App* app, std::string& config, const std::string& help,
                                    bool required = false) {
  CLI::Option* o = app->add_option("--config", config, help + " (default: $MEGASTORE_CONFIG)");
  if (const char* env = std::getenv("MEGASTORE_CONFIG"); env != nullptr && *env != '\0')
    config = env;
  else if (required)
    o->required();
  return o;
}

// The output switch of a verb that prints results: `-o text|json`
// (default $MEGASTORE_OUTPUT, else text), with `--json` short for
// `-o json`. (Set here for the reason AddConfigOption gives.)
inline void AddOutputOption(CLI::App* app, bool& json, const std::string& what_json_prints) {
  if (const char* env = std::getenv("MEGASTORE_OUTPUT"); env != nullptr && *env != '\0')
    json = std::string_view(env) == "json";
  CLI::Option* output = app->add_option_function<std::string>(
                               "-o,--output", [&json](const std::string& v) { json = v == "json"; },
                               "output format: text (for people) or json (" + what_json_prints +
                                   "); default $MEGASTORE_OUTPUT, else text")
                            ->check(CLI::IsMember({"text", "json"}));
  app->add_flag("--json", json, "the same as -o json")->excludes(output);
}

// Parses argv into `app` (with a --version flag). Returns -1 to
// continue, or the exit code to return now: 0 after --help or --version,
// 2 for a usage error (CLI11 prints the reason).
inline int ParseCommandLine(CLI::App& app, int argc, char** argv) {
  std::string name = argc > 0 ? argv[0] : "megastore";
  name = name.substr(name.rfind('/') + 1);
  app.set_version_flag("--version", name + " (megastore) " MEGASTORE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace megastore
