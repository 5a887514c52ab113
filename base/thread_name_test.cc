#include "base/thread_name.h"

#include <pthread.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace megastore {
namespace {

std::string CurrentName() {
  char name[32] = {};
  ::pthread_getname_np(::pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadNameTest, ANameIsCutToWhatLinuxKeeps) {
  std::thread([] {
    SetThreadName("ms-a-name-longer-than-fifteen");
    EXPECT_EQ(CurrentName(), "ms-a-name-longe");
  }).join();
}

TEST(ThreadNameTest, NameThreadOnceNamesAThreadOnlyTheFirstTime) {
  std::thread([] {
    NameThreadOnce("ms-first");
    NameThreadOnce("ms-second");
    EXPECT_EQ(CurrentName(), "ms-first");
    SetThreadName("ms-renamed");  // a plain SetThreadName still renames
    EXPECT_EQ(CurrentName(), "ms-renamed");
  }).join();
}

}  // namespace
}  // namespace megastore
