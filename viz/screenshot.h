// Saving what the window shows as a PNG: how every GUI test and README picture is made.
#pragma once
#include <string>

namespace memscope::viz {

// Reads the current GL framebuffer (width × height pixels, origin bottom-left) and writes it to
// path as an RGB PNG, top row first. Returns an empty string on success, else one line saying
// what failed. Call after rendering and before swapping buffers.
std::string save_framebuffer_png(const std::string& path, int width, int height);

}  // namespace memscope::viz
