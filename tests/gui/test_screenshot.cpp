// The real memscope window under a real X server (Xvfb in scripts/test): render frames, save a
// screenshot, and check its pixels show the layout rather than a blank or uniform window.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <unistd.h>

#include "gui/png_image.h"
#include "support/run_process.h"
#include "support/temp_files.h"

using memscope::test::load_png;
using memscope::test::run_process;

namespace {

// TMPDIR/memscope-screenshot-PID/NAME.png, the directory removed when this process exits.
std::string temp_png(const char* name) {
  static const auto dir = memscope::test::fresh_dir("screenshot");
  return (dir / (std::string(name) + ".png")).string();
}

}  // namespace

TEST_CASE("memscope --screenshot saves the window with its layout drawn", "[gui]") {
  REQUIRE(std::getenv("DISPLAY") != nullptr);  // scripts/test runs the GUI tests under xvfb-run
  const std::string path = temp_png("layout");
  auto result = run_process({MEMSCOPE_GUI_BINARY, "--screenshot", path, "--frames", "5", "--width", "1280", "--height", "800"});
  INFO(result.output);
  REQUIRE(result.exit_code == 0);

  const auto image = load_png(path);
  CHECK(image.width == 1280);
  CHECK(image.height == 800);

  // A drawn layout has text, borders and panel backgrounds: many distinct colours, and no
  // single colour covering (nearly) everything.
  std::map<unsigned, int> histogram;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) ++histogram[image.pixel(x, y)];
  unsigned background = 0;
  int most = 0;
  for (const auto& [color, count] : histogram)
    if (count > most) most = count, background = color;
  CHECK(histogram.size() > 20);
  CHECK(most < image.width * image.height * 97 / 100);

  // Each band of the layout (transport on top, the three panels, tokens and status at the
  // bottom) has something drawn in it, not just background.
  auto drawn_in_rows = [&](int y0, int y1) {
    int drawn = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < image.width; ++x) drawn += image.pixel(x, y) != background;
    return drawn;
  };
  CHECK(drawn_in_rows(0, 50) > 500);                                // transport
  CHECK(drawn_in_rows(50, 110) > 500);                              // panel headings
  CHECK(drawn_in_rows(image.height - 110, image.height) > 500);     // tokens + status
  std::remove(path.c_str());
}

TEST_CASE("memscope bad arguments give one clear line and a non-zero exit", "[gui]") {
  for (auto args : std::vector<std::vector<std::string>>{
           {MEMSCOPE_GUI_BINARY, "--frames", "0"},
           {MEMSCOPE_GUI_BINARY, "--bogus"},
           {MEMSCOPE_GUI_BINARY, "--width", "wide"},
       }) {
    auto result = run_process(args);
    INFO(result.output);
    CHECK(result.exit_code == 2);
    CHECK(memscope::test::count_lines(result.output) == 1);
    CHECK_THAT(result.output, Catch::StartsWith("memscope: "));
  }
}

TEST_CASE("memscope reports an unwritable screenshot path in one line", "[gui]") {
  REQUIRE(std::getenv("DISPLAY") != nullptr);
  auto result = run_process({MEMSCOPE_GUI_BINARY, "--screenshot", "/nonexistent-dir/x.png", "--frames", "1"});
  CHECK(result.exit_code == 1);
  CHECK(memscope::test::count_lines(result.output) == 1);
  CHECK_THAT(result.output, Catch::Contains("/nonexistent-dir/x.png"));
}

TEST_CASE("a preset with a 30 MB description opens and draws (the text is clipped, not laid out whole)", "[gui]") {
  REQUIRE(std::getenv("DISPLAY") != nullptr);
  const std::string preset = temp_png("huge-description") + ".toml";
  {
    FILE* f = std::fopen(preset.c_str(), "w");
    REQUIRE(f);
    std::fputs("inherits = \"demo-mqar\"\ndescription = \"", f);
    const std::string line(1000, 'x');
    for (int i = 0; i < 30 * 1000; ++i) std::fputs(line.c_str(), f);  // 30 MB on one line
    std::fputs("\"\n", f);
    std::fclose(f);
  }
  const std::string path = temp_png("huge-description");
  auto result = run_process({MEMSCOPE_GUI_BINARY, "--preset", preset, "--screenshot", path, "--frames", "3", "--width",
                             "1280", "--height", "800"});
  INFO(result.output);
  CHECK(result.exit_code == 0);  // the sweep saw a segfault inside the GL driver here
  CHECK(load_png(path).width == 1280);
  std::remove(preset.c_str());
}
