// Internal to the replication client library (group_client*.cc, commit.cc,
// catch_up.cc, read_position.cc, write_*.cc): deadlines, timers and the
// calls it makes, all of them holding the GroupClient's lifetime so nothing
// runs after the client is destroyed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "base/proto_call.h"
#include "base/retry.h"
#include "coordinator/coordinator_client.h"
#include "replication/group_client.h"

namespace megastore::replication::internal {

template <typename T>
using Callback = GroupClient::Callback<T>;

// The caller's deadline, or the client's default from now.
int64_t DeadlineFrom(GroupClient* c, int64_t deadline);
bool Expired(GroupClient* c, int64_t deadline);
// A pause of `d`, cut short at `deadline` (when the waiter then gives up).
absl::Duration Capped(GroupClient* c, int64_t deadline, absl::Duration d);
// A random pause in (0, max].
absl::Duration Jitter(GroupClient* c, absl::Duration max);
// Runs `fn` after `d` on the Env's timer, unless the client is gone by then.
// The timer's id, for Env::Cancel.
Env::TimerId Later(GroupClient* c, absl::Duration d, std::function<void()> fn);
// How long one request may wait: `timeout` (default: the client's RPC
// timeout), never past `deadline` (0: no deadline), at least 1 ms.
absl::Duration RequestTimeout(GroupClient* c, std::optional<absl::Duration> timeout,
                              int64_t deadline);

// `done`, made to do nothing if it runs after the client is gone.
template <typename T>
Callback<T> Guarded(GroupClient* c, Callback<T> done) {
  return [life = c->lifetime(), done = std::move(done)](absl::StatusOr<T> r) mutable {
    GroupClient::Entry entry(life);
    if (!entry) return;  // the client is gone
    done(std::move(r));
  };
}

// Calls `method` at `node` with a protobuf request and parses the reply.
template <typename Reply, typename Request>
void CallProto(GroupClient* c, std::string_view node, std::string_view method,
               const Request& request, Callback<Reply> done,
               std::optional<absl::Duration> timeout = std::nullopt, int64_t deadline = 0) {
  megastore::CallProto<Reply>(c->transport(), node, method, request,
                              RequestTimeout(c, timeout, deadline), Guarded(c, std::move(done)));
}

// CallProto for requests that are safe to repeat: a lost request or reply
// (or a replica briefly unavailable) is retried after a short random pause
// (up to options().max_backoff) until `deadline`.
template <typename Reply, typename Request>
void CallRetrying(GroupClient* c, std::string node, std::string method, Request request,
                  int64_t deadline, Callback<Reply> done) {
  struct Op : std::enable_shared_from_this<Op> {
    Op(GroupClient* c, int64_t deadline)
        : c(c), retry(c->env(), RetryPolicy::Jittered(c->options().max_backoff), deadline) {}
    GroupClient* const c;
    std::string node, method;
    Request request;
    Callback<Reply> done;
    Retry retry;
    void Attempt() {
      retry.StartAttempt();
      CallProto<Reply>(
          c, node, method, request,
          [self = this->shared_from_this()](absl::StatusOr<Reply> r) {
            self->OnReply(std::move(r));
          },
          std::nullopt, retry.deadline());
    }
    void OnReply(absl::StatusOr<Reply> r) {
      const bool transient =
          absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status());
      std::optional<absl::Duration> pause;
      if (!r.ok() && transient) pause = retry.NextPause();
      if (!pause) return done(std::move(r));
      Later(c, *pause, [self = this->shared_from_this()] { self->Attempt(); });
    }
  };
  auto op = std::make_shared<Op>(c, deadline);
  op->node = std::move(node);
  op->method = std::move(method);
  op->request = std::move(request);
  op->done = std::move(done);
  op->Attempt();
}

// The group as coordinators name it.
coordinator::GroupName CoordinatorGroup(const GroupRef& group);

// A replica's applied record as a read position there.
LogPosition FromApplied(const AppliedRecord& a, int replica);

// A log entry that changes nothing, for deciding a position nobody knows.
LogEntry NoOp(GroupClient* c);

}  // namespace megastore::replication::internal
