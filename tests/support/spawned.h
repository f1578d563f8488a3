// A started child process whose output goes to a file: for runs a test interrupts, kills or talks
// to while they run (run_process.h waits for the end).
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace memscope::test {

struct Spawned {
  pid_t pid = -1;
  std::filesystem::path log;
  // The exit status (128 + signal when killed), or −1 when it had to be killed after `limit`.
  int wait(std::chrono::seconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits until `ready` holds while the child runs. False when the child ended first or `limit`
  // passed; then the child is gone (killed if it still ran) and `why` says which, for the test's
  // message, with the child's log.
  bool wait_until(const std::function<bool()>& ready, std::chrono::seconds limit, std::string& why) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!ready()) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        why = "the child ended first, " + describe(status);
        return false;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        why = "still not ready after " + std::to_string(limit.count()) + " s (killed)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  static std::string describe(int status) {
    return WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                             : "signal " + std::to_string(WTERMSIG(status));
  }
};

// argv[0] is the program path; stdout and stderr both go to `log`.
inline Spawned spawn(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  Spawned s;
  s.log = log;
  s.pid = fork();
  if (s.pid == 0) {
    FILE* out = std::fopen(log.c_str(), "w");
    dup2(fileno(out), 1);
    dup2(fileno(out), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return s;
}

}  // namespace memscope::test
