// The heap settings every binary starts with (model/util/allocator.h): the heap is advised
// transparent huge pages as it grows, once advise_heap_growth() has seen the growth.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "model/util/allocator.h"

using namespace memscope::model;

namespace {

// The VmFlags of the mapping of /proc/self/smaps that holds `address`; empty when none does.
std::string vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> from >> dash >> to && dash == '-') {
      inside = from <= at && at < to;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return {};
}

bool has_flag(const std::string& flags, const std::string& flag) {
  return (flags + " ").find(" " + flag + " ") != std::string::npos;
}

}  // namespace

TEST_CASE("the heap is advised huge pages from the start, and where it grows", "[model]") {
#if !defined(__GLIBC__) || defined(__SANITIZE_ADDRESS__)
  SUCCEED("glibc's heap only");
#else
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    SUCCEED("this kernel has no transparent huge pages");
    return;
  }
  const char* setting = std::getenv("MEMSCOPE_HEAP_HUGE_PAGES");
  if (setting && std::string(setting) == "0") {
    SUCCEED("MEMSCOPE_HEAP_HUGE_PAGES=0: the heap is left as the kernel gives it");
    return;
  }
  keep_large_blocks_in_heap();
  // 96 MB, under the mmap threshold: the heap grows for it, its pages untouched.
  void* block = std::malloc(std::size_t{96} << 20);
  REQUIRE(block != nullptr);
  const void* middle = static_cast<char*>(block) + (48 << 20);
  const std::string before = vm_flags_at(middle);
  INFO("before: " << before);
  CHECK_FALSE(has_flag(before, "hg"));  // the growth is not advised by itself
  advise_heap_growth();
  const std::string after = vm_flags_at(middle);
  INFO("after: " << after);
  CHECK(has_flag(after, "hg"));
  std::free(block);
#endif
}
