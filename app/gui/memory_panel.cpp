// The memory panel (DESIGN "GUI" → Memory): layers × {M, S, ΔM} of one head as heatmaps, the
// head selector and the colour scale, click to enlarge. In the compare view every run and
// timeline gets a column of its M matrices, side by side at the same step.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>

#include "app/gui/gui_app.h"
#include "app/gui/matrix_textures.h"
#include "app/gui/panels.h"
#include "app/gui/plot_helpers.h"
#include "app/gui/spectrum.h"
#include "viz/line_plot.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

const char* tensor_title(const std::string& tensor) {
  return tensor == "M" ? "M (memory)" : tensor == "S" ? "S (momentum)" : tensor == "dM" ? "dM (this write)" : tensor.c_str();
}

// The frame's snapshots of one head, ordered rows (layer, weight) × columns (M, S, dM).
std::vector<const model::MatrixSnapshot*> head_snapshots(const model::Frame& f, int head) {
  std::vector<const model::MatrixSnapshot*> out;
  for (const auto& m : f.matrices)
    if (m.head == head) out.push_back(&m);
  const auto column = [](const std::string& t) { return t == "M" ? 0 : t == "S" ? 1 : 2; };
  std::stable_sort(out.begin(), out.end(), [&](const auto* a, const auto* b) {
    return std::tie(a->layer, a->weight) < std::tie(b->layer, b->weight) ||
           (std::tie(a->layer, a->weight) == std::tie(b->layer, b->weight) && column(a->tensor) < column(b->tensor));
  });
  return out;
}

void draw_scale_controls(ViewState& view) {
  ImGui::Checkbox("symmetric", &view.symmetric_scale);
  ImGui::SameLine();
  ImGui::Checkbox("lock", &view.lock_scale);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("a fixed colour range, so frames compare by colour");
  if (view.lock_scale) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(90.0f);
    ImGui::DragFloat("##range", &view.locked_range, 0.01f, 1e-4f, 1e4f, "+-%.3g", ImGuiSliderFlags_Logarithmic);
  }
}

// A hope block has no memory heads: its self-modifying memories take the head's place
// (probe_collector.h), so the selector picks one of M_k, M_v, M_eta, M_alpha, M.
bool shows_selfmod_memories(const GuiApp& app) {
  const TimelineCache& c = app.shown_cache();
  return c.heads() == 0 && !c.selfmod_error(0, 0).empty();
}

void draw_head_selector(GuiApp& app) {
  if (shows_selfmod_memories(app)) {
    draw_index_radios("memory", kSelfModMemories, app.view().head, selfmod_memory_name);
    return;
  }
  draw_index_radios("head", std::max(1, app.shown_cache().heads()), app.view().head);
}

// One heatmap cell with its title and a one-line summary; a click enlarges it.
void matrix_cell(GuiApp& app, const std::string& id, int run, int timeline, const model::Frame& frame,
                 const model::MatrixSnapshot& m, ImVec2 size) {
  ViewState& view = app.view();
  if (shows_selfmod_memories(app))
    ImGui::TextColored(viz::colors::muted(), "L%d %s %s %s", m.layer, selfmod_memory_name(m.head), m.weight.c_str(), tensor_title(m.tensor));
  else
    ImGui::TextColored(viz::colors::muted(), "L%d %s %s", m.layer, m.weight == "M" ? "" : m.weight.c_str(), tensor_title(m.tensor));
  viz::Heatmap& heatmap = app.textures().heatmap(id, frame, m, view);
  if (heatmap.stats().nan || heatmap.stats().inf) {
    ImGui::SameLine();
    ImGui::TextColored(viz::colors::error(), "%zu NaN %zu Inf", heatmap.stats().nan, heatmap.stats().inf);
  }
  if (heatmap.draw(id.c_str(), size)) {
    view.has_enlarged = true;
    view.enlarged = {m.layer, m.head, m.weight, m.tensor};
    view.enlarged_run = run;
    view.enlarged_timeline = timeline;
  }
  app.note_rect("matrix/" + id);
}

// `stacked`: one column (the compare view gives each run a column of its own).
void draw_grid(GuiApp& app, const Run& run, int run_index, int timeline, int64_t step, bool stacked) {
  ViewState& view = app.view();
  const auto frame = run.snapshot_frame(timeline, step);
  const auto latest = run.frame(timeline, -1);
  if (!frame && latest && latest->heads == 0 && latest->selfmod_error.empty()) {
    ImGui::TextColored(viz::colors::muted(), "This model has no memory matrices (an attention-only preset).");
    return;
  }
  if (!frame) {
    ImGui::TextColored(viz::colors::muted(), step < 0 ? "No snapshot yet: step the model (Space or Right)."
                                                     : "No snapshot held at or before this step (the ring dropped it).");
    return;
  }
  auto cells = head_snapshots(*frame, view.head);
  if (cells.empty()) {
    ImGui::TextColored(viz::colors::muted(), "This model has no memory matrices (an attention-only preset).");
    return;
  }
  int columns = 0;
  for (const auto* m : cells)
    if (m->layer == cells.front()->layer && m->weight == cells.front()->weight) ++columns;
  if (stacked) columns = 1;
  const int rows = static_cast<int>((cells.size() + columns - 1) / columns);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const float cell_w = (avail.x - ImGui::GetStyle().ItemSpacing.x * (columns - 1)) / columns;
  const float cell_h = std::max(40.0f, (avail.y - rows * (line + ImGui::GetStyle().ItemSpacing.y * 2)) / rows);
  // Square cells read as matrices; the colour bar takes ~60 px of the width.
  const float side = std::min(cell_w - 60.0f, cell_h);
  // Always say which step the matrices are from: right after a reset or between snapshots
  // (probe.matrices_every) they are older than the shown step, and S would look unchanged.
  const int64_t shown = step >= 0 ? step : run.steps(timeline);
  if (frame->step == shown)
    ImGui::TextColored(viz::colors::muted(), "matrices of step %lld", static_cast<long long>(frame->step));
  else
    ImGui::TextColored(viz::colors::warning(), "matrices of step %lld; the shown step is %lld (snapshots every probe.matrices_every steps)",
                       static_cast<long long>(frame->step), static_cast<long long>(shown));
  if (ImGui::BeginTable("grid", columns, ImGuiTableFlags_SizingStretchSame)) {
    for (const auto* m : cells) {
      ImGui::TableNextColumn();
      const std::string id = std::to_string(run_index) + "/" + std::to_string(timeline) + "/" + std::to_string(m->layer) +
                             "/" + std::to_string(m->head) + "/" + m->weight + "/" + m->tensor;
      matrix_cell(app, id, run_index, timeline, *frame, *m, {side + 60.0f, side});
    }
    ImGui::EndTable();
  }
}

}  // namespace

void draw_memory_panel(GuiApp& app) {
  ViewState& view = app.view();
  ImGui::TextColored(viz::colors::accent(), "Memory");
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), view.show_compare            ? "every run side by side, same step"
                                           : shows_selfmod_memories(app) ? "layers x {W1, W2} x {M, dM} of one self-modifying memory"
                                                                         : "layers x {M, S, dM}");
  draw_head_selector(app);  // a line of its own: five memory names or many heads do not fit after the title
  ImGui::SameLine();
  draw_scale_controls(view);
  ImGui::Separator();
  const int64_t step = view.follow ? -1 : view.cursor;
  if (!view.show_compare) {
    draw_grid(app, app.main(), 0, view.timeline, step, false);
    return;
  }
  // Compare: one column per run and timeline.
  std::vector<std::pair<int, int>> columns;
  for (size_t r = 0; r < app.runs().size(); ++r)
    for (size_t t = 0; t < app.runs()[r]->caches.size(); ++t) columns.push_back({static_cast<int>(r), static_cast<int>(t)});
  int make_main_later = 0;  // swapped after the table: its columns still draw the runs as they are
  if (ImGui::BeginTable("compare memory", static_cast<int>(columns.size()), ImGuiTableFlags_SizingStretchSame | ImGuiTableFlags_BordersInnerV)) {
    for (const auto& [r, t] : columns) {
      ImGui::TableNextColumn();
      const Run& run = *app.runs()[static_cast<size_t>(r)];
      ImGui::PushID(r * 100 + t);
      if (r > 0 && t == 0) {  // back to a run set aside (a restart knob change, a compare run)
        if (ImGui::SmallButton("make main")) make_main_later = r;
        app.note_rect("compare/make_main/" + std::to_string(r));
        ImGui::SameLine();  // before the label, which may be wider than the column
      }
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(run_color(r, t)), "%s%s", run.label.c_str(),
                         t ? (" / fork " + std::to_string(t)).c_str() : "");
      draw_grid(app, run, r, t, step, true);
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  if (make_main_later > 0) app.make_main(static_cast<size_t>(make_main_later));
}

void draw_enlarged_matrix(GuiApp& app) {
  ViewState& view = app.view();
  if (view.enlarged_run >= static_cast<int>(app.runs().size())) view.enlarged_run = 0, view.enlarged_timeline = 0;
  const Run& run = *app.runs()[static_cast<size_t>(view.enlarged_run)];
  const auto frame = run.snapshot_frame(view.enlarged_timeline, view.follow ? -1 : view.cursor);
  const model::MatrixSnapshot* m = nullptr;
  if (frame)
    for (const auto& s : frame->matrices)
      if (MatrixKey{s.layer, s.head, s.weight, s.tensor} == view.enlarged) m = &s;
  // "M" of a model whose memories are MLPs (--show enlarge=L asks for M): their first weight.
  if (frame && !m && view.enlarged.weight == "M")
    for (const auto& s : frame->matrices)
      if (!m && s.layer == view.enlarged.layer && s.head == view.enlarged.head && s.tensor == view.enlarged.tensor) {
        m = &s;
        view.enlarged.weight = s.weight;
      }
  const ImGuiViewport* viewport = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos({viewport->WorkPos.x + viewport->WorkSize.x * 0.5f, viewport->WorkPos.y + viewport->WorkSize.y * 0.5f},
                          ImGuiCond_Appearing, {0.5f, 0.5f});
  ImGui::SetNextWindowSize({900, 640}, ImGuiCond_Appearing);
  const std::string title = run.label + (view.enlarged_timeline ? " / fork " + std::to_string(view.enlarged_timeline) : "") +
                            ": layer " + std::to_string(view.enlarged.layer) + " head " + std::to_string(view.enlarged.head) +
                            (view.enlarged.weight == "M" ? "" : " " + view.enlarged.weight) + " " +  // not "M M (memory)"
                            tensor_title(view.enlarged.tensor) + "###enlarged";
  if (!ImGui::Begin(title.c_str(), &view.has_enlarged, ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  if (!m) {
    ImGui::TextColored(viz::colors::muted(), "No snapshot of this matrix at or before the shown step yet (snapshots every "
                                             "probe.matrices_every steps).");
    ImGui::End();
    return;
  }
  const float side = std::min(ImGui::GetContentRegionAvail().y - 40.0f, ImGui::GetContentRegionAvail().x * 0.55f);
  ImGui::BeginGroup();
  const std::string id = "enlarged/" + std::to_string(view.enlarged_run) + "/" + std::to_string(view.enlarged_timeline) + "/" +
                         std::to_string(m->layer) + "/" + std::to_string(m->head) + "/" + m->weight + "/" + m->tensor;
  viz::Heatmap& heatmap = app.textures().heatmap(id, *frame, *m, view);
  heatmap.draw("enlarged", {side + 70.0f, side});
  ImGui::TextColored(viz::colors::muted(), "snapshot of step %lld, %dx%d%s", static_cast<long long>(frame->step), m->rows, m->cols,
                     m->rows != m->full_rows || m->cols != m->full_cols
                         ? (" shown, area-averaged from " + std::to_string(m->full_rows) + "x" + std::to_string(m->full_cols)).c_str()
                         : "");
  ImGui::EndGroup();
  app.note_rect("enlarged/matrix");
  // The colour bar's value labels reach past the heatmap's item: leave them room.
  ImGui::SameLine(0.0f, ImGui::CalcTextSize("-0.00000").x + 24.0f);
  ImGui::BeginGroup();
  // The spectrum, recomputed only when the shown matrix changes.
  static std::vector<float> spectrum;
  static std::string spectrum_of;  // the texture id and the step: pointers could be reused
  const std::string spectrum_key = id + "@" + std::to_string(frame->step) + "@" + std::to_string(reinterpret_cast<std::uintptr_t>(m));
  const bool shrunk = m->rows != m->full_rows || m->cols != m->full_cols;
  // A shrunk snapshot of a live run carries its full matrix's spectrum; a recorded one only the copy.
  const bool real = !shrunk || !m->singular_values.empty();
  if (spectrum_of != spectrum_key) {
    const bool finite = std::all_of(m->values.begin(), m->values.end(), [](float v) { return std::isfinite(v); });
    spectrum = !shrunk ? singular_values(m->values.data(), m->rows, m->cols)
               : real  ? (finite ? m->singular_values : std::vector<float>{})
                       : singular_values(m->values.data(), m->rows, m->cols);
    spectrum_of = spectrum_key;
  }
  ImGui::TextColored(viz::colors::accent(), "singular values");
  if (spectrum.empty()) {
    ImGui::TextColored(viz::colors::error(), "not finite: no spectrum");
  } else {
    double total = 0, entropy = 0;
    for (float s : spectrum) total += s;
    for (float s : spectrum)
      if (s > 0 && total > 0) entropy -= (s / total) * std::log(s / total);
    ImGui::Text("sigma_max %.4g   sigma_min %.4g%s", spectrum.front(), spectrum.back(), real ? "" : " (shown copy)");
    if (real)
      ImGui::Text("effective rank %.3g of %zu (real %dx%d)", std::exp(entropy), spectrum.size(), m->full_rows,
                  m->full_cols);
    else
      ImGui::Text("effective rank %.3g of %zu (of the shown copy: recordings and attached runs keep no full spectrum)", std::exp(entropy),
                  spectrum.size());
    // A shrunk display copy has its own spectrum: the probe measured the real matrix, so say both.
    const auto w = std::find(frame->weights.begin(), frame->weights.end(), m->weight);
    if (!real && m->tensor == "M" && w != frame->weights.end() && m->layer < frame->layers && m->head < frame->heads) {
      const float real = frame->weight(m->layer, m->head, static_cast<int>(w - frame->weights.begin()), model::WeightMetric::Erank);
      ImGui::TextColored(viz::colors::accent(), "effective rank %.3g of the real %dx%d matrix (the probe)", real, m->full_rows,
                         m->full_cols);
    }
    ImGui::PlotHistogram("##spectrum", spectrum.data(), static_cast<int>(spectrum.size()), 0, nullptr, 0.0f, spectrum.front() * 1.05f,
                         {ImGui::GetContentRegionAvail().x, side * 0.6f});
    app.note_rect("enlarged/spectrum");
  }
  if (shrunk && real) {  // a live run measured the full matrix; two lines, as the column is narrow
    ImGui::BeginGroup();
    ImGui::TextColored(viz::colors::muted(), "range of the real %dx%d: [%.4g, %.4g]", m->full_rows, m->full_cols, m->full_min,
                       m->full_max);
    ImGui::TextColored(viz::colors::muted(), "%lld NaN, %lld Inf (the colours: the shown copy)", static_cast<long long>(m->full_nan),
                       static_cast<long long>(m->full_inf));
    ImGui::EndGroup();
    app.note_rect("enlarged/range of the real matrix");
  } else {
    ImGui::TextColored(viz::colors::muted(), "range [%.4g, %.4g], %zu NaN, %zu Inf%s", heatmap.stats().min, heatmap.stats().max,
                       heatmap.stats().nan, heatmap.stats().inf, shrunk ? " (of the shown copy)" : "");
    app.note_rect("enlarged/range");
  }
  ImGui::EndGroup();
  ImGui::End();
}

}  // namespace memscope::app
