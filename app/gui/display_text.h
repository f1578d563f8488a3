// Text that comes from files (a preset's description, a received session's event messages) is
// drawn with a bound. ImGui lays out every glyph of a string it is given: a 30 MB description
// became a vertex buffer that crashed the GL driver (issue 17), so a file someone sends you could
// crash the viewer.
#pragma once
#include <string>

namespace memscope::app {

// `text` cut to at most `max_bytes` and `max_lines` lines (at a UTF-8 character boundary), with a
// note of how much was left out; unchanged when it fits.
inline std::string clipped_for_display(const std::string& text, size_t max_bytes = 4096, int max_lines = 24) {
  size_t end = 0;
  int lines = 0;
  while (end < text.size() && end < max_bytes) {
    if (text[end] == '\n' && ++lines >= max_lines) break;
    ++end;
  }
  if (end >= text.size()) return text;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // not inside a character
  return text.substr(0, end) + " … (" + std::to_string(text.size() - end) + " more bytes not shown)";
}

}  // namespace memscope::app
