// Sessions from the command line (issue 6): step --record and train --record write a session that
// inspect describes and export converts; corrupt files give one line and a non-zero exit, never a
// crash.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/run_process.h"
#include "support/temp_files.h"

namespace fs = std::filesystem;
using memscope::test::count_lines;
using memscope::test::run_process;

namespace {

fs::path fresh(const std::string& name) { return memscope::test::fresh_dir("cli-session-" + name); }

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

nlohmann::json last_json_line(const std::string& output) {
  const auto end = output.find_last_not_of('\n');
  const auto start = output.rfind('\n', end);
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1));
}

}  // namespace

TEST_CASE("a recording of the default demo opens with inspect, and exports", "[cli][session]") {
  const auto dir = fresh("demo");
  const auto session = dir / "demo";  // the .memscope suffix is added
  const auto step = run_process({MEMSCOPE_CLI_BINARY, "step", "--tokens", "40", "--threads", "1", "--record", session.string()});
  INFO(step.output);
  REQUIRE(step.exit_code == 0);
  CHECK(step.output.find("recorded " + session.string() + ".memscope") != std::string::npos);

  const auto inspect = run_process({MEMSCOPE_CLI_BINARY, "inspect", session.string() + ".memscope"});
  INFO(inspect.output);
  REQUIRE(inspect.exit_code == 0);
  for (const char* text : {"frames    40 in 1 chunks", "timeline 0: 40 steps, 1 to 40", "2 layers x 4 heads", "erank",
                           "ns_error", "surprise_before", "damage    none", "preset demo-mqar", "[memory]"})
    CHECK(inspect.output.find(text) != std::string::npos);

  const auto json = run_process({MEMSCOPE_CLI_BINARY, "inspect", "--json", session.string()});
  REQUIRE(json.exit_code == 0);
  const auto j = nlohmann::json::parse(json.output);
  CHECK(j["frames"] == 40);
  CHECK(j["layers"] == 2);
  CHECK(j["heads"] == 4);
  CHECK(j["intact"] == true);
  CHECK(j["events"]["by_kind"]["command"].get<int>() >= 2);
  CHECK(j["config"]["knobs"]["memory.optimiser"] == "\"muon\"");  // TOML literals, as --set takes them

  const auto exported = run_process({MEMSCOPE_CLI_BINARY, "export", session.string(), "--out", (dir / "demo.safetensors").string(),
                                     "--csv", (dir / "demo.csv").string()});
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  const auto file = run_process({MEMSCOPE_CLI_BINARY, "inspect", "--json", (dir / "demo.safetensors").string()});
  REQUIRE(file.exit_code == 0);
  bool found = false;
  const auto tensors = nlohmann::json::parse(file.output)["tensors"];
  for (const auto& t : tensors)
    if (t["name"] == "layer1/head3/erank") found = t["shape"] == nlohmann::json::array({40});
  CHECK(found);
  CHECK(count_lines(read(dir / "demo.csv")) == 41);

  // Recording into a directory that holds a session is refused before any step runs.
  const auto again = run_process({MEMSCOPE_CLI_BINARY, "step", "--tokens", "5", "--record", session.string()});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("already exists") != std::string::npos);
  CHECK(count_lines(again.output) == 1);
}

TEST_CASE("train --record writes a frame per training step", "[cli][session]") {
  const auto dir = fresh("train");
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "train", "--preset", "demo-mqar", "--steps", "6", "--threads", "1",
                              "--json", "--record", (dir / "t.memscope").string(), "--set", "train.eval_batches=1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto inspect = run_process({MEMSCOPE_CLI_BINARY, "inspect", "--json", (dir / "t.memscope").string()});
  REQUIRE(inspect.exit_code == 0);
  const auto j = nlohmann::json::parse(inspect.output);
  CHECK(j["frames"] == 6);
  CHECK(j["intact"] == true);
  CHECK(j["timelines"][0]["last_step"] == 6);
  const auto csv = run_process({MEMSCOPE_CLI_BINARY, "export", (dir / "t.memscope").string(), "--csv", (dir / "t.csv").string()});
  REQUIRE(csv.exit_code == 0);
  const std::string text = read(dir / "t.csv");
  CHECK(text.find(",train,") != std::string::npos);  // the kind column
}

TEST_CASE("inspect: each kind of corrupt file is one line and exit 1, never a crash", "[cli][session]") {
  const auto dir = fresh("corrupt");
  const auto session = dir / "c.memscope";
  REQUIRE(run_process({MEMSCOPE_CLI_BINARY, "step", "--tokens", "10", "--threads", "1", "--record", session.string()}).exit_code == 0);
  const std::string good = read(session / "frames-000000.safetensors");
  REQUIRE(good.size() > 100);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(good[static_cast<size_t>(i)]);
  const std::string header = good.substr(8, header_length);

  std::string overlapping = good;  // the second tensor's offsets moved back onto the first's
  {
    auto j = nlohmann::json::parse(header);
    for (auto& [name, entry] : j.items())
      if (name != "__metadata__" && entry["data_offsets"][0] != 0) {
        entry["data_offsets"][0] = entry["data_offsets"][0].get<uint64_t>() - 4;
        entry["data_offsets"][1] = entry["data_offsets"][1].get<uint64_t>() - 4;
        break;
      }
    std::string text = j.dump();
    text.resize(header_length, ' ');
    overlapping.replace(8, header_length, text);
  }
  std::string flipped = good;
  flipped[0] ^= 0x01;  // the header length, off by one
  std::string bad_json = good;
  bad_json.replace(8, 2, "{{");
  std::string huge = good;
  for (int i = 0; i < 8; ++i) huge[static_cast<size_t>(i)] = static_cast<char>(0xff);

  const std::pair<const char*, std::string> cases[] = {{"truncated", good.substr(0, good.size() - 3)},
                                                       {"truncated header", good.substr(0, 8 + header_length / 2)},
                                                       {"flipped", flipped},
                                                       {"bad JSON", bad_json},
                                                       {"overlapping", overlapping},
                                                       {"huge header length", huge},
                                                       {"empty", ""}};
  for (const auto& [what, bytes] : cases) {
    INFO(what);
    const auto file = dir / "x.safetensors";
    write(file, bytes);
    const auto r = run_process({MEMSCOPE_CLI_BINARY, "inspect", file.string()});
    INFO(r.output);
    CHECK(r.exit_code == 1);  // not 128 + a signal
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find(file.string()) != std::string::npos);

    // The same damage inside a session: reported, the rest still read, exit 1.
    write(session / "frames-000000.safetensors", bytes);
    const auto s = run_process({MEMSCOPE_CLI_BINARY, "inspect", "--json", session.string()});
    CHECK(s.exit_code == 1);
    CHECK(last_json_line(s.output.substr(0, s.output.rfind("memscope-cli:")))["damage"].size() == 1);
  }
}

TEST_CASE("step --replay prints the recorded frames exactly as the live run did, and breaks", "[cli][session]") {
  const auto dir = fresh("replay");
  const auto session = (dir / "r.memscope").string();
  const auto live = run_process({MEMSCOPE_CLI_BINARY, "step", "--tokens", "20", "--threads", "1", "--json", "--record", session});
  REQUIRE(live.exit_code == 0);
  const auto replay = run_process({MEMSCOPE_CLI_BINARY, "step", "--replay", session, "--json"});
  INFO(replay.output);
  REQUIRE(replay.exit_code == 0);
  auto frames = [](const std::string& output) {
    std::vector<std::string> out;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"layers\"") != std::string::npos) out.push_back(line);
    return out;
  };
  const auto a = frames(live.output), b = frames(replay.output);
  REQUIRE(a.size() == 20);
  CHECK(a == b);

  const auto stopped = run_process({MEMSCOPE_CLI_BINARY, "step", "--replay", session, "--json", "--break-on", "step==7"});
  REQUIRE(stopped.exit_code == 0);
  const auto c = frames(stopped.output);
  REQUIRE(c.size() == 7);
  CHECK(c.back() == a[6]);
  // Knobs do not apply to a recording: one line, not a silent ignore.
  const auto with_set = run_process({MEMSCOPE_CLI_BINARY, "step", "--replay", session, "--set", "train.lr=0.1"});
  CHECK(with_set.exit_code == 1);
  CHECK(with_set.output.find("plays what was recorded") != std::string::npos);
  // One line when the session is not there.
  const auto missing = run_process({MEMSCOPE_CLI_BINARY, "step", "--replay", (dir / "nope").string()});
  CHECK(missing.exit_code == 1);
  CHECK(count_lines(missing.output) == 1);
}
