// Loading a screenshot PNG back into RGB pixels, for the GUI tests that check what was drawn.
#pragma once
#include <catch2/catch.hpp>
#include <stb_image.h>

#include <string>
#include <vector>

namespace memscope::test {

struct PngImage {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  const unsigned char* at(int x, int y) const { return &rgb[(static_cast<std::size_t>(y) * width + x) * 3]; }
  unsigned pixel(int x, int y) const {  // 0xRRGGBB
    const unsigned char* p = at(x, y);
    return (p[0] << 16) | (p[1] << 8) | p[2];
  }
};

inline PngImage load_png(const std::string& path) {
  PngImage image;
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &image.width, &image.height, &channels, 3);
  REQUIRE(data != nullptr);
  image.rgb.assign(data, data + static_cast<std::size_t>(image.width) * image.height * 3);
  stbi_image_free(data);
  return image;
}

}  // namespace memscope::test
