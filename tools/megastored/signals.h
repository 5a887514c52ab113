// megastored's signals: SIGTERM and SIGINT shut it down, SIGHUP reloads its
// TLS certificates (base/tls/context.h).
#pragma once

#include <signal.h>

namespace megastore::server {

// Blocks the signals megastored waits for (before any thread starts: every
// thread inherits the mask), so the main thread can sigwait for them; and
// ignores SIGPIPE.
void BlockServerSignals();

// Waits for SIGTERM or SIGINT, reloading the TLS certificates on every
// SIGHUP meanwhile (a failed reload is logged and keeps the ones in use).
// Returns the signal that ended the wait.
int WaitForShutdown();

}  // namespace megastore::server
