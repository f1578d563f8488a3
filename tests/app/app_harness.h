// The real app in a real window (Xvfb under scripts/test), driven the way a user drives it: keys
// and clicks go in through ImGui's IO between the platform backend and ImGui (AppWindow's input
// hook), so every widget reacts exactly as it does to a person.
#pragma once
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_internal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "app/gui/gui_app.h"
#include "gui/png_image.h"
#include "gui/widget_frame.h"
#include "support/temp_files.h"
#include "viz/app_window.h"

namespace memscope::test {

// TMPDIR/memscope-app-PID/NAME: this process's files, removed when it exits (support/temp_files.h).
inline std::string temp_path(const std::string& name) {
  static const auto dir = fresh_dir("app");
  return (dir / name).string();
}

class AppHarness {
 public:
  explicit AppHarness(const app::GuiOptions& options, int width = 1600, int height = 1000) {
    window_ = open_test_window(width, height, "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    window_->set_input_hook([this](ImGuiIO& io) {
      // Tests running in parallel open windows on the same X display and take the focus; ImGui
      // would then release every key at NewFrame. The simulated user types into this window.
      io.AppFocusLost = false;
      io.MousePos = mouse_;
      for (bool& down : io.MouseDown) down = false;
      io.MouseDown[0] = mouse_down_;
      for (int k : {GLFW_KEY_SPACE, GLFW_KEY_RIGHT, GLFW_KEY_LEFT, GLFW_KEY_ENTER, GLFW_KEY_ESCAPE, GLFW_KEY_R, GLFW_KEY_S,
                    GLFW_KEY_C, GLFW_KEY_END, GLFW_KEY_A, GLFW_KEY_LEFT_CONTROL})
        io.KeysDown[k] = false;
      io.KeyCtrl = ctrl_;
      io.KeyShift = shift_;
      if (key_ >= 0) io.KeysDown[key_] = true;
      for (char c : typed_) io.AddInputCharacter(static_cast<unsigned>(c));
      io.MouseWheel = wheel_;
      typed_.clear();
    });
    app_ = std::make_unique<app::GuiApp>(options);
    app_->view().speed = 0.0f;  // Run means the engine's own run, not paced steps
  }
  ~AppHarness() {
    app_.reset();  // the sources stop before the window (and GL) go
    window_.reset();
  }

  app::GuiApp& app() { return *app_; }

  // One full frame: poll the sources, draw, render.
  void frame() {
    window_->wait_for_events(true);
    app_->poll();
    window_->begin_frame();
    app_->draw();
    window_->end_frame();
    window_->present();
  }
  void frames(int n) {
    for (int i = 0; i < n; ++i) frame();
  }
  // Draws frames until `done` holds, for at most `seconds`, not a count of frames: on a loaded
  // machine the engine's and the viewer's threads may take a while. Returns whether it held.
  bool frames_until(const std::function<bool()>& done, double seconds = 30) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      frame();
    }
    return true;
  }
  // Waits for every run to apply what was posted, then draws until the view has caught up.
  void settle() {
    for (auto& run : app_->runs()) run->source->wait_idle();
    frames(3);
  }

  // A key held for one frame and released the next (a tap).
  void tap(int key, bool ctrl = false, bool shift = false) {
    key_ = key, ctrl_ = ctrl, shift_ = shift;
    frame();
    key_ = -1, ctrl_ = false, shift_ = false;
    frame();
  }
  // A left click at the centre of a named widget from the last frame ("events/row/3").
  void click(const std::string& rect_name, bool ctrl = false) {
    const auto it = app_->rects().find(rect_name);
    INFO("no widget named " << rect_name << " in the last frame");
    REQUIRE(it != app_->rects().end());
    click_at(it->second.GetCenter(), ctrl);
  }
  void click_at(ImVec2 p, bool ctrl = false) {
    mouse_ = p;
    frame();  // hover first, as a real pointer would
    mouse_down_ = true, ctrl_ = ctrl;
    frame();
    mouse_down_ = false;
    frame();
    ctrl_ = false;
    mouse_ = {-1000, -1000};
    frame();
  }
  // One wheel notch (positive: zoom in) over the centre of a named widget.
  void wheel(const std::string& rect_name, float notches) {
    const auto it = app_->rects().find(rect_name);
    INFO("no widget named " << rect_name << " in the last frame");
    REQUIRE(it != app_->rects().end());
    mouse_ = it->second.GetCenter();
    frame();
    wheel_ = notches;
    frame();
    wheel_ = 0.0f;
    mouse_ = {-1000, -1000};
    frame();
  }
  void type(const std::string& text) {
    typed_ = text;
    frame();
  }

  // The window as pixels (after drawing one more frame).
  PngImage screenshot(const std::string& name) {
    window_->wait_for_events(true);
    app_->poll();
    window_->begin_frame();
    app_->draw();
    window_->end_frame();
    // MEMSCOPE_KEEP_SCREENSHOTS=1 keeps them, as $TMPDIR/memscope-app-NAME-PID.png, for a person to look at.
    const bool keep = std::getenv("MEMSCOPE_KEEP_SCREENSHOTS") != nullptr;
    const std::string path = keep ? (std::filesystem::temp_directory_path() /
                                     ("memscope-app-" + name + "-" + std::to_string(getpid()) + ".png")).string()
                                  : temp_path(name) + ".png";
    REQUIRE(window_->screenshot(path).empty());
    window_->present();
    auto image = load_png(path);
    if (!keep) std::remove(path.c_str());
    return image;
  }

 private:
  std::unique_ptr<viz::AppWindow> window_;
  std::unique_ptr<app::GuiApp> app_;
  ImVec2 mouse_{-1000, -1000};
  bool mouse_down_ = false, ctrl_ = false, shift_ = false;
  float wheel_ = 0.0f;
  int key_ = -1;
  std::string typed_;
};

}  // namespace memscope::test
