#include "viz/app_window.h"

#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "viz/screenshot.h"
#include "viz/theme.h"

namespace memscope::viz {
namespace {

std::string g_last_glfw_error;

// Set by any window event, so an idle loop can tell input from a timeout or a wake-up. The
// callbacks chain to the ones ImGui's backend installed.
bool g_window_event = false;
GLFWcursorposfun g_prev_cursor = nullptr;
GLFWmousebuttonfun g_prev_button = nullptr;
GLFWscrollfun g_prev_scroll = nullptr;
GLFWkeyfun g_prev_key = nullptr;
GLFWcharfun g_prev_char = nullptr;
GLFWwindowsizefun g_prev_size = nullptr;
GLFWwindowfocusfun g_prev_focus = nullptr;
GLFWcursorenterfun g_prev_enter = nullptr;

void on_cursor(GLFWwindow* w, double x, double y) {
  g_window_event = true;
  if (g_prev_cursor) g_prev_cursor(w, x, y);
}
void on_button(GLFWwindow* w, int b, int a, int m) {
  g_window_event = true;
  if (g_prev_button) g_prev_button(w, b, a, m);
}
void on_scroll(GLFWwindow* w, double x, double y) {
  g_window_event = true;
  if (g_prev_scroll) g_prev_scroll(w, x, y);
}
void on_key(GLFWwindow* w, int k, int s, int a, int m) {
  g_window_event = true;
  if (g_prev_key) g_prev_key(w, k, s, a, m);
}
void on_char(GLFWwindow* w, unsigned c) {
  g_window_event = true;
  if (g_prev_char) g_prev_char(w, c);
}
void on_size(GLFWwindow* w, int x, int y) {
  g_window_event = true;
  if (g_prev_size) g_prev_size(w, x, y);
}
void on_focus(GLFWwindow* w, int f) {
  g_window_event = true;
  if (g_prev_focus) g_prev_focus(w, f);
}
void on_enter(GLFWwindow* w, int e) {
  g_window_event = true;
  if (g_prev_enter) g_prev_enter(w, e);
}
void on_refresh(GLFWwindow*) { g_window_event = true; }

void on_glfw_error(int code, const char* description) {
  g_last_glfw_error = "GLFW error " + std::to_string(code) + ": " + (description ? description : "?");
}

bool file_exists(const std::string& path) { return !path.empty() && std::ifstream(path).good(); }

}  // namespace

std::string last_glfw_error() { return g_last_glfw_error; }

AppWindow::AppWindow(const WindowOptions& options) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit())
    throw std::runtime_error("cannot open a window (" + g_last_glfw_error +
                             "); is there a display? Try: xvfb-run -a scripts/run");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  // MEMSCOPE_GL_CONTEXT=egl: the context through EGL instead of GLX, for X servers whose GLX the
  // machine's GL vendor cannot use (bench/gpu_gui.sh tries it under Xvfb with NVIDIA's EGL).
  const char* api = std::getenv("MEMSCOPE_GL_CONTEXT");
  if (api && std::strcmp(api, "egl") == 0) glfwWindowHint(GLFW_CONTEXT_CREATION_API, GLFW_EGL_CONTEXT_API);
  window_ = glfwCreateWindow(options.width, options.height, options.title.c_str(), nullptr, nullptr);
  if (!window_) {
    glfwTerminate();
    throw std::runtime_error("cannot create an OpenGL 3.3 window (" + g_last_glfw_error + ")");
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed from the window size, not remembered
  // No keyboard navigation: the arrows step the model and Space runs it; with nav on they would
  // also move a focus highlight and press the focused button.
  if (file_exists(options.font_path)) {
    // Latin plus the Greek letters, arrows and maths signs the model's messages use (‖M‖, σ, Δ,
    // α, η, −): without them ImGui draws '?'.
    static const ImWchar ranges[] = {0x0020, 0x00FF, 0x0370, 0x03FF, 0x2010, 0x205E, 0x2190, 0x21FF, 0x2200, 0x22FF, 0};
    io.Fonts->AddFontFromFileTTF(options.font_path.c_str(), options.font_size, nullptr, ranges);
  }
  else
    io.Fonts->AddFontDefault();
  apply_theme();
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
  g_prev_cursor = glfwSetCursorPosCallback(window_, on_cursor);
  g_prev_button = glfwSetMouseButtonCallback(window_, on_button);
  g_prev_scroll = glfwSetScrollCallback(window_, on_scroll);
  g_prev_key = glfwSetKeyCallback(window_, on_key);
  g_prev_char = glfwSetCharCallback(window_, on_char);
  g_prev_size = glfwSetWindowSizeCallback(window_, on_size);
  g_prev_focus = glfwSetWindowFocusCallback(window_, on_focus);
  g_prev_enter = glfwSetCursorEnterCallback(window_, on_enter);
  glfwSetWindowRefreshCallback(window_, on_refresh);
}

AppWindow::~AppWindow() {
  // Give ImGui's backend its own callbacks back before it uninstalls them.
  glfwSetCursorPosCallback(window_, g_prev_cursor);
  glfwSetMouseButtonCallback(window_, g_prev_button);
  glfwSetScrollCallback(window_, g_prev_scroll);
  glfwSetKeyCallback(window_, g_prev_key);
  glfwSetCharCallback(window_, g_prev_char);
  glfwSetWindowSizeCallback(window_, g_prev_size);
  glfwSetWindowFocusCallback(window_, g_prev_focus);
  glfwSetCursorEnterCallback(window_, g_prev_enter);
  glfwSetWindowRefreshCallback(window_, nullptr);
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool AppWindow::should_close() const { return glfwWindowShouldClose(window_); }
void AppWindow::request_close() { glfwSetWindowShouldClose(window_, GLFW_TRUE); }

bool AppWindow::wait_for_events(bool busy, double timeout_s) {
  g_window_event = false;
  if (busy)
    glfwPollEvents();
  else
    glfwWaitEventsTimeout(timeout_s);
  return g_window_event;
}

void wake_main_loop() { glfwPostEmptyEvent(); }

void AppWindow::begin_frame() {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (input_hook_) input_hook_(ImGui::GetIO());
  ImGui::NewFrame();
}

void AppWindow::end_frame() {
  ImGui::Render();
  glViewport(0, 0, framebuffer_width(), framebuffer_height());
  const auto bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glClearColor(bg.x, bg.y, bg.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void AppWindow::present() { glfwSwapBuffers(window_); }

std::string AppWindow::screenshot(const std::string& path) const {
  glReadBuffer(GL_BACK);
  return save_framebuffer_png(path, framebuffer_width(), framebuffer_height());
}

int AppWindow::framebuffer_width() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  return w;
}

int AppWindow::framebuffer_height() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  return h;
}

}  // namespace memscope::viz
