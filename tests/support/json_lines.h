// Parses a program's output as JSON lines (the CLI's piped format); throws if a line is not JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace memscope::test {

inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace memscope::test
