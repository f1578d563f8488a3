#include "model/util/errors.h"

namespace memscope::model {

std::string one_line(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  // c10::Error appends " (Exception raised from …)" on the same line in some builds.
  const auto where = line.find(" (Exception raised from");
  if (where != std::string::npos) line.erase(where);
  return line;
}

}  // namespace memscope::model
