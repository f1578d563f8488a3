// Nothing lost, nothing silent, from the command line (issue 17): outputs checked before the work,
// never over an input or another kind of file without --force, Ctrl+C and SIGTERM closing a
// recording, a NaN that is an error, and messages that name the right culprit.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

// The model headers (LibTorch, glog's CHECK) before Catch, so that CHECK is Catch's.
#include "model/session/safetensors_reader.h"
#include "model/session/safetensors_writer.h"
#include "model/session/session_reader.h"
#include "model/train/checkpoint.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/run_process.h"
#include "support/temp_files.h"

namespace {

using memscope::test::count_lines;
using memscope::test::run_process;
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) { return memscope::test::fresh_dir("cli-integrity-" + name); }

const std::vector<std::string> kSmall = {"--set", "model.d_model=32", "--set", "task.keys=16", "--set", "task.values=16",
                                         "--set", "task.pairs=4", "--set", "task.queries=4", "--set", "task.gap=8",
                                         "--set", "train.batch=4", "--set", "train.eval_batches=2", "--threads", "1"};

std::vector<std::string> cli(std::vector<std::string> args, bool small = false) {
  args.insert(args.begin(), MEMSCOPE_CLI_BINARY);
  if (small) args.insert(args.end(), kSmall.begin(), kSmall.end());
  return args;
}

// Starts the CLI, waits until `ready` holds, sends `signal` and returns the exit code.
int interrupt_when(const std::vector<std::string>& args, const std::function<bool()>& ready, int signal) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, signal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool has_chunk(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("frames-", 0) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("train checks --out before training: a missing directory, an empty path", "[cli]") {
  auto r = run_process(cli({"train", "--steps", "100000", "--out", "/nonexistent/d/ck.safetensors"}, true));
  CHECK(r.exit_code == 1);
  CHECK(count_lines(r.output) == 1);  // no step ran: the only line is the error
  CHECK(r.output.find("directory /nonexistent/d does not exist") != std::string::npos);
  r = run_process(cli({"train", "--steps", "100000", "--out", ""}, true));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--out: the path is empty") != std::string::npos);
}

TEST_CASE("no output overwrites its input or another kind of file without --force", "[cli]") {
  const auto dir = fresh("overwrite");
  const auto preset = dir / "p.toml";
  fs::copy_file(fs::path(MEMSCOPE_SOURCE_DIR) / "assets/presets/demo-mqar.toml", preset);
  const auto before = fs::file_size(preset);
  auto r = run_process(cli({"train", "--preset", preset.string(), "--steps", "1", "--out", preset.string()}, true));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("is this command's input") != std::string::npos);
  CHECK(fs::file_size(preset) == before);

  // A session's own session.json, and a CSV that exists, as export outputs.
  const auto session = dir / "s.memscope";
  REQUIRE(run_process(cli({"step", "--tokens", "8", "--record", session.string()})).exit_code == 0);
  const auto json_before = fs::file_size(session / "session.json");
  r = run_process(cli({"export", session.string(), "--out", (session / "session.json").string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("is inside this command's input") != std::string::npos);
  CHECK(fs::file_size(session / "session.json") == json_before);
  std::ofstream(dir / "notes.csv") << "a,b\n";
  r = run_process(cli({"export", session.string(), "--out", (dir / "notes.csv").string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("exists and is a CSV file, not a session export") != std::string::npos);
  CHECK(run_process(cli({"export", session.string(), "--out", (dir / "notes.csv").string(), "--force"})).exit_code == 0);

  // A checkpoint over a checkpoint is the same kind: allowed (save-every does it all the time).
  const auto ckpt = dir / "ck.safetensors";
  REQUIRE(run_process(cli({"train", "--steps", "1", "--out", ckpt.string()}, true)).exit_code == 0);
  CHECK(run_process(cli({"train", "--steps", "1", "--out", ckpt.string()}, true)).exit_code == 0);
  r = run_process(cli({"train", "--resume", ckpt.string(), "--steps", "2", "--out", ckpt.string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--force") != std::string::npos);
  CHECK(run_process(cli({"train", "--resume", ckpt.string(), "--steps", "2", "--out", ckpt.string(), "--force"})).exit_code == 0);
}

TEST_CASE("Ctrl+C and SIGTERM close a step recording cleanly", "[cli]") {
  for (const int signal : {SIGINT, SIGTERM}) {
    INFO("signal " << signal);
    const auto dir = fresh("signal-" + std::to_string(signal)) / "run.memscope";
    const int code = interrupt_when(cli({"step", "--tokens", "1000000", "--record", dir.string(), "--threads", "1", "--set",
                                         "record.chunk_steps=4"}),
                                    [&] { return has_chunk(dir); }, signal);
    CHECK(code == 128 + signal);
    const memscope::model::SessionReader session(dir.string());
    CHECK(session.info().closed);
    CHECK(session.damage().empty());
    CHECK(session.loss().frames_lost == 0);
    CHECK(session.steps(0).size() >= 4);
  }
}

TEST_CASE("a checkpoint with a NaN weight: eval and step fail with the parameter named", "[cli]") {
  const auto dir = fresh("nan");
  const auto ckpt = dir / "ck.safetensors";
  REQUIRE(run_process(cli({"train", "--steps", "1", "--out", ckpt.string()}, true)).exit_code == 0);
  {
    // Written with fresh checksums: the file is sound, the model is not.
    const memscope::model::SafetensorsFile file(ckpt.string());
    const auto metadata = file.header().metadata;
    auto checkpoint = memscope::model::read_checkpoint(ckpt);
    memscope::model::NamedTensors tensors;
    for (auto& [name, t] : checkpoint.tensors) {
      if (name == "model/embedding") t.fill_(std::nan(""));
      tensors.emplace_back(name, t);
    }
    memscope::model::write_safetensors(ckpt, tensors, metadata);
  }
  auto r = run_process(cli({"eval", "--ckpt", ckpt.string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("not finite") != std::string::npos);
  CHECK(r.output.find("parameter 'embedding'") != std::string::npos);
  r = run_process(cli({"step", "--ckpt", ckpt.string(), "--tokens", "50"}));
  CHECK(r.exit_code == 1);
  size_t paused = 0;
  for (size_t at = r.output.find("[error] paused"); at != std::string::npos; at = r.output.find("[error] paused", at + 1)) ++paused;
  CHECK(paused <= 1);  // one line says why, not one per head
  CHECK(r.output.find("stopped at step") != std::string::npos);
}

TEST_CASE("checkpoint bytes are checked: a flipped byte names the tensor", "[cli]") {
  const auto dir = fresh("ckpt-crc");
  const auto ckpt = dir / "ck.safetensors";
  REQUIRE(run_process(cli({"train", "--steps", "1", "--out", ckpt.string()}, true)).exit_code == 0);
  {
    const memscope::model::SafetensorsFile file(ckpt.string());
    const auto* t = file.find("model/embedding");
    REQUIRE(t);
    std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(file.header().data_start + t->begin + 5);
    f.seekg(at);
    const char byte = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(byte ^ 0x10));
  }
  const auto r = run_process(cli({"eval", "--ckpt", ckpt.string()}));
  CHECK(r.exit_code == 1);
  CHECK(count_lines(r.output) == 1);
  CHECK(r.output.find("'model/embedding' fails its CRC32C checksum") != std::string::npos);
  const auto inspect = run_process(cli({"inspect", ckpt.string()}));
  CHECK(inspect.exit_code == 1);
  CHECK(inspect.output.find("checksums FAIL") != std::string::npos);
}

TEST_CASE("messages name the culprit: --set, inherits, --resume with --preset, memory-trace usage", "[cli]") {
  auto r = run_process(cli({"train", "--steps", "1", "--set", "memory.lr.max=abc"}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--set memory.lr.max=abc (on ") != std::string::npos);

  const auto dir = fresh("inherits");
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "base.toml") << "inherits = \"demo-mqar\"\n";
  std::ofstream(dir / "sub" / "child.toml") << "inherits = \"../base.toml\"\n";
  std::ofstream(dir / "sub" / "orphan.toml") << "inherits = \"../missing.toml\"\n";
  // From another directory: the relative path is the file's, not the current directory's.
  CHECK(run_process(cli({"knobs", "--preset", (dir / "sub" / "child.toml").string()})).exit_code == 0);
  r = run_process(cli({"knobs", "--preset", (dir / "sub" / "orphan.toml").string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("orphan.toml: inherits \"../missing.toml\"") != std::string::npos);

  std::ofstream(dir / "compare.toml") << "inherits = \"demo-mqar\"\n[[compare]]\nlabel = \"fast\"\nsets = [\"memory.lr.max=-5\"]\n";
  r = run_process(cli({"knobs", "--preset", (dir / "compare.toml").string()}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("compare[0] (\"fast\")") != std::string::npos);

  r = run_process(cli({"train", "--resume", "x.safetensors", "--preset", "demo-mqar"}));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--preset does not apply") != std::string::npos);

  r = run_process(cli({"memory-trace", "--preset", "demo-mqar", "--tokens", "0", "--out", (dir / "t.safetensors").string()}));
  CHECK(r.exit_code == 2);
  CHECK(count_lines(r.output) == 1);
}
