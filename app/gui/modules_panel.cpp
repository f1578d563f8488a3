// The outer loop per module (issue 18): for the shown training step, each module's gradient norm
// before clipping and its update-to-weight ratio, largest first, and a map of log10 gradient norm
// (modules × the last 96 training steps) so that the module a spike starts in stands out.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "app/gui/gui_app.h"
#include "app/gui/matrix_textures.h"
#include "app/gui/panels.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

constexpr int kRecentSteps = 96;

// The newest train frame at or before `until` among `frames` (a train+inspect run interleaves).
std::shared_ptr<const model::Frame> train_frame_until(const std::vector<std::shared_ptr<const model::Frame>>& frames,
                                                      int64_t until) {
  for (auto it = frames.rbegin(); it != frames.rend(); ++it)
    if ((*it)->step <= until && !(*it)->module_names.empty()) return *it;
  return nullptr;
}

}  // namespace

void draw_modules_panel(GuiApp& app) {
  const ViewState& view = app.view();
  std::vector<std::shared_ptr<const model::Frame>> frames;
  if (const auto ring = app.main().source->ring(view.timeline)) frames = ring->frames();
  const int64_t until = app.shown_step();
  const auto frame = train_frame_until(frames, until);
  if (!frame) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(viz::colors::muted(),
                       "Per-module gradient norms and update ratios come from training steps. Set engine.mode to train or "
                       "train+inspect (Knobs) and keep train.module_norms on; a recorded training session shows them too.");
    ImGui::PopTextWrapPos();
    return;
  }
  const auto& names = frame->module_names;
  const size_t n = names.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto norm = [&](size_t i) { return i < frame->module_grad_norm.size() ? frame->module_grad_norm[i] : std::nanf(""); };
  auto ratio = [&](size_t i) { return i < frame->module_update_ratio.size() ? frame->module_update_ratio[i] : std::nanf(""); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return norm(a) > norm(b); });
  const float largest = n > 0 && std::isfinite(norm(order[0])) ? norm(order[0]) : 0.0f;

  ImGui::Text("training step %lld: gradient norm %.3g before clipping", static_cast<long long>(frame->train_step),
              frame->grad_norm);
  // Into this step: its batch, token by token, from the weights before it (a fork; issue 18).
  ImGui::SameLine();
  const std::string label = "Step into step " + std::to_string(frame->train_step);
  const bool can = app.main().live && !app.main().remote();
  if (!can) ImGui::BeginDisabled();
  if (ImGui::SmallButton(label.c_str())) app.step_into(frame->step, frame->train_step);
  if (!can) ImGui::EndDisabled();
  app.note_rect("modules/step_into");
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", app.main().remote() ? "an attached run: memscope-cli step --ckpt FILE --train-step S on its machine"
                            : app.main().live ? "A new timeline: this step's batch, row by row, from the weights before it, with the "
                                              "trainer's chunk form and the backward norms (grad_M, grad_S, grad_ns)"
                                            : "a recording cannot re-run training: use memscope-cli step --session DIR --train-step S");
  // Rows: the module, a bar of its norm against the largest on a log scale (three decades), the
  // norm and ‖Δθ‖/‖θ‖ (about 1e-3 is a healthy AdamW step; far above it, the module is thrashing).
  const float table_height = std::min(ImGui::GetContentRegionAvail().y * 0.55f, (static_cast<float>(n) + 1.5f) * ImGui::GetTextLineHeightWithSpacing());
  if (ImGui::BeginTable("modules", 4, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp,
                        {0.0f, table_height})) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("module", ImGuiTableColumnFlags_WidthStretch, 3.0f);
    ImGui::TableSetupColumn("grad norm (log, vs largest)", ImGuiTableColumnFlags_WidthStretch, 3.0f);
    ImGui::TableSetupColumn("norm", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("update/W", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableHeadersRow();
    for (size_t row = 0; row < n; ++row) {
      const size_t i = order[row];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (row == 0) ImGui::TextColored(viz::colors::accent(), "%s", names[i].c_str());
      else ImGui::TextUnformatted(names[i].c_str());
      ImGui::TableNextColumn();
      const float v = norm(i);
      const float fraction = largest > 0 && v > 0 ? std::clamp(1.0f + std::log10(v / largest) / 3.0f, 0.0f, 1.0f) : 0.0f;
      ImGui::ProgressBar(fraction, {-1.0f, ImGui::GetTextLineHeight()}, "");
      ImGui::TableNextColumn();
      ImGui::Text("%.3g", v);
      ImGui::TableNextColumn();
      ImGui::Text("%.2g", ratio(i));
    }
    ImGui::EndTable();
  }
  app.note_rect("modules/table");

  // log10 of each module's norm over the recent training steps (model order, as in the names).
  std::vector<std::shared_ptr<const model::Frame>> recent;
  for (const auto& f : frames)
    if (f->step <= until && f->module_names == names) recent.push_back(f);
  if (recent.size() > static_cast<size_t>(kRecentSteps)) recent.erase(recent.begin(), recent.end() - kRecentSteps);
  // As many columns as there are steps (up to kRecentSteps): no column stands for a missing step.
  const int cols = std::max<int>(1, static_cast<int>(recent.size()));
  std::vector<float> map(n * static_cast<size_t>(cols), std::nanf(""));
  for (size_t j = 0; j < recent.size(); ++j)
    for (size_t i = 0; i < n && i < recent[j]->module_grad_norm.size(); ++i) {
      const float v = recent[j]->module_grad_norm[i];
      map[i * static_cast<size_t>(cols) + j] = v > 0 ? std::log10(v) : std::nanf("");
    }
  ImGui::TextColored(viz::colors::muted(), "log10 grad norm per module (rows; hover for names), last %d training steps", cols);
  viz::Heatmap& h = app.textures().heatmap("modules/" + std::to_string(view.timeline), map.data(), static_cast<int>(n), cols,
                                           frame->step, viz::ColormapKind::Viridis, viz::ScaleMode::Auto, names);
  h.draw("module norms", {ImGui::GetContentRegionAvail().x, std::max(40.0f, ImGui::GetContentRegionAvail().y - 4.0f)});
  app.note_rect("modules/map");
}

}  // namespace memscope::app
