#include "viz/heatmap.h"

#include <GL/gl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "viz/theme.h"

namespace memscope::viz {
namespace {

constexpr float kColorbarWidth = 14.0f;
constexpr float kColorbarLabelWidth = 58.0f;

ImU32 to_imgui(const Rgba8& c) { return IM_COL32(c.r, c.g, c.b, c.a); }

void format_value(char* buffer, std::size_t size, float v) {
  if (std::isnan(v))
    std::snprintf(buffer, size, "NaN");
  else if (std::isinf(v))
    std::snprintf(buffer, size, v > 0 ? "+Inf" : "-Inf");
  else
    std::snprintf(buffer, size, "%.4g", v);
}

}  // namespace

void colorize(const float* values, std::size_t count, const Colormap& map, ValueRange range, Rgba8* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = map.map(values[i], range.lo, range.hi);
}

Heatmap::~Heatmap() {
  if (texture_) glDeleteTextures(1, &texture_);
}

void Heatmap::set_data(const float* values, int rows, int cols, const HeatmapOptions& options) {
  const std::size_t count = static_cast<std::size_t>(std::max(rows, 0)) * std::max(cols, 0);
  values_.assign(values, values + count);
  options_ = options;
  stats_ = finite_stats(values_.data(), count);
  range_ = choose_range(stats_, options.scale, options.locked);
  pixels_.resize(count);
  colorize(values_.data(), count, colormap(options.colormap), range_, pixels_.data());

  if (!texture_) {
    glGenTextures(1, &texture_);
    glBindTexture(GL_TEXTURE_2D, texture_);
    // Nearest: each cell stays a crisp square however far the matrix is scaled.
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  }
  glBindTexture(GL_TEXTURE_2D, texture_);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  if (rows == rows_ && cols == cols_)
    glTexSubImage2D(GL_TEXTURE_2D, 0, 0, 0, cols, rows, GL_RGBA, GL_UNSIGNED_BYTE, pixels_.data());
  else
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, cols, rows, 0, GL_RGBA, GL_UNSIGNED_BYTE, pixels_.data());
  rows_ = rows;
  cols_ = cols;
}

bool Heatmap::draw(const char* id, ImVec2 size) {
  ImGui::PushID(id);
  const float bar = options_.colorbar ? kColorbarWidth + kColorbarLabelWidth : 0.0f;
  const ImVec2 matrix_size{std::max(size.x - bar, 1.0f), std::max(size.y, 1.0f)};
  const ImVec2 top_left = ImGui::GetCursorScreenPos();
  bool clicked = false;
  if (texture_ && rows_ > 0 && cols_ > 0) {
    ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<std::intptr_t>(texture_)), matrix_size);
    clicked = ImGui::IsItemClicked();
    if (ImGui::IsItemHovered()) {
      const ImVec2 mouse = ImGui::GetIO().MousePos;
      const int col = std::clamp(static_cast<int>((mouse.x - top_left.x) / matrix_size.x * cols_), 0, cols_ - 1);
      const int row = std::clamp(static_cast<int>((mouse.y - top_left.y) / matrix_size.y * rows_), 0, rows_ - 1);
      char value[32];
      format_value(value, sizeof value, values_[static_cast<std::size_t>(row) * cols_ + col]);
      ImGui::BeginTooltip();
      if (static_cast<std::size_t>(row) < options_.row_labels.size())
        ImGui::Text("%s, col %d: %s", options_.row_labels[static_cast<std::size_t>(row)].c_str(), col, value);
      else
        ImGui::Text("row %d, col %d: %s", row, col, value);
      if (stats_.nan || stats_.inf)
        ImGui::TextColored(colors::error(), "%zu NaN, %zu Inf in this matrix", stats_.nan, stats_.inf);
      ImGui::EndTooltip();
    }
  } else {
    ImGui::Dummy(matrix_size);
  }
  if (options_.colorbar) draw_colorbar({top_left.x + matrix_size.x + 4.0f, top_left.y}, {kColorbarWidth, matrix_size.y});
  ImGui::PopID();
  return clicked;
}

void Heatmap::draw_colorbar(ImVec2 top_left, ImVec2 size) const {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const Colormap& map = colormap(options_.colormap);
  constexpr int kSegments = 16;  // gradient quads: 16 × 4 vertices, whatever the matrix size
  const float h = size.y / kSegments;
  for (int s = 0; s < kSegments; ++s) {
    // Top is the high end of the range.
    const ImU32 top = to_imgui(map.at(1.0f - static_cast<float>(s) / kSegments));
    const ImU32 bottom = to_imgui(map.at(1.0f - static_cast<float>(s + 1) / kSegments));
    draw->AddRectFilledMultiColor({top_left.x, top_left.y + s * h}, {top_left.x + size.x, top_left.y + (s + 1) * h},
                                  top, top, bottom, bottom);
  }
  char label[32];
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float x = top_left.x + size.x + 3.0f;
  format_value(label, sizeof label, range_.hi);
  draw->AddText({x, top_left.y}, text, label);
  format_value(label, sizeof label, range_.lo);
  draw->AddText({x, top_left.y + size.y - ImGui::GetFontSize()}, text, label);
}

}  // namespace memscope::viz
