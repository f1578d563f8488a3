#include "model/util/errors.h"

#include <cstdio>
#include <cstdlib>

namespace memscope::model {

std::string one_line(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  // c10::Error appends " (Exception raised from …)" on the same line in some builds.
  const auto where = line.find(" (Exception raised from");
  if (where != std::string::npos) line.erase(where);
  // LibTorch's allocator message names its source file and a byte count: say what it means.
  const auto tried = line.find("you tried to allocate ");
  if (line.find("can't allocate memory") != std::string::npos && tried != std::string::npos) {
    const double bytes = std::strtod(line.c_str() + tried + 22, nullptr);
    char text[200];
    std::snprintf(text, sizeof text,
                  "out of memory: one tensor of %.3g GiB could not be allocated (is a size knob such as "
                  "model.d_model, train.batch or task.* too large?)",
                  bytes / (1024.0 * 1024.0 * 1024.0));
    return text;
  }
  return line;
}

}  // namespace memscope::model
