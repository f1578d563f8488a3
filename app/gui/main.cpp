// memscope: the desktop debugger. Opens the main window on a live preset or a recorded session.
// --screenshot renders, saves the window as a PNG and exits (how GUI tests and README pictures
// are made); --steps runs the model that far first.
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "app/gui/gui_app.h"
#include "memscope/version.h"
#include "model/engine/command.h"
#include "model/util/allocator.h"
#include "model/util/small_block_cache.h"
#include "model/util/device.h"
#include "model/util/errors.h"
#include "viz/app_window.h"

namespace {

// SIGINT or SIGTERM: the window closes as if the user closed it, so a recording in progress is
// finished (its last chunk and its totals) by the normal shutdown. The main loop wakes at least
// once a second, and a signal interrupts its wait, so the flag is seen at once.
std::atomic<int> g_quit_signal{0};

extern "C" void on_quit_signal(int signal) {
  // A second signal while shutting down: leave at once, the usual meaning of pressing it twice.
  if (g_quit_signal.exchange(signal) != 0) ::_exit(128 + signal);
}

void watch_quit_signals() {
  struct sigaction action {};
  action.sa_handler = on_quit_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

struct Options {
  std::string screenshot;
  int frames = 3;
  int width = 1600;
  int height = 1000;
  int64_t steps = 0;
  bool paused = false;
  float speed = 30.0f;
  std::vector<std::string> show;
  std::string device = "auto";
  memscope::app::GuiOptions gui;
};

// Where per-user state goes: $XDG_CONFIG_HOME/memscope or ~/.config/memscope ("" when neither is set).
std::filesystem::path config_dir() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "memscope";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".config" / "memscope";
  return {};
}

int run(Options options) {
  using namespace memscope;
  viz::WindowOptions window_options;
  window_options.width = options.width;
  window_options.height = options.height;
  window_options.font_path = MEMSCOPE_FONT_PATH;
  viz::AppWindow window(window_options);

  model::set_default_device(model::pick_device(options.device));  // every model this window builds runs there
  options.gui.device_line = model::describe_device(model::default_device());
  app::GuiApp app(options.gui);
  app.view().speed = options.speed;
  for (const auto& what : options.show) {
    if (what == "compare") app.view().show_compare = true;
    else if (what == "hope") app.view().select_right_tab = 1;
    else if (what == "modules") app.view().select_right_tab = 2;
    else if (what == "breakpoints") app.view().select_left_tab = 1;
    else if (what == "resets") app.view().select_left_tab = 2;
    else if (what == "help") app.view().show_help = true;
    else if (what == "intro") app.view().show_intro = true;
    else if (what == "batch") app.view().strip_shows_batch = true;  // train+inspect: the training batch in the token strip
    else if (what == "presets") app.view().show_presets = true;
    else if (what == "open") app.view().prompt = "open";  // the File > Open session prompt, on the working folder
    else if (what == "open-checkpoint") app.view().prompt = "checkpoint";
    else if (what.rfind("enlarge=", 0) == 0) {
      app.view().has_enlarged = true;
      app.view().enlarged = {std::stoi(what.substr(8)), 0, "M", "M"};
    }
  }
  // The first-run overlay: once per user, on an interactive start (a screenshot shows it only
  // when asked with --show intro). Its marker lives in $XDG_CONFIG_HOME (or ~/.config)/memscope.
  const std::filesystem::path intro_marker = config_dir() / "intro-seen";
  if (options.screenshot.empty() && !config_dir().empty() && !std::filesystem::exists(intro_marker)) app.view().show_intro = true;
  app.view().on_intro_dismissed = [intro_marker] {
    std::error_code ec;
    std::filesystem::create_directories(intro_marker.parent_path(), ec);
    std::ofstream(intro_marker) << "the first-run overlay was dismissed\n";  // best effort: a read-only home only shows it again
  };
  if (!options.gui.record.empty()) {
    if (!app.main().live) throw model::UserError("--record needs a live run (a replay is recorded already)");
    if (!app.start_recording(options.gui.record)) throw model::UserError(app.view().banner);
  }
  const bool screenshot_mode = !options.screenshot.empty();
  if (options.steps > 0) {
    app.post_all(model::Command::steps(options.steps));
    for (auto& run : app.runs()) run->source->wait_idle();
  }
  // A teacher opening the demo sees it move; a screenshot shows exactly the steps asked for.
  // An attached run goes on as it was: its own process runs or pauses it.
  if (!screenshot_mode && !options.paused && options.gui.attach.empty()) app.toggle_run();

  // Redraw only for input or news, at most 60 times a second: an idle window sleeps, and a
  // running one draws each new frame the engine publishes, not every loop.
  constexpr double kFrameInterval = 1.0 / 60.0;
  int settle = 3;        // ImGui settles hover and layout over a couple of frames after input
  bool pending = false;  // news not drawn yet
  using clock = std::chrono::steady_clock;
  auto last_frame = clock::now();
  const auto since_last_frame = [&] { return std::chrono::duration<double>(clock::now() - last_frame).count(); };
  for (int frame = 1; !window.should_close() && g_quit_signal == 0; ++frame) {
    bool input = false;
    if (screenshot_mode || settle > 0) {
      input = window.wait_for_events(true);
    } else {
      // Awake often enough to pace a limited-speed run and to draw pending news on time.
      const double timeout = pending ? std::max(0.0, kFrameInterval - since_last_frame())
                             : app.animating() ? kFrameInterval
                                               : 1.0;
      input = window.wait_for_events(false, timeout);
    }
    pending = app.poll() || pending;
    const bool due = pending && since_last_frame() >= kFrameInterval;
    if (!screenshot_mode && settle == 0 && !input && !due) continue;
    settle = input ? 3 : std::max(0, settle - 1);
    pending = false;
    last_frame = clock::now();

    window.begin_frame();
    if (!app.draw()) window.request_close();
    window.end_frame();

    if (screenshot_mode && frame >= options.frames) {
      if (auto error = window.screenshot(options.screenshot); !error.empty()) {
        std::cerr << "memscope: " << error << "\n";
        return 1;
      }
      return 0;
    }
    if (!app.view().screenshot_request.empty()) {
      auto error = window.screenshot(app.view().screenshot_request);
      app.view().notice = error.empty() ? "saved " + app.view().screenshot_request : error;
      app.view().screenshot_request.clear();
    }
    window.present();
  }
  if (g_quit_signal != 0) {
    std::cerr << "memscope: " << (g_quit_signal == SIGINT ? "interrupted" : "terminated")
              << "; closing the run and any recording\n";
    return 128 + g_quit_signal;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  memscope::model::keep_large_blocks_in_heap();  // model/util/allocator.h
  memscope::model::install_small_block_cache();  // model/util/small_block_cache.h
  watch_quit_signals();
  CLI::App cli{"memscope: a debugger for test-time-learning memory (Titans, Atlas, HOPE, TTT)"};
  cli.set_version_flag("--version", std::string("memscope ") + MEMSCOPE_VERSION);
  Options options;
  cli.add_option("--preset", options.gui.preset, "Preset to run live (assets/presets name or .toml path)")->capture_default_str();
  cli.add_option("--set", options.gui.sets, "KEY=VALUE knob override (repeatable)");
  cli.add_option("--session", options.gui.session, "Replay a recorded session (NAME.memscope) instead of a live run");
  cli.add_option("--follow", options.gui.session,
                 "Follow a session that is still being recorded (e.g. train --record, rank 0 of a --nproc run): its "
                 "frames play as they land")
      ->each([&options](const std::string&) { options.gui.follow = true; });
  cli.add_option("--attach", options.gui.attach,
                 "Attach to a run served by another process (memscope-cli train|step --serve): HOST:PORT");
  cli.add_option("--token", options.gui.token, "With --attach: the token the run printed (or was given)");
  cli.add_option("--ckpt", options.gui.checkpoint, "Run the model saved in this checkpoint (memscope-cli train --out)");
  cli.add_option("--train-step", options.gui.train_step,
                 "Step into this training step: its batch token by token, from the weights before it (rebuilt from --ckpt or "
                 "the preset's start)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cli.add_option("--record", options.gui.record, "Record the live run from its first step into DIR (NAME.memscope)");
  cli.add_option("--compare-session", options.gui.compare_session, "A recorded session to show beside the run (compare view)");
  cli.add_option("--show", options.show, "Open with: compare, hope, modules, breakpoints, resets, help, presets, open (the session prompt), open-checkpoint, enlarge=LAYER, batch (the training batch in the token strip)")
      ->check(CLI::IsMember({"compare", "hope", "modules", "breakpoints", "resets", "help", "intro", "presets", "open", "open-checkpoint", "batch", "enlarge=0", "enlarge=1", "enlarge=2", "enlarge=3"}));
  cli.add_option("--steps", options.steps, "Run this many steps before showing (with --screenshot: what the picture shows)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cli.add_flag("--paused", options.paused, "Open paused (by default a live run starts at --speed)");
  cli.add_option("--speed", options.speed, "Steps per second when running (0: as fast as the model goes)")
      ->check(CLI::Range(0.0f, 100000.0f))->capture_default_str();
  cli.add_option("--screenshot", options.screenshot, "Render --frames frames, save the window as this PNG, exit");
  cli.add_option("--frames", options.frames, "Frames to render before --screenshot")->check(CLI::Range(1, 100000))->capture_default_str();
  cli.add_option("--width", options.width, "Window width in pixels")->check(CLI::Range(320, 16384))->capture_default_str();
  cli.add_option("--height", options.height, "Window height in pixels")->check(CLI::Range(240, 16384))->capture_default_str();
  cli.add_option("--device", options.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.exit(e);
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
