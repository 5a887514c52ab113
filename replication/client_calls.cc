#include "replication/client_calls.h"

#include <algorithm>

#include "base/strings.h"

namespace megastore::replication::internal {

int64_t DeadlineFrom(GroupClient* c, int64_t deadline) {
  if (deadline != 0) return deadline;
  return c->env()->MonotonicMicros() + absl::ToInt64Microseconds(c->options().deadline);
}

bool Expired(GroupClient* c, int64_t deadline) { return c->env()->MonotonicMicros() >= deadline; }

absl::Duration Capped(GroupClient* c, int64_t deadline, absl::Duration d) {
  return std::min(d,
                  absl::Microseconds(std::max<int64_t>(0, deadline - c->env()->MonotonicMicros())));
}

absl::Duration Jitter(GroupClient* c, absl::Duration max) {
  const int64_t us = std::max<int64_t>(1, absl::ToInt64Microseconds(max));
  return absl::Microseconds(static_cast<int64_t>(c->env()->Random64() % us) + 1);
}

Env::TimerId Later(GroupClient* c, absl::Duration d, std::function<void()> fn) {
  return c->env()->Schedule(d, [life = c->lifetime(), fn = std::move(fn)] {
    GroupClient::Entry entry(life);
    if (entry) fn();
  });
}

absl::Duration RequestTimeout(GroupClient* c, std::optional<absl::Duration> timeout,
                              int64_t deadline) {
  absl::Duration wait = timeout.value_or(c->options().rpc_timeout);
  if (deadline != 0)
    wait = std::clamp(absl::Microseconds(deadline - c->env()->MonotonicMicros()),
                      absl::Milliseconds(1), wait);
  return wait;
}

coordinator::GroupName CoordinatorGroup(const GroupRef& group) {
  return coordinator::GroupName{group.table(), group.root()};
}

LogPosition FromApplied(const AppliedRecord& a, int replica) {
  LogPosition p;
  p.position = a.position();
  p.timestamp = a.timestamp();
  p.next_leader = a.next_leader();
  p.replica = replica;
  return p;
}

LogEntry NoOp(GroupClient* c) {
  LogEntry e;
  e.set_id(StrCat("noop-", c->env()->Random64()));
  e.set_noop(true);
  e.set_next_leader(-1);
  return e;
}

}  // namespace megastore::replication::internal
