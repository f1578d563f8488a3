// The knobs panel, generated from the knob registry (DESIGN principle 5): adding a knob never
// touches this file. A live knob applies at the next step; a restart knob says that changing it
// starts a new run. Edits post one SetKnob when the widget is released, not on every drag frame.
#include <imgui.h>
#include <imgui_internal.h>  // GetActiveID
#include <imgui_stdlib.h>

#include <cmath>
#include <map>

#include "model/remote/wire_messages.h"
#include "app/gui/gui_app.h"
#include "app/gui/display_text.h"
#include "app/gui/panels.h"
#include "model/config/knob_relevance.h"
#include "model/config/knobs.h"
#include "model/config/preset.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

// Numeric values being dragged or typed, by knob name: the preset's value shows otherwise.
std::map<std::string, double>& numeric_edits() {
  static std::map<std::string, double> edits;
  return edits;
}

std::string table_of(const std::string& name) { return name.substr(0, name.find('.')); }

// Post when the user let go of an edited widget; drop the edit buffer when they are done.
void finish_edit(GuiApp& app, const model::Knob& knob, const std::string& literal) {
  if (ImGui::IsItemDeactivatedAfterEdit()) app.post(model::Command::set_knob(knob.name, literal));
}

void numeric_knob(GuiApp& app, const model::Knob& knob, const model::KnobValue& current) {
  auto& edits = numeric_edits();
  const bool is_int = knob.type == model::KnobType::Int;
  const double value_now = is_int ? static_cast<double>(std::get<int64_t>(current)) : std::get<double>(current);
  double value = edits.count(knob.name) ? edits[knob.name] : value_now;
  ImGui::SetNextItemWidth(-1);
  const std::string id = "##" + knob.name;
  // Sliders where the range is a human one; a plain field for "any count" ranges.
  const bool slider = knob.max - knob.min <= 1e6;
  const bool logarithmic = knob.min > 0 && knob.max / knob.min >= 100;
  if (is_int) {
    int64_t v = static_cast<int64_t>(value);
    const int64_t lo = static_cast<int64_t>(knob.min), hi = static_cast<int64_t>(knob.max);
    if (slider)
      ImGui::SliderScalar(id.c_str(), ImGuiDataType_S64, &v, &lo, &hi, "%lld", logarithmic ? ImGuiSliderFlags_Logarithmic : 0);
    else
      ImGui::InputScalar(id.c_str(), ImGuiDataType_S64, &v);
    value = static_cast<double>(v);
  } else {
    if (slider)
      ImGui::SliderScalar(id.c_str(), ImGuiDataType_Double, &value, &knob.min, &knob.max, "%.4g",
                          logarithmic ? ImGuiSliderFlags_Logarithmic : 0);
    else
      ImGui::InputDouble(id.c_str(), &value, 0.0, 0.0, "%.6g");
  }
  const model::KnobValue edited = is_int ? model::KnobValue(static_cast<int64_t>(value)) : model::KnobValue(value);
  if (ImGui::IsItemActive()) edits[knob.name] = value;
  finish_edit(app, knob, model::format_knob_value(knob, edited));
  if (!ImGui::IsItemActive()) edits.erase(knob.name);
}

void knob_widget(GuiApp& app, const model::Knob& knob, const model::Preset& preset) {
  const model::KnobValue current = knob.get(preset);
  switch (knob.type) {
    case model::KnobType::Int:
    case model::KnobType::Float: numeric_knob(app, knob, current); break;
    case model::KnobType::Bool: {
      bool v = std::get<bool>(current);
      if (ImGui::Checkbox(("##" + knob.name).c_str(), &v)) app.post(model::Command::set_knob(knob.name, v ? "true" : "false"));
      break;
    }
    case model::KnobType::Choice: {
      const std::string& v = std::get<std::string>(current);
      ImGui::SetNextItemWidth(-1);
      if (ImGui::BeginCombo(("##" + knob.name).c_str(), v.c_str())) {
        for (const auto& choice : knob.choices)
          if (ImGui::Selectable(choice.c_str(), choice == v)) app.post(model::Command::set_knob(knob.name, "\"" + choice + "\""));
        ImGui::EndCombo();
      }
      break;
    }
    default: {
      // Strings and coefficient lists as TOML literals; Enter applies. Not being edited, the
      // field shows the value in force.
      auto& text = app.view().knob_text[knob.name];
      const std::string id = "##" + knob.name;
      if (ImGui::GetActiveID() != ImGui::GetID(id.c_str())) text = model::format_knob_value(knob, current);
      ImGui::SetNextItemWidth(-1);
      if (ImGui::InputText(id.c_str(), &text, ImGuiInputTextFlags_EnterReturnsTrue))
        app.post(model::Command::set_knob(knob.name, text));
      break;
    }
  }
}

// `unused`: why this model does not read the knob (model/config/knob_relevance.h), or empty.
void knob_row(GuiApp& app, const model::Knob& knob, const model::Preset& preset, const std::string& unused) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  const std::string short_name = knob.name.substr(knob.name.find('.') + 1);
  const bool restart = knob.apply == model::KnobApply::Restart;
  // An attached training run takes live knobs only: a restart would throw its trained steps away.
  const std::string refused = restart ? app.main().refused(model::kRestartKnob) : "";
  ImGui::AlignTextToFramePadding();
  if (unused.empty()) ImGui::TextUnformatted(short_name.c_str());
  else ImGui::TextColored(viz::colors::muted(), "%s", short_name.c_str());
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::TextColored(viz::colors::accent(), "%s", knob.name.c_str());
    if (!unused.empty()) ImGui::TextColored(viz::colors::warning(), "this model does not use it: %s", unused.c_str());
    ImGui::TextUnformatted(knob.doc.c_str());
    ImGui::TextColored(viz::colors::muted(), "range %s, default %s", model::knob_range(knob).c_str(),
                       model::knob_default(knob).c_str());
    if (restart) ImGui::TextColored(viz::colors::warning(), "restart: changing it rebuilds the model and starts a new run");
    else ImGui::TextColored(viz::colors::muted(), "live: applies at the next step");
    if (!refused.empty()) ImGui::TextColored(viz::colors::error(), "not for this attached run: %s", refused.c_str());
    ImGui::EndTooltip();
  }
  if (restart) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::warning(), "R");
  }
  ImGui::TableNextColumn();
  ImGui::PushID(knob.name.c_str());
  ImGui::BeginDisabled(!refused.empty());
  knob_widget(app, knob, preset);
  ImGui::EndDisabled();
  app.note_rect("knob/" + knob.name);
  ImGui::PopID();
}

}  // namespace

void draw_knobs_panel(GuiApp& app) {
  ViewState& view = app.view();
  const Run& run = app.main();
  const model::Preset& preset = run.status.preset;
  ImGui::TextColored(viz::colors::accent(), "%s", preset.name.empty() ? "Knobs" : preset.name.c_str());
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), !run.live                                ? "recorded (read-only)"
                                           : run.refused(model::kRestartKnob).empty() ? "R: restart knob"
                                                                                      : "R: restart knob (refused here)");
  if (!preset.description.empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(viz::colors::muted(), "%s", clipped_for_display(preset.description).c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##filter", "filter knobs (e.g. lr, window, ns)", &view.knob_filter);
  // Knobs this model does not read are hidden unless asked for (or searched for by name).
  const std::vector<model::Knob>& all = model::knobs();
  std::vector<std::string> unused_reasons;
  unused_reasons.reserve(all.size());
  int unused_count = 0;
  for (const model::Knob& knob : all) {
    unused_reasons.push_back(model::knob_unused_reason(knob, preset));
    unused_count += !unused_reasons.back().empty();
  }
  if (unused_count > 0) {
    ImGui::Checkbox(("show the " + std::to_string(unused_count) + " knobs this model does not use").c_str(),
                    &view.show_unused_knobs);
    app.note_rect("knobs/show unused");
  }

  ImGui::BeginChild("knob list", {0, 0}, false);
  ImGui::BeginDisabled(!run.live);
  std::string open_table;
  bool table_open = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const model::Knob& knob = all[i];
    if (!view.knob_filter.empty() && knob.name.find(view.knob_filter) == std::string::npos) continue;
    const std::string& unused = unused_reasons[i];
    if (!unused.empty() && !view.show_unused_knobs && view.knob_filter.empty()) continue;
    const std::string table = table_of(knob.name);
    if (table != open_table) {
      if (table_open) ImGui::EndTable();
      open_table = table;
      const bool default_open = table == "memory" || table == "train" || !view.knob_filter.empty();
      table_open = ImGui::CollapsingHeader(table.c_str(), default_open ? ImGuiTreeNodeFlags_DefaultOpen : 0) &&
                   ImGui::BeginTable(table.c_str(), 2, ImGuiTableFlags_SizingStretchProp);
      if (table_open) {
        ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0.5f);
        ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch, 0.5f);
      }
    }
    if (table_open) knob_row(app, knob, preset, unused);
  }
  if (table_open) ImGui::EndTable();
  ImGui::EndDisabled();
  ImGui::EndChild();
}

}  // namespace memscope::app
