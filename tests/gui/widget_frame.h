// Driving one widget through real frames for the GUI tests: a borderless ImGui window over the
// whole AppWindow, a mouse the test places (the X pointer is ignored), and a screenshot to check.
#pragma once
#include <catch2/catch.hpp>
#include <imgui.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

#include "gui/png_image.h"
#include "viz/app_window.h"

namespace memscope::test {

// Xvfb resets itself when its last client disconnects and refuses connections meanwhile, so a
// window opened right after another one closed can fail: retry for up to two seconds.
inline std::unique_ptr<viz::AppWindow> open_test_window(int width, int height, const std::string& font_path = "") {
  REQUIRE(std::getenv("DISPLAY") != nullptr);  // scripts/test runs the GUI tests under xvfb-run
  viz::WindowOptions options;
  options.width = width;
  options.height = height;
  options.font_path = font_path;
  for (int attempt = 1;; ++attempt) {
    try {
      return std::make_unique<viz::AppWindow>(options);
    } catch (const std::runtime_error&) {
      if (attempt == 40) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

// Where the test puts the mouse for a frame; the default is "not over the window".
struct TestMouse {
  ImVec2 pos{-FLT_MAX, -FLT_MAX};
  bool down = false;
};

// One frame of draw() with the mouse at `mouse`, set through the window's input hook: after the
// GLFW backend has read the real pointer, before ImGui sees it.
inline void widget_frame(viz::AppWindow& window, const std::function<void()>& draw, TestMouse mouse = {}) {
  window.wait_for_events(true);
  window.set_input_hook([mouse](ImGuiIO& io) {
    io.MousePos = mouse.pos;
    io.MouseDown[ImGuiMouseButton_Left] = mouse.down;
  });
  window.begin_frame();
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("widget", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
  draw();
  ImGui::End();
  window.end_frame();
}

// The cursor's screen position in whole pixels, where the viz widgets put their top-left corner.
inline ImVec2 pixel_cursor() {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  return {std::floor(p.x), std::floor(p.y)};
}

// The frame just rendered (call before present), as pixels. MEMSCOPE_KEEP_PNG keeps the file.
inline PngImage capture(const viz::AppWindow& window, const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/memscope-" + name + "-" + std::to_string(getpid()) + ".png";
  REQUIRE(window.screenshot(path).empty());
  PngImage image = load_png(path);
  if (!std::getenv("MEMSCOPE_KEEP_PNG")) std::remove(path.c_str());
  return image;
}

// 0xRRGGBB of an ImU32 colour (which ImGui packs as ABGR).
inline unsigned rgb_of(ImU32 c) { return ((c & 0xff) << 16) | (c & 0xff00) | ((c >> 16) & 0xff); }

// Whether two 0xRRGGBB colours differ by at most `tolerance` in every channel.
inline bool rgb_close(unsigned a, unsigned b, int tolerance = 2) {
  for (int shift : {0, 8, 16})
    if (std::abs(static_cast<int>((a >> shift) & 0xff) - static_cast<int>((b >> shift) & 0xff)) > tolerance) return false;
  return true;
}

}  // namespace memscope::test
