#include "base/thread_name.h"

#include <pthread.h>

#include <string>

namespace megastore {

void SetThreadName(std::string_view name) {
  std::string kept(name.substr(0, 15));
  ::pthread_setname_np(::pthread_self(), kept.c_str());
}

void NameThreadOnce(std::string_view name) {
  thread_local bool named = false;
  if (named) return;
  named = true;
  SetThreadName(name);
}

}  // namespace megastore
