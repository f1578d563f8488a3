#include "model/util/small_file.h"

#include <fstream>
#include <sstream>

namespace memscope::model {

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace memscope::model
