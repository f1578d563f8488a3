#include "model/util/host_memory.h"

#include <algorithm>
#include <sstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "model/util/small_block_cache.h"
#include "model/util/small_file.h"

namespace memscope::model {

namespace {

// One whole number, alone apart from whitespace.
std::optional<int64_t> whole_number(const std::string& text) {
  std::istringstream in(text);
  int64_t value = 0;
  std::string rest;
  if (!(in >> value) || (in >> rest) || value < 0) return std::nullopt;
  return value;
}

// The value of `key` in a "key value" list (memory.stat), 0 where it is missing.
int64_t stat_value(const std::string& stat, const std::string& key) {
  std::istringstream in(stat);
  for (std::string name; in >> name;) {
    int64_t value = 0;
    if (!(in >> value)) break;
    if (name == key) return value;
  }
  return 0;
}

// What this process holds free for its next allocations: glibc's free chunks and the block cache.
int64_t held_free_for_reuse() {
  int64_t bytes = static_cast<int64_t>(small_block_cache_stats().cached_bytes);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  bytes += static_cast<int64_t>(mallinfo2().fordblks);
#endif
  return bytes;
}

}  // namespace

std::optional<int64_t> mem_available_from_meminfo(const std::string& meminfo) {
  std::istringstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, unit;
    int64_t value = 0;
    if (!(fields >> name >> value) || name != "MemAvailable:") continue;
    fields >> unit;
    if (value < 0 || (unit != "kB" && !unit.empty())) return std::nullopt;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

std::optional<int64_t> cgroup_memory_room(const std::string& limit, const std::string& usage,
                                          const std::string& stat) {
  const auto l = whole_number(limit), u = whole_number(usage);
  if (!l || !u || *l >= (int64_t{1} << 62))
    return std::nullopt;  // "max", v1's page-rounded 2^63, or unreadable
  const int64_t reclaimable =
      std::max(stat_value(stat, "inactive_file"), stat_value(stat, "total_inactive_file"));
  return std::max<int64_t>(0, *l - *u + reclaimable);
}

std::optional<int64_t> host_memory_free() {
  const auto meminfo = read_small_file("/proc/meminfo");
  std::optional<int64_t> available = meminfo ? mem_available_from_meminfo(*meminfo) : std::nullopt;
  if (!available) return std::nullopt;
  struct Files {
    const char *limit, *usage, *stat;
  };
  for (const Files f :
       {Files{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"},
        Files{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
              "/sys/fs/cgroup/memory/memory.stat"}}) {
    const auto limit = read_small_file(f.limit), usage = read_small_file(f.usage);
    if (!limit || !usage) continue;
    if (const auto room = cgroup_memory_room(*limit, *usage, read_small_file(f.stat).value_or("")))
      available = std::min(*available, *room);
    break;
  }
  return *available + held_free_for_reuse();
}

}  // namespace memscope::model
