#include "app/cli/interrupt.h"

#include <atomic>
#include <csignal>

namespace memscope::app {

namespace {

std::atomic<int> g_signal{0};

extern "C" void on_interrupt(int signal) {
  if (g_signal.exchange(signal) != 0) {  // the second one: leave now
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

}  // namespace

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking read returns, the loop sees the flag
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interrupted() { return g_signal.load() != 0; }
int interrupt_signal() { return g_signal.load(); }
int interrupt_exit_code() { return 128 + g_signal.load(); }

}  // namespace memscope::app
