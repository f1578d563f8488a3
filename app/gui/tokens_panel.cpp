// The token strip (DESIGN "GUI" → Tokens): the probe stream's tokens with per-token surprise as
// the background, the shown step outlined; hover shows that token's metrics, click seeks. In train
// mode it shows the row of the batch being trained instead, coloured by each token's loss.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "app/gui/gui_app.h"
#include "app/gui/panels.h"
#include "model/config/preset.h"
#include "model/data/key_value_vocab.h"
#include "viz/theme.h"
#include "viz/token_strip.h"

namespace memscope::app {
namespace {

constexpr size_t kStripTokens = 512;  // the newest tokens the strip holds (it scrolls)

// A token as text: bytes of a text stream as characters; the recall tasks' ids as what they are
// (k12 a key, v3 a value, · filler; a query is a key with "?"); other tasks' ids as numbers.
std::string token_text(int64_t token, const model::TaskConfig& task, bool scored = false) {
  if (token < 0) return "-";
  if (task.kind == "text" && token < 256) return std::string(1, static_cast<char>(token));
  if (task.kind == "mqar" || task.kind == "needle") {
    const model::KeyValueVocab vocab{task.keys, task.values};
    return vocab.label(token) + (scored && vocab.is_key(token) ? "?" : "");
  }
  return "#" + std::to_string(token);
}

// The role bar of a recall task's token: key blue, value orange, query red (a key the model must
// answer: it has a target); filler and other tasks none.
viz::Rgba8 token_role(int64_t token, int64_t target, const model::TaskConfig& task) {
  if (task.kind != "mqar" && task.kind != "needle") return {0, 0, 0, 0};
  const model::KeyValueVocab vocab{task.keys, task.values};
  if (vocab.is_key(token)) return target >= 0 ? viz::Rgba8{235, 64, 52, 255} : viz::Rgba8{66, 135, 245, 255};
  if (vocab.is_value(token)) return {245, 166, 35, 255};
  return {0, 0, 0, 0};
}

// The strip's colour scale, its hint and the strip: `cells` coloured by their value, its range
// written beside `value_name`; none where no cell has a value. Returns the cell clicked, or -1.
std::ptrdiff_t draw_strip(GuiApp& app, const std::vector<viz::TokenCell>& cells, const char* value_name,
                          long long current_step, const std::function<void(std::size_t)>& tooltip) {
  viz::ValueRange range{0.0f, 0.0f};
  bool any = false;
  for (const auto& c : cells)
    if (std::isfinite(c.surprise)) {
      range.lo = any ? std::min(range.lo, c.surprise) : c.surprise;
      range.hi = any ? std::max(range.hi, c.surprise) : c.surprise;
      any = true;
    }
  if (range.hi <= range.lo) range.hi = range.lo + 1.0f;
  ImGui::SameLine();
  if (any) {
    ImGui::TextColored(viz::colors::muted(), "  %s", value_name);
    ImGui::SameLine();
    viz::draw_surprise_scale(range, 120.0f);
  } else {
    ImGui::TextColored(viz::colors::muted(), "  no %s measured here (no memory, or probes off)", value_name);
  }
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "  hover for metrics, click to seek");
  const auto clicked = viz::draw_token_strip("tokens", cells, current_step, range, tooltip, ImGui::GetContentRegionAvail());
  app.note_rect("tokens/strip");
  return clicked;
}

// Train mode (issue 19): row 0 of the batch the newest training step trained on, each target
// token coloured by its loss under the weights before the update.
void draw_training_batch(GuiApp& app, const TrainBatchRow& batch, const model::TaskConfig& task) {
  ImGui::TextColored(viz::colors::accent(), "Training batch");
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "row 0 of training step %lld; background = each target's loss before the update",
                     static_cast<long long>(batch.train_step));
  std::vector<viz::TokenCell> cells;
  cells.reserve(batch.tokens.size());
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    const int64_t target = i < batch.targets.size() ? batch.targets[i] : -1;
    const float loss = i < batch.loss.size() ? batch.loss[i] : std::numeric_limits<float>::quiet_NaN();
    cells.push_back({token_text(batch.tokens[i], task, target >= 0), loss, static_cast<long long>(batch.step),
                     token_role(batch.tokens[i], target, task)});
  }
  const auto tooltip = [&](size_t i) {
    ImGui::Text("position %zu  token %s  target %s", i, token_text(batch.tokens[i], task).c_str(),
                token_text(i < batch.targets.size() ? batch.targets[i] : -1, task).c_str());
    if (i < batch.loss.size() && std::isfinite(batch.loss[i])) ImGui::Text("loss %.4g", batch.loss[i]);
  };
  if (draw_strip(app, cells, "loss", static_cast<long long>(batch.step), tooltip) >= 0) app.seek(batch.step);
}

}  // namespace

void draw_tokens_panel(GuiApp& app) {
  const TimelineCache& cache = app.shown_cache();
  const auto& tokens = cache.tokens();
  const model::Preset& preset = app.main().status.preset;
  const model::TaskConfig& task = preset.task;
  // Train mode has only the batch to show; train+inspect has both, and a switch between them.
  const bool both = preset.engine.mode == model::EngineMode::TrainInspect && cache.train_batch().step >= 0;
  if (both) {
    bool& batch = app.view().strip_shows_batch;
    if (ImGui::RadioButton("probe stream", !batch)) batch = false;
    app.note_rect("tokens/show probe stream");
    ImGui::SameLine();
    if (ImGui::RadioButton("training batch", batch)) batch = true;
    app.note_rect("tokens/show training batch");
    ImGui::SameLine();
  }
  // A run with no token steps shows the batch whatever its preset says (a `memscope-cli train`
  // recording keeps the preset's engine.mode).
  const bool only_training = preset.engine.mode == model::EngineMode::Train || tokens.empty();
  if (cache.train_batch().step >= 0 && (only_training || (both && app.view().strip_shows_batch))) {
    draw_training_batch(app, cache.train_batch(), task);
    return;
  }
  const bool recall = task.kind == "mqar" || task.kind == "needle";
  ImGui::TextColored(viz::colors::accent(), "Tokens");
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), recall ? "top bar: key (blue), value (orange), query (red); background = surprise"
                                                  : "input stream; background = surprise (mean over layers and heads)");
  if (tokens.empty()) {
    ImGui::TextColored(viz::colors::muted(), "No tokens yet: inspect steps feed one token each (engine.mode inspect or train+inspect).");
    return;
  }
  const size_t first = tokens.size() > kStripTokens ? tokens.size() - kStripTokens : 0;
  std::vector<viz::TokenCell> cells;
  cells.reserve(tokens.size() - first);
  for (size_t i = first; i < tokens.size(); ++i) {
    const TokenEntry& t = tokens[i];
    cells.push_back({token_text(t.token, task, t.target >= 0), t.surprise, static_cast<long long>(t.step),
                     token_role(t.token, t.target, task)});
  }
  const auto tooltip = [&](size_t index) {
    const TokenEntry& t = tokens[first + index];
    ImGui::Text("sequence %lld  target %s  predicted %s", static_cast<long long>(t.sequence), token_text(t.target, task).c_str(),
                token_text(t.predicted, task).c_str());
    ImGui::Text("loss %.4g   surprise %.4g", t.loss, t.surprise);
    if (t.target >= 0)
      ImGui::TextColored(t.predicted == t.target ? viz::colors::accent() : viz::colors::warning(),
                         t.predicted == t.target ? "recalled" : "missed");
  };
  const auto clicked = draw_strip(app, cells, "surprise", static_cast<long long>(app.shown_step()), tooltip);
  if (clicked >= 0) app.seek(tokens[first + static_cast<size_t>(clicked)].step);
}

}  // namespace memscope::app
