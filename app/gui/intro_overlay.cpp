// The first-run overlay (issue 19): three lines on what to watch, shown over the first window a
// new user opens until dismissed. main.cpp decides when (no marker file yet, or --show intro);
// dismissing it writes the marker so it does not come back.
#include <imgui.h>

#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "viz/theme.h"

namespace memscope::app {

void draw_intro_overlay(GuiApp& app) {
  ViewState& view = app.view();
  if (!view.show_intro) return;
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos({viewport->WorkPos.x + viewport->WorkSize.x * 0.5f, viewport->WorkPos.y + viewport->WorkSize.y * 0.42f},
                          ImGuiCond_Always, {0.5f, 0.5f});
  ImGui::SetNextWindowBgAlpha(0.97f);
  ImGui::Begin("What to watch", nullptr,
               ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoMove);
  ImGui::TextColored(viz::colors::accent(), "1");
  ImGui::SameLine();
  ImGui::TextUnformatted("The model reads the strip at the bottom one token at a time (key-value pairs, filler, queries). Space pauses, +1 steps.");
  ImGui::TextColored(viz::colors::accent(), "2");
  ImGui::SameLine();
  ImGui::TextUnformatted("Memory panel: each pair is written into M (dM lights up); the memory is the only way back to the pairs.");
  ImGui::TextColored(viz::colors::accent(), "3");
  ImGui::SameLine();
  ImGui::TextUnformatted("Plots: at each query the token loss falls near 0 when M recalls the value. ? lists every key.");
  ImGui::Spacing();
  if (ImGui::Button("Got it", {120, 0})) {
    view.show_intro = false;
    if (view.on_intro_dismissed) view.on_intro_dismissed();
  }
  app.note_rect("intro/ok");
  ImGui::End();
}

}  // namespace memscope::app
