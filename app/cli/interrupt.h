// Ctrl+C (SIGINT) and SIGTERM in the CLI: the first one asks the command to finish cleanly (the
// step in flight, the checkpoint, the recording's last chunk and its totals); a second one of the
// same kind ends the process at once, as a user pressing Ctrl+C twice expects.
#pragma once
#include <stdexcept>
#include <string>

namespace memscope::app {

// Thrown once a command has finished cleanly after a signal; main prints it and exits with
// interrupt_exit_code().
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void catch_interrupts();       // installs the handlers; call before the work starts
bool interrupted();            // a signal arrived
int interrupt_signal();        // which one (SIGINT, SIGTERM), 0 when none
int interrupt_exit_code();     // 128 + the signal, the shell's convention

}  // namespace memscope::app
