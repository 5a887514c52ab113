#include "base/thread_batch.h"

#include <utility>
#include <vector>

namespace megastore {
namespace {

struct Batch {
  int depth = 0;
  std::vector<std::function<void()>> deferred;
};
thread_local Batch batch;

}  // namespace

ThreadBatch::ThreadBatch() { ++batch.depth; }

ThreadBatch::~ThreadBatch() {
  if (batch.depth > 1) {
    --batch.depth;
    return;
  }
  // Still open while the actions run: what they defer joins this round.
  for (size_t i = 0; i < batch.deferred.size(); ++i) {
    std::function<void()> action = std::move(batch.deferred[i]);
    action();
  }
  batch.deferred.clear();
  batch.depth = 0;
}

bool ThreadBatch::Open() { return batch.depth > 0; }

bool ThreadBatch::Defer(std::function<void()>& action) {
  if (batch.depth == 0) return false;
  batch.deferred.push_back(std::move(action));
  return true;
}

}  // namespace megastore
