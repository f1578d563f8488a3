#include "app/gui/main_layout.h"

#include <imgui.h>

#include "app/gui/keys.h"
#include "memscope/version.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

constexpr float kTransportHeight = 44.0f;
constexpr float kTokensHeight = 86.0f;

void heading(const char* title, const char* subtitle) {
  ImGui::TextColored(viz::colors::accent(), "%s", title);
  if (subtitle && *subtitle) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::muted(), "%s", subtitle);
  }
  ImGui::Separator();
}

// Panels whose source (the engine, the knob registry) has not landed yet say so plainly
// rather than show invented data.
void waiting_for(const char* what) {
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextColored(viz::colors::muted(), "%s", what);
  ImGui::PopTextWrapPos();
}

void draw_transport() {
  ImGui::BeginChild("transport", {0, kTransportHeight}, true, ImGuiWindowFlags_NoScrollbar);
  ImGui::AlignTextToFramePadding();
  ImGui::TextColored(viz::colors::accent(), "memscope");
  ImGui::SameLine();
  ImGui::BeginDisabled(true);  // enabled once an engine or session is attached
  ImGui::Button("Run  [Space]");
  ImGui::SameLine();
  ImGui::Button("Step 1");
  ImGui::SameLine();
  ImGui::Button("Step 10");
  ImGui::SameLine();
  ImGui::Button("Step 100");
  ImGui::SameLine();
  ImGui::Button("Record");
  ImGui::SameLine();
  ImGui::Button("Rewind");
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "step  -   no source attached");
  ImGui::EndChild();
}

void draw_knobs(const ViewState& view) {
  heading("Knobs", "& breakpoints");
  if (view.preset_name.empty()) {
    waiting_for("No preset loaded.");
    return;
  }
  ImGui::TextColored(viz::colors::accent(), "preset  %s", view.preset_name.c_str());
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(view.preset_description.c_str());
  ImGui::PopTextWrapPos();
  ImGui::Spacing();
  if (ImGui::BeginTable("preset", 2, ImGuiTableFlags_SizingStretchProp)) {
    for (const auto& [what, value] : view.preset_summary) {
      ImGui::TableNextColumn();
      ImGui::TextColored(viz::colors::muted(), "%s", what.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::Spacing();
  const std::string hint = "Read-only for now: editable knobs and breakpoints come with the engine (issue 5). "
                           "Train this preset headless with: memscope-cli train --preset " + view.preset_name;
  waiting_for(hint.c_str());
}

void draw_memory() {
  heading("Memory", "layers x {M, S, dM}");
  waiting_for("No memory to show yet: heatmaps of M, S and dM per layer and head appear here.");
}

void draw_plots() {
  heading("Plots", "against step");
  waiting_for("loss, surprise, effective rank, NS error, gates, retention and norms.");
}

void draw_tokens() {
  ImGui::BeginChild("tokens", {0, kTokensHeight}, true);
  heading("Tokens", "surprise as colour");
  waiting_for("The input stream appears here; hover a token for its metrics, click to seek.");
  ImGui::EndChild();
}

void draw_status_line(const ViewState& view) {
  ImGui::TextColored(viz::colors::muted(), "memscope %s  |  %s  |  %.0f fps  |  ? for help",
                     MEMSCOPE_VERSION, view.device_line.c_str(), ImGui::GetIO().Framerate);
  if (!view.notice.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::warning(), "  %s", view.notice.c_str());
  }
}

}  // namespace

void draw_main_layout(ViewState& view) {
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(viewport->WorkPos);
  ImGui::SetNextWindowSize(viewport->WorkSize);
  ImGui::Begin("memscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  draw_transport();

  const float status_height = ImGui::GetFrameHeightWithSpacing();
  const float middle_height =
      ImGui::GetContentRegionAvail().y - kTokensHeight - status_height - ImGui::GetStyle().ItemSpacing.y;
  constexpr ImGuiTableFlags table_flags =
      ImGuiTableFlags_Resizable | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("panels", 3, table_flags, {0, middle_height})) {
    ImGui::TableSetupColumn("knobs", ImGuiTableColumnFlags_WidthStretch, 0.22f);
    ImGui::TableSetupColumn("memory", ImGuiTableColumnFlags_WidthStretch, 0.46f);
    ImGui::TableSetupColumn("plots", ImGuiTableColumnFlags_WidthStretch, 0.32f);
    ImGui::TableNextRow(ImGuiTableRowFlags_None, middle_height);
    // An explicit height: a {0, 0} child in a table cell would fill the whole window's
    // remaining height and push the token strip and status line out of view.
    const auto panel = [&](const char* id, auto draw) {
      ImGui::TableNextColumn();
      ImGui::BeginChild(id, {0, middle_height}, true);
      draw();
      ImGui::EndChild();
    };
    panel("knobs", [&] { draw_knobs(view); });
    panel("memory", draw_memory);
    panel("plots", draw_plots);
    ImGui::EndTable();
  }
  draw_tokens();
  draw_status_line(view);
  ImGui::End();

  if (view.show_help) draw_help_overlay(view.show_help);
}

}  // namespace memscope::app
