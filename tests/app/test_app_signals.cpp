// SIGINT and SIGTERM close the desktop app as if its window were closed (issue 17): a recording in
// progress keeps its last chunk and is finished with its totals.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "model/session/session_reader.h"
#include "support/temp_files.h"

namespace fs = std::filesystem;

TEST_CASE("the GUI closes a recording cleanly on SIGTERM and SIGINT", "[gui]") {
  for (const int signal : {SIGTERM, SIGINT}) {
    INFO("signal " << signal);
    const auto root = memscope::test::fresh_dir("gui-signal-" + std::to_string(signal));
    const auto dir = root / "run.memscope";
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string record = dir.string();
      ::execl(MEMSCOPE_GUI_BINARY, MEMSCOPE_GUI_BINARY, "--record", record.c_str(), "--speed", "0", "--width", "800",
              "--height", "600", "--set", "record.chunk_steps=4", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Until a chunk is on disk: the run is recording.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!fs::exists(dir / "frames-000001.safetensors") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(fs::exists(dir / "frames-000001.safetensors"));
    ::kill(pid, signal);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + signal);
    const memscope::model::SessionReader session(dir.string());
    CHECK(session.info().closed);
    CHECK(session.damage().empty());
    CHECK(session.loss().frames_lost == 0);
    CHECK(session.steps(0).size() >= 8);
  }
}
