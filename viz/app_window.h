// The one GLFW window with an OpenGL 3.3 core context and a Dear ImGui context on it.
// Everything platform-specific (GLFW, GL loading through ImGui's backend, fonts) stays here.
#pragma once
#include <functional>
#include <string>

struct GLFWwindow;
struct ImGuiIO;

namespace memscope::viz {

struct WindowOptions {
  std::string title = "memscope";
  int width = 1600;
  int height = 1000;
  std::string font_path;  // a TTF; empty or missing falls back to ImGui's built-in font
  float font_size = 15.0f;
};

class AppWindow {
 public:
  // Throws std::runtime_error with one line (e.g. "no display") when a window cannot be made.
  explicit AppWindow(const WindowOptions& options);
  ~AppWindow();
  AppWindow(const AppWindow&) = delete;
  AppWindow& operator=(const AppWindow&) = delete;

  bool should_close() const;
  void request_close();

  // Idle means no redraw: block until input arrives, wake_main_loop() is called, or timeout_s
  // passes. Poll when busy. Returns true when a window event (input, resize, expose) arrived.
  bool wait_for_events(bool busy, double timeout_s = 1.0);

  void begin_frame();  // starts an ImGui frame

  // Called in begin_frame after the platform backend has read the real input and before ImGui
  // sees it: the GUI tests simulate keys and clicks through ImGui's IO here.
  void set_input_hook(std::function<void(ImGuiIO&)> hook) { input_hook_ = std::move(hook); }
  void end_frame();    // renders it into the back buffer (no swap yet)
  void present();      // swaps buffers

  // Saves the back buffer as a PNG; call between end_frame() and present(). "" on success.
  std::string screenshot(const std::string& path) const;

  int framebuffer_width() const;
  int framebuffer_height() const;
  GLFWwindow* handle() const { return window_; }

 private:
  GLFWwindow* window_ = nullptr;
  std::function<void(ImGuiIO&)> input_hook_;
};

// Wakes a wait_for_events() in progress; safe from any thread (a source's thread on a new frame).
void wake_main_loop();

// The last message GLFW reported, for one-line errors.
std::string last_glfw_error();

}  // namespace memscope::viz
