// The CPUs a cgroup quota lets this process keep busy (issue 20's spare-core rule, SideThread). A
// container may cap CPU time (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`) without narrowing the
// affinity mask; a thread stepping ahead there only takes time from the engine thread while both
// spin for each other.
#pragma once
#include <optional>
#include <string>

namespace memscope::model {

// The quota of this process's cgroup in whole CPUs, rounded down and at least 1; none when there
// is no quota or it cannot be read. Reads the cgroup named in /proc/self/cgroup under the usual
// mounts (/sys/fs/cgroup for v2; /sys/fs/cgroup/cpu and cpu,cpuacct for v1), and the mount's root,
// which is a container's own cgroup. A quota set only on an ancestor cgroup is not seen.
std::optional<int> cgroup_cpu_limit();

// The parsers behind it, for tests. `cpu.max` holds "QUOTA PERIOD" or "max PERIOD"; v1 keeps them
// in two files, with a quota of -1 for none. Both give CPUs (quota / period), none where unlimited
// or malformed.
std::optional<double> cpus_from_cpu_max(const std::string& cpu_max);
std::optional<double> cpus_from_cfs(const std::string& quota_us, const std::string& period_us);

}  // namespace memscope::model
