#include "booster/stop_signal.h"

#include <pthread.h>

#include <csignal>

namespace lattice {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
void on_signal(int sig) { g_stop_signal = sig > 0 ? sig : -1; }
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls resume; the loop reads the flag between steps
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A launcher may start the process with them blocked: a request already
  // pending is delivered now, and later ones as they come.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal > 0 ? int(g_stop_signal) : 0; }
void request_stop(int signal) { on_signal(signal); }
void clear_stop_request() { g_stop_signal = 0; }

}  // namespace lattice
