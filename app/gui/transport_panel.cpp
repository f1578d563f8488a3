// Transport (DESIGN "GUI"): run/pause, step 1/10/100, speed, the step counter, the engine mode,
// record, rewind and fork, and the timeline scrubber with the events as ticks.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "app/gui/display_text.h"
#include "app/gui/event_style.h"
#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "model/config/knobs.h"
#include "viz/theme.h"
#include "viz/timeline_scrubber.h"

namespace memscope::app {
namespace {

std::vector<std::string> split_sets(const std::string& text) {
  std::vector<std::string> sets;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    item = item.substr(first, item.find_last_not_of(' ') - first + 1);
    sets.push_back(item);
  }
  return sets;
}

void draw_mode_combo(GuiApp& app) {
  const model::Knob* mode = model::find_knob("engine.mode");
  if (!mode) return;
  const std::string current = model::knob_value(app.main().status.preset, *mode);
  ImGui::SetNextItemWidth(130.0f);
  ImGui::BeginDisabled(!app.main().live);
  if (ImGui::BeginCombo("##mode", current.substr(1, current.size() - 2).c_str())) {
    for (const auto& choice : mode->choices)
      if (ImGui::Selectable(choice.c_str(), "\"" + choice + "\"" == current))
        app.post_all(model::Command::set_knob("engine.mode", "\"" + choice + "\""));
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("engine.mode: inspect steps one token; train runs the outer loop; train+inspect alternates");
}

void draw_scrubber(GuiApp& app) {
  const Run& run = app.main();
  const int64_t last = run.steps(app.view().timeline);
  std::vector<viz::TimelineTick> ticks;
  ticks.reserve(run.events.size());
  for (const auto& e : run.events)
    if (e.timeline == app.view().timeline && e.kind != model::EventKind::Command)
      ticks.push_back({static_cast<double>(e.step), event_color(e.kind), e.message.c_str()});
  const double seek = viz::draw_timeline_scrubber("scrubber", 1.0, static_cast<double>(std::max<int64_t>(last, 1)),
                                                  static_cast<double>(app.shown_step()), ticks,
                                                  {ImGui::GetContentRegionAvail().x, 18.0f});
  app.note_rect("transport/scrubber");
  if (std::isfinite(seek)) app.seek(static_cast<int64_t>(std::llround(seek)));
}

}  // namespace

void draw_transport(GuiApp& app) {
  ViewState& view = app.view();
  Run& run = app.main();
  ImGui::BeginChild("transport", {0, ImGui::GetFrameHeightWithSpacing() * 2 + 12.0f}, true, ImGuiWindowFlags_NoScrollbar);
  const bool running = view.playing || run.status.running;
  ImGui::AlignTextToFramePadding();
  if (ImGui::Button(running ? "Pause [Space]" : "Run  [Space]", {110, 0})) app.toggle_run();
  app.note_rect("transport/run");
  for (int n : {1, 10, 100}) {
    ImGui::SameLine();
    const std::string label = "+" + std::to_string(n);
    if (ImGui::Button(label.c_str())) app.step(n);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("step %d token%s (Right, Shift+Right, Ctrl+Right)", n, n > 1 ? "s" : "");
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(150.0f);
  const bool was_limited = view.speed > 0.0f;
  if (ImGui::SliderFloat("##speed", &view.speed, 0.0f, 200.0f, view.speed <= 0.0f ? "speed: max" : "%.0f steps/s",
                         ImGuiSliderFlags_Logarithmic) &&
      running && was_limited != (view.speed > 0.0f)) {
    // Switch a running run between the engine's own Run (max) and paced steps, without a stop.
    if (view.speed > 0.0f) {
      app.post_all(model::Command::pause());
      view.playing = true;
    } else {
      view.playing = false;
      app.post_all(model::Command::run());
    }
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("steps per second while running (0: as fast as the model goes)");
  ImGui::SameLine();
  draw_mode_combo(app);

  ImGui::SameLine();
  const bool recording = !run.status.recording.empty();
  if (recording) ImGui::PushStyleColor(ImGuiCol_Button, viz::colors::error());
  if (ImGui::Button(recording ? "Stop rec" : "Record")) app.toggle_recording();
  if (recording) ImGui::PopStyleColor();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(recording ? "recording into %s" : "record every frame and event into a new session%s",
                      recording ? run.status.recording.c_str() : "");

  ImGui::SameLine();
  // What an attached run refuses is greyed out, and its tooltip says why (issue 22).
  const std::string no_rewind = run.refused("rewind"), no_fork = run.refused("fork");
  ImGui::BeginDisabled(view.follow || !run.live || !no_rewind.empty());
  if (ImGui::Button("Rewind here")) app.rewind_to_cursor();
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", no_rewind.empty() ? "restore the keyframe before the pinned step and re-run to it (Ctrl+R); pin a step first"
                                              : ("not for an attached run: " + no_rewind).c_str());

  ImGui::SameLine();
  ImGui::BeginDisabled(!run.live || !no_fork.empty());
  ImGui::SetNextItemWidth(170.0f);
  ImGui::InputTextWithHint("##forksets", "memory.lr.max=0.5, ...", &view.fork_sets);
  ImGui::SameLine();
  if (ImGui::Button("Fork")) app.fork_at_cursor(split_sets(view.fork_sets));
  ImGui::EndDisabled();
  app.note_rect("transport/fork");
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", no_fork.empty() ? "a second timeline from the shown step with these live knobs changed (compare view)"
                                            : ("not for an attached run: " + no_fork).c_str());

  if (run.caches.size() > 1) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(90.0f);
    ImGui::SliderInt("##timeline", &view.timeline, 0, static_cast<int>(run.caches.size()) - 1, "timeline %d");
  }

  ImGui::SameLine();
  const int64_t steps = run.steps(view.timeline);
  const char* state = run.remote() && !run.status.connected          ? "(retrying)"
                      : !run.status.last_error.empty() && !running ? "paused on error"
                      : running                                  ? "running"
                                                                 : "paused";
  const char* kind = run.remote() ? (run.status.connected ? "attached" : "detached") : run.live ? "live" : "replay";
  if (view.follow)
    ImGui::TextColored(viz::colors::accent(), "step %lld  %s  %s", static_cast<long long>(steps), kind, state);
  else
    ImGui::TextColored(viz::colors::warning(), "step %lld of %lld (pinned, End follows)  %s",
                       static_cast<long long>(view.cursor), static_cast<long long>(steps), state);
  // A slow step (HOPE: seconds) or command (a rewind, a fork) says what it is doing and for how long.
  const double busy_for = run.status.busy_since > 0 ? model::steady_seconds() - run.status.busy_since : 0.0;
  if (busy_for > 0.5) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::warning(), "working: %s, %.1f s", clipped_for_display(run.status.busy_with, 60, 1).c_str(),
                       busy_for);
    app.note_rect("transport/busy");
  }
  // An attached run: who serves it, and what the wire lost (frames the run dropped for this viewer,
  // never for its recording), or why it is detached and that it is retrying.
  if (run.remote()) {
    ImGui::SameLine();
    if (!run.status.connected)
      ImGui::TextColored(viz::colors::error(), "%s", clipped_for_display(run.status.last_error, 140, 1).c_str());
    else if (run.status.frames_missed > 0 || run.status.events_missed > 0)
      ImGui::TextColored(viz::colors::warning(), "%s: missed %lld frames, %lld events (this viewer fell behind)",
                         run.status.remote.c_str(), static_cast<long long>(run.status.frames_missed),
                         static_cast<long long>(run.status.events_missed));
    else
      ImGui::TextColored(viz::colors::muted(), "%s", clipped_for_display(run.status.remote_server, 80, 1).c_str());
    app.note_rect("transport/remote");
  }
  draw_scrubber(app);
  ImGui::EndChild();
}

void draw_error_banner(GuiApp& app) {
  ViewState& view = app.view();
  if (view.banner.empty()) return;
  ImGui::PushStyleColor(ImGuiCol_ChildBg, view.banner_is_breakpoint ? ImVec4(0.42f, 0.30f, 0.04f, 1.0f)
                                                                  : ImVec4(0.45f, 0.08f, 0.10f, 1.0f));
  // Wrapped beside the button, and as tall as its lines: an error that says what to set (a step
  // that does not fit in memory, say) is read whole, not cut at the window's edge.
  const std::string text = clipped_for_display(view.banner, 600, 3);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float button_width = ImGui::CalcTextSize("Dismiss").x + style.FramePadding.x * 2.0f;
  const float wrap_width = std::max(200.0f, ImGui::GetContentRegionAvail().x - button_width -
                                                style.ItemSpacing.x - style.WindowPadding.x * 2.0f);
  const float text_height = ImGui::CalcTextSize(text.c_str(), nullptr, false, wrap_width).y;
  const float height = std::max(ImGui::GetFrameHeight(), text_height + style.FramePadding.y * 2.0f);
  ImGui::BeginChild("banner", {0, height + style.WindowPadding.y * 2.0f}, true, ImGuiWindowFlags_NoScrollbar);
  const ImVec2 top = ImGui::GetCursorPos();
  ImGui::SetCursorPosY(top.y + style.FramePadding.y);
  ImGui::PushTextWrapPos(top.x + wrap_width);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::SetCursorPos({ImGui::GetWindowWidth() - style.WindowPadding.x - button_width, top.y});
  if (ImGui::Button("Dismiss")) view.banner.clear();
  app.note_rect("banner/dismiss");
  ImGui::EndChild();
  app.note_rect("banner");
  ImGui::PopStyleColor();
}

}  // namespace memscope::app
