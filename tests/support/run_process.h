// Run a program as a child process and capture what it prints, for tests that exercise the
// real executables (memscope, memscope-cli) rather than their internals.
#pragma once
#include <string>
#include <vector>

namespace memscope::test {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number if the child was killed
  std::string output;  // stdout and stderr interleaved
};

// argv[0] is the program path; no shell is involved.
ProcessResult run_process(const std::vector<std::string>& argv);

// Number of non-empty lines in text.
int count_lines(const std::string& text);

}  // namespace memscope::test
