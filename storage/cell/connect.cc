#include "storage/cell/connect.h"

#include "base/strings.h"
#include "storage/lock/etcd_lock_service.h"
#include "storage/lock/lock_service_rpc.h"

namespace megastore::storage::cell {

namespace {
bool IsHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  return colon != std::string::npos && colon > 0 && colon + 1 < s.size() &&
         s.find_first_not_of("0123456789", colon + 1) == std::string::npos;
}
}  // namespace

absl::StatusOr<std::unique_ptr<lock::LockService>> ConnectLockService(const std::string& spec) {
  if (spec.rfind("etcd:", 0) == 0) {
    lock::EtcdOptions o;
    o.key_prefix = "/megastore";
    const std::string list = spec.substr(5);
    for (size_t start = 0; start <= list.size();) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      const std::string endpoint = list.substr(start, comma - start);
      start = comma + 1;
      if (!IsHostPort(endpoint))
        return absl::InvalidArgumentError(StrCat("lock service \"", spec, "\": etcd endpoint \"",
                                                 endpoint, "\" is not HOST:PORT"));
      o.endpoints.push_back(endpoint);
    }
    return std::unique_ptr<lock::LockService>(std::make_unique<lock::EtcdLockService>(o));
  }
  if (!IsHostPort(spec))
    return absl::InvalidArgumentError(StrCat("lock service \"", spec,
                                             "\" is neither HOST:PORT (a megastored lock role) nor "
                                             "etcd:HOST:PORT[,HOST:PORT...]"));
  return std::unique_ptr<lock::LockService>(std::make_unique<lock::RemoteLockService>(spec));
}

}  // namespace megastore::storage::cell
