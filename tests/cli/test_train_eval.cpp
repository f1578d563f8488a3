// memscope-cli train and eval as a user runs them (issue 4): JSON lines when piped, checkpoints
// that eval reads, and one clear line for bad knobs and bad checkpoints.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/json_lines.h"
#include "support/run_process.h"

namespace {

using memscope::test::json_lines;
using memscope::test::run_process;
namespace fs = std::filesystem;

// demo-mqar-titans, shrunk so a few steps take about a second.
std::vector<std::string> small(std::vector<std::string> args) {
  for (const char* set : {"model.d_model=32", "task.keys=16", "task.values=16", "task.pairs=4", "task.queries=4",
                          "task.gap=8", "train.batch=4", "train.eval_batches=2", "train.log_every=1"}) {
    args.push_back("--set");
    args.push_back(set);
  }
  return args;
}

}  // namespace

TEST_CASE("train prints one JSON line per step and a final evaluation when piped", "[cli]") {
  const fs::path ckpt = fs::temp_directory_path() / "memscope-cli-train.safetensors";
  fs::remove(ckpt);
  const auto r = run_process(small({MEMSCOPE_CLI_BINARY, "train", "--preset", "demo-mqar-titans", "--steps", "3",
                                    "--out", ckpt.string()}));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = json_lines(r.output);
  int steps = 0;
  for (const auto& j : lines) {
    if (j.contains("message")) continue;
    if (j.value("eval", false)) {
      CHECK(j["step"] == 3);
      CHECK(j["acc"].get<double>() >= 0.0);
      continue;
    }
    ++steps;
    CHECK(j["step"] == steps);
    for (const char* key : {"loss", "acc", "lr", "grad_norm", "tokens_per_s"}) CHECK(j.contains(key));
  }
  CHECK(steps == 3);
  CHECK(fs::exists(ckpt));

  const auto e = run_process({MEMSCOPE_CLI_BINARY, "eval", "--ckpt", ckpt.string(), "--task", "mqar", "--task", "needle",
                              "--set", "task.seq_len=24"});
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  const auto evals = json_lines(e.output);
  REQUIRE(evals.size() == 2);
  CHECK(evals[0]["task"] == "mqar");
  CHECK(evals[1]["task"] == "needle");
  CHECK(evals[0]["step"] == 3);
}

TEST_CASE("train and eval: bad knobs and bad checkpoints give one line naming the problem", "[cli]") {
  const fs::path garbage = fs::temp_directory_path() / "memscope-cli-garbage.safetensors";
  std::ofstream(garbage) << "definitely not safetensors";
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  for (const auto& c : std::vector<Case>{
           {{MEMSCOPE_CLI_BINARY, "train", "--steps", "1", "--set", "train.lr=-3"}, "train.lr"},
           {{MEMSCOPE_CLI_BINARY, "train", "--steps", "1", "--set", "model.no_such_knob=1"}, "model.no_such_knob"},
           {{MEMSCOPE_CLI_BINARY, "train", "--preset", "no-such-preset"}, "no-such-preset"},
           {{MEMSCOPE_CLI_BINARY, "eval", "--ckpt", garbage.string()}, garbage.string()},
           {{MEMSCOPE_CLI_BINARY, "eval", "--ckpt", "/nonexistent/x.safetensors"}, "not found"},
       }) {
    const auto r = run_process(c.args);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(c.names));
    CHECK(memscope::test::count_lines(r.output) == 1);
  }
}
