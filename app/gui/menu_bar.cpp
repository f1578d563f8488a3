// The File / View / Help menus, and the path prompt their file actions open: a text field (for
// typing and pasting) over a listing of the folder it points into (app/gui/path_browser.h).
#include <imgui.h>
#include <imgui_stdlib.h>

#include <GLFW/glfw3.h>

#include <filesystem>

#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

void open_prompt(ViewState& view, const char* kind, std::string path) {
  view.prompt = kind;
  view.prompt_path = std::move(path);
}

PathKind kind_of(const std::string& prompt) {
  if (prompt == "open" || prompt == "compare") return PathKind::Session;
  if (prompt == "save" || prompt == "record") return PathKind::SessionOut;
  if (prompt == "checkpoint") return PathKind::Checkpoint;
  return prompt == "csv" ? PathKind::CsvOut : PathKind::SafetensorsOut;
}

// The listing under the field: click a folder to go in, click what the action takes to choose it,
// double-click to open it at once. Returns true on that double-click.
bool draw_listing(GuiApp& app) {
  ViewState& view = app.view();
  const PathKind kind = kind_of(view.prompt);
  const std::string key = view.prompt + '\n' + view.prompt_path;
  if (key != view.prompt_listing_of) {  // the filesystem is read when the path changes, not every frame
    view.prompt_listing = list_path(view.prompt_path, kind);
    view.prompt_listing_of = key;
  }
  const PathListing& listing = view.prompt_listing;
  std::error_code ec;
  const std::string where = std::filesystem::absolute(listing.folder, ec).lexically_normal().string();
  ImGui::TextColored(viz::colors::muted(), "in %s", (ec ? listing.folder : where).c_str());
  bool chosen = false;
  ImGui::BeginChild("##listing", {0, 260}, true);
  if (!listing.error.empty()) ImGui::TextColored(viz::colors::error(), "%s", listing.error.c_str());
  if (listing.entries.empty() && listing.error.empty())
    ImGui::TextColored(viz::colors::muted(), kind == PathKind::Session ? "no sessions or folders here"
                                             : kind == PathKind::Checkpoint ? "no .safetensors files or folders here"
                                                                            : "no folders here");
  // An export keeps the file name it was given while the folder changes.
  const std::string name = std::filesystem::path(view.prompt_path).filename().string();
  const bool keep_name = kind == PathKind::CsvOut || kind == PathKind::SafetensorsOut || kind == PathKind::SessionOut;
  std::string next;
  for (const PathEntry& e : listing.entries) {
    const std::string label = e.folder ? e.name + "/" : e.name;
    if (e.folder) ImGui::PushStyleColor(ImGuiCol_Text, viz::colors::accent());
    const bool clicked = ImGui::Selectable(label.c_str(), view.prompt_path == e.path, ImGuiSelectableFlags_AllowDoubleClick);
    app.note_rect("prompt/entry/" + e.name);  // for the tests that click through it
    if (e.folder) ImGui::PopStyleColor();
    if (!clicked) continue;
    next = e.folder && keep_name ? e.path + name : e.path;
    if (!e.folder && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) chosen = true;
  }
  if (listing.truncated) ImGui::TextColored(viz::colors::muted(), "(first %zu entries; type to narrow)", kMaxPathEntries);
  ImGui::EndChild();
  if (!next.empty()) view.prompt_path = next;
  return chosen;
}

void draw_prompt(GuiApp& app) {
  ViewState& view = app.view();
  if (view.prompt.empty()) return;
  if (!ImGui::IsPopupOpen("###path")) ImGui::OpenPopup("###path");
  ImGui::SetNextWindowSize({560, 0});
  const char* title = view.prompt == "open" ? "Open session###path"
                      : view.prompt == "checkpoint" ? "Open checkpoint###path"
                      : view.prompt == "compare"    ? "Compare with session###path"
                      : view.prompt == "save"       ? "Save session as###path"
                      : view.prompt == "record"     ? "Record to###path"
                                                    : "Export###path";
  if (ImGui::BeginPopupModal(title, nullptr, ImGuiWindowFlags_NoSavedSettings)) {
    ImGui::Text("%s", view.prompt == "open"      ? "Open a recorded session (NAME.memscope directory)"
                      : view.prompt == "checkpoint" ? "Open a checkpoint (memscope-cli train --out); it runs live with its own preset"
                      : view.prompt == "compare" ? "Compare with a recorded session"
                      : view.prompt == "save"    ? "Save what the run holds now as a new session (NAME.memscope directory)"
                      : view.prompt == "record"  ? "Record the run from now into a new session (NAME.memscope directory)"
                      : view.prompt == "csv"     ? "Export the shown timeline's scalars to CSV"
                                                 : "Export the shown timeline to one safetensors file");
    ImGui::SetNextItemWidth(-1);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
    const bool enter = ImGui::InputText("##path", &view.prompt_path, ImGuiInputTextFlags_EnterReturnsTrue);
    const bool double_clicked = draw_listing(app);
    const bool ok = ImGui::Button("OK", {90, 0});
    app.note_rect("prompt/ok");
    if (ok || enter || double_clicked) {
      const std::string kind = view.prompt, path = view.prompt_path;
      view.prompt.clear();
      ImGui::CloseCurrentPopup();
      if (kind == "open") app.open_session(path);
      else if (kind == "checkpoint") app.open_checkpoint(path);
      else if (kind == "compare") app.open_compare_session(path);
      else if (kind == "save") app.save_session(path);
      else if (kind == "record") app.start_recording(path);
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
      // Sessions land in runs/ (Ctrl+S, Record): start there when it exists.
      const std::string sessions = std::filesystem::is_directory("runs") ? "runs/" : "";
      if (ImGui::MenuItem("Open session...")) open_prompt(view, "open", sessions);
      if (ImGui::MenuItem("Compare with session...")) open_prompt(view, "compare", sessions);
      ImGui::Separator();
      const bool live = app.main().live, recording = !app.main().status.recording.empty();
      if (ImGui::MenuItem("Save session", "Ctrl+S", false, live)) app.save_session();
      if (ImGui::MenuItem("Save session as...", nullptr, false, live && !recording))
        open_prompt(view, "save", default_session_path());
      if (ImGui::MenuItem(recording ? "Stop recording" : "Start recording")) app.toggle_recording();
      if (ImGui::MenuItem("Record to...", nullptr, false, live && !recording)) open_prompt(view, "record", default_session_path());
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
