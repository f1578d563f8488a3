// The left column's lists: events (click one to seek to it), breakpoints, and the reset buttons.
#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/gui/event_style.h"
#include "app/gui/display_text.h"
#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "model/engine/command.h"
#include "model/util/errors.h"
#include "viz/theme.h"

namespace memscope::app {

void draw_events_panel(GuiApp& app) {
  const Run& run = app.main();
  static bool show_commands = true;
  ImGui::Checkbox("commands", &show_commands);
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "%zu events; click one to seek", run.events.size());
  ImGui::BeginChild("event list", {0, 0}, false);
  if (run.events.empty()) ImGui::TextColored(viz::colors::muted(), "No events yet: detectors, commands and errors appear here.");
  // Newest first; clipped, so a run with thousands of events costs only the visible rows.
  std::vector<size_t> rows;
  rows.reserve(run.events.size());
  for (size_t i = run.events.size(); i-- > 0;)
    if (show_commands || run.events[i].kind != model::EventKind::Command) rows.push_back(i);
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(rows.size()));
  while (clipper.Step())
    for (int r = clipper.DisplayStart; r < clipper.DisplayEnd; ++r) {
      const model::Event& e = run.events[rows[static_cast<size_t>(r)]];
      ImGui::PushID(static_cast<int>(rows[static_cast<size_t>(r)]));
      const bool selected = !app.view().follow && app.view().cursor == e.step && e.timeline == app.view().timeline;
      const std::string label = "t" + std::to_string(e.timeline) + "  " + std::to_string(e.step);
      if (ImGui::Selectable(label.c_str(), selected, ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap)) {
        app.view().timeline = e.timeline < static_cast<int>(run.caches.size()) ? e.timeline : 0;
        app.seek(e.step);
      }
      app.note_rect("events/row/" + std::to_string(rows[static_cast<size_t>(r)]));
      if (ImGui::BeginPopupContextItem("event menu")) {
        // A training step's event (a loss or gradient spike): open that step's batch (issue 18).
        const auto frame = run.frame(e.timeline, e.step);
        const bool training = frame && frame->kind == model::FrameKind::Train;
        if (ImGui::MenuItem("Step into this training step", nullptr, false, training && run.live && !run.remote()))
          app.step_into(frame->step, frame->train_step);
        if (!training) ImGui::TextColored(viz::colors::muted(), "(not a training step's event)");
        else if (run.remote()) ImGui::TextColored(viz::colors::muted(), "(an attached run: memscope-cli step --ckpt FILE --train-step S on its machine)");
        else if (!run.live) ImGui::TextColored(viz::colors::muted(), "(a recording: memscope-cli step --session DIR --train-step S)");
        ImGui::EndPopup();
      }
      ImGui::SameLine(90.0f);
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(event_color(e.kind)), "%-10s", model::to_string(e.kind));
      ImGui::SameLine();
      ImGui::TextUnformatted(clipped_for_display(e.message, 300, 1).c_str());
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", clipped_for_display(e.message).c_str());
      ImGui::PopID();
    }
  ImGui::EndChild();
}

void draw_breakpoints_panel(GuiApp& app) {
  ViewState& view = app.view();
  const Run& run = app.main();
  ImGui::TextColored(viz::colors::muted(), "pause on: nan, spike, ns_error>0.3, norm_growth, any, step==100");
  ImGui::SetNextItemWidth(-70.0f);
  const bool enter = ImGui::InputText("##breakpoint", &view.breakpoint_text, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if (ImGui::Button("Add", {60, 0}) || enter) {
    try {
      model::Command c{model::Command::Kind::AddBreakpoint};
      c.breakpoint = model::parse_breakpoint(view.breakpoint_text);
      app.post_all(c);
    } catch (const std::exception& e) {
      app.show_error(model::one_line(e.what()));
    }
  }
  for (const auto& kind : {"nan", "spike", "ns_error", "norm_growth", "any"}) {
    if (ImGui::SmallButton(kind)) {
      model::Command c{model::Command::Kind::AddBreakpoint};
      c.breakpoint = model::parse_breakpoint(kind);
      app.post_all(c);
    }
    ImGui::SameLine();
  }
  ImGui::NewLine();
  ImGui::Separator();
  if (run.status.breakpoints.empty()) ImGui::TextColored(viz::colors::muted(), "No breakpoints.");
  for (const auto& b : run.status.breakpoints) {
    ImGui::PushID(b.id);
    if (ImGui::SmallButton("x")) {
      model::Command c{model::Command::Kind::RemoveBreakpoint};
      c.breakpoint = b;
      app.post_all(c);  // added to every run in lockstep, removed from every run
    }
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::warning(), "%s", model::describe(b).c_str());
    ImGui::PopID();
  }
}

void draw_reset_buttons(GuiApp& app) {
  const TimelineCache& cache = app.shown_cache();
  const auto reset = [&](model::Command::Kind kind, int layer, int head) {
    model::Command c{kind};
    c.layer = layer;
    c.head = head;
    c.timeline = app.view().timeline;
    app.post(c);
  };
  ImGui::BeginDisabled(!app.main().live);
  if (ImGui::Button("Reset momentum: all [R]")) reset(model::Command::Kind::ResetMomentum, -1, -1);
  ImGui::SameLine();
  if (ImGui::Button("Reset memory: all")) reset(model::Command::Kind::ResetMemory, -1, -1);
  ImGui::TextColored(viz::colors::muted(), "per layer and head (S = 0 / M = M0, S = 0, window emptied):");
  if (ImGui::BeginTable("resets", 3, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg)) {
    for (int l = 0; l < cache.layers(); ++l)
      for (int h = 0; h < cache.heads(); ++h) {
        ImGui::PushID(l * 1000 + h);
        ImGui::TableNextColumn();
        ImGui::Text("layer %d head %d", l, h);
        ImGui::TableNextColumn();
        if (ImGui::SmallButton("momentum")) reset(model::Command::Kind::ResetMomentum, l, h);
        ImGui::TableNextColumn();
        if (ImGui::SmallButton("memory")) reset(model::Command::Kind::ResetMemory, l, h);
        ImGui::PopID();
      }
    ImGui::EndTable();
  }
  ImGui::EndDisabled();
}

}  // namespace memscope::app
