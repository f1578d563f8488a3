// HOPE's internals (issue 8 "Probes"): the CMS levels' state norms and update ticks, the DGD
// retention map's (or, in a hope block, the diagonal preconditioner's) smallest and largest
// eigenvalue (effective retention, SPEC §8), the
// self-modifying memories' target errors, and per-feature η and α as heatmaps over tokens.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "app/gui/gui_app.h"
#include "app/gui/matrix_textures.h"
#include "app/gui/panels.h"
#include "app/gui/plot_helpers.h"
#include "viz/theme.h"

namespace memscope::app {
namespace {

constexpr int kRecentTokens = 96;  // columns of the over-token heatmaps

const ImU32 kLevelColors[] = {kBlue, kOrange, kGreen, kPurple, kRed, kYellow, kGrey};

// [rows × the last kRecentTokens frames up to `until`] of one per-frame array, oldest column first.
// NaN where a frame did not measure it.
std::vector<float> recent_matrix(const std::vector<std::shared_ptr<const model::Frame>>& frames, int64_t until, int rows,
                                 const std::function<float(const model::Frame&, int)>& value) {
  size_t end = frames.size();
  while (end > 0 && frames[end - 1]->step > until) --end;  // a pinned view
  const size_t n = std::min<size_t>(end, kRecentTokens);
  std::vector<float> out(static_cast<size_t>(rows) * kRecentTokens, std::nanf(""));
  for (size_t j = 0; j < n; ++j) {
    const model::Frame& f = *frames[end - n + j];
    const size_t column = kRecentTokens - n + j;
    for (int r = 0; r < rows; ++r) out[static_cast<size_t>(r) * kRecentTokens + column] = value(f, r);
  }
  return out;
}

void small_heatmap(GuiApp& app, const char* id, const std::string& where, const std::string& title, const std::vector<float>& values,
                   int rows, int64_t version, viz::ScaleMode mode, float height) {
  ImGui::TextColored(viz::colors::muted(), "%s", title.c_str());
  viz::Heatmap& h = app.textures().heatmap(std::string("hope/") + id + where, values.data(), rows, kRecentTokens, version,
                                           viz::ColormapKind::Viridis, mode);
  h.draw(id, {ImGui::GetContentRegionAvail().x, height});
  app.note_rect(std::string("hope/") + id);
}

}  // namespace

void draw_hope_panel(GuiApp& app) {
  const ViewState& view = app.view();
  const TimelineCache& c = app.shown_cache();
  draw_layer_selector(app);
  const int l = view.layer;
  const bool has_cms = c.cms_levels() > 0;
  const bool has_selfmod = !c.selfmod_error(l, 0).empty();
  const auto frame = app.shown_frame();
  const bool has_features = frame && frame->feature_rows > 0;
  if (!has_cms && !has_selfmod && !has_features) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(viz::colors::muted(),
                       "This model has no HOPE parts. Load hope, hope-cms-only, gated-deltanet or demo-mqar-hope (Presets) "
                       "to see the CMS levels, the self-modifying memories' target errors and per-feature gates.");
    ImGui::PopTextWrapPos();
  }
  const auto markers = event_markers(app.main(), view.timeline);
  const auto& xs = c.steps();
  const float height = std::max(60.0f, ImGui::GetContentRegionAvail().y / 6.0f);
  const int64_t version = (frame ? frame->step : 0) * 1000 + c.generation();
  // Texture ids name what they show, so a layer, head or timeline switch uploads again.
  const std::string where = "/" + std::to_string(view.timeline) + "/" + std::to_string(l) + "/" + std::to_string(view.head);
  const int64_t until = app.shown_step();
  // The ring's frames, fetched once, for the over-token maps.
  std::vector<std::shared_ptr<const model::Frame>> frames;
  if (has_cms || has_features)
    if (const auto ring = app.main().source->ring(view.timeline)) frames = ring->frames();

  if (has_cms) {
    std::vector<std::string> names;
    for (int k = 0; k < c.cms_levels(); ++k) names.push_back("level " + std::to_string(k));
    std::vector<viz::PlotSeries> norms;
    for (int k = 0; k < c.cms_levels(); ++k)
      norms.push_back({names[k].c_str(), xs.data(), c.cms_norm(l, k).data(), std::min(xs.size(), c.cms_norm(l, k).size()),
                       kLevelColors[k % 7], series_revision(c, l, view.head)});
    plot(app, "cms norms", "CMS: state norm per level", norms, markers, height);
    // Ticks as a levels × recent-steps map: a bright cell is an update.
    const int levels = c.cms_levels();
    const auto ticks = recent_matrix(frames, until, levels, [&](const model::Frame& f, int k) {
      const size_t i = static_cast<size_t>(l * levels + k);
      return f.cms_levels == levels && i < f.cms_tick.size() ? f.cms_tick[i] : std::nanf("");
    });
    small_heatmap(app, "cms ticks", where, "CMS update ticks, levels (rows) over the last 96 steps", ticks, levels, version,
                  viz::ScaleMode::Auto, std::min(height * 0.6f, 18.0f * levels));
  }
  // Effective retention (SPEC §8): per head from the memory layer's retention map (dgd memories),
  // or from the self-modifying memories' diagonal preconditioner α − η⊙k² in a hope block.
  const auto retention_series = [&](const std::vector<float>& lo, const std::vector<float>& hi) {
    return std::vector<viz::PlotSeries>{{"min", xs.data(), lo.data(), std::min(xs.size(), lo.size()), kBlue, series_revision(c, l, view.head)},
                                        {"max", xs.data(), hi.data(), std::min(xs.size(), hi.size()), kOrange, series_revision(c, l, view.head)}};
  };
  if (c.layers() > 0) {
    plot(app, "retention", "effective retention: smallest / largest eigenvalue of the retention map",
         retention_series(c.head(l, view.head, model::HeadMetric::RetainMin), c.head(l, view.head, model::HeadMetric::RetainMax)),
         markers, height);
  } else if (has_selfmod) {
    plot(app, "retention", "effective retention: eigenvalue range of the dgd preconditioner alpha - eta*k^2",
         retention_series(c.selfmod_retention(l, 0), c.selfmod_retention(l, 1)), markers, height);
  }
  if (has_selfmod) {
    std::vector<viz::PlotSeries> errors;
    for (int m = 0; m < kSelfModMemories; ++m)
      errors.push_back({selfmod_memory_name(m), xs.data(), c.selfmod_error(l, m).data(),
                        std::min(xs.size(), c.selfmod_error(l, m).size()), kLevelColors[m], series_revision(c, l, view.head)});
    plot(app, "selfmod", "self-modifying memories: target error 1/2|M(k) - v_hat|^2 / d", errors, markers, height);
  }
  if (has_features) {
    const int dim = frame->feature_dim, row = std::min(view.head, frame->feature_rows - 1);
    const auto feature = [&](bool lr) {
      return recent_matrix(frames, until, dim, [&](const model::Frame& f, int d) {
        const auto& v = lr ? f.lr_feature : f.retain_feature;
        const size_t i = (static_cast<size_t>(l) * f.feature_rows + row) * f.feature_dim + d;
        return f.feature_dim == dim && i < v.size() ? v[i] : std::nanf("");
      });
    };
    const float h = std::max(40.0f, height * 0.8f);
    // model.hope.shared_gates: every feature carries the same value, so each token is one stripe.
    const bool shared = app.main().status.preset.model.hope_shared_gates;
    const std::string how = shared ? " (model.hope.shared_gates: one value per token)" : " (features x last 96 tokens)";
    small_heatmap(app, "eta", where, (shared ? "eta" : "per-feature eta") + how, feature(true), dim, version, viz::ScaleMode::Auto, h);
    small_heatmap(app, "alpha", where, (shared ? "alpha" : "per-feature alpha") + how, feature(false), dim, version, viz::ScaleMode::Auto,
                  h);
  }
}

}  // namespace memscope::app
