#include "viz/token_strip.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <imgui_internal.h>  // GImGui->ActiveIdWindow: is this strip's scrollbar being dragged

#include "viz/theme.h"

namespace memscope::viz {
namespace {

constexpr float kGap = 2.0f;      // background between cells keeps neighbouring tokens apart
constexpr float kTextPad = 3.0f;
constexpr float kOutline = 2.0f;  // the current cell's outline, drawn inside the cell
constexpr float kRoleBar = 4.0f;  // the role bar along a cell's top

ImU32 to_imgui(const Rgba8& c) { return IM_COL32(c.r, c.g, c.b, c.a); }

// Dark text on the bright end of viridis, light text on the dark end: readable on every cell.
ImU32 text_color_on(const Rgba8& c) {
  const float luma = 0.299f * c.r + 0.587f * c.g + 0.114f * c.b;
  return luma > 140.0f ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
}

// Four filled rectangles rather than a stroked one: a stroke is anti-aliased across two pixels,
// filled edges land on whole pixels.
void outline(ImDrawList* draw, ImVec2 a, ImVec2 b, float t, ImU32 color) {
  draw->AddRectFilled(a, {b.x, a.y + t}, color);
  draw->AddRectFilled({a.x, b.y - t}, b, color);
  draw->AddRectFilled({a.x, a.y + t}, {a.x + t, b.y - t}, color);
  draw->AddRectFilled({b.x - t, a.y + t}, {b.x, b.y - t}, color);
}

// From the back: the current token is usually among the newest.
std::ptrdiff_t find_step(const std::vector<TokenCell>& cells, long long step) {
  for (std::size_t i = cells.size(); i-- > 0;)
    if (cells[i].step == step) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

}  // namespace

std::string readable_token_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char escape[5];
      std::snprintf(escape, sizeof escape, "\\x%02x", c);
      out += escape;
    } else {
      out += ch;  // printable ASCII, or UTF-8 that the font draws (or shows as '?')
    }
  }
  return out;
}

void draw_surprise_scale(ValueRange range, float width) {
  const Colormap& viridis = colormap(ColormapKind::Viridis);
  char lo[32], hi[32];
  std::snprintf(lo, sizeof lo, "%.3g", range.lo);
  std::snprintf(hi, sizeof hi, "%.3g", range.hi);
  ImGui::TextUnformatted(lo);
  ImGui::SameLine();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const float height = ImGui::GetTextLineHeight();
  ImDrawList* draw = ImGui::GetWindowDrawList();
  constexpr int kSteps = 32;
  for (int i = 0; i < kSteps; ++i) {
    const float x0 = at.x + width * i / kSteps, x1 = at.x + width * (i + 1) / kSteps;
    draw->AddRectFilled({x0, at.y + 2.0f}, {x1, at.y + height - 2.0f}, to_imgui(viridis.at((i + 0.5f) / kSteps)));
  }
  ImGui::Dummy({width, height});
  ImGui::SameLine();
  ImGui::TextUnformatted(hi);
}

std::ptrdiff_t draw_token_strip(const char* id, const std::vector<TokenCell>& cells, long long current_step,
                                ValueRange surprise_range, const std::function<void(std::size_t)>& tooltip,
                                ImVec2 size, float cell_width) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float width = std::floor(cell_width > 0.0f ? cell_width : ImGui::CalcTextSize("00000").x + 2.0f * kTextPad);
  const float pitch = width + kGap;
  const float cells_height = std::max(std::floor(size.y - style.ScrollbarSize), ImGui::GetFontSize() + 2.0f * kOutline);
  const std::ptrdiff_t current = find_step(cells, current_step);

  ImGui::PushID(id);
  ImGuiStorage* storage = ImGui::GetStateStorage();
  const ImGuiID held_key = ImGui::GetID("held");
  // SetNextWindowScroll takes effect in this frame's BeginChild, so the outline never lags a step.
  if (current >= 0 && !storage->GetBool(held_key, false))
    ImGui::SetNextWindowScroll({std::max(0.0f, current * pitch + 0.5f * (width - size.x)), -1.0f});
  ImGui::BeginChild("cells", size, false, ImGuiWindowFlags_HorizontalScrollbar | ImGuiWindowFlags_NoScrollWithMouse);

  const ImVec2 start = ImGui::GetCursorScreenPos();  // already shifted by the scroll
  const ImVec2 origin{std::floor(start.x), std::floor(start.y)};
  const float scroll = ImGui::GetScrollX();
  const std::size_t n = cells.size();
  ImGui::Dummy({n ? n * pitch - kGap : 0.0f, cells_height});  // the scrollable extent

  const ImGuiIO& io = ImGui::GetIO();
  const bool window_hovered = ImGui::IsWindowHovered(ImGuiHoveredFlags_AllowWhenBlockedByActiveItem);
  const bool scrollbar_held = ImGui::GetActiveID() != 0 && GImGui->ActiveIdWindow == ImGui::GetCurrentWindow();
  storage->SetBool(held_key, window_hovered || scrollbar_held);
  if (ImGui::IsWindowHovered() && io.MouseWheel != 0.0f) ImGui::SetScrollX(scroll - io.MouseWheel * pitch * 3.0f);

  std::ptrdiff_t hovered = -1;
  if (ImGui::IsWindowHovered() && io.MousePos.x >= origin.x && io.MousePos.y >= origin.y &&
      io.MousePos.y < origin.y + cells_height) {
    const auto i = static_cast<std::size_t>((io.MousePos.x - origin.x) / pitch);
    if (i < n && io.MousePos.x - origin.x - i * pitch < width) hovered = static_cast<std::ptrdiff_t>(i);
  }

  // Only the cells in view are drawn: the vertex count depends on the strip's width, not on n.
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const Colormap& viridis = colormap(ColormapKind::Viridis);
  const ImU32 accent = ImGui::ColorConvertFloat4ToU32(colors::accent());
  const std::size_t begin = static_cast<std::size_t>(std::max(0.0f, std::floor(scroll / pitch)));
  const std::size_t end = std::min(n, static_cast<std::size_t>(std::ceil((scroll + size.x) / pitch)) + 1);
  for (std::size_t i = begin; i < end; ++i) {
    const TokenCell& cell = cells[i];
    const ImVec2 a{origin.x + i * pitch, origin.y}, b{a.x + width, origin.y + cells_height};
    const Rgba8 fill = std::isnan(cell.surprise)
                           ? no_surprise_color()
                           : viridis.map(cell.surprise, surprise_range.lo, surprise_range.hi);
    draw->AddRectFilled(a, b, to_imgui(fill));
    if (cell.role.a > 0) draw->AddRectFilled(a, {b.x, a.y + kRoleBar}, to_imgui(cell.role));

    const std::string label = readable_token_text(cell.text);
    const ImVec2 text_size = ImGui::CalcTextSize(label.data(), label.data() + label.size());
    // Centred when it fits; otherwise it starts at the left and is clipped at the cell's edge.
    const float tx = text_size.x <= width - 2.0f * kTextPad ? a.x + std::floor(0.5f * (width - text_size.x))
                                                            : a.x + kTextPad;
    const float ty = a.y + std::floor(0.5f * (cells_height - text_size.y));
    const ImVec4 clip{a.x + 1.0f, a.y, b.x - 1.0f, b.y};
    draw->AddText(nullptr, 0.0f, {tx, ty}, text_color_on(fill), label.data(), label.data() + label.size(), 0.0f, &clip);

    if (static_cast<std::ptrdiff_t>(i) == current)
      outline(draw, a, b, kOutline, accent);
    else if (static_cast<std::ptrdiff_t>(i) == hovered)
      outline(draw, a, b, 1.0f, ImGui::GetColorU32(ImGuiCol_Text));
  }

  std::ptrdiff_t clicked = -1;
  if (hovered >= 0) {
    const TokenCell& cell = cells[static_cast<std::size_t>(hovered)];
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(readable_token_text(cell.text).c_str());
    ImGui::TextColored(colors::muted(), "step %lld", cell.step);
    if (std::isnan(cell.surprise))
      ImGui::TextColored(colors::muted(), "surprise: none");
    else
      ImGui::Text("surprise %.4g", cell.surprise);
    if (tooltip) {
      ImGui::Separator();
      tooltip(static_cast<std::size_t>(hovered));
    }
    ImGui::EndTooltip();
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) clicked = hovered;
  }
  ImGui::EndChild();
  ImGui::PopID();
  return clicked;
}

}  // namespace memscope::viz
