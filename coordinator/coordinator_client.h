// CoordinatorClient: the calls a writer and a reader make to coordinators
// (coordinator.h), and the writer's lock survey.
//
//  * A current read asks its local coordinator Check(group) and, after a
//    catch-up, Validate(group, position, epoch).
//  * A writer invalidates the coordinator of each full replica that missed
//    its entry: Invalidate(group, position). If that coordinator cannot be
//    reached, SurveyLocks asks the other datacenters' lock services whether
//    it still holds its lock there; once it cannot hold a majority of them
//    it cannot be answering "valid", so the write may go ahead.
//  * A writer that asks for it queues on the group's advisory lock:
//    Lock / Unlock.
//
// Every callback runs exactly once, possibly before the call returns, on
// the transport's thread. The client holds no state but its transport.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/transport.h"
#include "coordinator/coordinator.pb.h"

namespace megastore::coordinator {

// The entity group a call is about (coordinators know groups by table and
// root row).
struct GroupName {
  std::string table;
  std::string root;
};

class CoordinatorClient {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

  // `transport` must outlive the client.
  explicit CoordinatorClient(Transport* transport) : transport_(transport) {}

  // coord.Check at `node`: whether the group is up to date at its replica,
  // and the coordinator's epoch.
  void Check(std::string_view node, const GroupName& group, absl::Duration timeout,
             Callback<CoordinatorReply> done);
  // coord.Validate: the group caught up to `position` since Check reported
  // `epoch`.
  void Validate(std::string_view node, const GroupName& group, uint64_t position, uint64_t epoch,
                absl::Duration timeout, Callback<CoordinatorReply> done);
  // coord.Invalidate: `position` was chosen without this replica's accept.
  void Invalidate(std::string_view node, const GroupName& group, uint64_t position,
                  absl::Duration timeout, Callback<CoordinatorReply> done);

  // The lock survey of the coordinator of replica `replica`: asks
  // `lock_services` (every other datacenter's) whether its lock is held.
  // Once every service answered (or failed): done(true) if so many reported
  // it free that it cannot hold a majority of them.
  void SurveyLocks(const std::vector<std::string>& lock_services, std::string_view replica,
                   absl::Duration timeout, absl::AnyInvocable<void(bool cannot_serve)> done);

  // coord.Lock: queue at most `wait` for the group's advisory lock, held for
  // at most `lease` once granted.
  void Lock(std::string_view node, const GroupName& group, std::string owner, absl::Duration wait,
            absl::Duration lease, absl::Duration timeout, Callback<AdvisoryLockReply> done);
  // coord.Unlock: release it, or leave its queue.
  void Unlock(std::string_view node, const GroupName& group, std::string owner,
              absl::Duration timeout, Callback<AdvisoryLockReply> done);

 private:
  Transport* const transport_;
};

}  // namespace megastore::coordinator
