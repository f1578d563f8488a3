// memscope: the desktop debugger. Opens the main window; --screenshot renders a few frames,
// saves the window as a PNG and exits (how GUI tests and README pictures are made).
#include <CLI/CLI.hpp>

#include <iostream>

#include "app/gui/keys.h"
#include "app/gui/main_layout.h"
#include "memscope/version.h"
#include "model/config/preset.h"
#include "model/util/device.h"
#include "model/util/errors.h"
#include "viz/app_window.h"

namespace {

struct Options {
  std::string screenshot;
  int frames = 3;
  int width = 1600;
  int height = 1000;
  std::string device = "auto";
  std::string preset = "demo-mqar";
};

// The preset's shape in a few lines for the knobs panel.
void describe_preset(const memscope::model::Preset& p, memscope::app::ViewState& view) {
  using namespace memscope::model;
  view.preset_name = p.name;
  view.preset_description = p.description;
  const auto n = [](auto v) { return std::to_string(v); };
  view.preset_summary = {
      {"model", std::string(to_string(p.model.block)) + " x " + n(p.model.layers) + ", d " + n(p.model.d_model) +
                    (p.model.has_attention() ? ", window " + n(p.model.window) : "")},
      {"task", p.task.kind + (p.task.kind == "mqar" ? ", " + n(p.task.pairs) + " pairs, gap " + n(p.task.gap) : "")},
      {"train", n(p.train.steps) + " steps, batch " + n(p.train.batch) + ", chunk " + n(p.train.chunk)},
  };
  if (p.model.has_memory())
    view.preset_summary.insert(
        view.preset_summary.begin() + 1,
        {"memory", std::string(to_string(p.memory.structure)) + ", " + to_string(p.memory.optimiser) + ", c " +
                       n(p.memory.window) + ", " + to_string(p.memory.feature_map) + (p.model.ttl ? "" : ", TTL off")});
}

int run(const Options& options) {
  memscope::viz::WindowOptions window_options;
  window_options.width = options.width;
  window_options.height = options.height;
  window_options.font_path = MEMSCOPE_FONT_PATH;
  memscope::viz::AppWindow window(window_options);

  memscope::app::ViewState view;
  view.device_line = memscope::model::describe_device(memscope::model::pick_device(options.device));
  describe_preset(memscope::model::load_preset(options.preset), view);

  const bool screenshot_mode = !options.screenshot.empty();
  for (int frame = 1; !window.should_close(); ++frame) {
    // ImGui settles its layout over a couple of frames after input; keep drawing briefly after.
    window.wait_for_events(/*busy=*/screenshot_mode || frame < 3);
    window.begin_frame();
    if (memscope::app::handle_keys(view)) window.request_close();
    memscope::app::draw_main_layout(view);
    window.end_frame();

    if (screenshot_mode && frame >= options.frames) {
      if (auto error = window.screenshot(options.screenshot); !error.empty()) {
        std::cerr << "memscope: " << error << "\n";
        return 1;
      }
      return 0;
    }
    if (!view.screenshot_request.empty()) {
      auto error = window.screenshot(view.screenshot_request);
      view.notice = error.empty() ? "saved " + view.screenshot_request : error;
      view.screenshot_request.clear();
    }
    window.present();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memscope: a debugger for test-time-learning memory (Titans, Atlas, HOPE, TTT)"};
  app.set_version_flag("--version", std::string("memscope ") + MEMSCOPE_VERSION);
  Options options;
  app.add_option("--screenshot", options.screenshot, "Render --frames frames, save the window as this PNG, exit");
  app.add_option("--frames", options.frames, "Frames to render before --screenshot")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--width", options.width, "Window width in pixels")->check(CLI::Range(320, 16384))->capture_default_str();
  app.add_option("--height", options.height, "Window height in pixels")->check(CLI::Range(240, 16384))->capture_default_str();
  app.add_option("--device", options.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--preset", options.preset, "Preset to open (assets/presets name or .toml path)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "memscope: " << e.what() << " (see memscope --help)\n";
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "memscope: " << memscope::model::one_line(e.what()) << "\n";
    return 1;
  }
}
