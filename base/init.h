// Process-wide setup for the project's binaries (megastored, msadmin,
// msbench); call first thing in main(). Tests do not call it.
#pragma once

namespace megastore {

// Sends logs to stderr (LogToStderr), protobuf's messages through them
// (RouteProtobufLogs) and raises the descriptor limit to its hard maximum
// (RaiseDescriptorLimit). In release builds (NDEBUG), turns
// off absl::Mutex's deadlock detector:
// Debian builds Abseil without NDEBUG, which leaves the detector on and
// makes every lock acquisition update a lock graph (a few percent of a busy
// server's CPU). Debug, sanitizer and test builds keep it.
void InitProcess();

// Protobuf's log messages (it writes one for each malformed message it
// parses, e.g. a string field that is not UTF-8) go to the process's log
// as warnings, at most ten a second, instead of to stderr without bound.
void RouteProtobufLogs();

}  // namespace megastore
