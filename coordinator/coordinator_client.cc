#include "coordinator/coordinator_client.h"

#include <algorithm>
#include <memory>

#include "base/gather.h"
#include "base/proto_call.h"
#include "coordinator/coordinator.h"
#include "storage/lock/lock.pb.h"

namespace megastore::coordinator {

namespace {

CoordinatorRequest Request(const GroupName& group, uint64_t position, uint64_t epoch) {
  CoordinatorRequest r;
  r.set_table(group.table);
  r.set_root(group.root);
  r.set_position(position);
  r.set_epoch(epoch);
  return r;
}

AdvisoryLockRequest LockRequest(const GroupName& group, std::string owner) {
  AdvisoryLockRequest r;
  r.set_table(group.table);
  r.set_root(group.root);
  r.set_owner(std::move(owner));
  return r;
}

}  // namespace

void CoordinatorClient::Check(std::string_view node, const GroupName& group, absl::Duration timeout,
                              Callback<CoordinatorReply> done) {
  CallProto<CoordinatorReply>(transport_, node, "coord.Check", Request(group, 0, 0), timeout,
                              std::move(done));
}

void CoordinatorClient::Validate(std::string_view node, const GroupName& group, uint64_t position,
                                 uint64_t epoch, absl::Duration timeout,
                                 Callback<CoordinatorReply> done) {
  CallProto<CoordinatorReply>(transport_, node, "coord.Validate", Request(group, position, epoch),
                              timeout, std::move(done));
}

void CoordinatorClient::Invalidate(std::string_view node, const GroupName& group, uint64_t position,
                                   absl::Duration timeout, Callback<CoordinatorReply> done) {
  CallProto<CoordinatorReply>(transport_, node, "coord.Invalidate", Request(group, position, 0),
                              timeout, std::move(done));
}

void CoordinatorClient::SurveyLocks(const std::vector<std::string>& lock_services,
                                    std::string_view replica, absl::Duration timeout,
                                    absl::AnyInvocable<void(bool)> done) {
  using storage::lock::LockReply;
  const size_t n = lock_services.size();
  const size_t majority = n / 2 + 1;
  // Free at more than n - majority services: the coordinator holds fewer
  // than a majority.
  auto on_locks = [n, majority,
                   done = std::move(done)](Gather<LockReply>::Results results) mutable {
    size_t free = 0;
    for (auto& r : results)
      if (r && r->ok() && !(*r)->held()) ++free;
    done(free > n - majority);
  };
  auto gather = std::make_shared<Gather<LockReply>>(n, n, std::move(on_locks));
  storage::lock::LockRequest q;
  q.set_name(LockName(replica));
  for (size_t i = 0; i < n; ++i)
    CallProto<LockReply>(transport_, lock_services[i], "lock.Query", q, timeout, gather->Slot(i));
  gather->FinishIfEmpty();
}

void CoordinatorClient::Lock(std::string_view node, const GroupName& group, std::string owner,
                             absl::Duration wait, absl::Duration lease, absl::Duration timeout,
                             Callback<AdvisoryLockReply> done) {
  AdvisoryLockRequest req = LockRequest(group, std::move(owner));
  req.set_wait_ms(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait))));
  req.set_lease_ms(static_cast<uint64_t>(std::max<int64_t>(1, absl::ToInt64Milliseconds(lease))));
  CallProto<AdvisoryLockReply>(transport_, node, "coord.Lock", req, timeout, std::move(done));
}

void CoordinatorClient::Unlock(std::string_view node, const GroupName& group, std::string owner,
                               absl::Duration timeout, Callback<AdvisoryLockReply> done) {
  CallProto<AdvisoryLockReply>(transport_, node, "coord.Unlock",
                               LockRequest(group, std::move(owner)), timeout, std::move(done));
}

}  // namespace megastore::coordinator
