// Certificates for msbench --tls-compare: a CA and one certificate (for
// 127.0.0.1, serving both ends) in a fresh temporary directory.
#pragma once

#include "absl/status/statusor.h"
#include "base/tls/context.h"

namespace megastore::tools {

absl::StatusOr<tls::TlsFiles> ThrowawayTls();
// Removes the directory ThrowawayTls made.
void RemoveThrowawayTls(const tls::TlsFiles& files);

}  // namespace megastore::tools
