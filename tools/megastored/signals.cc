#include "tools/megastored/signals.h"

#include "base/logging.h"
#include "base/tls/context.h"

namespace megastore::server {
namespace {

sigset_t ServerSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  return signals;
}

}  // namespace

void BlockServerSignals() {
  const sigset_t signals = ServerSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int WaitForShutdown() {
  const sigset_t signals = ServerSignals();
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig != SIGHUP) {
      MS_LOG_INFO("megastored: {} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      return sig;
    }
    if (tls::CertificatesInUse().empty()) {
      MS_LOG_INFO("megastored: SIGHUP received; no TLS certificates to reload");
    } else if (absl::Status s = tls::ReloadTls(); s.ok()) {
      MS_LOG_INFO(
          "megastored: SIGHUP received; TLS certificates reloaded (new "
          "connections use them)");
    } else {
      MS_LOG_ERROR("megastored: SIGHUP received; TLS reload failed, {}", s.message());
    }
  }
}

}  // namespace megastore::server
