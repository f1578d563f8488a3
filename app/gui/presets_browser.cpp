// The presets browser: every shipped preset with its one-line description; Load replaces the runs
// (a preset with [[compare]] runs opens in the compare view).
#include <imgui.h>

#include "app/gui/gui_app.h"
#include "app/gui/display_text.h"
#include "app/gui/panels.h"
#include "model/config/preset.h"
#include "model/util/errors.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

struct PresetLine {
  std::string name, description;
  size_t compare = 0;
  std::string error;  // a preset that does not load says why instead of vanishing
};

const std::vector<PresetLine>& preset_lines() {
  static const std::vector<PresetLine> lines = [] {
    std::vector<PresetLine> out;
    for (const auto& name : model::list_presets()) {
      PresetLine line{name, "", 0, ""};
      try {
        const model::Preset p = model::load_preset(name);
        line.description = p.description;
        line.compare = p.compare.size();
      } catch (const std::exception& e) {
        line.error = model::one_line(e.what());
      }
      out.push_back(std::move(line));
    }
    return out;
  }();
  return lines;
}

}  // namespace

void draw_presets_browser(GuiApp& app) {
  ViewState& view = app.view();
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos({viewport->WorkPos.x + viewport->WorkSize.x * 0.5f, viewport->WorkPos.y + viewport->WorkSize.y * 0.5f},
                          ImGuiCond_Appearing, {0.5f, 0.5f});
  ImGui::SetNextWindowSize({980, 560}, ImGuiCond_Appearing);
  if (!ImGui::Begin("Presets", &view.show_presets, ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  ImGui::TextColored(viz::colors::muted(), "Loading a preset replaces the current run (record it first to keep it).");
  if (ImGui::BeginTable("presets", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, 60.0f);
    ImGui::TableSetupColumn("preset", ImGuiTableColumnFlags_WidthFixed, 170.0f);
    ImGui::TableSetupColumn("what it shows");
    for (const auto& p : preset_lines()) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(p.name.c_str());
      ImGui::BeginDisabled(!p.error.empty());
      if (ImGui::SmallButton("Load")) {
        app.load_preset(p.name);
        view.show_presets = false;
      }
      ImGui::EndDisabled();
      ImGui::PopID();
      ImGui::TableNextColumn();
      const bool current = app.main().status.preset.name == p.name;
      ImGui::TextColored(current ? viz::colors::accent() : ImGui::GetStyle().Colors[ImGuiCol_Text], "%s", p.name.c_str());
      ImGui::TableNextColumn();
      ImGui::PushTextWrapPos(0.0f);
      if (!p.error.empty())
        ImGui::TextColored(viz::colors::error(), "%s", p.error.c_str());
      else if (p.compare)
        ImGui::Text("%s  [compare view: %zu more run%s]", clipped_for_display(p.description, 400, 2).c_str(), p.compare, p.compare > 1 ? "s" : "");
      else
        ImGui::TextUnformatted(clipped_for_display(p.description, 400, 2).c_str());
      ImGui::PopTextWrapPos();
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

}  // namespace memscope::app
