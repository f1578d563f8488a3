// `memscope-cli train --nproc N`: this process becomes a launcher, like torchrun on one machine.
// It hosts the rendezvous store, starts N copies of the same command as ranks 0..N-1 (the
// standard launcher variables set), forwards Ctrl+C and SIGTERM to them once, and watches them:
// when one dies, it says which in one line and stops the others.
#pragma once
#include <string>
#include <vector>

namespace memscope::app {

// Set by the launcher in each rank's environment, so that the rank ignores --nproc.
inline constexpr const char* kLaunchedRankVariable = "MEMSCOPE_LAUNCHED_RANK";

// The command line main() received (the ranks re-run it).
void set_command_line(int argc, char** argv);

// Runs the ranks to the end and returns the exit status for this process: 0 when every rank
// succeeded, 128+signal when the run was interrupted, 1 otherwise (after the one line).
int launch_local_ranks(int nproc, int stop_grace_seconds);

// Thrown by a command whose process must exit with `code` and has said everything already
// (the launcher: its ranks printed their own lines); main() returns the code.
struct ExitStatus {
  int code = 0;
};

}  // namespace memscope::app
