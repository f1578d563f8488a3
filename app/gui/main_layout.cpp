#include "app/gui/main_layout.h"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "app/gui/gui_app.h"
#include "app/gui/keys.h"
#include "app/gui/panels.h"
#include "memscope/version.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

constexpr float kTokensHeight = 92.0f;

void draw_status_line(GuiApp& app) {
  const ViewState& view = app.view();
  const Run& run = app.main();
  ImGui::TextColored(viz::colors::muted(), "memscope %s  |  %s  |  %s  |  ? for help", MEMSCOPE_VERSION,
                     view.device_line.c_str(), run.label.c_str());
  if (!run.status.recording.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::error(), "  REC %s", run.status.recording.c_str());
  }
  if (!view.notice.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::warning(), "  %s", view.notice.c_str());
  }
  // What the CUDA graphs do (Branch::graph_summary), a part per graph, last: a long line must not
  // push the recording or a notice out of view. A failed capture means a step many times slower,
  // so its part stands out.
  const std::string& graphs = run.status.graphs;
  for (size_t from = 0; from < graphs.size();) {
    const size_t bar = std::min(graphs.find(" | ", from), graphs.size());
    const std::string part = graphs.substr(from, bar - from);
    ImGui::SameLine(0, 0);
    ImGui::TextColored(viz::colors::muted(), "  |  ");
    ImGui::SameLine(0, 0);
    const bool failed = part.find("failed") != std::string::npos;
    ImGui::TextColored(failed ? viz::colors::warning() : viz::colors::muted(), "%s", part.c_str());
    from = bar + 3;
  }
}

// A column cell of the panels table: a bordered child of a fixed height, so the token strip and
// the status line below always stay in view.
template <typename Draw>
void panel(GuiApp& app, const char* id, float height, Draw draw) {
  ImGui::BeginChild(id, {0, height}, true);
  draw();
  ImGui::EndChild();
  app.note_rect(std::string("panel/") + id);
}

void draw_left_column(GuiApp& app, float height) {
  const float knobs_height = height * 0.58f;
  panel(app, "knobs", knobs_height, [&] { draw_knobs_panel(app); });
  panel(app, "lists", height - knobs_height - ImGui::GetStyle().ItemSpacing.y, [&] {
    if (ImGui::BeginTabBar("lists")) {
      const auto flags = [&](int tab) {
        return app.view().select_left_tab == tab ? ImGuiTabItemFlags_SetSelected : ImGuiTabItemFlags_None;
      };
      if (ImGui::BeginTabItem("Events", nullptr, flags(0))) {
        draw_events_panel(app);
        ImGui::EndTabItem();
      }
      if (ImGui::BeginTabItem("Breakpoints", nullptr, flags(1))) {
        draw_breakpoints_panel(app);
        ImGui::EndTabItem();
      }
      if (ImGui::BeginTabItem("Resets", nullptr, flags(2))) {
        draw_reset_buttons(app);
        ImGui::EndTabItem();
      }
      ImGui::EndTabBar();
    }
    app.view().select_left_tab = -1;
  });
}

void draw_right_column(GuiApp& app, float height) {
  panel(app, "plots", height, [&] {
    if (app.view().show_compare) {
      draw_compare_view(app);
      return;
    }
    const bool hope = app.shown_cache().hope_layers() > 0;
    if (ImGui::BeginTabBar("plot tabs")) {
      const auto flags = [&](int tab) {
        return app.view().select_right_tab == tab ? ImGuiTabItemFlags_SetSelected : ImGuiTabItemFlags_None;
      };
      if (ImGui::BeginTabItem("Plots", nullptr, flags(0))) {
        draw_plots_panel(app);
        ImGui::EndTabItem();
      }
      if (ImGui::BeginTabItem(hope ? "HOPE###hope" : "HOPE (n/a)###hope", nullptr, flags(1))) {
        draw_hope_panel(app);
        ImGui::EndTabItem();
      }
      if (ImGui::BeginTabItem("Modules", nullptr, flags(2))) {
        draw_modules_panel(app);
        ImGui::EndTabItem();
      }
      ImGui::EndTabBar();
    }
    app.view().select_right_tab = -1;
  });
}

}  // namespace

void draw_main_layout(GuiApp& app) {
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(viewport->WorkPos);
  ImGui::SetNextWindowSize(viewport->WorkSize);
  ImGui::Begin("memscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_MenuBar);
  draw_menu_bar(app);
  draw_error_banner(app);
  draw_transport(app);

  const float status_height = ImGui::GetFrameHeightWithSpacing();
  const float middle_height =
      ImGui::GetContentRegionAvail().y - kTokensHeight - status_height - ImGui::GetStyle().ItemSpacing.y * 2;
  constexpr ImGuiTableFlags table_flags = ImGuiTableFlags_Resizable | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("panels", 3, table_flags, {0, middle_height})) {
    ImGui::TableSetupColumn("left", ImGuiTableColumnFlags_WidthStretch, 0.22f);
    ImGui::TableSetupColumn("memory", ImGuiTableColumnFlags_WidthStretch, 0.43f);
    ImGui::TableSetupColumn("plots", ImGuiTableColumnFlags_WidthStretch, 0.35f);
    ImGui::TableNextRow(ImGuiTableRowFlags_None, middle_height);
    ImGui::TableNextColumn();
    draw_left_column(app, middle_height);
    ImGui::TableNextColumn();
    panel(app, "memory", middle_height, [&] { draw_memory_panel(app); });
    ImGui::TableNextColumn();
    draw_right_column(app, middle_height);
    ImGui::EndTable();
  }
  panel(app, "tokens", kTokensHeight, [&] { draw_tokens_panel(app); });
  draw_status_line(app);
  ImGui::End();

  if (app.view().has_enlarged) draw_enlarged_matrix(app);
  if (app.view().show_presets) draw_presets_browser(app);
  if (app.view().show_help) draw_help_overlay(app.view().show_help);
  draw_intro_overlay(app);
}

}  // namespace memscope::app
