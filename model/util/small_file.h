// A small file read whole: the kernel's views of this machine (/proc/meminfo, a cgroup's limits),
// which say what the process may use (cpu_quota.h, host_memory.h).
#pragma once
#include <optional>
#include <string>

namespace memscope::model {

// The file's text; none where it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path);

}  // namespace memscope::model
