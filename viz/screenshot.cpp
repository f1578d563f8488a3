#include "viz/screenshot.h"

#include <GL/gl.h>
#include <stb_image_write.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace memscope::viz {

std::string save_framebuffer_png(const std::string& path, int width, int height) {
  if (width <= 0 || height <= 0) return "screenshot: the framebuffer is empty (" + std::to_string(width) + "x" + std::to_string(height) + ")";
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width) * height * 3);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  if (GLenum err = glGetError(); err != GL_NO_ERROR) return "screenshot: glReadPixels failed with GL error " + std::to_string(err);
  // GL's origin is the bottom-left corner; PNG rows go top to bottom.
  const std::size_t row = static_cast<std::size_t>(width) * 3;
  std::vector<unsigned char> flipped(pixels.size());
  for (int y = 0; y < height; ++y)
    std::memcpy(&flipped[static_cast<std::size_t>(height - 1 - y) * row], &pixels[static_cast<std::size_t>(y) * row], row);
  errno = 0;
  if (!stbi_write_png(path.c_str(), width, height, 3, flipped.data(), static_cast<int>(row)))
    return "screenshot: cannot write '" + path + "'" + (errno ? std::string(": ") + std::strerror(errno) : std::string());
  return {};
}

}  // namespace memscope::viz
