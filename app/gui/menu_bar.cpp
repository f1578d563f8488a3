// The File / View / Help menus, and the path prompt their file actions open (Dear ImGui has no
// file dialog: a text field with a sensible default is quicker than a hand-made browser).
#include <imgui.h>
#include <imgui_stdlib.h>

#include <GLFW/glfw3.h>

#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

void open_prompt(ViewState& view, const char* kind, std::string path) {
  view.prompt = kind;
  view.prompt_path = std::move(path);
}

void draw_prompt(GuiApp& app) {
  ViewState& view = app.view();
  if (view.prompt.empty()) return;
  if (!ImGui::IsPopupOpen("path")) ImGui::OpenPopup("path");
  ImGui::SetNextWindowSize({560, 0});
  if (ImGui::BeginPopupModal("path", nullptr, ImGuiWindowFlags_NoSavedSettings)) {
    ImGui::Text("%s", view.prompt == "open"      ? "Open a recorded session (NAME.memscope directory)"
                      : view.prompt == "checkpoint" ? "Open a checkpoint (memscope-cli train --out); it runs live with its own preset"
                      : view.prompt == "compare" ? "Compare with a recorded session"
                      : view.prompt == "csv"     ? "Export the shown timeline's scalars to CSV"
                                                 : "Export the shown timeline to one safetensors file");
    ImGui::SetNextItemWidth(-1);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
    const bool enter = ImGui::InputText("##path", &view.prompt_path, ImGuiInputTextFlags_EnterReturnsTrue);
    if (ImGui::Button("OK", {90, 0}) || enter) {
      const std::string kind = view.prompt, path = view.prompt_path;
      view.prompt.clear();
      ImGui::CloseCurrentPopup();
      if (kind == "open") app.open_session(path);
      else if (kind == "checkpoint") app.open_checkpoint(path);
      else if (kind == "compare") app.open_compare_session(path);
      else app.export_session(kind == "csv", path);
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel", {90, 0}) || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) {
      view.prompt.clear();
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
}

}  // namespace

void draw_menu_bar(GuiApp& app) {
  ViewState& view = app.view();
  const bool replay = !app.main().live;
  if (ImGui::BeginMenuBar()) {
    if (ImGui::BeginMenu("File")) {
      if (ImGui::MenuItem("Open checkpoint...")) open_prompt(view, "checkpoint", "assets/demo-mqar-trained.safetensors");
      if (ImGui::MenuItem("Open session...")) open_prompt(view, "open", "run.memscope");
      if (ImGui::MenuItem("Compare with session...")) open_prompt(view, "compare", "run.memscope");
      ImGui::Separator();
      if (ImGui::MenuItem("Save session", "Ctrl+S", false, app.main().live)) app.save_session();
      if (ImGui::MenuItem(app.main().status.recording.empty() ? "Start recording" : "Stop recording"))
        app.toggle_recording();
      ImGui::Separator();
      if (ImGui::MenuItem("Export CSV...", nullptr, false, replay)) open_prompt(view, "csv", "session.csv");
      if (ImGui::MenuItem("Export safetensors...", nullptr, false, replay))
        open_prompt(view, "safetensors", "session.safetensors");
      if (!replay && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
        ImGui::SetTooltip("export reads a recording: save (Ctrl+S), then open the session");
      ImGui::Separator();
      if (ImGui::MenuItem("Screenshot", "F12")) view.screenshot_request = "memscope-screenshot.png";
      if (ImGui::MenuItem("Quit", "Ctrl+Q")) glfwSetWindowShouldClose(glfwGetCurrentContext(), 1);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("View")) {
      ImGui::MenuItem("Compare view", "C", &view.show_compare);
      ImGui::MenuItem("Presets browser", nullptr, &view.show_presets);
      ImGui::MenuItem("Symmetric colour scale", nullptr, &view.symmetric_scale);
      ImGui::MenuItem("Lock colour scale", nullptr, &view.lock_scale);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Help")) {
      ImGui::MenuItem("Keyboard shortcuts", "?", &view.show_help);
      ImGui::EndMenu();
    }
    if (ImGui::Button("Presets")) view.show_presets = !view.show_presets;
    ImGui::EndMenuBar();
  }
  draw_prompt(app);
}

}  // namespace memscope::app
