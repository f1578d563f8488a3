// Files for tests that run the real programs: a fresh directory per test and process, removed when
// that process exits, and a file's whole text.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace memscope::test {

namespace detail {

// The directories fresh_dir made, removed at exit by the process that made them: a forked child
// that leaves through exit() must not delete its parent's files. Each test run had left about
// 9 MB of sessions and checkpoints under /tmp. MEMSCOPE_KEEP_TEST_FILES=1 keeps them, to look at
// after a failure.
struct MadeDirs {
  std::vector<std::filesystem::path> dirs;
  pid_t owner = ::getpid();
  ~MadeDirs() {
    const char* keep = std::getenv("MEMSCOPE_KEEP_TEST_FILES");
    if (::getpid() != owner || (keep != nullptr && *keep != '\0' && std::string(keep) != "0")) return;
    std::error_code ignored;
    for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }
};

inline MadeDirs& made_dirs() {
  static MadeDirs dirs;
  return dirs;
}

}  // namespace detail

// TMPDIR/memscope-NAME-PID, emptied; removed when this process exits.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("memscope-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  detail::made_dirs().dirs.push_back(dir);
  return dir;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace memscope::test
