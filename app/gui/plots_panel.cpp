// Plots against step (DESIGN "GUI" → Plots): loss, surprise before and after the write, effective
// rank, the Newton–Schulz error with σ_min/σ_max, the gates, effective retention and the norms of
// one layer and head, with the events marked on the shared step axis. A click seeks.
#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "app/gui/event_style.h"
#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "app/gui/plot_helpers.h"
#include "viz/theme.h"

namespace memscope::app {

using model::HeadMetric;
using model::WeightMetric;

std::vector<viz::PlotMarker> event_markers(const Run& run, int timeline) {
  std::vector<viz::PlotMarker> markers;
  for (const auto& e : run.events)
    if (e.timeline == timeline && e.kind != model::EventKind::Command)
      markers.push_back({static_cast<double>(e.step), event_color(e.kind), e.message.c_str()});
  return markers;
}

void plot(GuiApp& app, const char* id, const char* title, const std::vector<viz::PlotSeries>& series,
          const std::vector<viz::PlotMarker>& markers, float height) {
  ImGui::TextColored(viz::colors::muted(), "%s", title);
  // One step window for every plot: zooming or panning one moves them all (linked).
  viz::PlotView& linked = app.view().plots["linked"];
  const double clicked = viz::draw_line_plot(id, linked, series, markers, {ImGui::GetContentRegionAvail().x, height});
  app.note_rect(std::string("plot/") + id);
  if (std::isfinite(clicked)) app.seek(static_cast<int64_t>(clicked));
}

bool has_values(const std::vector<float>& ys) {
  return std::any_of(ys.rbegin(), ys.rend(), [](float y) { return std::isfinite(y); });
}

uint64_t series_revision(const TimelineCache& cache, int layer, int head) {
  return cache.revision() * 1000003u + static_cast<uint64_t>(layer) * 1009u + static_cast<uint64_t>(head);
}

void draw_index_radios(const char* label, int count, int& value, const char* (*name)(int)) {
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(label);
  for (int i = 0; i < count; ++i) {
    ImGui::SameLine();
    ImGui::PushID(i);
    if (ImGui::RadioButton(name ? name(i) : std::to_string(i).c_str(), value == i)) value = i;
    ImGui::PopID();
  }
  if (value >= count) value = 0;
}

void draw_layer_selector(GuiApp& app) {
  // The plots' shared step window: once zoomed or panned, a button brings back the newest steps.
  viz::PlotView& linked = app.view().plots["linked"];
  if (!linked.follow) {
    if (ImGui::SmallButton("Follow newest")) linked.follow = true;
    app.note_rect("plots/follow");
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("the plots are zoomed or panned; this (or a double-click on a plot) follows again");
    ImGui::SameLine();
  }
  draw_index_radios("layer", std::max({1, app.shown_cache().layers(), app.shown_cache().hope_layers()}), app.view().layer);
  if (app.shown_cache().heads() == 0) return;  // hope blocks: the memory panel's selector picks a memory, not a head
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "head %d (memory panel)", app.view().head);
}

void draw_plots_panel(GuiApp& app) {
  const ViewState& view = app.view();
  const TimelineCache& c = app.shown_cache();
  draw_layer_selector(app);
  const auto markers = event_markers(app.main(), view.timeline);
  const int l = view.layer, h = view.head;
  // Newton–Schulz only runs under Muon; the backward norms only when stepping into a training step.
  const bool has_ns = has_values(c.weight(l, h, 0, WeightMetric::NsError));
  const bool has_backward = has_values(c.weight(l, h, 0, WeightMetric::GradM));
  // Surprise and gates are what a token step measures: a run that only trains has none.
  const bool has_surprise = has_values(c.head(l, h, HeadMetric::SurpriseBefore));
  const bool has_gates = has_values(c.head(l, h, HeadMetric::Retain)) || has_values(c.head(l, h, HeadMetric::Lr)) ||
                         has_values(c.head(l, h, HeadMetric::Momentum)) || has_values(c.head(l, h, HeadMetric::Gamma)) ||
                         has_values(c.head(l, h, HeadMetric::RetainMin));
  // Training gets its own curves on top: the loss and the outer gradient norm per training step.
  const bool has_train = has_values(c.train_loss()), has_token = has_values(c.token_loss());
  // A model of hope blocks has no memory layer: its surprise, rank, gates and norms would be empty
  // plots, so they give way to a pointer to the HOPE tab, which has that run's own probes.
  const bool memory_layers = c.layers() > 0 || c.hope_layers() == 0;
  if (!memory_layers) {
    ImGui::PushStyleColor(ImGuiCol_Text, viz::colors::muted());
    ImGui::TextWrapped(
        "HOPE blocks have no memory layer: the self-modifying memories' target errors, effective retention and the CMS are "
        "on the HOPE tab.");
    ImGui::PopStyleColor();
    app.note_rect("plots/hope pointer");
  }
  const int plots = (memory_layers ? 2 + has_surprise + has_gates + has_ns + has_backward : 0) + (has_train ? 2 : 0) +
                    (has_token || !has_train ? 1 : 0);
  const float height = std::max(60.0f, (ImGui::GetContentRegionAvail().y - plots * (ImGui::GetTextLineHeightWithSpacing() +
                                                                                      ImGui::GetStyle().ItemSpacing.y)) / plots);
  const auto& xs = c.steps();
  const auto series = [&](const char* name, const std::vector<float>& ys, ImU32 color) {
    return viz::PlotSeries{name, xs.data(), ys.data(), std::min(xs.size(), ys.size()), color, series_revision(c, l, h)};
  };
  if (has_train) {
    plot(app, "train loss", "training loss (one point per training step)", {series("train", c.train_loss(), kOrange)}, markers, height);
    plot(app, "grad norm", "outer gradient norm before clipping", {series("grad norm", c.grad_norm(), kRed)}, markers, height);
  }
  if (has_token || !has_train)
    plot(app, "loss", "token loss: -log p(target) at each scored token", {series("token", c.token_loss(), kBlue)}, markers, height);
  if (!memory_layers) return;
  if (has_surprise)
    plot(app, "surprise", "surprise: inner loss before and after the write",
         {series("before", c.head(l, h, HeadMetric::SurpriseBefore), kOrange),
          series("after", c.head(l, h, HeadMetric::SurpriseAfter), kGreen)},
         markers, height);
  plot(app, "erank", "effective rank of M", {series("erank", c.weight(l, h, 0, WeightMetric::Erank), kPurple)}, markers, height);
  if (has_ns)
    plot(app, "ns", "Newton-Schulz: orthogonality error, sigma_min, sigma_max",
         {series("error", c.weight(l, h, 0, WeightMetric::NsError), kRed), series("s_min", c.weight(l, h, 0, WeightMetric::NsSmin), kBlue),
          series("s_max", c.weight(l, h, 0, WeightMetric::NsSmax), kGreen)},
         markers, height);
  if (has_backward)
    plot(app, "backward", "backward through the inner loop: |dL/dM_t|, |dL/dS_t|, through this token's NS",
         {series("dL/dM", c.weight(l, h, 0, WeightMetric::GradM), kRed), series("dL/dS", c.weight(l, h, 0, WeightMetric::GradS), kOrange),
          series("via NS", c.weight(l, h, 0, WeightMetric::GradNs), kPurple)},
         markers, height);
  if (has_gates)
    plot(app, "gates", "gates: retain alpha, lr eta, momentum beta, gamma; effective retention min/max",
         {series("retain", c.head(l, h, HeadMetric::Retain), kBlue), series("lr", c.head(l, h, HeadMetric::Lr), kOrange),
          series("momentum", c.head(l, h, HeadMetric::Momentum), kGreen), series("gamma", c.head(l, h, HeadMetric::Gamma), kPurple),
          series("ret_min", c.head(l, h, HeadMetric::RetainMin), kGrey)},
         markers, height);
  plot(app, "norms", "norms: |M|, |S|, |dM|",
       {series("|M|", c.weight(l, h, 0, WeightMetric::NormM), kBlue), series("|S|", c.weight(l, h, 0, WeightMetric::NormS), kOrange),
        series("|dM|", c.weight(l, h, 0, WeightMetric::NormDM), kGreen)},
       markers, height);
}

void draw_compare_view(GuiApp& app) {
  ViewState& view = app.view();
  draw_layer_selector(app);
  ImGui::TextColored(viz::colors::muted(), "every run and timeline overlaid; C leaves the compare view");
  // One colour per run and timeline, named in every legend.
  std::vector<std::string> names;
  std::vector<const TimelineCache*> caches;
  std::vector<ImU32> colors;
  for (size_t r = 0; r < app.runs().size(); ++r)
    for (size_t t = 0; t < app.runs()[r]->caches.size(); ++t) {
      names.push_back(app.runs()[r]->label + (t ? " / fork " + std::to_string(t) : ""));
      caches.push_back(&app.runs()[r]->caches[t]);
      colors.push_back(run_color(static_cast<int>(r), static_cast<int>(t)));
    }
  if (caches.size() < 2)
    ImGui::TextColored(viz::colors::warning(), "Only one timeline: fork (transport), load a teaching preset, or File > Compare with session.");
  const auto markers = event_markers(app.main(), 0);
  const int l = view.layer, h = view.head;
  // `salt` names a series choice beyond layer and head (the CMS level), so switching it redraws.
  const auto overlay = [&](auto pick, uint64_t salt = 0) {
    std::vector<viz::PlotSeries> out;
    for (size_t i = 0; i < caches.size(); ++i) {
      const auto& ys = pick(*caches[i]);
      out.push_back({names[i].c_str(), caches[i]->steps().data(), ys.data(), std::min(caches[i]->steps().size(), ys.size()), colors[i],
                     series_revision(*caches[i], l, h) + salt * 7919u});
    }
    return out;
  };
  // The memory-layer plots for runs with memory layers, HOPE's for runs with HOPE parts (a
  // hope block has no memory layer, so its surprise, rank and norm series are empty); a mixed
  // comparison shows both.
  bool memory_layers = false, hope = false;
  int cms_levels = 0;
  // A series any run has a finite value in: plots with nothing to draw are left out (training
  // frames have no token loss or surprise; only Muon has an NS error; inspect has no training loss).
  const auto any = [&](auto pick) {
    return std::any_of(caches.begin(), caches.end(), [&](const TimelineCache* c) { return has_values(pick(*c)); });
  };
  for (const TimelineCache* c : caches) {
    memory_layers = memory_layers || c->layers() > 0;
    hope = hope || c->hope_layers() > 0;
    cms_levels = std::max(cms_levels, c->cms_levels());
  }
  const auto token_loss = [](const TimelineCache& c) -> const std::vector<float>& { return c.token_loss(); };
  const auto train_loss = [](const TimelineCache& c) -> const std::vector<float>& { return c.train_loss(); };
  const auto grad_norm = [](const TimelineCache& c) -> const std::vector<float>& { return c.grad_norm(); };
  const auto surprise = [&](const TimelineCache& c) -> const std::vector<float>& { return c.head(l, h, HeadMetric::SurpriseBefore); };
  const auto ns_error = [&](const TimelineCache& c) -> const std::vector<float>& { return c.weight(l, h, 0, WeightMetric::NsError); };
  const bool has_token = any(token_loss), has_train = any(train_loss);
  const bool has_surprise = memory_layers && any(surprise), has_ns = memory_layers && any(ns_error);
  if (cms_levels > 0) draw_index_radios("CMS level", cms_levels, view.cms_level);
  const int plots = std::max(1, (has_token ? 1 : 0) + (has_train ? 2 : 0) +
                                    (memory_layers ? 2 + (has_surprise ? 1 : 0) + (has_ns ? 1 : 0) : 0) +
                                    (hope ? 2 + (cms_levels > 0) : 0));
  const float height = std::max(60.0f, (ImGui::GetContentRegionAvail().y - plots * (ImGui::GetTextLineHeightWithSpacing() +
                                                                                      ImGui::GetStyle().ItemSpacing.y)) / plots);
  if (has_train) {
    plot(app, "cmp train loss", "training loss", overlay(train_loss), markers, height);
    plot(app, "cmp grad norm", "outer gradient norm before clipping", overlay(grad_norm), markers, height);
  }
  if (has_token || !has_train) plot(app, "cmp loss", "token loss", overlay(token_loss), markers, height);
  if (memory_layers) {
    if (has_surprise) plot(app, "cmp surprise", "surprise before the write", overlay(surprise), markers, height);
    plot(app, "cmp erank", "effective rank of M",
         overlay([&](const TimelineCache& c) -> const std::vector<float>& { return c.weight(l, h, 0, WeightMetric::Erank); }), markers, height);
    if (has_ns) plot(app, "cmp ns", "Newton-Schulz orthogonality error", overlay(ns_error), markers, height);
    plot(app, "cmp norm", "|M|",
         overlay([&](const TimelineCache& c) -> const std::vector<float>& { return c.weight(l, h, 0, WeightMetric::NormM); }), markers, height);
  }
  if (hope) {
    // The main self-modifying memory's target is v_t itself, so its error is HOPE's surprise.
    plot(app, "cmp selfmod", "self-modifying memory M: target error before the write",
         overlay([&](const TimelineCache& c) -> const std::vector<float>& { return c.selfmod_error(l, kSelfModMemories - 1); }), markers,
         height);
    // Effective retention (SPEC §8): the hope block's preconditioner, or a dgd memory layer's map.
    plot(app, "cmp retention", "effective retention: smallest eigenvalue",
         overlay([&](const TimelineCache& c) -> const std::vector<float>& {
           const auto& selfmod = c.selfmod_retention(l, 0);
           return selfmod.empty() ? c.head(l, h, HeadMetric::RetainMin) : selfmod;
         }),
         markers, height);
    if (cms_levels > 0) {
      const std::string title = "CMS level " + std::to_string(view.cms_level) + ": state norm";
      plot(app, "cmp cms", title.c_str(),
           overlay([&](const TimelineCache& c) -> const std::vector<float>& { return c.cms_norm(l, view.cms_level); },
                   static_cast<uint64_t>(view.cms_level) + 1),
           markers, height);
    }
  }
}

}  // namespace memscope::app
