// What a token cell shows, without a window: every byte visible on one line, and a colour for
// "no surprise" that viridis never produces.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "viz/token_strip.h"

using namespace memscope::viz;

TEST_CASE("token text escapes control bytes and keeps printable text", "[viz]") {
  CHECK(readable_token_text("k12") == "k12");
  CHECK(readable_token_text("'a'") == "'a'");
  CHECK(readable_token_text("\n") == "\\n");
  CHECK(readable_token_text("a\tb\r") == "a\\tb\\r");
  CHECK(readable_token_text(std::string_view("\0\x01\x7f", 3)) == "\\x00\\x01\\x7f");
  CHECK(readable_token_text("caf\xc3\xa9") == "caf\xc3\xa9");  // UTF-8 passes through for the font
  CHECK(readable_token_text("").empty());
}

TEST_CASE("the missing-surprise grey is no colour of the viridis map", "[viz]") {
  const Rgba8 grey = no_surprise_color();
  for (const Rgba8& c : colormap(ColormapKind::Viridis).table()) {
    const int distance = std::abs(c.r - grey.r) + std::abs(c.g - grey.g) + std::abs(c.b - grey.b);
    REQUIRE(distance > 30);
  }
}
