#include "model/util/cpu_quota.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "model/util/small_file.h"

namespace memscope::model {

namespace {

std::optional<double> ratio(double quota, double period) {
  if (!(quota > 0) || !(period > 0) || !std::isfinite(quota / period)) return std::nullopt;
  return quota / period;
}

// One number, alone apart from whitespace.
std::optional<double> number(const std::string& text) {
  std::istringstream in(text);
  double value = 0;
  std::string rest;
  if (!(in >> value) || (in >> rest)) return std::nullopt;
  return value;
}

// Where this process's cgroup of a hierarchy lies: its path for v2 (controllers "") or for the
// v1 hierarchy whose controllers include "cpu".
struct CgroupPaths {
  std::optional<std::string> v2, v1_cpu;
};

CgroupPaths own_cgroups() {
  CgroupPaths paths;
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.empty()) {
      paths.v2 = path;
      continue;
    }
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "cpu") paths.v1_cpu = path;
  }
  return paths;
}

// The directories to look in, in order: under each mount, the cgroup's own directory first, then
// the mount's root (a container sees its cgroup there).
std::vector<std::string> directories(const std::vector<std::string>& mounts, const std::string& path) {
  std::vector<std::string> out;
  for (const auto& mount : mounts) {
    if (!path.empty() && path != "/") out.push_back(mount + path);
    out.push_back(mount);
  }
  return out;
}

}  // namespace

std::optional<double> cpus_from_cpu_max(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota, period, rest;
  if (!(in >> quota >> period) || (in >> rest) || quota == "max") return std::nullopt;
  const auto q = number(quota), p = number(period);
  if (!q || !p) return std::nullopt;
  return ratio(*q, *p);
}

std::optional<double> cpus_from_cfs(const std::string& quota_us, const std::string& period_us) {
  const auto q = number(quota_us), p = number(period_us);
  if (!q || !p) return std::nullopt;  // -1 (no quota) falls out in ratio()
  return ratio(*q, *p);
}

std::optional<int> cgroup_cpu_limit() {
  const CgroupPaths own = own_cgroups();
  std::optional<double> cpus;
  // The first directory whose files can be read decides, whatever they say.
  if (own.v2)
    for (const auto& dir : directories({"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}, *own.v2))
      if (const auto text = read_small_file(dir + "/cpu.max")) {
        cpus = cpus_from_cpu_max(*text);
        break;
      }
  if (!cpus && own.v1_cpu)
    for (const auto& dir : directories({"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}, *own.v1_cpu)) {
      const auto quota = read_small_file(dir + "/cpu.cfs_quota_us"),
                 period = read_small_file(dir + "/cpu.cfs_period_us");
      if (quota && period) {
        cpus = cpus_from_cfs(*quota, *period);
        break;
      }
    }
  if (!cpus) return std::nullopt;
  // Rounded down: two threads spinning for each other in 1.5 CPUs of quota lose more to throttling
  // than the overlap gains.
  return std::max(1, static_cast<int>(std::floor(*cpus)));
}

}  // namespace memscope::model
