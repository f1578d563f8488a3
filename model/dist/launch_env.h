// Where this process sits in a distributed run, read from the launcher's environment: the
// variables torchrun and Slurm wrappers set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT). `memscope-cli train --nproc N` sets the same ones for the ranks it spawns, so one
// code path serves both.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace memscope::model {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The launcher hosts the rendezvous store itself (torchrun's TORCHELASTIC_USE_AGENT_STORE, and
  // --nproc's supervisor): rank 0 then connects to it instead of serving it.
  bool agent_store = false;
};

// The launch this environment describes, or nullopt when WORLD_SIZE is not set (a plain,
// single-process run). A variable that is set but wrong (WORLD_SIZE=0, a rank outside the world,
// a port out of range, a missing MASTER_ADDR) is a UserError naming the variable and its value.
// `env` maps names to values; read_launch_env() reads the process environment.
std::optional<LaunchEnv> parse_launch_env(const std::map<std::string, std::string>& env);
std::optional<LaunchEnv> read_launch_env();

}  // namespace memscope::model
