// GUI frame cost (issue 7, "Benchmarks"): 8 heatmaps of 128×128 and 6 plots of 1M points each
// in a 1600×1000 window laid out like the app (transport, knobs, memory grid, plots, timeline,
// token strip). Run it under xvfb-run with Mesa. One JSON line per configuration:
// - "frame_live": new heatmap data every frame (set_data in the frame, as when the engine runs);
// - "frame_static": the same frames with the heatmaps left as they are (no upload);
//   CPU frame time is begin_frame to the end of end_frame (layout, decimation, uploads, ImGui's GL
//   submission), not the swap, which is reported apart (Mesa may rasterise there);
// - "idle": no input, no new data: wait_for_events(false, ≤1 s) for --idle-seconds, redrawing only
//   when the wait ended early; process CPU seconds (CLOCK_PROCESS_CPUTIME_ID) over wall seconds, in percent.
//   AppWindow does not say why a wait ended, so "ended early" is judged by the clock.
// - "idle_redraw_each_wake": the same, redrawing after every wake as app/gui/main.cpp does now.
// - "frame_follow": frames as "frame_static", with one new sample appended to every plot's series
//   each frame (a running model in follow mode), so the plots' summaries extend every frame;
// - "decimate": one 1M-point series decimated into 500 columns, the full range (follow mode):
//   "scan_ms" without a summary, "summary_ms" over a summary, "rebuild_ms" to summarise it from
//   scratch, "append_ms" to extend the summary by one sample and decimate (a follow-mode frame).
//   Medians over --decimate-runs runs (50).
// Flags: --frames N (300), --warmup N (20), --idle-seconds S (10), --width W (1600), --height H (1000),
// --decimate-runs N (50).
#include <GL/gl.h>
#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_timing.h"
#include "viz/app_window.h"
#include "viz/decimate.h"
#include "viz/heatmap.h"
#include "viz/line_plot.h"
#include "viz/minmax_pyramid.h"
#include "viz/timeline_scrubber.h"
#include "viz/token_strip.h"

using namespace memscope::viz;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kHeatmaps = 8, kMatrixSide = 128, kDataVariants = 3;
constexpr int kPlots = 6;
constexpr std::size_t kPoints = 1'000'000;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Nearest-rank percentile of milliseconds.
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))];
}

// Everything one frame draws, made up front so that only the GUI's work is timed.
struct Scene {
  std::vector<std::vector<float>> matrices;  // kHeatmaps × kDataVariants, each 128 × 128
  std::vector<Heatmap> heatmaps = std::vector<Heatmap>(kHeatmaps);
  std::vector<double> steps;                 // the shared step axis
  std::vector<std::vector<float>> metrics;   // one series per plot
  std::vector<PlotView> views = std::vector<PlotView>(kPlots);
  std::vector<PlotMarker> markers;
  std::vector<TimelineTick> ticks;
  std::vector<TokenCell> tokens;

  Scene() {
    std::mt19937 rng(1);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (int m = 0; m < kHeatmaps * kDataVariants; ++m) {
      std::vector<float> values(kMatrixSide * kMatrixSide);
      for (auto& v : values) v = noise(rng);
      matrices.push_back(std::move(values));
    }
    for (std::size_t i = 0; i < kPoints; ++i) steps.push_back(static_cast<double>(i));
    for (int p = 0; p < kPlots; ++p) {
      std::vector<float> ys(kPoints);
      float walk = 0.0f;
      for (auto& y : ys) y = (walk += 0.01f * noise(rng)) + 0.1f * noise(rng);
      metrics.push_back(std::move(ys));
    }
    for (int e = 0; e < 50; ++e) markers.push_back({e * 20'000.0 + 7'000.0, IM_COL32(255, 190, 80, 255), "spike"});
    for (int e = 0; e < 2'000; ++e)
      ticks.push_back(e % 50 ? TimelineTick{e * 499.0, IM_COL32(150, 150, 160, 255), "knob changed"}
                             : TimelineTick{e * 499.0 + 3.0, IM_COL32(255, 110, 90, 255), "spike", 1});
    for (int t = 0; t < 4096; ++t)
      tokens.push_back({"k" + std::to_string(t % 97), (t % 13) / 12.0f, static_cast<long long>(kPoints) - 4096 + t});
  }

  // A step and one sample per plot, as the app's timeline cache appends while the model runs.
  void append() {
    std::mt19937 rng(static_cast<unsigned>(steps.size()));
    std::normal_distribution<float> noise(0.0f, 1.0f);
    steps.push_back(static_cast<double>(steps.size()));
    for (auto& ys : metrics) ys.push_back(ys.back() + 0.01f * noise(rng));
  }

  void upload(int frame) {
    for (int h = 0; h < kHeatmaps; ++h)
      heatmaps[h].set_data(matrices[h * kDataVariants + frame % kDataVariants].data(), kMatrixSide, kMatrixSide);
  }

  void draw() {
    static const char* kMetricNames[kPlots] = {"loss", "surprise", "erank", "NS error", "gate", "norm"};
    static const ImU32 kColors[kPlots] = {IM_COL32(255, 200, 0, 255),   IM_COL32(120, 200, 255, 255),
                                          IM_COL32(150, 230, 120, 255), IM_COL32(255, 120, 120, 255),
                                          IM_COL32(200, 150, 255, 255), IM_COL32(230, 230, 230, 255)};
    const ImGuiViewport* viewport = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(viewport->WorkPos);
    ImGui::SetNextWindowSize(viewport->WorkSize);
    ImGui::Begin("bench", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
    for (const char* b : {"Run", "Step 1", "Step 10", "Step 100", "Record", "Rewind"}) {
      ImGui::Button(b);
      ImGui::SameLine();
    }
    ImGui::Text("step %zu", kPoints - 1);

    const float bottom = 24.0f + 60.0f + ImGui::GetStyle().ItemSpacing.y * 2;
    const float middle = ImGui::GetContentRegionAvail().y - bottom;
    if (ImGui::BeginTable("panels", 3, ImGuiTableFlags_SizingStretchProp, {0, middle})) {
      ImGui::TableSetupColumn("knobs", ImGuiTableColumnFlags_WidthStretch, 0.22f);
      ImGui::TableSetupColumn("memory", ImGuiTableColumnFlags_WidthStretch, 0.46f);
      ImGui::TableSetupColumn("plots", ImGuiTableColumnFlags_WidthStretch, 0.32f);
      ImGui::TableNextColumn();
      for (int k = 0; k < 24; ++k) ImGui::Text("knob %d  %.3f", k, 0.01 * k);
      ImGui::TableNextColumn();
      if (ImGui::BeginTable("grid", 2)) {
        for (int h = 0; h < kHeatmaps; ++h) {
          ImGui::TableNextColumn();
          const std::string id = "m" + std::to_string(h);
          heatmaps[h].draw(id.c_str(), {ImGui::GetContentRegionAvail().x, middle / 4 - 12.0f});
        }
        ImGui::EndTable();
      }
      ImGui::TableNextColumn();
      for (int p = 0; p < kPlots; ++p) {
        const PlotSeries series{kMetricNames[p], steps.data(), metrics[p].data(), metrics[p].size(), kColors[p]};
        draw_line_plot(kMetricNames[p], views[p], {series}, markers, {ImGui::GetContentRegionAvail().x, middle / kPlots - 8.0f});
      }
      ImGui::EndTable();
    }
    draw_timeline_scrubber("timeline", 0.0, static_cast<double>(kPoints - 1), static_cast<double>(kPoints - 1), ticks,
                           {ImGui::GetContentRegionAvail().x, 24.0f});
    draw_token_strip("tokens", tokens, static_cast<long long>(kPoints) - 1, {0.0f, 1.0f}, nullptr,
                     {ImGui::GetContentRegionAvail().x, 60.0f});
    ImGui::End();
  }
};

// Times `frames` frames after `warmup` untimed ones; upload says whether heatmaps get new data,
// append whether the plots' series grow by a sample (before the clock starts, as data arrives).
nlohmann::json time_frames(AppWindow& window, Scene& scene, int warmup, int frames, bool upload, bool append = false) {
  std::vector<double> frame_ms, present_ms, vertices;
  for (int f = 0; f < warmup + frames; ++f) {
    window.wait_for_events(true);
    if (append) scene.append();
    const auto start = Clock::now();
    window.begin_frame();
    if (upload) scene.upload(f);
    scene.draw();
    window.end_frame();
    const double frame = seconds_since(start) * 1e3;
    const auto swap = Clock::now();
    window.present();
    if (f < warmup) continue;
    frame_ms.push_back(frame);
    present_ms.push_back(seconds_since(swap) * 1e3);
    vertices.push_back(ImGui::GetDrawData()->TotalVtxCount);
  }
  return {{"frames", frames},
          {"warmup", warmup},
          {"cpu_frame_ms", {{"median", percentile(frame_ms, 0.5)}, {"p90", percentile(frame_ms, 0.9)},
                            {"p99", percentile(frame_ms, 0.99)}, {"max", percentile(frame_ms, 1.0)}}},
          {"present_ms_median", percentile(present_ms, 0.5)},
          {"vertices_median", percentile(vertices, 0.5)}};
}

// Decimation of one 1M-point series alone, the way a plot in follow mode asks for it.
nlohmann::json time_decimation(const Scene& scene, int runs) {
  constexpr int kColumns = 500;
  std::vector<double> xs = scene.steps;
  std::vector<float> ys = scene.metrics[0];
  xs.resize(kPoints), ys.resize(kPoints);
  auto median_ms = [&](auto&& work) {
    std::vector<double> ms;
    for (int r = 0; r < runs; ++r) {
      const auto start = Clock::now();
      work(r);
      ms.push_back(seconds_since(start) * 1e3);
    }
    return percentile(ms, 0.5);
  };
  std::size_t kept = 0;  // used, so the work is not optimised away
  const double scan = median_ms([&](int) {
    kept += decimate_minmax(xs.data(), ys.data(), kPoints, xs[0], xs[kPoints - 1], kColumns).size();
  });
  MinMaxPyramid summary;
  const double rebuild = median_ms([&](int) { summary.rebuild(ys.data(), kPoints - runs); });
  summary.rebuild(ys.data(), kPoints - runs);
  const double append = median_ms([&](int r) {
    const std::size_t count = kPoints - runs + r + 1;
    summary.extend(ys.data(), count);
    kept += decimate_minmax(xs.data(), ys.data(), count, xs[0], xs[count - 1], kColumns, summary).size();
  });
  const double query = median_ms([&](int) {
    kept += decimate_minmax(xs.data(), ys.data(), kPoints, xs[0], xs[kPoints - 1], kColumns, summary).size();
  });
  return {{"points", kPoints}, {"columns", kColumns},  {"runs", runs},         {"scan_ms", scan},
          {"summary_ms", query}, {"rebuild_ms", rebuild}, {"append_ms", append}, {"kept", kept}};
}

// Idle for `seconds`: returns CPU percent, wakes and redraws.
nlohmann::json idle(AppWindow& window, Scene& scene, double seconds, bool redraw_each_wake) {
  const double cpu_start = memscope::bench::process_cpu_seconds();
  const auto start = Clock::now();
  int wakes = 0, redraws = 0;
  for (double left = seconds; left > 0.0; left = seconds - seconds_since(start)) {
    const double timeout = std::min(1.0, left);
    const auto wait_start = Clock::now();
    window.wait_for_events(false, timeout);
    ++wakes;
    const bool early = seconds_since(wait_start) < 0.9 * timeout;  // an event, as far as the clock tells
    if (!early && !redraw_each_wake) continue;
    window.begin_frame();
    scene.draw();
    window.end_frame();
    window.present();
    ++redraws;
  }
  const double wall = seconds_since(start);
  return {{"seconds", wall}, {"cpu_percent", 100.0 * (memscope::bench::process_cpu_seconds() - cpu_start) / wall}, {"wakes", wakes},
          {"redraws", redraws}};
}

}  // namespace

int main(int argc, char** argv) {
  int frames = 300, warmup = 20, decimate_runs = 50;
  double idle_seconds = 10.0;
  WindowOptions options;
  options.title = "memscope gui_frame bench";
  options.width = 1600;
  options.height = 1000;
  if (argc % 2 == 0) {
    std::cerr << "gui_frame: flag " << argv[argc - 1] << " needs a value\n";
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--frames") frames = std::max(1, std::stoi(value));
    else if (flag == "--warmup") warmup = std::max(0, std::stoi(value));
    else if (flag == "--idle-seconds") idle_seconds = std::stod(value);
    else if (flag == "--width") options.width = std::stoi(value);
    else if (flag == "--height") options.height = std::stoi(value);
    else if (flag == "--decimate-runs") decimate_runs = std::max(1, std::stoi(value));
    else {
      std::cerr << "gui_frame: unknown flag " << flag << "\n";
      return 2;
    }
  }

  std::unique_ptr<AppWindow> window;
  try {
    window = std::make_unique<AppWindow>(options);
  } catch (const std::exception& e) {
    std::cerr << "gui_frame: " << e.what() << "\n";
    return 1;
  }
  Scene scene;
  scene.upload(0);
  const nlohmann::json setup{{"width", options.width},   {"height", options.height},
                             {"heatmaps", kHeatmaps},    {"matrix", kMatrixSide},
                             {"plots", kPlots},          {"points_per_plot", kPoints},
                             {"renderer", reinterpret_cast<const char*>(glGetString(GL_RENDERER))}};

  auto line = [&](const char* bench, nlohmann::json result) {
    result["bench"] = bench;
    result.update(setup);
    std::cout << result.dump() << std::endl;
  };
  line("frame_live", time_frames(*window, scene, warmup, frames, true));
  line("frame_static", time_frames(*window, scene, warmup, frames, false));
  line("frame_follow", time_frames(*window, scene, warmup, frames, false, true));
  line("decimate", time_decimation(scene, decimate_runs));
  line("idle", idle(*window, scene, idle_seconds, false));
  line("idle_redraw_each_wake", idle(*window, scene, idle_seconds, true));
  return 0;
}
