#include "tools/msbench/throwaway_tls.h"

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "base/status.h"
#include "base/tls/certs.h"

namespace megastore::tools {

absl::StatusOr<tls::TlsFiles> ThrowawayTls() {
  std::string dir = (std::filesystem::temp_directory_path() / "msbench-tls.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr)
    return absl::InternalError("cannot make a temporary directory");
  MS_RETURN_IF_ERROR(tls::CreateCa(dir, "msbench CA (throwaway)"));
  tls::CertificateRequest r;
  r.common_name = "msbench";
  r.hosts = {"127.0.0.1", "localhost"};
  MS_RETURN_IF_ERROR(tls::IssueCertificate(dir, dir, "msbench", r));
  return tls::TlsFiles{dir + "/ca.crt", dir + "/msbench.crt", dir + "/msbench.key"};
}

void RemoveThrowawayTls(const tls::TlsFiles& files) {
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::path(files.ca).parent_path(), ignored);
}

}  // namespace megastore::tools
