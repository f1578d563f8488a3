#include "app/cli/rank_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "model/dist/rendezvous_store.h"
#include "model/util/errors.h"

extern char** environ;

namespace memscope::app {

namespace {

std::vector<std::string> g_command_line;
std::atomic<int> g_forward{0};  // a signal the launcher received and has yet to forward

extern "C" void on_launcher_signal(int signal) { g_forward.store(signal); }

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // waitpid's
};

// An environment for rank r: ours, with the launcher variables replaced.
std::vector<std::string> rank_environment(int rank, int world, int port) {
  std::vector<std::string> env;
  const char* replaced[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
                            "TORCHELASTIC_USE_AGENT_STORE=", kLaunchedRankVariable};
  for (char** e = environ; *e; ++e) {
    bool keep = true;
    for (const char* name : replaced) keep = keep && std::strncmp(*e, name, std::strlen(name)) != 0;
    if (keep) env.emplace_back(*e);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
  env.push_back(std::string(kLaunchedRankVariable) + "=1");
  // The cores shared out, as torchrun does, unless the user chose (OMP_NUM_THREADS or --threads).
  if (!std::getenv("OMP_NUM_THREADS")) {
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1L, cores / world)));
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool clean_exit(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace

void set_command_line(int argc, char** argv) { g_command_line.assign(argv, argv + argc); }

int launch_local_ranks(int nproc, int stop_grace_seconds) {
  const model::RendezvousStore store;
  std::vector<std::string> args = g_command_line;
  auto argv = c_strings(args);

  struct sigaction action {};
  action.sa_handler = on_launcher_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<Rank> ranks(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    auto env_strings = rank_environment(r, nproc, store.port());
    auto envp = c_strings(env_strings);  // built before fork: the child only execs
    const pid_t pid = fork();
    if (pid < 0) throw model::UserError("--nproc: cannot start rank " + std::to_string(r) + ": " + std::strerror(errno));
    if (pid == 0) {
      // Its own process group, so that a terminal's Ctrl+C reaches the launcher alone, which
      // forwards it once (two would make a rank quit without saving); and gone with the launcher.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execve("/proc/self/exe", argv.data(), envp.data());
      _exit(127);
    }
    ranks[static_cast<size_t>(r)] = {pid, true, 0};
  }

  int live = nproc;
  int culprit = -1;  // the first rank that ended badly
  int forwarded = 0;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto signal_all = [&](int signal) {
    for (const Rank& rank : ranks)
      if (rank.running) kill(rank.pid, signal);
  };
  while (live > 0) {
    if (const int s = g_forward.exchange(0)) {
      forwarded = s;
      signal_all(s);
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() > stop_deadline) {
        signal_all(SIGKILL);  // a rank stuck in a collective that cannot finish
        stop_deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (int r = 0; r < nproc; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      if (rank.pid != pid) continue;
      rank.running = false;
      rank.status = status;
      --live;
      if (clean_exit(status) || forwarded || culprit >= 0) break;
      // A rank that died by a signal is the cause; its peers exit with an error a moment later.
      // Give them that moment, then prefer the one killed.
      culprit = r;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int q = 0; q < nproc; ++q) {
        Rank& other = ranks[static_cast<size_t>(q)];
        if (!other.running) continue;
        int s = 0;
        if (waitpid(other.pid, &s, WNOHANG) == other.pid) {
          other.running = false;
          other.status = s;
          --live;
          if (WIFSIGNALED(s) && !WIFSIGNALED(ranks[static_cast<size_t>(culprit)].status)) culprit = q;
        }
      }
      std::cerr << "memscope-cli: rank " << culprit << " of " << nproc << " (pid " << ranks[static_cast<size_t>(culprit)].pid
                << ") " << describe_exit(ranks[static_cast<size_t>(culprit)].status)
                << (live > 0 ? "; stopping the other ranks" : "") << "\n";
      signal_all(SIGTERM);
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(stop_grace_seconds);
      break;
    }
  }
  if (culprit >= 0) return 1;
  if (forwarded) return 128 + forwarded;
  for (const Rank& rank : ranks)
    if (!clean_exit(rank.status)) return 1;
  return 0;
}

}  // namespace memscope::app
