#include "model/dist/launch_env.h"

#include <cstdlib>
#include <limits>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

constexpr const char* kVariables[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                      "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"};

// A whole decimal integer in [low, high], or a UserError naming the variable.
int integer(const std::map<std::string, std::string>& env, const std::string& name, int low, int high,
            const std::string& meaning) {
  const auto it = env.find(name);
  if (it == env.end()) throw UserError(name + " is not set (the launcher must give " + meaning + ")");
  const std::string& text = it->second;
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    throw UserError(name + "='" + text + "' is not an integer (" + meaning + ")");
  if (v < low || v > high)
    throw UserError(name + "=" + text + " is out of range: " + meaning + " must be in [" + std::to_string(low) + ", " +
                    std::to_string(high) + "]");
  return static_cast<int>(v);
}

}  // namespace

std::optional<LaunchEnv> parse_launch_env(const std::map<std::string, std::string>& env) {
  if (!env.count("WORLD_SIZE")) return std::nullopt;
  LaunchEnv e;
  e.world_size = integer(env, "WORLD_SIZE", 1, 1 << 20, "the number of ranks");
  // The message names the world, not a bare range: RANK=2 with WORLD_SIZE=2 is the classic slip.
  const int rank = integer(env, "RANK", 0, std::numeric_limits<int>::max(), "this process's rank");
  if (rank >= e.world_size)
    throw UserError("RANK=" + std::to_string(rank) + " is not below WORLD_SIZE=" + std::to_string(e.world_size) +
                    " (ranks count from 0)");
  e.rank = rank;
  e.local_rank = env.count("LOCAL_RANK") ? integer(env, "LOCAL_RANK", 0, e.world_size - 1, "the rank on this machine") : 0;
  const auto addr = env.find("MASTER_ADDR");
  if (addr == env.end() || addr->second.empty())
    throw UserError("MASTER_ADDR is not set (the address of the machine rank 0 runs on)");
  e.master_addr = addr->second;
  e.master_port = integer(env, "MASTER_PORT", 1, 65535, "the rendezvous port");
  const auto agent = env.find("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != env.end() && (agent->second == "True" || agent->second == "true" || agent->second == "1");
  return e;
}

std::optional<LaunchEnv> read_launch_env() {
  std::map<std::string, std::string> env;
  for (const char* name : kVariables)
    if (const char* v = std::getenv(name)) env[name] = v;
  return parse_launch_env(env);
}

}  // namespace memscope::model
