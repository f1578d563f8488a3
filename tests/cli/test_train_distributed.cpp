// memscope-cli train on several processes (issue 21): c10d Gloo ranks on loopback, launched by
// --nproc or by the launcher variables torchrun sets, against single-process training.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/dist/data_parallel.h"
#include "model/train/checkpoint.h"  // before catch.hpp: torch's headers and Catch's macros clash
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/json_lines.h"
#include "support/run_process.h"
#include "support/spawned.h"
#include "support/temp_files.h"

namespace {

using memscope::test::json_lines;
using memscope::test::run_process;
using memscope::test::spawn;
using memscope::test::read_text;
using memscope::test::Spawned;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;


// The last training step's JSON line.
nlohmann::json last_step(const std::string& output) {
  nlohmann::json last;
  for (const auto& j : json_lines(output))
    if (j.contains("grad_norm")) last = j;
  return last;
}

// The pid of the child of `parent` whose environment says RANK=`rank`.
pid_t rank_pid(pid_t parent, int rank) {
  std::istringstream children(read_text("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children"));
  for (pid_t child = 0; children >> child;) {
    const std::string env = read_text("/proc/" + std::to_string(child) + "/environ");
    if (env.find(std::string("RANK=") + std::to_string(rank) + '\0') == 0 ||
        env.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
      return child;
  }
  return -1;
}

// A loopback port that was free a moment ago, and a socket that holds one.
int listening_socket(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(fd, 1);
  socklen_t size = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
  *port = ntohs(a.sin_port);
  return fd;
}

// demo-mqar (batch 16) with the per-step log.
std::vector<std::string> train_args(std::vector<std::string> extra) {
  std::vector<std::string> args{MEMSCOPE_CLI_BINARY, "train", "--json", "--set", "train.log_every=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE(
    "two Gloo ranks train as one process does with the same global batch, to 1e-6 after 10 steps, in "
    "micro-batches too",
    "[cli][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  const fs::path dir = memscope::test::fresh_dir("dist-equal");
  // One thread each, so that both sides run the same kernels. train.eps=1e-6: AdamW divides by
  // √v + eps, so with the default 1e-8 a gradient component near 0 turns the shards' different
  // summation order (1e-7 relative) into steps that differ by up to 2e-6 in a few elements after
  // 10 steps; 1e-6 bounds that amplification, and what is compared is the data parallelism.
  const std::vector<std::string> common{"--steps", "10", "--set", "train.eps=1e-6"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return train_args(extra);
  };
  const auto single = run_process(with({"--threads", "1", "--out", (dir / "one.safetensors").string()}));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  const auto ranks = run_process(with({"--nproc", "2", "--out", (dir / "two.safetensors").string()}));
  INFO(ranks.output);
  REQUIRE(ranks.exit_code == 0);

  const auto a = last_step(single.output), b = last_step(ranks.output);
  REQUIRE(b["step"] == 10);
  CHECK(b["world_size"] == 2);
  CHECK(b["comm_share"].get<double>() > 0.0);
  CHECK(b["loss"].get<double>() == Approx(a["loss"].get<double>()).epsilon(1e-6));
  CHECK(b["acc"] == a["acc"]);  // the same predictions, counted over both shards
  CHECK(b["grad_norm"].get<double>() == Approx(a["grad_norm"].get<double>()).epsilon(1e-6));
  CHECK(ranks.output.find("data-parallel: 2 ranks on gloo, 8 of 16 sequences per rank") != std::string::npos);
  // Rank 0 alone reports: one line per step, not two.
  int step_lines = 0;
  for (const auto& j : json_lines(ranks.output)) step_lines += j.contains("grad_norm") ? 1 : 0;
  CHECK(step_lines == 10);

  const auto one = memscope::model::read_checkpoint(dir / "one.safetensors");
  const auto two = memscope::model::read_checkpoint(dir / "two.safetensors");
  CHECK(one.world_size == 1);
  CHECK(two.world_size == 2);
  CHECK(two.step == 10);
  double worst = 0;
  std::string where;
  for (const auto& [name, t] : one.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    REQUIRE(two.tensors.count(name));
    const double d = (t - two.tensors.at(name)).abs().max().item<double>();
    if (d > worst) worst = d, where = name;
  }
  INFO("largest parameter difference " << worst << " in " << where);
  CHECK(worst <= 1e-6);
  CHECK(worst > 0.0);  // the shards' gradients are summed in another order: equal to rounding, not bit-equal

  // Each rank's 8 sequences 3 at a time (train.micro_batch; 3 + 3 + 2): the all-reduce waits for
  // the last group's backward, when the rank's gradient is whole.
  const auto grouped = run_process(with({"--nproc", "2", "--set", "train.micro_batch=3"}));
  INFO(grouped.output);
  REQUIRE(grouped.exit_code == 0);
  const auto c = last_step(grouped.output);
  CHECK(c["loss"].get<double>() == Approx(a["loss"].get<double>()).epsilon(1e-6));
  CHECK(c["grad_norm"].get<double>() == Approx(a["grad_norm"].get<double>()).epsilon(1e-6));
  fs::remove_all(dir);
}

TEST_CASE("a rank killed mid-run stops the other with one line naming it, and the last checkpoint resumes",
          "[cli][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  const fs::path dir = memscope::test::fresh_dir("dist-kill");
  const fs::path ckpt = dir / "run.safetensors";
  const Spawned launcher = spawn(train_args({"--steps", "100000", "--nproc", "2", "--save-every", "3", "--out",
                                             ckpt.string()}),
                                 dir / "launcher.log");
  // Wait for a checkpoint, then kill rank 1 as an OOM killer would.
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ckpt) && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(fs::exists(ckpt));
  const pid_t victim = rank_pid(launcher.pid, 1);
  REQUIRE(victim > 0);
  REQUIRE(kill(victim, SIGKILL) == 0);
  const int code = launcher.wait(std::chrono::seconds(60));
  const std::string output = read_text(launcher.log);
  INFO(output);
  CHECK(code == 1);
  const std::string pid = std::to_string(victim);
  CHECK(output.find("memscope-cli: rank 1 of 2 (pid " + pid + ") was killed by signal 9") != std::string::npos);
  CHECK(output.find("rank 1 (pid " + pid + ") is gone") != std::string::npos);  // what rank 0 saw

  // Only the checkpoint is left (no temporary of a half-written one), and it is whole.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    CHECK((name == "run.safetensors" || name == "launcher.log"));
  }
  const auto saved = memscope::model::read_checkpoint(ckpt);
  CHECK(saved.world_size == 2);
  CHECK(saved.step % 3 == 0);
  // Resumed on one process: another world size, the same global batches.
  const auto resumed = run_process(train_args({"--resume", ckpt.string(), "--steps", std::to_string(saved.step + 2),
                                               "--out", (dir / "resumed.safetensors").string()}));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("(written by 2 rank(s), now 1)") != std::string::npos);
  CHECK(last_step(resumed.output)["step"] == saved.step + 2);
  fs::remove_all(dir);
}

TEST_CASE("Ctrl+C to the launcher stops every rank at the same step and saves", "[cli][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  const fs::path dir = memscope::test::fresh_dir("dist-interrupt");
  const fs::path ckpt = dir / "run.safetensors";
  const Spawned launcher = spawn(train_args({"--steps", "100000", "--nproc", "2", "--out", ckpt.string()}), dir / "log");
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (read_text(launcher.log).find("\"step\":3,") == std::string::npos && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(launcher.pid, SIGINT);
  const int code = launcher.wait(std::chrono::seconds(60));
  const std::string output = read_text(launcher.log);
  INFO(output);
  CHECK(code == 130);
  const auto saved = memscope::model::read_checkpoint(ckpt);
  CHECK(output.find("memscope-cli: interrupted at step " + std::to_string(saved.step) + "; checkpoint") !=
        std::string::npos);
  CHECK(memscope::test::count_lines(output.substr(output.find("memscope-cli:"))) == 1);  // rank 0's line alone
  fs::remove_all(dir);
}

TEST_CASE("bad launcher settings each give one line and exit 1", "[cli][dist]") {
  int held_port = 0;
  const int held = listening_socket(&held_port);
  int closed_port = 0;
  close(listening_socket(&closed_port));  // nothing listens there now

  auto run_with = [](std::vector<std::string> env) {
    std::vector<std::string> argv{"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    for (const char* a : {MEMSCOPE_CLI_BINARY, "train", "--steps", "2", "--dist-timeout", "2"}) argv.push_back(a);
    return run_process(argv);
  };
  const std::string loopback = "MASTER_ADDR=127.0.0.1";
  struct Case {
    std::vector<std::string> env;
    std::string says;
  };
  const std::vector<Case> cases{
      {{"WORLD_SIZE=0", "RANK=0", loopback, "MASTER_PORT=29500"}, "WORLD_SIZE=0 is out of range"},
      {{"WORLD_SIZE=2", "RANK=2", loopback, "MASTER_PORT=29500"}, "RANK=2 is not below WORLD_SIZE=2"},
      {{"WORLD_SIZE=2", "RANK=0", loopback, "MASTER_PORT=" + std::to_string(held_port)},
       "MASTER_PORT " + std::to_string(held_port) + " is already in use on this machine"},
      {{"WORLD_SIZE=2", "RANK=1", loopback, "MASTER_PORT=" + std::to_string(closed_port)},
       "rank 1 of 2: cannot reach the rendezvous at 127.0.0.1:" + std::to_string(closed_port) + " within 2 s"},
      {{"WORLD_SIZE=2", "RANK=1", "MASTER_ADDR=no-such-host.invalid", "MASTER_PORT=29500"},
       "cannot reach the rendezvous at no-such-host.invalid:29500"},
      {{"WORLD_SIZE=2", "RANK=0", loopback, "MASTER_PORT=" + std::to_string(closed_port)},
       "not all 2 ranks joined the rendezvous"},
  };
  for (const Case& c : cases) {
    const auto r = run_with(c.env);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(memscope::test::count_lines(r.output) == 1);
    CHECK(r.output.find(c.says) != std::string::npos);
  }
  close(held);

  // --nproc checks what every rank would trip on once, before starting any.
  const auto odd = run_process({MEMSCOPE_CLI_BINARY, "train", "--steps", "2", "--nproc", "3"});
  INFO(odd.output);
  CHECK(odd.exit_code == 1);
  CHECK(odd.output == "memscope-cli: train --nproc 3: train.batch=16 is not a multiple of it (every rank computes an "
                      "equal share of the batch)\n");
}
