#include "base/thread_batch.h"

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace megastore {
namespace {

TEST(ThreadBatchTest, DeferredActionsRunWhenTheOutermostBatchEndsInOrder) {
  std::string log;
  auto defer = [&](char c) {
    std::function<void()> action = [&log, c] { log += c; };
    return ThreadBatch::Defer(action);
  };
  EXPECT_FALSE(defer('x')) << "no batch open";
  EXPECT_FALSE(ThreadBatch::Open());
  {
    ThreadBatch outer;
    EXPECT_TRUE(ThreadBatch::Open());
    EXPECT_TRUE(defer('a'));
    {
      ThreadBatch inner;
      EXPECT_TRUE(defer('b'));
    }
    EXPECT_EQ(log, "") << "the inner batch's end runs nothing";
    std::function<void()> chained = [&] {
      log += 'c';
      std::function<void()> late = [&log] { log += 'd'; };
      EXPECT_TRUE(ThreadBatch::Defer(late));
    };
    EXPECT_TRUE(ThreadBatch::Defer(chained));
  }
  EXPECT_EQ(log, "abcd");
  EXPECT_FALSE(defer('y')) << "closed again";
  // Batches are per thread.
  ThreadBatch here;
  bool deferred_there = true;
  std::thread([&] {
    std::function<void()> action = [] {};
    deferred_there = ThreadBatch::Defer(action);
  }).join();
  EXPECT_FALSE(deferred_there);
}

}  // namespace
}  // namespace megastore
