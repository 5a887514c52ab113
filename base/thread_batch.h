// A batch of work on one thread: while a ThreadBatch lives, code may defer
// actions to its end, so that many small steps taken in a loop (a commit
// log group's callbacks answering RPCs, say) share one expensive step per
// target (one socket write per connection) instead of one each.
//
//   {
//     ThreadBatch batch;
//     for (auto& cb : callbacks) cb();  // may call ThreadBatch::Defer
//   }                                   // deferred actions run here
//
// Batches nest; deferred actions run when the outermost one ends, in the
// order they were deferred, on this thread. An action deferred while they
// run joins them (it runs in the same round).
#pragma once

#include <functional>

namespace megastore {

class ThreadBatch {
 public:
  ThreadBatch();
  ~ThreadBatch();
  ThreadBatch(const ThreadBatch&) = delete;
  ThreadBatch& operator=(const ThreadBatch&) = delete;

  // Whether a batch is open on this thread.
  static bool Open();
  // Defers `action` to the end of this thread's outermost batch; false
  // (and `action` untouched, not run) if no batch is open here.
  static bool Defer(std::function<void()>& action);
};

}  // namespace megastore
