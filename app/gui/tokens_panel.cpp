// The token strip (DESIGN "GUI" → Tokens): the probe stream's tokens with per-token surprise as
// the background, the shown step outlined; hover shows that token's metrics, click seeks.
#include <imgui.h>

#include <algorithm>
#include <cmath>

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

}  // namespace

void draw_tokens_panel(GuiApp& app) {
  const TimelineCache& cache = app.shown_cache();
  const auto& tokens = cache.tokens();
  const model::TaskConfig& task = app.main().status.preset.task;
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
  viz::ValueRange range{0.0f, 0.0f};
  bool any = false;
  for (size_t i = first; i < tokens.size(); ++i) {
    const TokenEntry& t = tokens[i];
    cells.push_back({token_text(t.token, task, t.target >= 0), t.surprise, static_cast<long long>(t.step),
                     token_role(t.token, t.target, task)});
    if (std::isfinite(t.surprise)) {
      range.lo = any ? std::min(range.lo, t.surprise) : t.surprise;
      range.hi = any ? std::max(range.hi, t.surprise) : t.surprise;
      any = true;
    }
  }
  if (range.hi <= range.lo) range.hi = range.lo + 1.0f;
  // The colours' scale: the strip's surprise range, low to high; none where nothing measures it.
  ImGui::SameLine();
  if (any) {
    ImGui::TextColored(viz::colors::muted(), "  surprise");
    ImGui::SameLine();
    viz::draw_surprise_scale(range, 120.0f);
  } else {
    ImGui::TextColored(viz::colors::muted(), "  no surprise measured here (no memory, or probes off)");
  }
  ImGui::SameLine();
  ImGui::TextColored(viz::colors::muted(), "  hover for metrics, click to seek");
  const auto tooltip = [&](size_t index) {
    const TokenEntry& t = tokens[first + index];
    ImGui::Text("sequence %lld  target %s  predicted %s", static_cast<long long>(t.sequence), token_text(t.target, task).c_str(),
                token_text(t.predicted, task).c_str());
    ImGui::Text("loss %.4g   surprise %.4g", t.loss, t.surprise);
    if (t.target >= 0)
      ImGui::TextColored(t.predicted == t.target ? viz::colors::accent() : viz::colors::warning(),
                         t.predicted == t.target ? "recalled" : "missed");
  };
  const auto clicked = viz::draw_token_strip("tokens", cells, static_cast<long long>(app.shown_step()), range, tooltip,
                                             ImGui::GetContentRegionAvail());
  app.note_rect("tokens/strip");
  if (clicked >= 0) app.seek(tokens[first + static_cast<size_t>(clicked)].step);
}

}  // namespace memscope::app
