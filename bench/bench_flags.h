// The bench programs' flags: "--name value" pairs, each bound to a variable; a repeatable flag
// binds to a vector. An unknown flag or a missing value prints one line and parse() returns false.
#pragma once
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace memscope::bench {

class BenchFlags {
 public:
  explicit BenchFlags(std::string program) : program_(std::move(program)) {}

  BenchFlags& add(const std::string& flag, std::string& value) {
    setters_[flag] = [&value](const std::string& v) { value = v; };
    return *this;
  }
  BenchFlags& add(const std::string& flag, int64_t& value) {
    setters_[flag] = [&value](const std::string& v) { value = std::stoll(v); };
    return *this;
  }
  BenchFlags& add(const std::string& flag, int& value) {
    setters_[flag] = [&value](const std::string& v) { value = std::stoi(v); };
    return *this;
  }
  BenchFlags& add(const std::string& flag, std::vector<std::string>& values) {  // repeatable
    setters_[flag] = [&values](const std::string& v) { values.push_back(v); };
    return *this;
  }

  bool parse(int argc, char** argv) const {
    for (int i = 1; i < argc; i += 2) {
      const auto it = setters_.find(argv[i]);
      if (it == setters_.end() || i + 1 >= argc) {
        std::cerr << program_ << ": " << (it == setters_.end() ? "unknown flag " : "no value for ") << argv[i] << "\n";
        return false;
      }
      try {
        it->second(argv[i + 1]);
      } catch (const std::exception&) {
        std::cerr << program_ << ": " << argv[i] << " takes a number, got " << argv[i + 1] << "\n";
        return false;
      }
    }
    return true;
  }

 private:
  std::string program_;
  std::map<std::string, std::function<void(const std::string&)>> setters_;
};

}  // namespace memscope::bench
