// Blocking on an asynchronous call: for callers that may block (an app
// server's thread, a tool, a test), never from a callback of the same
// transport or Env thread that must deliver the answer.
#pragma once

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "base/env.h"

namespace megastore {

// Calls `fn(callback)` and waits until the callback has run; returns what
// it was given. The callback may run before `fn` returns.
template <typename T, typename Fn>
absl::StatusOr<T> Await(Fn fn) {
  absl::Notification done;
  std::optional<absl::StatusOr<T>> out;
  fn([&](absl::StatusOr<T> r) {
    out = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return std::move(*out);
}

// Await, waiting through `env` (Env::Wait): in the simulator the wait runs
// the simulation until the callback comes, so blocking callers work on its
// one thread too.
template <typename T, typename Fn>
absl::StatusOr<T> Await(Env* env, Fn fn) {
  absl::Notification done;
  std::optional<absl::StatusOr<T>> out;
  fn([&](absl::StatusOr<T> r) {
    out = std::move(r);
    done.Notify();
  });
  env->Wait(done);
  return std::move(*out);
}

}  // namespace megastore
