// Process-wide setup for the project's binaries (megastored, msadmin,
// msbench); call first thing in main(). Tests do not call it.
#pragma once

namespace megastore {

// Sends logs to stderr (LogToStderr) and raises the descriptor limit to
// its hard maximum (RaiseDescriptorLimit). In release builds (NDEBUG), turns
// off absl::Mutex's deadlock detector:
// Debian builds Abseil without NDEBUG, which leaves the detector on and
// makes every lock acquisition update a lock graph (a few percent of a busy
// server's CPU). Debug, sanitizer and test builds keep it.
void InitProcess();

}  // namespace megastore
