#include "viz/app_window.h"

#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <fstream>
#include <stdexcept>

#include "viz/screenshot.h"
#include "viz/theme.h"

namespace memscope::viz {
namespace {

std::string g_last_glfw_error;

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
  io.ConfigFlags |= ImGuiConfigFlags_NavEnableKeyboard;
  if (file_exists(options.font_path))
    io.Fonts->AddFontFromFileTTF(options.font_path.c_str(), options.font_size);
  else
    io.Fonts->AddFontDefault();
  apply_theme();
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
}

AppWindow::~AppWindow() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool AppWindow::should_close() const { return glfwWindowShouldClose(window_); }
void AppWindow::request_close() { glfwSetWindowShouldClose(window_, GLFW_TRUE); }

void AppWindow::wait_for_events(bool busy, double timeout_s) {
  if (busy)
    glfwPollEvents();
  else
    glfwWaitEventsTimeout(timeout_s);
}

void AppWindow::begin_frame() {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
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
