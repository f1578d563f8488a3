// train --serve and memscope-cli attach (issue 22): real processes on loopback.
#include <signal.h>

#include "model/train/checkpoint.h"  // before catch.hpp: torch's headers and Catch's macros clash
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/run_process.h"
#include "support/spawned.h"
#include "support/temp_files.h"

namespace {

namespace fs = std::filesystem;
using memscope::test::run_process;
using memscope::test::spawn;
using memscope::test::read_text;
using memscope::test::Spawned;


// Waits (up to a minute) until `log` matches `pattern`; returns the first group.
std::string wait_for(const fs::path& log, const std::string& pattern) {
  const std::regex re(pattern);
  for (int i = 0; i < 1200; ++i) {
    std::smatch m;
    const std::string text = read_text(log);
    if (std::regex_search(text, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("never printed " << pattern << ":\n" << read_text(log));
  return "";
}

const std::vector<std::string> kSmall = {"--threads", "1", "--json", "--set", "train.log_every=1"};

std::vector<std::string> cli(std::vector<std::string> args, const std::vector<std::string>& extra = kSmall) {
  args.insert(args.begin(), MEMSCOPE_CLI_BINARY);
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The last training step's JSON line; a served run's log also has the server's plain lines.
nlohmann::json last_step(const std::string& output) {
  nlohmann::json last;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("grad_norm")) last = j;
  }
  return last;
}

}  // namespace

TEST_CASE("train --serve: a viewer killed mid-stream leaves the run as it is without one", "[cli]") {
  const fs::path dir = memscope::test::fresh_dir("serve-kill");
  const auto plain = run_process(cli({"train", "--steps", "8", "--out", (dir / "plain.safetensors").string()}));
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);

  // Started paused and run by the viewer, so that the viewer is there before step 1 however slow
  // its start on a loaded machine (pausing changes no weights).
  const Spawned run = spawn(cli({"train", "--steps", "8", "--out", (dir / "served.safetensors").string(),
                                 "--serve", "0", "--token", "t0k", "--paused"}),
                            dir / "run.log");
  const std::string address = wait_for(dir / "run.log", "serving train demo-mqar on (127\\.0\\.0\\.1:[0-9]+)");
  const Spawned viewer =
      spawn({MEMSCOPE_CLI_BINARY, "attach", address, "--token", "t0k", "--post", "run"}, dir / "viewer.log");
  wait_for(dir / "viewer.log", "\"kind\":\"train\"");  // mid-stream: a training frame arrived
  kill(viewer.pid, SIGKILL);
  CHECK(viewer.wait(std::chrono::seconds(10)) == 128 + SIGKILL);
  REQUIRE(run.wait(std::chrono::seconds(300)) == 0);
  const std::string log = read_text(dir / "run.log");
  INFO(log);
  CHECK(log.find("viewer 127.0.0.1:") != std::string::npos);  // it was attached

  // The same steps and the same weights, bit for bit.
  const auto a = last_step(plain.output), b = last_step(log);
  REQUIRE(b["step"] == 8);
  CHECK(b["loss"] == a["loss"]);
  CHECK(b["grad_norm"] == a["grad_norm"]);
  const auto one = memscope::model::read_checkpoint(dir / "plain.safetensors");
  const auto two = memscope::model::read_checkpoint(dir / "served.safetensors");
  CHECK(two.step == 8);
  int compared = 0;
  for (const auto& [name, t] : one.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    REQUIRE(two.tensors.count(name));
    CHECK(torch::equal(t, two.tensors.at(name)));
    ++compared;
  }
  CHECK(compared > 10);
  fs::remove_all(dir);
}

TEST_CASE("train --serve: a viewer's knob and pause reach the run, a restart knob and a wrong token are refused", "[cli]") {
  const fs::path dir = memscope::test::fresh_dir("serve-drive");
  // Started paused, so that the viewer's commands land before step 1 however slow its start on a
  // loaded machine (a run left to go had a viewer attach during step 6, and its run went on past it).
  const Spawned run =
      spawn(cli({"train", "--steps", "6", "--serve", "127.0.0.1:0", "--token", "t0k", "--paused"}),
            dir / "run.log");
  const std::string address = wait_for(dir / "run.log", "on (127\\.0\\.0\\.1:[0-9]+)");

  const auto wrong = run_process({MEMSCOPE_CLI_BINARY, "attach", address, "--token", "nope"});
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.output.find("refused this viewer: wrong token") != std::string::npos);
  CHECK(memscope::test::count_lines(wrong.output) == 1);

  // Pause, a live knob, a restart knob, then on to the end; the viewer detaches when the run ends.
  const auto viewer = run_process({MEMSCOPE_CLI_BINARY, "attach", address, "--token", "t0k", "--quiet", "--post", "pause",
                                   "--post", "set train.lr=0.002", "--post", "set model.d_model=32", "--post", "run"});
  INFO(viewer.output);
  CHECK(viewer.exit_code == 0);
  CHECK(viewer.output.find("\"message\":\"set train.lr = 0.002\"") != std::string::npos);
  CHECK(viewer.output.find("set model.d_model = 32: model.d_model: a restart knob rebuilds the model") != std::string::npos);
  CHECK(viewer.output.find("the run finished at step 6") != std::string::npos);
  REQUIRE(run.wait(std::chrono::seconds(300)) == 0);
  const std::string log = read_text(dir / "run.log");
  INFO(log);
  // The knob changed the steps after it: the lr the run logged is the new base lr's warmup value.
  const auto last = last_step(log);
  REQUIRE(last["step"] == 6);
  CHECK(last["lr"].get<double>() == Approx(0.002 * 6 / 50));
  CHECK(log.find("paused at step 0; a viewer resumes it") != std::string::npos);  // --paused
  fs::remove_all(dir);
}

TEST_CASE("train --serve --resume stops at train.steps counted from the first step, as train does", "[cli]") {
  // The engine counts a served run's steps from 0; a resumed one had trained train.steps more.
  const fs::path dir = memscope::test::fresh_dir("serve-resume");
  const fs::path first = dir / "first.safetensors";
  REQUIRE(run_process(cli({"train", "--steps", "3", "--out", first.string()})).exit_code == 0);
  const auto plain = run_process(cli(
      {"train", "--resume", first.string(), "--steps", "5", "--out", (dir / "plain.safetensors").string()}));
  REQUIRE(plain.exit_code == 0);
  const Spawned run = spawn(cli({"train", "--resume", first.string(), "--steps", "5", "--serve", "0", "--out",
                                 (dir / "served.safetensors").string()}),
                            dir / "run.log");
  REQUIRE(run.wait(std::chrono::seconds(300)) == 0);
  const std::string log = read_text(dir / "run.log");
  INFO(log);
  CHECK(last_step(log)["step"] == 5);
  CHECK(last_step(log)["loss"] == last_step(plain.output)["loss"]);
  CHECK(memscope::model::read_checkpoint(dir / "served.safetensors").step == 5);
  // Resumed at or past train.steps: nothing to train.
  const Spawned done =
      spawn(cli({"train", "--resume", first.string(), "--steps", "2", "--serve", "0"}), dir / "done.log");
  REQUIRE(done.wait(std::chrono::seconds(120)) == 0);
  CHECK(read_text(dir / "done.log").find("\"step\":4") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("train --serve: bad input is one line", "[cli]") {
  const auto nproc = run_process(cli({"train", "--steps", "1", "--serve", "0", "--nproc", "2"}));
  CHECK(nproc.exit_code == 1);
  CHECK(nproc.output.find("does not combine with --nproc") != std::string::npos);
  const auto paused = run_process(cli({"train", "--steps", "1", "--paused"}));
  CHECK(paused.exit_code == 1);
  CHECK(paused.output.find("train --paused waits for a viewer to run it: it needs --serve") !=
        std::string::npos);
  const auto address = run_process(cli({"train", "--steps", "1", "--serve", "localhost:http"}));
  CHECK(address.exit_code == 1);
  CHECK(address.output.find("has no port number") != std::string::npos);
  const auto nobody = run_process({MEMSCOPE_CLI_BINARY, "attach", "127.0.0.1:1", "--token", "x"});
  CHECK(nobody.exit_code == 1);
  CHECK(nobody.output.find("cannot connect to 127.0.0.1:1") != std::string::npos);
  CHECK(memscope::test::count_lines(nobody.output) == 1);
}
