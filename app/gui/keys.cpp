#include "app/gui/keys.h"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <ctime>

#include "viz/theme.h"

namespace memscope::app {
namespace {

struct Shortcut {
  const char* keys;
  const char* action;
  bool available;  // false until its source (the engine, sessions) exists
};

constexpr Shortcut kShortcuts[] = {
    {"Space", "run / pause", false},
    {"Right", "step 1 token", false},
    {"Shift+Right", "step 10 tokens", false},
    {"R", "reset momentum at the next step", false},
    {"Ctrl+S", "save the session", false},
    {"F12", "save a screenshot (memscope-YYYYmmdd-HHMMSS.png)", true},
    {"?", "show / hide this help", true},
    {"Esc", "close this help", true},
    {"Ctrl+Q", "quit", true},
};

std::string timestamped_screenshot_name() {
  char buffer[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(buffer, sizeof buffer, "memscope-%Y%m%d-%H%M%S.png", std::localtime(&now));
  return buffer;
}

}  // namespace

bool handle_keys(ViewState& view) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_Q, false)) return true;
  if (ImGui::IsKeyPressed(GLFW_KEY_F12, false)) view.screenshot_request = timestamped_screenshot_name();
  if (view.show_help && ImGui::IsKeyPressed(GLFW_KEY_ESCAPE, false)) view.show_help = false;
  if (!io.WantTextInput)
    for (ImWchar c : io.InputQueueCharacters)
      if (c == '?') view.show_help = !view.show_help;
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
      ImGui::TextColored(s.available ? viz::colors::accent() : viz::colors::muted(), "%s", s.keys);
      ImGui::TableNextColumn();
      if (s.available)
        ImGui::TextUnformatted(s.action);
      else
        ImGui::TextColored(viz::colors::muted(), "%s  (needs a running model)", s.action);
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

}  // namespace memscope::app
