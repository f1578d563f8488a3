// memscope-cli knobs, and `--set` on the subcommands that take a preset (DESIGN principle 5):
// the listing is the registry, and a bad knob is one line that names it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/config/knobs.h"
#include "model/memory/memory_rule.h"  // list_presets
#include "support/run_process.h"

namespace {

using memscope::test::count_lines;
using memscope::test::run_process;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string first_word(const std::string& line) { return line.substr(0, line.find(' ')); }

}  // namespace

TEST_CASE("knobs lists every registered knob as an aligned table", "[cli][knobs]") {
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "knobs"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(r.output);
  const auto& all = memscope::model::knobs();
  REQUIRE(lines.size() == all.size() + 1);  // a header, then one line per knob in registry order
  CHECK(first_word(lines[0]) == "name");
  const size_t doc_column = lines[0].find("doc");
  REQUIRE(doc_column != std::string::npos);
  for (size_t i = 0; i < all.size(); ++i) {
    INFO(lines[i + 1]);
    CHECK(first_word(lines[i + 1]) == all[i].name);
    CHECK(lines[i + 1].compare(doc_column, all[i].doc.size(), all[i].doc) == 0);  // columns line up
    CHECK_THAT(lines[i + 1], Catch::Contains(memscope::model::knob_default(all[i])));
  }
}

TEST_CASE("knobs --json prints one object per knob, with a preset's values when asked", "[cli][knobs]") {
  const auto& all = memscope::model::knobs();
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "knobs", "--json"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(r.output);
  REQUIRE(lines.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i]);  // throws if not JSON
    CHECK(j["name"] == all[i].name);
    CHECK(j["doc"] == all[i].doc);
    CHECK((j["apply"] == "live" || j["apply"] == "restart"));
    CHECK(j.contains("default"));
    CHECK_FALSE(j.contains("value"));
    if (j["type"] == "int" || j["type"] == "float") CHECK((j["min"] <= j["default"] && j["default"] <= j["max"]));
  }

  const auto p = run_process({MEMSCOPE_CLI_BINARY, "knobs", "--json", "--preset", "demo-mqar", "--set", "train.lr=0.01"});
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& line : lines_of(p.output)) {
    const auto j = nlohmann::json::parse(line);
    by_name[j["name"].get<std::string>()] = j;
  }
  REQUIRE(by_name.size() == all.size());
  CHECK(by_name["train.steps"]["value"] == 1500);
  CHECK(by_name["train.steps"]["default"] == 200);
  CHECK(by_name["train.lr"]["value"] == 0.01);
  CHECK(by_name["memory.optimiser"]["value"] == "muon");  // inherited from atlas
  CHECK(by_name["memory.ns.coefficients"]["value"].size() == 3);
}

TEST_CASE("an unknown or out-of-range knob in --set is one line naming it, exit 1", "[cli][knobs]") {
  const auto trace = (std::filesystem::temp_directory_path() / "memscope-cli-knobs-trace.safetensors").string();
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  for (const auto& c : std::vector<Case>{
           {{MEMSCOPE_CLI_BINARY, "knobs", "--set", "train.lrr=1"}, "train.lrr: unknown key"},
           {{MEMSCOPE_CLI_BINARY, "knobs", "--preset", "atlas", "--set", "probe.every=-1"}, "probe.every: must be in [0,"},
           {{MEMSCOPE_CLI_BINARY, "train", "--steps", "1", "--set", "train.lrr=1"}, "train.lrr"},
           {{MEMSCOPE_CLI_BINARY, "train", "--steps", "1", "-s", "engine.mode=replay"}, "engine.mode"},
           {{MEMSCOPE_CLI_BINARY, "memory-trace", "--preset", "atlas", "--out", trace, "--set", "memory.window.c=0"},
            "memory.window.c: must be in [1, 4096], got 0"},
           {{MEMSCOPE_CLI_BINARY, "memory-trace", "--preset", "atlas", "--out", trace, "-s", "memory.lr.maxx=1"},
            "memory.lr.maxx"},
       }) {
    const auto r = run_process(c.args);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(c.names));
    CHECK(count_lines(r.output) == 1);
  }
}

TEST_CASE("presets lists every shipped preset with its description, and as JSON", "[cli]") {
  const auto table = memscope::test::run_process({MEMSCOPE_CLI_BINARY, "presets"});
  REQUIRE(table.exit_code == 0);
  const auto names = memscope::model::list_presets();
  REQUIRE(names.size() > 10);
  CHECK(memscope::test::count_lines(table.output) == static_cast<int>(names.size()));
  CHECK(table.output.find("demo-mqar  ") != std::string::npos);
  CHECK(table.output.find("multi-query associative recall") != std::string::npos);
  const auto json = memscope::test::run_process({MEMSCOPE_CLI_BINARY, "presets", "--json"});
  REQUIRE(json.exit_code == 0);
  size_t objects = 0;
  std::istringstream lines(json.output);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    CHECK(j.contains("name"));
    CHECK_FALSE(j["description"].get<std::string>().empty());
    CHECK_FALSE(j.contains("error"));
    ++objects;
  }
  CHECK(objects == names.size());
}
