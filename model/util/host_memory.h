// How much memory this machine has free for a new piece of work (a training step's check that it
// fits, cpu_memory_watch.h): the kernel's estimate of what can be allocated without swapping,
// lowered to the room left under this container's cgroup limit, plus what this process already
// holds free for reuse (glibc's heap and memscope's block cache).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace memscope::model {

// Bytes free; none where the kernel does not say (not Linux). The cgroup read is the mount's root,
// which is a container's own cgroup (v2 memory.max, v1 memory.limit_in_bytes); a limit set only on
// an ancestor cgroup is not seen.
std::optional<int64_t> host_memory_free();

// The parsers behind it, for tests. /proc/meminfo's MemAvailable in bytes; and the room under a
// cgroup's limit: limit less usage, with the reclaimable page cache (the memory.stat entry
// `inactive_file`, v1 `total_inactive_file`) counted as room. "max" or a v1 limit near 2^63 is no
// limit.
std::optional<int64_t> mem_available_from_meminfo(const std::string& meminfo);
std::optional<int64_t> cgroup_memory_room(const std::string& limit, const std::string& usage,
                                          const std::string& stat);

}  // namespace memscope::model
