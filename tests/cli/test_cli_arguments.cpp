// memscope-cli's argument handling, run as a user would run it: a real process.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/run_process.h"

using memscope::test::run_process;

TEST_CASE("memscope-cli --version names memscope and LibTorch", "[cli]") {
  auto result = run_process({MEMSCOPE_CLI_BINARY, "--version"});
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, Catch::Contains("memscope") && Catch::Contains("LibTorch"));
}

TEST_CASE("memscope-cli --help lists the subcommands", "[cli]") {
  auto result = run_process({MEMSCOPE_CLI_BINARY, "--help"});
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, Catch::Contains("info"));
}

TEST_CASE("memscope-cli bad arguments give one clear line and a non-zero exit", "[cli]") {
  for (auto args : std::vector<std::vector<std::string>>{
           {MEMSCOPE_CLI_BINARY, "--no-such-flag"},
           {MEMSCOPE_CLI_BINARY, "no-such-command"},
           {MEMSCOPE_CLI_BINARY},
           {MEMSCOPE_CLI_BINARY, "info", "--device", "tpu"},
           {MEMSCOPE_CLI_BINARY, "train", "--device", "tpu", "--steps", "1"},  // every command's --device
       }) {
    auto result = run_process(args);
    INFO("args: " << args.back() << "\noutput: " << result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.exit_code < 128);  // an exit, not a signal (a crash)
    CHECK(memscope::test::count_lines(result.output) == 1);
    CHECK_THAT(result.output, Catch::StartsWith("memscope-cli: "));
  }
}

TEST_CASE("memscope-cli info reports the device as JSON", "[cli]") {
  auto result = run_process({MEMSCOPE_CLI_BINARY, "info", "--json"});
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, Catch::Contains("\"device\":\"cpu\"") || Catch::Contains("\"device\":\"cuda:0\""));
}

TEST_CASE("memscope-cli --device puts the model there, and says so in the recording", "[cli]") {
  // Every command takes --device (before or after its name); the run's session.json names it.
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/memscope-device-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto result = run_process({MEMSCOPE_CLI_BINARY, "step", "--device", "cpu", "--tokens", "3", "--record", dir + "/r.memscope"});
  INFO(result.output);
  CHECK(result.exit_code == 0);
  auto info = run_process({MEMSCOPE_CLI_BINARY, "inspect", dir + "/r.memscope"});
  CHECK_THAT(info.output, Catch::Contains("on cpu"));
  std::filesystem::remove_all(dir);
}
