// Sessions in the app: a replayed session's first frame looks exactly like the live frame it was
// recorded from, and `memscope --session` opens a recording (or says in one line why not).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "app/app_harness.h"
#include "support/run_process.h"

using memscope::test::AppHarness;
using memscope::test::PngImage;
using memscope::test::run_process;
namespace model = memscope::model;
namespace fs = std::filesystem;

namespace {

// The pixels of a named panel from the last frame.
std::vector<unsigned> region(const PngImage& image, const ImRect& r) {
  std::vector<unsigned> out;
  for (int y = static_cast<int>(r.Min.y); y < static_cast<int>(r.Max.y); ++y)
    for (int x = static_cast<int>(r.Min.x); x < static_cast<int>(r.Max.x); ++x) out.push_back(image.pixel(x, y));
  return out;
}

}  // namespace

TEST_CASE("app: the first frame of a replayed session matches the live frame pixel for pixel", "[gui]") {
  const std::string dir = memscope::test::temp_path("first-frame") + ".memscope";
  fs::remove_all(dir);
  const std::vector<std::string> panels = {"panel/memory", "panel/plots", "panel/tokens"};
  std::map<std::string, std::vector<unsigned>> live;
  {
    memscope::app::GuiOptions o;
    o.sets = {"probe.matrices_every=1"};
    AppHarness h(o);
    h.app().post(model::Command::start_recording(dir));
    h.app().post(model::Command::steps(1));
    h.settle();
    h.app().post({model::Command::Kind::StopRecording});
    h.settle();
    const PngImage image = h.screenshot("live");
    for (const auto& p : panels) live[p] = region(image, h.app().rects().at(p));
    REQUIRE(h.app().rects().count("matrix/0/0/0/0/M/M") == 1);  // the frame has its heatmaps
  }
  memscope::app::GuiOptions o;
  o.session = dir;
  AppHarness h(o);
  CHECK_FALSE(h.app().main().live);
  h.app().post(model::Command::steps(1));
  h.settle();
  REQUIRE(h.app().main().steps() == 1);
  const PngImage image = h.screenshot("replay");
  for (const auto& p : panels) {
    INFO(p);
    const auto replayed = region(image, h.app().rects().at(p));
    REQUIRE(replayed.size() == live[p].size());
    size_t differing = 0;
    for (size_t i = 0; i < replayed.size(); ++i) differing += replayed[i] != live[p][i];
    CHECK(differing == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("memscope --session replays a recording, and a bad path is one line and exit 1", "[gui]") {
  const std::string dir = memscope::test::temp_path("cli-session") + ".memscope";
  fs::remove_all(dir);
  auto record = run_process({MEMSCOPE_CLI_BINARY, "step", "--preset", "demo-mqar", "--tokens", "12", "--record", dir});
  INFO(record.output);
  REQUIRE(record.exit_code == 0);
  const std::string png = memscope::test::temp_path("cli-session") + ".png";
  auto shown = run_process({MEMSCOPE_GUI_BINARY, "--session", dir, "--steps", "12", "--screenshot", png, "--frames", "4"});
  INFO(shown.output);
  CHECK(shown.exit_code == 0);
  const PngImage image = memscope::test::load_png(png);
  CHECK(image.width == 1600);
  fs::remove(png);

  auto missing = run_process({MEMSCOPE_GUI_BINARY, "--session", dir + "-missing", "--screenshot", png});
  CHECK(missing.exit_code == 1);
  CHECK(memscope::test::count_lines(missing.output) == 1);
  CHECK_THAT(missing.output, Catch::Contains("memscope:"));
  fs::remove_all(dir);
}

TEST_CASE("app: a session with a corrupt middle chunk opens with a banner and plays past it", "[gui]") {
  const std::string dir = memscope::test::temp_path("corrupt-middle") + ".memscope";
  fs::remove_all(dir);
  {
    memscope::app::GuiOptions o;
    o.sets = {"record.chunk_steps=5"};
    AppHarness h(o);
    h.app().post(model::Command::start_recording(dir));
    h.app().post(model::Command::steps(20));
    h.app().post({model::Command::Kind::StopRecording});
    h.settle();
  }
  {  // one byte of the second chunk's data changes: its checksum no longer matches
    const auto chunk = fs::path(dir) / "frames-000001.safetensors";
    std::fstream f(chunk, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-9, std::ios::end);
    const char byte = static_cast<char>(f.get());
    f.seekp(-9, std::ios::end);
    f.put(static_cast<char>(byte ^ 0x40));
  }
  memscope::app::GuiOptions o;
  o.session = dir;
  AppHarness h(o);
  CHECK_THAT(h.app().view().banner, Catch::Contains("1 damaged file(s) skipped"));
  CHECK_THAT(h.app().view().banner, Catch::Contains("frames-000001.safetensors"));
  h.app().post(model::Command::run());
  h.settle();
  CHECK(h.app().main().steps() == 20);  // the intact chunks after the damaged one play too
  fs::remove_all(dir);
}

TEST_CASE("app: a replayed memscope-cli train recording shows the batch each step trained on", "[gui]") {
  // The CLI records with the preset's own engine.mode (inspect here): the strip goes by what the
  // frames hold, not by the mode.
  const std::string dir = memscope::test::temp_path("train-batch-replay") + ".memscope";
  fs::remove_all(dir);
  const auto record = run_process({MEMSCOPE_CLI_BINARY, "train", "--preset", "demo-mqar", "--steps", "3", "--set",
                                   "train.batch=4", "--threads", "1", "--record", dir});
  INFO(record.output);
  REQUIRE(record.exit_code == 0);
  memscope::app::GuiOptions o;
  o.session = dir;
  AppHarness h(o);
  h.app().post(model::Command::run());
  h.settle();
  REQUIRE(h.app().main().steps() == 3);
  const memscope::app::TrainBatchRow& row = h.app().shown_cache().train_batch();
  CHECK(row.train_step == 3);
  CHECK_FALSE(row.tokens.empty());
  CHECK(h.app().rects().count("tokens/strip") == 1);
  fs::remove_all(dir);
}
