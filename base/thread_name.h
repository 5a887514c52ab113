// Thread names, as `top -H`, `perf` and /proc/PID/task/*/comm show them:
// which of a server's threads burns the CPU or switches most.
#pragma once

#include <string_view>

namespace megastore {

// Names the calling thread (Linux keeps the first 15 bytes).
void SetThreadName(std::string_view name);

// As SetThreadName, but only the first time on each thread: for the
// threads of a pool we do not start ourselves (Asio's), named by the first
// task each runs. A thread-local test after that.
void NameThreadOnce(std::string_view name);

}  // namespace megastore
