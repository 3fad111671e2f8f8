// alloc/numa_alloc.h's AvailableOnNode: what the kernel says a NUMA node can still give.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "alloc/numa_alloc.h"

namespace cputrain::alloc {
namespace {

// The value of `key` (e.g. "MemAvailable:") in a meminfo file, in bytes (the files say kB);
// 0 with *found false if the file or the key is missing.
std::uint64_t MeminfoBytes(const std::string& path, const std::string& key, bool* found) {
  *found = false;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t at = line.find(key);
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + key.size()));
    unsigned long long kb = 0;
    if (!(rest >> kb)) return 0;
    *found = true;
    return static_cast<std::uint64_t>(kb) * 1024;
  }
  return 0;
}

// A node's free and reclaimable pages (MemFree + FilePages + SReclaimable of its meminfo file,
// whose lines read "Node 0 MemFree:   123 kB"), or 0 if the node has no such file.
std::uint64_t NodeFreeAndReclaimable(int node) {
  const std::string path = fmt::format("/sys/devices/system/node/node{}/meminfo", node);
  std::uint64_t sum = 0;
  for (const char* key : {"MemFree:", "FilePages:", "SReclaimable:"}) {
    bool found = false;
    sum += MeminfoBytes(path, key, &found);
  }
  return sum;
}

// The nodes the system has (node<N> directories), as OS indexes.
std::vector<int> SystemNodes() {
  std::vector<int> nodes;
  std::ifstream online("/sys/devices/system/node/online");
  std::string list;
  if (!std::getline(online, list)) return nodes;
  std::istringstream parts(list);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const std::size_t dash = part.find('-');
    try {
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      for (int n = lo; n <= hi && n - lo < 4096; ++n) nodes.push_back(n);
    } catch (const std::exception&) {
      return {};
    }
  }
  return nodes;
}

// A cgroup v2 file's single number ("max" reads as no limit), or *found false.
std::uint64_t CgroupValue(const std::string& path, bool* found) {
  *found = false;
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return 0;
  try {
    const std::uint64_t v = std::stoull(word);
    *found = true;
    return v;
  } catch (const std::exception&) {
    return 0;
  }
}

// What the process's cgroup (v2) still allows: memory.max - memory.current, or UINT64_MAX with
// no limit (or no cgroup v2).
std::uint64_t CgroupHeadroom() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, dir;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) dir = line.substr(3);  // the v2 hierarchy's line
  }
  if (dir.empty()) return UINT64_MAX;
  const std::string base = "/sys/fs/cgroup" + (dir == "/" ? std::string() : dir);
  bool has_max = false, has_current = false;
  const std::uint64_t max = CgroupValue(base + "/memory.max", &has_max);
  const std::uint64_t current = CgroupValue(base + "/memory.current", &has_current);
  if (!has_max || !has_current) return UINT64_MAX;
  return max > current ? max - current : 0;
}

}  // namespace

std::uint64_t AvailableOnNode(int os_node) {
  bool found = false;
  const std::uint64_t available = MeminfoBytes("/proc/meminfo", "MemAvailable:", &found);
  if (!found) return 0;
  std::uint64_t share = available;
  const std::vector<int> nodes = SystemNodes();
  if (nodes.size() > 1) {
    std::uint64_t all = 0, mine = 0;
    for (int n : nodes) {
      const std::uint64_t b = NodeFreeAndReclaimable(n);
      all += b;
      if (n == os_node) mine = b;
    }
    if (all > 0) {
      share = static_cast<std::uint64_t>(static_cast<double>(available) *
                                         (static_cast<double>(mine) / static_cast<double>(all)));
    }
  }
  return std::min(share, CgroupHeadroom());
}

}  // namespace cputrain::alloc
