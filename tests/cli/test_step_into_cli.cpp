// memscope-cli step --train-step (issue 18): step into a training step from a preset's start, a
// checkpoint or a recorded session; the batch's loss recomputed token by token is the trainer's,
// and every bad input is one line and exit 1.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/json_lines.h"
#include "support/run_process.h"
#include "support/temp_files.h"

namespace fs = std::filesystem;
using memscope::test::count_lines;
using memscope::test::json_lines;
using memscope::test::run_process;

namespace {

// A demo-mqar small enough for a test: one training step in well under a second.
const std::vector<std::string> kSmall = {"--set", "model.d_model=16", "--set", "task.pairs=3", "--set", "task.queries=3",
                                         "--set", "task.gap=2", "--set", "train.batch=2", "--threads", "1"};

std::vector<std::string> cli(std::vector<std::string> args, bool small = true) {
  args.insert(args.begin(), MEMSCOPE_CLI_BINARY);
  if (small) args.insert(args.end(), kSmall.begin(), kSmall.end());
  return args;
}

fs::path fresh(const std::string& name) { return memscope::test::fresh_dir("cli-step-into-" + name); }

// The JSON lines of an output whose stderr also says what it rebuilt.
std::vector<nlohmann::json> json_objects(const std::string& text) {
  std::string kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.front() == '{') kept += line + '\n';
  return json_lines(kept);
}

double train_loss_at(const std::string& output, int step) {
  for (const auto& j : json_lines(output))
    if (j.contains("step") && j["step"] == step && !j.contains("eval")) return j["loss"].get<double>();
  FAIL("no training line for step " << step);
  return 0;
}

}  // namespace

TEST_CASE("step --train-step: the batch's token-by-token loss is the loss train printed for that step", "[cli]") {
  const auto dir = fresh("loss");
  const auto train = run_process(cli({"train", "--steps", "4", "--json", "--set", "train.log_every=1", "--record",
                                      (dir / "run").string()}));
  INFO(train.output);
  REQUIRE(train.exit_code == 0);
  const double trained = train_loss_at(train.output, 3);

  // From the preset's start (re-running steps 1 and 2), and from the recorded session.
  for (const auto& args : {cli({"step", "--train-step", "3", "--json"}),
                           cli({"step", "--session", (dir / "run.memscope").string(), "--train-step", "3", "--json"}, false)}) {
    const auto step = run_process(args);
    INFO(step.output);
    REQUIRE(step.exit_code == 0);
    const auto lines = json_objects(step.output);
    REQUIRE(!lines.empty());
    const auto& summary = lines.back();
    CHECK(summary["step_into"] == 3);
    CHECK(summary["whole_batch"] == true);
    CHECK(std::abs(summary["loss"].get<double>() - trained) < 1e-5 * std::max(1.0, trained));
    CHECK(std::abs(summary["trainer_loss"].get<double>() - trained) < 1e-5 * std::max(1.0, trained));
    CHECK(std::abs(summary["acc"].get<double>() - summary["trainer_acc"].get<double>()) < 1e-12);  // the same queries hit
    // The probed tokens print as step --json does: the same frame objects.
    CHECK(lines.front()["kind"] == "inspect");
    CHECK(lines.front()["layers"].is_array());
  }
  const auto from_session =
      run_process(cli({"step", "--session", (dir / "run.memscope").string(), "--train-step", "3"}, false));
  CHECK(from_session.output.find("recorded in the session: ") != std::string::npos);
  CHECK(from_session.output.find("differs") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("step --train-step: beyond the run, no training frames, a checkpoint of another run: one line, exit 1",
          "[cli]") {
  const auto dir = fresh("bad");
  const std::string run = (dir / "run").string(), probe = (dir / "probe").string();
  REQUIRE(run_process(cli({"train", "--steps", "3", "--record", run, "--out", (dir / "ck.safetensors").string()})).exit_code == 0);
  REQUIRE(run_process(cli({"step", "--tokens", "3", "--record", probe})).exit_code == 0);
  REQUIRE(run_process(cli({"train", "--steps", "1", "--set", "model.block=lmm", "--out", (dir / "other.safetensors").string()}))
              .exit_code == 0);

  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {cli({"step", "--train-step", "99999"}), "training step 99999 is beyond the run (train.steps = 1500"},
      {cli({"step", "--session", run + ".memscope", "--train-step", "4"}, false),
       "--train-step 4 is beyond the run: session " + run + ".memscope trained to step 3"},
      {cli({"step", "--session", probe + ".memscope", "--train-step", "1"}, false), "has no training frames"},
      {cli({"step", "--session", run + ".memscope", "--ckpt", (dir / "other.safetensors").string(), "--train-step", "2"}, false),
       "is from another run than session"},
      {cli({"step", "--ckpt", (dir / "ck.safetensors").string(), "--train-step", "2"}, false),
       "needs weights from before it (a checkpoint at step 1 or earlier)"},
      {cli({"step", "--session", run + ".memscope"}, false), "--session needs --train-step"},
  };
  for (const auto& c : cases) {
    const auto r = run_process(c.args);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find(c.says) != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("the trained demo checkpoint scripts/run opens recalls its probe sequences' queries", "[cli]") {
  // assets/demo-mqar-trained.safetensors (scripts/make-demo-checkpoint): what a new user steps
  // through first. Ten probe sequences of 28 tokens, 6 queries each.
  const std::string checkpoint = std::string(MEMSCOPE_SOURCE_DIR) + "/assets/demo-mqar-trained.safetensors";
  REQUIRE(fs::exists(checkpoint));
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "step", "--ckpt", checkpoint, "--tokens", "280", "--json", "--threads", "1"});
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  int queries = 0, recalled = 0;
  for (const auto& f : json_objects(r.output)) {
    if (!f.contains("target") || f["target"].is_null() || f["target"].get<int>() < 0) continue;
    ++queries;
    recalled += f["predicted"] == f["target"];
  }
  CHECK(queries == 60);
  CHECK(recalled >= 57);  // ≥ 95%
}
