#include "storage/lock/lock_table.h"

#include "base/strings.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {

LockTable::Holder LockTable::HolderLocked(std::string_view name) {
  Holder h;
  auto it = leases_.find(name);
  if (it == leases_.end()) return h;
  const int64_t now = env_->MonotonicMicros();
  if (it->second.expires <= now) {
    leases_.erase(it);
    return h;
  }
  h.held = true;
  h.owner = it->second.owner;
  h.remaining = absl::Microseconds(it->second.expires - now);
  return h;
}

LockTable::Holder LockTable::Acquire(std::string_view name, std::string_view owner,
                                     absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  Holder h = HolderLocked(name);
  if (h.held && h.owner != owner) return h;
  Lease& l = leases_[std::string(name)];
  l.owner = std::string(owner);
  l.expires = env_->MonotonicMicros() + absl::ToInt64Microseconds(lease);
  return HolderLocked(name);
}

LockTable::Holder LockTable::Query(std::string_view name) {
  absl::MutexLock lock(&mu_);
  return HolderLocked(name);
}

void LockTable::Release(std::string_view name, std::string_view owner) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(name);
  if (it != leases_.end() && it->second.owner == owner) leases_.erase(it);
}

void LockTable::Serve(std::string_view method, std::string request, Responder respond) {
  LockReply reply;
  Holder h;
  if (method == "lock.Acquire") {
    AcquireRequest r;
    if (!r.ParseFromString(request) || r.name().empty() || r.owner().empty() ||
        r.lease_micros() <= 0) {
      respond(absl::InvalidArgumentError(
          "lock.Acquire: malformed request (needs a name, an owner and a positive lease)"));
      return;
    }
    h = Acquire(r.name(), r.owner(), absl::Microseconds(r.lease_micros()));
    reply.set_granted(h.held && h.owner == r.owner());
  } else if (method == "lock.Query" || method == "lock.Release") {
    LockRequest r;
    if (!r.ParseFromString(request) || r.name().empty()) {
      respond(absl::InvalidArgumentError(StrCat(method, ": malformed request")));
      return;
    }
    if (method == "lock.Release") Release(r.name(), r.owner());
    h = Query(r.name());
  } else {
    respond(absl::UnimplementedError(StrCat("lock service has no method ", method)));
    return;
  }
  reply.set_held(h.held);
  reply.set_holder(h.owner);
  reply.set_remaining_micros(absl::ToInt64Microseconds(h.remaining));
  respond(reply.SerializeAsString());
}

}  // namespace megastore::storage::lock
