// Run and RunAtRow: a transaction body run to a commit, retried on
// conflicts and transient failures.
#include "base/coding.h"
#include "base/retry.h"
#include "base/status.h"
#include "base/strings.h"
#include "txn/internal.h"
#include "txn/transaction.h"

namespace megastore::txn {

Retry TransactionRetry(Env* env, const TransactionOptions& options) {
  const int64_t deadline =
      options.deadline > absl::ZeroDuration()
          ? env->MonotonicMicros() + absl::ToInt64Microseconds(options.deadline)
          : 0;
  return Retry(env,
               RetryPolicy::Jittered(options.max_retry_backoff, std::max(1, options.max_attempts)),
               deadline);
}

absl::Status DeadlinePassed(absl::Duration total, int attempts) {
  return absl::DeadlineExceededError(StrCat("transaction deadline (", absl::FormatDuration(total),
                                            ") passed after ", attempts, " attempt(s)"));
}

bool PositionFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

absl::Status StartAttempt(Retry& retry, absl::Duration total, TransactionOptions* options) {
  // Even a first attempt needs time left: options->deadline 0 would mean "none".
  if (retry.Expired() || !retry.StartAttempt()) return DeadlinePassed(total, retry.attempts());
  if (retry.deadline() != 0) options->deadline = retry.Left();
  return absl::OkStatus();
}

void RunAtRow(Context ctx, std::string root, Body body, Callback<CommitInfo> done) {
  struct Attempt : std::enable_shared_from_this<Attempt> {
    explicit Attempt(Env* env) : retry(env, RetryPolicy::Jittered(absl::Milliseconds(50), 20)) {}
    Context ctx;
    std::string root;
    Body body;
    Callback<CommitInfo> finished;
    megastore::Retry retry;
    void Go() {
      retry.StartAttempt();  // the policy has no deadline: Retry allows it
      auto self = shared_from_this();
      Transaction::BeginAtRow(ctx, root, {},
                              [self](absl::StatusOr<std::shared_ptr<Transaction>> t) {
                                if (!t.ok()) return self->Retry(t.status());
                                auto txn = *t;
                                self->body(txn, [self, txn](absl::Status s) {
                                  if (!s.ok()) return self->Retry(s);
                                  txn->Commit([self](absl::StatusOr<CommitInfo> info) {
                                    if (info.ok() || !absl::IsAborted(info.status()))
                                      return self->finished(std::move(info));
                                    self->Retry(info.status());
                                  });
                                });
                              });
    }
    void Retry(absl::Status s) {
      const bool transient =
          absl::IsAborted(s) || absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
      if (!transient || !retry.ScheduleRetry([self = shared_from_this()] { self->Go(); }))
        return finished(s);
    }
  };
  auto a = std::make_shared<Attempt>(ctx.client->env());
  a->ctx = ctx;
  a->root = std::move(root);
  a->body = std::move(body);
  a->finished = std::move(done);
  a->Go();
}

namespace {

struct RunOp : std::enable_shared_from_this<RunOp> {
  RunOp(Context ctx, TransactionOptions o)
      : ctx(ctx), options(Ordered(ctx, o)), retry(TransactionRetry(ctx.client->env(), options)) {}
  // Orders this app server's commits to the group, oldest first.
  static TransactionOptions Ordered(const Context& ctx, TransactionOptions o) {
    if (o.first_attempt == 0)
      o.first_attempt = std::max<int64_t>(1, ctx.client->env()->MonotonicMicros());
    return o;
  }
  Context ctx;
  std::string root_table;
  std::vector<KeyValue> root_key;
  const TransactionOptions options;
  Body body;
  Callback<CommitInfo> done;
  megastore::Retry retry;

  void Attempt() {
    auto self = shared_from_this();
    TransactionOptions this_try = options;
    if (absl::Status s = StartAttempt(retry, options.deadline, &this_try); !s.ok())
      return Finish(s, false);
    // The position is read with the body's first read (one request less).
    Transaction::Begin(
        ctx, root_table, root_key, this_try,
        [self](absl::StatusOr<std::shared_ptr<Transaction>> txn) {
          if (!txn.ok()) return self->Finish(txn.status(), PositionFailure(txn.status()));
          auto t = *txn;
          self->body(t, [self, t](absl::Status s) {
            // The application's own failure, or the position's (as a failed
            // Begin, retried if transient).
            if (!s.ok()) return self->Finish(s, PositionFailure(t->position_failure()));
            t->Commit([self, t](absl::StatusOr<CommitInfo> info) {
              if (info.ok()) info->attempts = self->retry.attempts();
              // Lost a position this app server's lane judged: wait for
              // the turn it kept rather than a random pause.
              if (!info.ok() && replication::GroupClient::HasTurn(info.status()))
                return self->AwaitTurn(t->group(), info.status());
              // After Commit only a conflict is certain not to have
              // committed (or a position never found: nothing proposed).
              const bool retry =
                  absl::IsAborted(info.status()) || PositionFailure(t->position_failure());
              self->Finish(std::move(info), retry);
            });
          });
        },
        /*deferred=*/true);
  }

  void AwaitTurn(const replication::GroupRef& group, absl::Status failure) {
    if (!retry.attempts_left()) return Finish(failure, false);
    if (retry.Expired()) return Finish(DeadlinePassed(options.deadline, retry.attempts()), false);
    ctx.client->AwaitTurn(
        group, options.first_attempt,
        [self = shared_from_this(), failure](absl::StatusOr<bool> turn) {
          if (!turn.ok())
            return self->Finish(self->retry.deadline() != 0
                                    ? DeadlinePassed(self->options.deadline, self->retry.attempts())
                                    : failure,
                                false);
          self->Attempt();
        },
        retry.deadline());
  }

  void Finish(absl::StatusOr<CommitInfo> result, bool retryable) {
    if (!result.ok() && retryable) {
      if (retry.ScheduleRetry([self = shared_from_this()] { self->Attempt(); })) return;
      // Out of attempts: the last failure says what happened. Out of time
      // with attempts left: the deadline.
      if (retry.attempts_left()) result = DeadlinePassed(options.deadline, retry.attempts());
    }
    if (done) std::exchange(done, nullptr)(std::move(result));
  }
};

}  // namespace

void Run(Context ctx, std::string root_table, std::vector<KeyValue> root_key,
         TransactionOptions options, Body body, Callback<CommitInfo> done) {
  auto op = std::make_shared<RunOp>(ctx, options);
  op->root_table = std::move(root_table);
  op->root_key = std::move(root_key);
  op->body = std::move(body);
  op->done = std::move(done);
  op->Attempt();
}

}  // namespace megastore::txn
