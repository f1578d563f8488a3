#include "viz/theme.h"

#include <imgui.h>

namespace memscope::viz {

void apply_theme() {
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0.0f;
  style.ChildRounding = 4.0f;
  style.FrameRounding = 3.0f;
  style.GrabRounding = 3.0f;
  style.WindowPadding = {8, 8};
  style.FramePadding = {6, 4};
  style.ItemSpacing = {8, 6};
  style.CellPadding = {4, 3};
  ImVec4* c = style.Colors;
  c[ImGuiCol_WindowBg] = {0.09f, 0.10f, 0.12f, 1.0f};
  c[ImGuiCol_ChildBg] = {0.12f, 0.13f, 0.16f, 1.0f};
  c[ImGuiCol_Border] = {0.22f, 0.24f, 0.29f, 1.0f};
  c[ImGuiCol_FrameBg] = {0.17f, 0.19f, 0.23f, 1.0f};
  c[ImGuiCol_Header] = {0.20f, 0.30f, 0.45f, 1.0f};
  c[ImGuiCol_Button] = {0.19f, 0.27f, 0.40f, 1.0f};
  c[ImGuiCol_ButtonHovered] = {0.25f, 0.37f, 0.55f, 1.0f};
  c[ImGuiCol_ButtonActive] = {0.30f, 0.45f, 0.66f, 1.0f};
  c[ImGuiCol_TableHeaderBg] = {0.15f, 0.17f, 0.21f, 1.0f};
}

namespace colors {
ImVec4 accent() { return {0.45f, 0.72f, 1.00f, 1.0f}; }
ImVec4 muted() { return {0.55f, 0.58f, 0.64f, 1.0f}; }
ImVec4 warning() { return {1.00f, 0.75f, 0.30f, 1.0f}; }
ImVec4 error() { return {1.00f, 0.38f, 0.38f, 1.0f}; }
}  // namespace colors

}  // namespace memscope::viz
