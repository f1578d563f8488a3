// Every panel and overlay renders in a real window without an ImGui assertion (Debian's libimgui
// is built with asserts on: a broken Begin/End pairing or ID stack aborts the test), on a live
// HOPE run, a fork, a compare preset and a replay.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "app/app_harness.h"
#include "model/config/preset.h"
#include "model/data/batch.h"
#include "model/train/trainer.h"
#include "viz/colormap.h"

using memscope::test::AppHarness;
namespace model = memscope::model;

namespace {

// demo-mqar, training only, on batches of 4.
memscope::app::GuiOptions training_only() {
  memscope::app::GuiOptions o;
  o.preset = "demo-mqar";
  o.sets = {"engine.mode=train", "train.batch=4"};
  return o;
}

// Draws every view of the app at least once.
void visit_everything(AppHarness& h) {
  auto& view = h.app().view();
  for (int tab = 0; tab < 3; ++tab) {
    view.select_left_tab = tab;
    h.frames(2);
  }
  for (int tab = 0; tab < 3; ++tab) {
    view.select_right_tab = tab;
    h.frames(2);
  }
  view.show_compare = true;
  h.frames(2);
  view.show_compare = false;
  view.show_help = true;
  view.show_presets = true;
  h.frames(2);
  view.show_help = view.show_presets = false;
  view.has_enlarged = true;
  view.enlarged = {0, 0, "M", "M"};
  h.frames(2);
  view.lock_scale = true;
  view.symmetric_scale = false;
  h.frames(2);
  view.has_enlarged = false;
  view.prompt = "open";
  h.frames(2);
  view.prompt.clear();
  h.app().show_error("a test error: nothing is wrong");
  h.frames(2);
  view.knob_filter = "memory";
  h.frames(2);
}

}  // namespace

TEST_CASE("app: every panel renders on a live HOPE run with a fork", "[gui]") {
  memscope::app::GuiOptions o;
  o.preset = "demo-mqar-hope";
  o.sets = {"probe.matrices_every=1"};
  AppHarness h(o);
  h.app().post_all(model::Command::steps(100));  // the CMS ticks map shows the last 96 steps
  h.settle();
  h.app().post(model::Command::fork(50, {"memory.lr.max=0.5"}));
  h.settle();
  REQUIRE(h.app().main().caches.size() == 2);
  visit_everything(h);
  // The Plots tab leaves out the memory-layer plots a hope block cannot fill, and says where to look.
  h.app().view().select_right_tab = 0;
  h.frames(2);
  CHECK(h.app().rects().count("plots/hope pointer") == 1);
  CHECK(h.app().rects().count("plot/surprise") == 0);
  CHECK(h.app().rects().count("plot/loss") == 1);
  // The knobs panel hides the memory-rule knobs a hope block does not read, and shows them when asked.
  h.app().view().knob_filter.clear();
  h.frames(2);
  CHECK(h.app().rects().count("knob/memory.lr.max") == 1);
  CHECK(h.app().rects().count("knob/memory.bias") == 0);
  REQUIRE(h.app().rects().count("knobs/show unused") == 1);
  h.click("knobs/show unused");
  h.frames(2);
  CHECK(h.app().view().show_unused_knobs);
  CHECK(h.app().rects().count("knob/memory.bias") == 1);
  // The token strip colours a hope block's tokens by its main memory's target error before the
  // write (a hope block has no memory layer, so no surprise of its own).
  const auto& tokens = h.app().shown_cache().tokens();
  REQUIRE(!tokens.empty());
  CHECK(std::isfinite(tokens.back().surprise));
  CHECK(tokens.back().surprise > 0.0f);
  // The HOPE panel found its data.
  h.app().view().select_right_tab = 1;
  h.frames(2);
  CHECK(h.app().shown_cache().cms_levels() > 0);
  CHECK(h.app().rects().count("plot/cms norms") == 1);
  CHECK(h.app().rects().count("plot/selfmod") == 1);
  CHECK(h.app().rects().count("plot/retention") == 1);  // the dgd preconditioner's eigenvalue range
  // The memory panel shows the self-modifying memories in place of heads: M and ΔM of W1 and W2
  // per layer for the selected one (head 4: the main memory M).
  h.app().view().head = 4;
  h.frames(2);
  for (const char* cell : {"matrix/0/0/0/4/W1/M", "matrix/0/0/1/4/W2/dM"}) {
    INFO(cell);
    CHECK(h.app().rects().count(cell) == 1);
  }
  // The CMS ticks map shows real ticks: level 0 updates every step (viridis' bright end), a slower
  // level mostly does not (its dark end); never the magenta of a value that is missing.
  const memscope::test::PngImage image = h.screenshot("hope");
  const ImRect ticks = h.app().rects().at("hope/cms ticks");
  const int levels = h.app().shown_cache().cms_levels();
  const auto& viridis = memscope::viz::colormap(memscope::viz::ColormapKind::Viridis);
  const float row_height = (ticks.Max.y - ticks.Min.y) / static_cast<float>(levels);
  const auto row_pixel = [&](int level) {
    return image.pixel(static_cast<int>(ticks.Max.x) - 90, static_cast<int>(ticks.Min.y + row_height * (level + 0.5f)));
  };
  const auto rgb = [](memscope::viz::Rgba8 c) { return (unsigned(c.r) << 16) | (unsigned(c.g) << 8) | c.b; };
  CHECK(row_pixel(0) == rgb(viridis.at(1.0f)));
  unsigned dark = 0;
  for (int dx = 0; dx < 40; ++dx)
    dark += image.pixel(static_cast<int>(ticks.Max.x) - 90 - dx, static_cast<int>(ticks.Min.y + row_height * (levels - 0.5f))) ==
            rgb(viridis.at(0.0f));
  CHECK(dark > 20);
}

TEST_CASE("app: clicking a heatmap enlarges it with its singular-value spectrum", "[gui]") {
  memscope::app::GuiOptions o;
  o.sets = {"probe.matrices_every=1"};
  AppHarness h(o);
  h.app().post_all(model::Command::steps(5));
  h.settle();
  REQUIRE(h.app().rects().count("matrix/0/0/1/0/M/S") == 1);  // run 0, timeline 0, layer 1, head 0, S
  h.click("matrix/0/0/1/0/M/S");
  REQUIRE(h.app().view().has_enlarged);
  CHECK((h.app().view().enlarged == memscope::app::MatrixKey{1, 0, "M", "S"}));
  h.frames(2);
  CHECK(h.app().rects().count("enlarged/spectrum") == 1);
  CHECK(h.app().rects().count("enlarged/range") == 1);  // full size: the shown matrix is the real one
  // The layout: the spectrum column starts right of the matrix and its colour bar's value labels,
  // and the range line sits under the spectrum.
  const ImRect matrix = h.app().rects().at("enlarged/matrix");
  const ImRect spectrum = h.app().rects().at("enlarged/spectrum");
  const ImRect range = h.app().rects().at("enlarged/range");
  CHECK(spectrum.Min.x >= matrix.Max.x + ImGui::CalcTextSize("-0.00000").x);
  CHECK(range.Min.y >= spectrum.Max.y);
  CHECK(range.Min.x >= matrix.Max.x);
  h.tap(GLFW_KEY_ESCAPE);
  CHECK_FALSE(h.app().view().has_enlarged);
}

TEST_CASE("app: an enlarged matrix shown shrunk gives the real matrix's range and spectrum", "[gui]") {
  // demo-mqar's 16x16 memories shown as 4x4 copies: a live run measured the full ones.
  memscope::app::GuiOptions o;
  o.sets = {"probe.matrices_every=1", "probe.downsample=4"};
  AppHarness h(o);
  h.app().post_all(model::Command::steps(5));
  h.settle();
  REQUIRE(h.app().rects().count("matrix/0/0/0/0/M/M") == 1);
  h.click("matrix/0/0/0/0/M/M");
  REQUIRE(h.app().view().has_enlarged);
  h.frames(2);
  CHECK(h.app().rects().count("enlarged/range of the real matrix") == 1);
  CHECK(h.app().rects().count("enlarged/range") == 0);
  CHECK(h.app().rects().count("enlarged/spectrum") == 1);
  const auto frame = h.app().runs()[0]->snapshot_frame(0, -1);
  REQUIRE(frame);
  const auto m = std::find_if(frame->matrices.begin(), frame->matrices.end(), [](const model::MatrixSnapshot& s) {
    return s.layer == 0 && s.head == 0 && s.tensor == "M";
  });
  REQUIRE(m != frame->matrices.end());
  CHECK(m->rows == 4);
  CHECK(m->full_rows == 16);
  CHECK(m->singular_values.size() == 16);
  const auto [lo, hi] = std::minmax_element(m->values.begin(), m->values.end());
  CHECK(m->full_min < *lo);  // the area means narrow the range: the line shows the real one
  CHECK(m->full_max > *hi);
}

TEST_CASE("app: a preset with compare runs opens them side by side and steps them in lockstep", "[gui]") {
  memscope::app::GuiOptions o;
  o.preset = std::string(MEMSCOPE_SOURCE_DIR) + "/tests/app/compare-test.toml";
  AppHarness h(o);
  REQUIRE(h.app().runs().size() == 2);
  CHECK(h.app().view().show_compare);
  h.tap(GLFW_KEY_RIGHT, false, true);
  h.settle();
  CHECK(h.app().runs()[0]->steps() == 10);
  CHECK(h.app().runs()[1]->steps() == 10);
  CHECK(h.app().runs()[1]->status.preset.memory.window == 2);
  visit_everything(h);
}

TEST_CASE("app: the compare view overlays HOPE's plots for HOPE runs, per CMS level", "[gui]") {
  memscope::app::GuiOptions o;
  o.preset = std::string(MEMSCOPE_SOURCE_DIR) + "/tests/app/compare-hope-test.toml";
  AppHarness h(o);
  REQUIRE(h.app().runs().size() == 2);
  REQUIRE(h.app().view().show_compare);
  h.app().post_all(model::Command::steps(40));
  h.settle();
  REQUIRE(h.app().runs()[1]->steps() == 40);
  auto& view = h.app().view();
  view.cms_level = 1;  // level 0 restarts from level 1 in the nested run, so the two runs part
  h.frames(2);
  // A hope block has no memory layer: its surprise, rank and norm plots would be empty.
  for (const char* id : {"plot/cmp loss", "plot/cmp selfmod", "plot/cmp retention", "plot/cmp cms"}) {
    INFO(id);
    CHECK(h.app().rects().count(id) == 1);
  }
  CHECK(h.app().rects().count("plot/cmp erank") == 0);
  // Both runs' lines are drawn in the CMS plot, each in its run's colour.
  const memscope::test::PngImage image = h.screenshot("compare-hope");
  const ImRect r = h.app().rects().at("plot/cmp cms");
  const auto count_near = [&](ImU32 color) {
    const ImVec4 c = ImGui::ColorConvertU32ToFloat4(color);
    int n = 0;
    for (int y = static_cast<int>(r.Min.y); y < static_cast<int>(r.Max.y); ++y)
      for (int x = static_cast<int>(r.Min.x); x < static_cast<int>(r.Max.x); ++x) {
        const unsigned char* p = image.at(x, y);
        n += std::abs(p[0] - c.x * 255) < 30 && std::abs(p[1] - c.y * 255) < 30 && std::abs(p[2] - c.z * 255) < 30;
      }
    return n;
  };
  CHECK(count_near(memscope::app::run_color(0, 0)) > 30);
  CHECK(count_near(memscope::app::run_color(1, 0)) > 30);
  // A level past the last (a run with fewer levels was compared) falls back to level 0.
  view.cms_level = 99;
  h.frames(2);
  CHECK(view.cms_level == 0);
}

TEST_CASE("app: loading a preset from the browser replaces the run, a bad one is a banner", "[gui]") {
  memscope::app::GuiOptions o;
  AppHarness h(o);
  h.settle();
  h.app().load_preset("no-such-preset");
  CHECK_THAT(h.app().view().banner, Catch::Contains("unknown preset 'no-such-preset'"));
  CHECK(h.app().main().status.preset.name == "demo-mqar");
  h.app().load_preset("deltanet");
  h.settle();
  CHECK(h.app().main().status.preset.name == "deltanet");
  h.tap(GLFW_KEY_RIGHT);
  h.settle();
  CHECK(h.app().main().steps() == 1);
}

TEST_CASE("app: the Modules tab shows a training step's per-module gradient norms, largest first", "[gui]") {
  AppHarness h(training_only());
  h.app().post_all(model::Command::steps(6));
  h.settle();
  h.app().view().select_right_tab = 2;
  h.frames(3);
  REQUIRE(h.app().rects().count("modules/table") == 1);
  REQUIRE(h.app().rects().count("modules/map") == 1);
  const auto frame = h.app().shown_frame();
  REQUIRE(frame);
  REQUIRE(!frame->module_names.empty());
  // The map holds six training steps of real norms: its right end is coloured, not one flat colour.
  const memscope::test::PngImage image = h.screenshot("modules");
  const ImRect map = h.app().rects().at("modules/map");
  std::set<unsigned> colors;
  for (int y = static_cast<int>(map.Min.y) + 2; y < static_cast<int>(map.Max.y) - 2; ++y)
    colors.insert(image.pixel(static_cast<int>(map.Max.x) - 4, y));
  CHECK(colors.size() > 3);
}

TEST_CASE("app: in train mode the token strip shows the row of the batch being trained, coloured by its loss", "[gui]") {
  {  // one window at a time: the harness owns ImGui's context
    const memscope::app::GuiOptions o = training_only();
    AppHarness h(o);
    h.app().post_all(model::Command::steps(2));
    h.settle();
    const memscope::app::TrainBatchRow& row = h.app().shown_cache().train_batch();
    REQUIRE(row.step == 2);
    CHECK(row.train_step == 2);
    // The row the second training step drew (the batches are a function of the step).
    const model::Batch batch = model::Trainer(model::load_preset("demo-mqar", o.sets)).training_batch(2);
    REQUIRE(static_cast<int64_t>(row.tokens.size()) == batch.tokens.size(1));
    for (size_t t = 0; t < row.tokens.size(); ++t) CHECK(row.tokens[t] == batch.tokens[0][static_cast<int64_t>(t)].item<int64_t>());
    int scored = 0;
    for (size_t t = 0; t < row.loss.size(); ++t) scored += std::isfinite(row.loss[t]) && row.targets[t] >= 0;
    CHECK(scored > 0);
    // The strip draws it: the scored tokens' cells carry colours of the loss scale.
    const memscope::test::PngImage image = h.screenshot("train-batch");
    const ImRect strip = h.app().rects().at("tokens/strip");
    std::set<unsigned> colors;
    for (int x = static_cast<int>(strip.Min.x); x < static_cast<int>(strip.Max.x); x += 3)
      colors.insert(image.pixel(x, static_cast<int>((strip.Min.y + strip.Max.y) * 0.5f)));
    CHECK(colors.size() > 4);
    // A run that only trains has no token steps: no surprise or gates to plot, so no empty plots.
    CHECK(h.app().rects().count("plot/train loss") == 1);
    CHECK(h.app().rects().count("plot/surprise") == 0);
    CHECK(h.app().rects().count("plot/gates") == 0);
    CHECK(h.app().rects().count("plot/erank") == 1);
  }

  // train+inspect has both: a switch picks the probe stream (the default) or the training batch.
  memscope::app::GuiOptions both;
  both.preset = "demo-mqar";
  both.sets = {"engine.mode=train+inspect", "engine.inspect_every=1", "engine.inspect_tokens=4", "train.batch=4"};
  AppHarness b(both);
  b.app().post_all(model::Command::steps(6));
  b.settle();
  REQUIRE(b.app().shown_cache().train_batch().step > 0);
  REQUIRE(!b.app().shown_cache().tokens().empty());
  CHECK_FALSE(b.app().view().strip_shows_batch);
  b.click("tokens/show training batch");
  b.frames(2);
  CHECK(b.app().view().strip_shows_batch);
  CHECK(b.app().rects().count("tokens/strip") == 1);
}

TEST_CASE("app: 'Step into step N' forks at the weights before it and shows the batch with the backward norms", "[gui]") {
  memscope::app::GuiOptions o;
  o.preset = "demo-mqar";
  o.sets = {"engine.mode=train", "train.batch=4"};
  AppHarness h(o);
  h.app().post_all(model::Command::steps(4));
  h.settle();
  h.app().view().select_right_tab = 2;
  h.frames(3);
  const auto trained = h.app().shown_frame();
  REQUIRE(trained);
  REQUIRE(trained->kind == model::FrameKind::Train);
  const int64_t train_step = trained->train_step;
  h.click("modules/step_into");
  h.settle();
  REQUIRE(h.app().view().timeline == 1);  // the view moved to the fork
  h.app().post_all(model::Command::steps(12));
  h.settle();
  h.app().view().select_right_tab = 0;  // Plots
  h.frames(3);
  const auto stepped = h.app().shown_frame();
  REQUIRE(stepped);
  CHECK(stepped->kind == model::FrameKind::Inspect);
  CHECK(stepped->train_step == train_step - 1);  // the weights from before the step
  CHECK(std::isfinite(stepped->weight(0, 0, 0, model::WeightMetric::GradM)));
  CHECK(h.app().rects().count("plot/backward") == 1);
  CHECK(h.app().rects().count("plot/ns") == 1);  // Atlas runs Muon: its inspect frames measure NS
  // The main timeline kept training alongside: nothing was thrown away.
  CHECK(h.app().main().steps(0) == 16);
  h.screenshot("step-into");
}

TEST_CASE("app: the first-run overlay says what to watch and goes away for good with 'Got it'", "[gui]") {
  memscope::app::GuiOptions o;
  AppHarness h(o);
  int dismissed = 0;
  h.app().view().show_intro = true;
  h.app().view().on_intro_dismissed = [&] { ++dismissed; };
  h.frames(2);
  REQUIRE(h.app().rects().count("intro/ok") == 1);
  h.screenshot("intro");
  h.click("intro/ok");
  CHECK_FALSE(h.app().view().show_intro);
  CHECK(dismissed == 1);
  CHECK(h.app().rects().count("intro/ok") == 0);
}

TEST_CASE("app: a slow step shows what is running and for how long", "[gui]") {
  memscope::app::GuiOptions o;
  o.preset = "demo-mqar-hope";  // a HOPE training step takes seconds on this CPU
  o.sets = {"engine.mode=train"};
  AppHarness h(o);
  const double posted = model::steady_seconds();
  h.app().post(model::Command::steps(1));
  bool shown = false;
  const auto start = std::chrono::steady_clock::now();
  while (!shown && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    h.frame();
    shown = h.app().rects().count("transport/busy") == 1;
  }
  CHECK(shown);
  // The clock it shows runs from when the step began: after the post, over half a second ago.
  const double since = h.app().runs()[0]->status.busy_since;
  CHECK(since >= posted);
  CHECK(model::steady_seconds() - since > 0.5);
  h.settle();
  CHECK(h.app().rects().count("transport/busy") == 0);  // gone once the step is done
}

TEST_CASE("app: the token strip names MQAR tokens and marks keys, values and queries", "[gui]") {
  memscope::app::GuiOptions o;  // demo-mqar: 6 pairs, 10 filler, 6 queries, 28 tokens
  AppHarness h(o);
  h.app().post_all(model::Command::steps(28));
  h.settle();
  const memscope::test::PngImage image = h.screenshot("token-roles");
  const ImRect strip = h.app().rects().at("tokens/strip");
  // The role bars along the cells' top edge: every colour of the three roles appears.
  std::set<unsigned> bars;
  for (int x = static_cast<int>(strip.Min.x); x < static_cast<int>(strip.Max.x); ++x) bars.insert(image.pixel(x, static_cast<int>(strip.Min.y) + 1));
  CHECK(bars.count(0x4287f5u) == 1);  // key
  CHECK(bars.count(0xf5a623u) == 1);  // value
  CHECK(bars.count(0xeb4034u) == 1);  // query
}

TEST_CASE("app: File > Open checkpoint runs the trained demo live, and a bad path is a banner", "[gui]") {
  memscope::app::GuiOptions o;
  AppHarness h(o);
  h.app().open_checkpoint("/nonexistent/ck.safetensors");
  h.frames(2);
  CHECK(h.app().view().banner.find("/nonexistent/ck.safetensors") != std::string::npos);
  h.app().view().banner.clear();
  h.app().open_checkpoint(std::string(MEMSCOPE_SOURCE_DIR) + "/assets/demo-mqar-trained.safetensors");
  REQUIRE(h.app().main().live);
  h.app().post_all(model::Command::steps(28));  // one probe sequence: 6 queries
  h.settle();
  int queries = 0, recalled = 0;
  for (int64_t step = 1; step <= 28; ++step) {
    const auto f = h.app().main().frame(0, step);
    REQUIRE(f);
    if (f->target < 0) continue;
    ++queries;
    recalled += f->predicted == f->target;
  }
  CHECK(queries == 6);
  CHECK(recalled == 6);
}

TEST_CASE("app: zooming one plot zooms them all, and 'Follow newest' brings the newest steps back", "[gui]") {
  memscope::app::GuiOptions o;
  AppHarness h(o);
  h.app().post_all(model::Command::steps(60));
  h.settle();
  REQUIRE(h.app().rects().count("plot/surprise") == 1);
  CHECK(h.app().rects().count("plots/follow") == 0);
  h.wheel("plot/surprise", 3.0f);
  const memscope::viz::PlotView linked = h.app().view().plots.at("linked");
  CHECK_FALSE(linked.follow);
  CHECK(linked.x_max - linked.x_min < 50.0);  // zoomed in from 60 steps
  REQUIRE(h.app().rects().count("plots/follow") == 1);
  // Every plot draws from the one window: no plot keeps a view of its own.
  for (const auto& [id, view] : h.app().view().plots) CHECK(id == "linked");
  h.click("plots/follow");
  CHECK(h.app().view().plots.at("linked").follow);
  CHECK(h.app().rects().count("plots/follow") == 0);
}
