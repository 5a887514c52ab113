// Reaching a cell's lock service from a flag: "HOST:PORT" (a megastored
// running the lock role: RemoteLockService) or "etcd:HOST:PORT[,HOST:PORT...]"
// (an etcd cluster, keys under "/megastore").
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "storage/lock/lock_service.h"

namespace megastore::storage::cell {

absl::StatusOr<std::unique_ptr<lock::LockService>> ConnectLockService(const std::string& spec);

}  // namespace megastore::storage::cell
