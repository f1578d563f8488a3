#include "viz/timeline_scrubber.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "viz/theme.h"

namespace memscope::viz {
namespace {

constexpr float kTickInset = 3.0f;      // ticks stop short of the edges so the cursor stands out
constexpr float kHoverRadius = 3.0f;    // pixels either side of the mouse whose ticks are listed
constexpr std::size_t kMaxHoverLabels = 8;
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// Whether tick a should replace tick b (drawn earlier in the same column): see the header's rule.
bool outranks(const TimelineTick& a, const TimelineTick& b) { return a.severity >= b.severity; }

}  // namespace

double draw_timeline_scrubber(const char* id, double first, double last, double current,
                              const std::vector<TimelineTick>& ticks, ImVec2 size) {
  ImGui::PushID(id);
  const int columns = std::max(2, static_cast<int>(size.x));
  const float height = std::max(size.y, 2.0f * kTickInset + 1.0f);
  // Whole-pixel origin: each step maps to exactly one pixel column, with no blending into the next.
  const ImVec2 cursor = ImGui::GetCursorScreenPos();
  const ImVec2 origin{std::floor(cursor.x), std::floor(cursor.y)};
  ImGui::InvisibleButton("timeline", {static_cast<float>(columns), height});
  const bool hovered = ImGui::IsItemHovered();
  const bool active = ImGui::IsItemActive();

  const double span = last > first ? last - first : 1.0;
  const auto column_of = [&](double step) { return (step - first) / span * (columns - 1); };
  const auto step_at = [&](float x) {
    const double t = std::clamp(static_cast<double>(x - origin.x) / (columns - 1), 0.0, 1.0);
    return std::round(first + t * span);
  };

  ImDrawList* draw = ImGui::GetWindowDrawList();
  const float top = origin.y, bottom = origin.y + height;
  draw->AddRectFilled(origin, {origin.x + columns, bottom}, ImGui::GetColorU32(ImGuiCol_FrameBg));

  // One winner per pixel column, so 100k events cost one pass and at most `columns` quads.
  std::vector<std::size_t> winner(static_cast<std::size_t>(columns), kNone);
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double c = column_of(ticks[i].step);
    if (!(c >= -0.5 && c < columns - 0.5)) continue;  // also drops NaN steps
    std::size_t& w = winner[static_cast<std::size_t>(std::lround(c))];
    if (w == kNone || outranks(ticks[i], ticks[w])) w = i;
  }
  for (int c = 0; c < columns; ++c)
    if (winner[c] != kNone)
      draw->AddRectFilled({origin.x + c, top + kTickInset}, {origin.x + c + 1, bottom - kTickInset},
                          ticks[winner[c]].color);

  const ImU32 accent = ImGui::ColorConvertFloat4ToU32(colors::accent());
  if (std::isfinite(current) && current >= first && current <= last) {
    const float x = origin.x + static_cast<float>(std::lround(column_of(current)));
    // A dark column either side keeps the cursor visible over dense ticks of any colour.
    draw->AddRectFilled({x - 2, top}, {x + 3, bottom}, ImGui::GetColorU32(ImGuiCol_WindowBg));
    draw->AddRectFilled({x - 1, top}, {x + 2, bottom}, accent);
  }

  double seek = std::numeric_limits<double>::quiet_NaN();
  if (hovered || active) {
    const float mouse_x = ImGui::GetIO().MousePos.x;
    const double step = step_at(mouse_x);
    if (active && (ImGui::IsItemActivated() || ImGui::GetIO().MouseDelta.x != 0.0f)) seek = step;
    if (hovered) {
      const float x = origin.x + static_cast<float>(std::lround(column_of(step)));
      draw->AddRectFilled({x, top}, {x + 1, bottom}, ImGui::GetColorU32(ImGuiCol_TextDisabled));
      ImGui::BeginTooltip();
      ImGui::Text("step %.0f", step);
      std::size_t listed = 0, more = 0;
      for (const auto& tick : ticks) {
        const double c = column_of(tick.step);
        if (!(std::abs(origin.x + c - mouse_x) <= kHoverRadius)) continue;
        if (listed == kMaxHoverLabels) {
          ++more;
          continue;
        }
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(tick.color), "%.0f  %s", tick.step, tick.label ? tick.label : "");
        ++listed;
      }
      if (more) ImGui::TextColored(colors::muted(), "and %zu more here", more);
      ImGui::EndTooltip();
    }
  }
  ImGui::PopID();
  return seek;
}

}  // namespace memscope::viz
