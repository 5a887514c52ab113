// Defaults of the operator tools (msadmin) from the environment and an rc
// file, so a cluster's config and certificates need not be repeated on
// every command (docs/msadmin.md):
//
//   MEGASTORE_CONFIG     the cluster config (every --config)
//   MEGASTORE_TLS_CA     --tls-ca
//   MEGASTORE_TLS_CERT   --tls-cert
//   MEGASTORE_TLS_KEY    --tls-key
//   MEGASTORE_OUTPUT     -o: text or json
//
// The rc file ($MEGASTORE_RC, else $XDG_CONFIG_HOME/megastore/rc, else
// ~/.config/megastore/rc) holds the same as `key = value` lines (config,
// tls-ca, tls-cert, tls-key, output; '#' starts a comment). A variable set
// in the environment wins over the file; a flag wins over both. Relative
// paths in the file are taken from its directory.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace megastore {

// The rc file LoadToolDefaults reads ("" if no HOME or XDG_CONFIG_HOME).
std::string ToolRcPath();

// Sets the variables above from the rc file where the environment has
// none. OK if there is no file; InvalidArgument naming FILE:LINE for a
// line that is not `key = value` with a known key, or a file over 64 KiB.
absl::Status LoadToolDefaults(const std::string& rc_path = ToolRcPath());

}  // namespace megastore
