#include "app/gui/keys.h"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <ctime>
#include <string>

#include "app/gui/gui_app.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

struct Shortcut {
  const char* keys;
  const char* action;
};

constexpr Shortcut kShortcuts[] = {
    {"Space", "run / pause (every run of the compare view in lockstep)"},
    {"Right", "step 1 token"},
    {"Shift+Right", "step 10 tokens"},
    {"Ctrl+Right", "step 100 tokens"},
    {"Left / Shift+Left", "view the previous step / 10 steps back (pins the view)"},
    {"End", "follow the newest step again"},
    {"R", "reset momentum (S = 0) of every layer and head at the next step"},
    {"Ctrl+R", "rewind the engine to the pinned step"},
    {"C", "compare view on / off"},
    {"Ctrl+S", "save the session (every frame and event the run holds)"},
    {"F12", "save a screenshot (memscope-YYYYmmdd-HHMMSS.png)"},
    {"?", "show / hide this help"},
    {"Esc", "close this help or the enlarged matrix"},
    {"Ctrl+Q", "quit"},
};

std::string timestamped_screenshot_name() {
  char buffer[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(buffer, sizeof buffer, "memscope-%Y%m%d-%H%M%S.png", std::localtime(&now));
  return buffer;
}

bool pressed(int key) { return ImGui::IsKeyPressed(key, false); }
bool pressed_repeat(int key) { return ImGui::IsKeyPressed(key, true); }

}  // namespace

bool handle_keys(GuiApp& app) {
  const ImGuiIO& io = ImGui::GetIO();
  ViewState& view = app.view();
  if (io.KeyCtrl && pressed(GLFW_KEY_Q)) return true;
  if (pressed(GLFW_KEY_F12)) view.screenshot_request = timestamped_screenshot_name();
  if (pressed(GLFW_KEY_ESCAPE)) {
    if (view.show_intro) {
      view.show_intro = false;
      if (view.on_intro_dismissed) view.on_intro_dismissed();
    } else if (view.show_help) {
      view.show_help = false;
    } else {
      view.has_enlarged = false;
    }
  }
  // While a text field has the keyboard, keys are typing, not commands.
  if (io.WantTextInput) return false;
  for (ImWchar c : io.InputQueueCharacters)
    if (c == '?') view.show_help = !view.show_help;
  if (pressed(GLFW_KEY_SPACE)) app.toggle_run();
  if (pressed_repeat(GLFW_KEY_RIGHT)) app.step(io.KeyCtrl ? 100 : io.KeyShift ? 10 : 1);
  if (pressed_repeat(GLFW_KEY_LEFT)) {
    const int64_t back = io.KeyShift ? 10 : 1;
    app.seek(std::max<int64_t>(1, app.shown_step() - back));
  }
  if (pressed(GLFW_KEY_END)) app.follow_latest();
  if (pressed(GLFW_KEY_R)) {
    if (io.KeyCtrl)
      app.rewind_to_cursor();
    else
      app.post_all({model::Command::Kind::ResetMomentum});
  }
  if (pressed(GLFW_KEY_C) && !io.KeyCtrl) view.show_compare = !view.show_compare;
  if (io.KeyCtrl && pressed(GLFW_KEY_S)) app.save_session();
  return false;
}

void draw_help_overlay(bool& open) {
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos({viewport->WorkPos.x + viewport->WorkSize.x * 0.5f,
                           viewport->WorkPos.y + viewport->WorkSize.y * 0.5f},
                          ImGuiCond_Always, {0.5f, 0.5f});
  ImGui::SetNextWindowBgAlpha(0.96f);
  if (!ImGui::Begin("Keyboard shortcuts", &open,
                    ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings)) {
    ImGui::End();
    return;
  }
  if (ImGui::BeginTable("shortcuts", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV)) {
    for (const Shortcut& s : kShortcuts) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(viz::colors::accent(), "%s", s.keys);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(s.action);
    }
    ImGui::EndTable();
  }
  ImGui::TextColored(viz::colors::muted(), "Mouse: click a matrix to enlarge it, an event, token or plot point to seek;");
  ImGui::TextColored(viz::colors::muted(), "wheel zooms a plot, drag pans it, double-click follows the newest step again.");
  ImGui::End();
}

}  // namespace memscope::app
