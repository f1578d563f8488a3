// memscope-cli step as a user runs it (issue 5): one JSON line per probed token with the probes of
// every layer and head, breakpoints that stop the run and print the event, and one-line errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "support/json_lines.h"
#include "support/run_process.h"

namespace {

using memscope::test::json_lines;
using memscope::test::run_process;

}  // namespace

TEST_CASE("step --json prints the probes of every layer and head for each token", "[cli]") {
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "step", "--preset", "demo-mqar", "--tokens", "12", "--json",
                              "--threads", "1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = json_lines(r.output);
  REQUIRE(lines.size() == 12);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& j = lines[i];
    CHECK(j["step"] == static_cast<int>(i) + 1);
    CHECK(j["token"].is_number_integer());
    REQUIRE(j["layers"].size() == 2);
    for (const auto& layer : j["layers"]) {
      REQUIRE(layer["heads"].size() == 4);
      for (const auto& head : layer["heads"])
        for (const char* field : {"erank", "ns_error", "ns_smin", "ns_smax", "retain", "lr", "momentum",
                                  "surprise_before", "surprise_after", "norm_M", "norm_S", "norm_dM"}) {
          INFO(field);
          CHECK(head[field].is_number());
        }
    }
  }
}

TEST_CASE("step --probe-every and --break-on stop where asked and print the event", "[cli]") {
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "step", "--tokens", "40", "--probe-every", "2", "--break-on",
                              "nan,step==9", "--json", "--threads", "1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = json_lines(r.output);
  REQUIRE(!lines.empty());
  const auto& last = lines.back();
  CHECK(last["event"] == "breakpoint");
  CHECK(last["step"] == 9);
  int frames = 0;
  for (const auto& j : lines)
    if (j.contains("layers")) {
      ++frames;
      CHECK(j["step"].get<int>() % 2 == 0);
    }
  CHECK(frames == 4);  // steps 2, 4, 6, 8
}

TEST_CASE("step: a bad breakpoint, knob or preset is one line and exit 1", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--break-on", "sometimes"}, {"--set", "probe.evry=2"}, {"--preset", "no-such-preset"}}) {
    std::vector<std::string> argv{MEMSCOPE_CLI_BINARY, "step", "--tokens", "2"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(memscope::test::count_lines(r.output) == 1);
  }
}

TEST_CASE("step --json prints HOPE's CMS norms and ticks and the target errors", "[cli]") {
  const auto r = run_process({MEMSCOPE_CLI_BINARY, "step", "--preset", "hope", "--set", "model.cms.periods=\"1,2,4\"",
                              "--tokens", "4", "--probe-every", "1", "--json", "--threads", "1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = json_lines(r.output);
  REQUIRE(lines.size() == 4);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& hope = lines[i]["hope"];
    REQUIRE(hope.size() == 2);  // one entry per layer
    for (const auto& layer : hope) {
      REQUIRE(layer["cms_norm"].size() == 3);
      for (const auto& n : layer["cms_norm"]) CHECK(n.get<double>() > 0);
      // Periods 1, 2, 4 after token i + 1: a level ticks where its period ends.
      const int t = static_cast<int>(i) + 1;
      CHECK(layer["cms_tick"] == nlohmann::json({1, t % 2 == 0 ? 1 : 0, t % 4 == 0 ? 1 : 0}));
      for (const char* m : {"k", "v", "eta", "alpha", "memory"}) CHECK(layer["target_error"][m].get<double>() > 0);
    }
  }
}

