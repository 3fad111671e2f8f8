#include "topology/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hwloc.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::topo {
namespace {

struct HwlocTopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocPtr = std::unique_ptr<hwloc_topology, HwlocTopologyDeleter>;

std::vector<int> CpusetToList(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  if (!set) return out;
  int i;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(i); }
  hwloc_bitmap_foreach_end();
  return out;
}

// The leading digits of s, as hwloc's strtoul reads them ("555555\x04..." is 555555: a fuzzer
// found hwloc building such a level for minutes), capped at `cap`; -1 if none.
long long LeadingCount(std::string_view s, long long cap = kMaxTopologyPus + 1) {
  long long n = 0;
  std::size_t digits = 0;
  for (; digits < s.size() && s[digits] >= '0' && s[digits] <= '9'; ++digits) {
    n = std::min(n * 10 + (s[digits] - '0'), cap);
  }
  return digits == 0 ? -1 : n;
}

// Calls f(count) for every level in one space-separated token of a synthetic description, its
// attribute groups already blanked ("core:8", "8"). hwloc needs no space between levels:
// "pack:3core:2" is two, so every ":count" is a level, as is a token that starts with a count
// (found by fuzz_topology: "pack:32643Tile...:2" had been measured as 2 PUs and hwloc built tens
// of millions). A level whose count is unreadable counts 1.
template <class F>
void ForEachLevelCount(std::string_view token, F f) {
  bool any = false;
  if (const long long n = LeadingCount(token); n >= 0) {
    f(n);
    any = true;
  }
  for (std::size_t i = token.find(':'); i != std::string_view::npos; i = token.find(':', i + 1)) {
    const long long n = LeadingCount(token.substr(i + 1));
    f(n >= 0 ? n : 1);
    any = true;
  }
  if (!any) f(1);
}

void CheckSyntheticSize(const std::string& spec, const std::string& desc) {
  if (desc.find_first_not_of(" \t\n") == std::string::npos) {
    throw InputError(fmt::format("topology '{}': the synthetic description is empty", spec),
                     "describe the levels from the package down, e.g. "
                     "'synthetic:pack:2 numa:1 core:8 pu:2'");
  }
  if (desc.find('\0') != std::string::npos) {  // hwloc would read only up to it
    throw InputError(fmt::format("topology 'synthetic:...': the description holds a NUL byte"),
                     "describe the levels in plain text, e.g. 'synthetic:pack:2 core:8 pu:2'");
  }
  // hwloc sizes a bitmap by the largest OS index of an `indexes=` list: a 90-digit index ran it
  // out of memory (found by fuzz_topology). Real OS indexes stay far below this bound.
  constexpr long long kMaxOsIndex = 1 << 20;
  for (std::size_t at = desc.find("indexes="); at != std::string::npos;
       at = desc.find("indexes=", at + 1)) {
    const std::size_t end = std::min(desc.find(')', at), desc.size());
    for (std::size_t i = at + 8; i < end; ++i) {
      const long long n = LeadingCount(std::string_view(desc).substr(i, end - i), kMaxOsIndex + 1);
      if (n > kMaxOsIndex) {
        throw InputError(fmt::format("topology '{}': an `indexes=` list names an OS index above {}",
                                     spec, kMaxOsIndex),
                         "list the machine's real OS indexes (e.g. `pu:2(indexes=0,4,1,5)`)");
      }
      while (i < end && desc[i] >= '0' && desc[i] <= '9') ++i;
    }
  }
  const SyntheticSize size = MeasureSynthetic(desc);
  if (size.pus > kMaxTopologyPus) {
    throw InputError(
        fmt::format("topology '{}' describes more than {} PUs (the product of its "
                    "level counts), the most this build plans for",
                    spec, kMaxTopologyPus),
        fmt::format("describe a machine of at most {} hardware threads", kMaxTopologyPus));
  }
  if (size.widest > kMaxSyntheticArity) {
    throw InputError(fmt::format("topology '{}' has a level of {} objects under one parent, more "
                                 "than the {} a synthetic description may have",
                                 spec, size.widest, kMaxSyntheticArity),
                     "split the level, e.g. 'pack:4 core:512' instead of 'pack:1 core:2048'");
  }
}

// The attribute name before the '=' at `eq` in XML text (the word before it, spaces skipped).
std::string_view AttributeName(std::string_view text, std::size_t eq) {
  const std::size_t end = text.find_last_not_of(" \t\r\n", eq - 1) + 1;
  const std::size_t begin = text.find_last_of(" \t\r\n\"'<", end - 1) + 1;
  return text.substr(begin, end - begin);
}

// hwloc 2.9.0 (Debian 12) dereferences NULL inside hwloc_topology_load when an XML object has
// `nodeset=` without `complete_nodeset=`, or `cpuset=` without `complete_cpuset=` (found by
// fuzz_topology; hwloc-info crashes on the same files). lstopo always writes both, so such a
// file is refused before hwloc sees it. Returns the offending attribute, or "".
std::string MissingCompleteSet(std::string_view xml) {
  for (std::size_t at = xml.find("<object"); at != std::string_view::npos;
       at = xml.find("<object", at + 1)) {
    const std::string_view tag = xml.substr(at, xml.find('>', at) - at);
    bool nodeset = false, complete_nodeset = false, cpuset = false, complete_cpuset = false;
    for (std::size_t eq = tag.find('='); eq != std::string_view::npos; eq = tag.find('=', eq + 1)) {
      const std::string_view name = AttributeName(tag, eq);
      nodeset |= name == "nodeset";
      complete_nodeset |= name == "complete_nodeset";
      cpuset |= name == "cpuset";
      complete_cpuset |= name == "complete_cpuset";
    }
    if (nodeset && !complete_nodeset) return "nodeset without complete_nodeset";
    if (cpuset && !complete_cpuset) return "cpuset without complete_cpuset";
  }
  return "";
}

// One chunk of hwloc's bitmap text: "0x" and 1-8 hex digits.
bool BitmapChunk(std::string_view c) {
  if (c.size() < 3 || c.size() > 10 || c.substr(0, 2) != "0x") return false;
  return c.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string_view::npos;
}

// hwloc's bitmap text as lstopo writes it: "0xf...f" (infinite), or comma-separated chunks,
// optionally after "0xf...f,"; a chunk between two others may be empty (zero: lstopo writes
// "0x0000ffff,,,,0x0000ffff"), the first and the last may not.
bool WellFormedBitmap(std::string_view v) {
  if (v.substr(0, 7) == "0xf...f") {
    if (v.size() == 7) return true;
    if (v[7] != ',') return false;
    v.remove_prefix(8);
  }
  for (bool first = true;; first = false) {
    const std::size_t comma = v.find(',');
    const std::string_view chunk = v.substr(0, comma);
    const bool last = comma == std::string_view::npos;
    if (!BitmapChunk(chunk) && (first || last || !chunk.empty())) return false;
    if (last) return true;
    v.remove_prefix(comma + 1);
  }
}

// The first attribute named *set (cpuset, complete_nodeset, ...) whose value is not a
// well-formed bitmap, as `name="value"`; or "". hwloc 2.9's bitmap parser asserts (aborts the
// process) on some malformed ones, e.g. a leading comma (found by fuzz_topology).
std::string MalformedBitmap(std::string_view xml) {
  for (std::size_t eq = xml.find('='); eq != std::string_view::npos; eq = xml.find('=', eq + 1)) {
    const std::string_view name = AttributeName(xml, eq);
    if (name.size() < 3 || name.substr(name.size() - 3) != "set") continue;
    const std::size_t open = xml.find_first_not_of(" \t\r\n", eq + 1);
    if (open == std::string_view::npos || (xml[open] != '"' && xml[open] != '\'')) continue;
    const std::size_t close = xml.find(xml[open], open + 1);
    if (close == std::string_view::npos) continue;  // not XML at all: hwloc refuses it
    const std::string_view value = xml.substr(open + 1, close - open - 1);
    if (!WellFormedBitmap(value)) return fmt::format("{}=\"{}\"", name, value.substr(0, 40));
  }
  return "";
}

void SetXml(hwloc_topology_t raw, const std::string& spec, const std::string& path) {
  // Read it ourselves: hwloc would block on a FIFO and read /dev/zero without end.
  const std::string xml =
      ReadFile(path, InputKind{"topology XML file", "an XML file written by `lstopo --of xml`",
                               kMaxTopologyXmlBytes,
                               "export a machine with `lstopo --of xml machine.xml` and pass "
                               "--topology xml:machine.xml"});
  if (const std::string missing = MissingCompleteSet(xml); !missing.empty()) {
    throw InputError(fmt::format("topology '{}': '{}' has an object with {} (hwloc 2.9 crashes "
                                 "on it; lstopo always writes both)",
                                 spec, path, missing),
                     "use a file written by `lstopo --of xml`");
  }
  if (const std::string bad = MalformedBitmap(xml); !bad.empty()) {
    throw InputError(fmt::format("topology '{}': '{}' has a malformed bitmap, {} (hwloc 2.9 "
                                 "aborts on some; lstopo writes 0x-prefixed hex chunks separated "
                                 "by commas)",
                                 spec, path, bad),
                     "use a file written by `lstopo --of xml`");
  }
  if (hwloc_topology_set_xmlbuffer(raw, xml.c_str(), static_cast<int>(xml.size()) + 1) != 0) {
    throw InputError(fmt::format("topology '{}': '{}' is not valid hwloc XML", spec, path),
                     "use a file written by `lstopo --of xml` (hwloc 2 format)");
  }
}

HwlocPtr LoadHwloc(const std::string& spec, bool* simulated) {
  hwloc_topology_t raw;
  if (hwloc_topology_init(&raw) != 0) throw RuntimeError("hwloc_topology_init failed");
  HwlocPtr topo(raw);
  // See CPUs outside our cpuset too, so a placement naming one can be refused precisely
  // ("outside the allowed cpuset") instead of "does not exist".
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  const std::string kSynthetic = "synthetic:", kXml = "xml:";
  *simulated = false;
  if (spec == "this" || spec.empty()) {
    // the real machine
  } else if (spec.rfind(kSynthetic, 0) == 0) {
    std::string desc = spec.substr(kSynthetic.size());
    CheckSyntheticSize(spec, desc);
    if (hwloc_topology_set_synthetic(raw, desc.c_str()) != 0) {
      throw InputError(
          fmt::format("topology '{}': hwloc cannot parse the synthetic description '{}'", spec,
                      desc),
          "write it as hwloc does, e.g. 'synthetic:pack:2 numa:1 l3:1 core:8 pu:2' "
          "(levels from the package down; `lstopo --of synthetic` prints this machine's)");
    }
    *simulated = true;
  } else if (spec.rfind(kXml, 0) == 0) {
    SetXml(raw, spec, spec.substr(kXml.size()));
    *simulated = true;
  } else {
    throw InputError(fmt::format("unknown topology '{}'", spec),
                     "use 'this', 'synthetic:<hwloc synthetic description>' or 'xml:<file>'");
  }
  if (hwloc_topology_load(raw) != 0) {
    throw InputError(fmt::format("topology '{}': hwloc failed to load it", spec),
                     *simulated ? "check the description or XML file"
                                : "check that /sys is mounted and readable");
  }
  return topo;
}

// OS index -> index of the first item (package, NUMA node, L3) whose CPUs hold it: one pass
// over the items, so a PU's lookup is O(1) (a search per PU was quadratic in the PUs).
template <class Items>
std::unordered_map<int, int> FirstContaining(const Items& items) {
  std::unordered_map<int, int> m;
  for (std::size_t k = 0; k < items.size(); ++k) {
    for (int cpu : items[k].cpus) m.emplace(cpu, static_cast<int>(k));  // keeps the first
  }
  return m;
}

int Find(const std::unordered_map<int, int>& m, int key) {
  auto it = m.find(key);
  return it == m.end() ? -1 : it->second;
}

// allowed: the cpuset and the process's binding; cpuset: the cpuset alone.
void AddCoresAndPus(hwloc_topology_t h, hwloc_const_bitmap_t allowed, hwloc_const_bitmap_t cpuset,
                    int ncore, int npu, Topology& t) {
  const auto package_of = FirstContaining(t.packages);
  const auto numa_of = FirstContaining(t.numa_nodes);
  const auto l3_of = FirstContaining(t.l3s);
  std::map<hwloc_obj_t, int> core_index;
  for (int i = 0; i < ncore; ++i) {
    core_index[hwloc_get_obj_by_type(h, HWLOC_OBJ_CORE, i)] = i;
    t.cores.emplace_back();
  }
  for (int i = 0; i < npu; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_PU, i);
    if (o->complete_cpuset == nullptr || hwloc_bitmap_weight(o->complete_cpuset) != 1 ||
        !hwloc_bitmap_isset(o->complete_cpuset, o->os_index)) {
      // A PU's cpuset is its own OS index; hwloc accepts an XML where they disagree (found by
      // fuzz_topology, with a second PU claiming OS index 0), and the plan follows os_index.
      throw InputError(fmt::format("topology '{}': PU with OS index {} has a cpuset that is not "
                                   "that one CPU",
                                   t.spec, o->os_index),
                       "each PU's cpuset must be its own OS index: export the machine again with "
                       "`lstopo --of xml`");
    }
    Pu pu;
    pu.os_index = static_cast<int>(o->os_index);
    pu.allowed = hwloc_bitmap_isset(allowed, o->os_index);
    pu.in_cpuset = hwloc_bitmap_isset(cpuset, o->os_index);
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_CORE, o);
    if (core) {
      const auto it = core_index.find(core);
      CPUTRAIN_CHECK(it != core_index.end(), "a PU's core is not among the topology's cores");
      pu.core = it->second;
    } else {  // no core objects: every PU is its own core
      pu.core = static_cast<int>(t.cores.size());
      t.cores.emplace_back();
    }
    pu.package = Find(package_of, pu.os_index);
    pu.numa = Find(numa_of, pu.os_index);
    pu.l3 = Find(l3_of, pu.os_index);
    Core& c = t.cores[pu.core];
    c.pus.push_back(pu.os_index);
    c.package = pu.package;
    c.numa = pu.numa;
    c.l3 = pu.l3;
    if (!t.pu_by_os.emplace(pu.os_index, static_cast<int>(t.pus.size())).second) {
      // hwloc accepts an XML whose PUs repeat an OS index (found by fuzz_topology: the plan then
      // pinned two workers to one CPU).
      throw InputError(
          fmt::format("topology '{}' has two PUs with OS index {}", t.spec, pu.os_index),
          "each PU needs its own OS index: export the machine again with "
          "`lstopo --of xml`");
    }
    t.pus.push_back(pu);
  }
}

// A NUMA node belongs to the package of its CPUs if they are all on one; an L3 to the package of
// its first CPU.
void LinkNumaNodesAndL3s(Topology& t) {
  for (std::size_t n = 0; n < t.numa_nodes.size(); ++n) {
    NumaNode& node = t.numa_nodes[n];
    constexpr int kNone = -2;
    int package = kNone;
    for (int cpu : node.cpus) {
      const Pu* pu = t.FindPu(cpu);
      if (!pu) continue;
      if (package == kNone) {
        package = pu->package;
      } else if (package != pu->package) {
        package = -1;  // spans packages
        break;
      }
    }
    node.package = package == kNone ? -1 : package;
    if (node.package >= 0) t.packages[node.package].numa_nodes.push_back(static_cast<int>(n));
  }
  for (L3Cache& c : t.l3s) {
    if (!c.cpus.empty()) {
      const Pu* pu = t.FindPu(c.cpus[0]);
      c.package = pu ? pu->package : -1;
    }
  }
}

// NUMA distances (SLIT from the OS, or what the XML carries). Synthetic machines have none.
void ReadNumaDistances(hwloc_topology_t h, Topology& t) {
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_type(h, HWLOC_OBJ_NUMANODE, &nr, &dist,
                                  HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) == 0 &&
      nr >= 1 && dist) {
    const unsigned n = dist->nbobjs;
    if (n == t.numa_nodes.size()) {
      t.numa_distances.assign(n, std::vector<uint64_t>(n, 0));
      for (unsigned a = 0; a < n; ++a) {
        for (unsigned b = 0; b < n; ++b) {
          t.numa_distances[dist->objs[a]->logical_index][dist->objs[b]->logical_index] =
              dist->values[a * n + b];
        }
      }
    }
    hwloc_distances_release(h, dist);
  }
}

}  // namespace

SyntheticSize MeasureSynthetic(const std::string& description) {
  // Balanced "(...)" (attributes) and "[...]" (memory children) groups are blanked out; an
  // unbalanced opener is kept as text, so it cannot hide the levels after it (found by
  // fuzz_topology: a stray '[' hid "l1:10000002", and hwloc built the machine for minutes).
  std::string flat = description;
  std::vector<std::size_t> open;
  for (std::size_t i = 0; i < flat.size(); ++i) {
    if (flat[i] == '(' || flat[i] == '[') open.push_back(i);
    const bool closes = (flat[i] == ')' || flat[i] == ']') && !open.empty() &&
                        flat[open.back()] == (flat[i] == ')' ? '(' : '[');
    if (!closes) continue;
    std::fill(flat.begin() + static_cast<std::ptrdiff_t>(open.back()),
              flat.begin() + static_cast<std::ptrdiff_t>(i) + 1, ' ');
    open.pop_back();
  }
  SyntheticSize size;
  std::size_t begin = 0;
  for (std::size_t i = 0; i <= flat.size(); ++i) {
    const char ch = i < flat.size() ? flat[i] : ' ';
    if (ch != ' ' && ch != '\t' && ch != '\n') continue;
    const std::string_view level = std::string_view(flat).substr(begin, i - begin);
    begin = i + 1;
    if (level.empty()) continue;
    ForEachLevelCount(level, [&](long long n) {
      size.pus = std::min(size.pus * n, kMaxTopologyPus + 1);
      size.widest = std::max(size.widest, n);
    });
  }
  return size;
}

const Pu* Topology::FindPu(int os_index) const {
  if (!pu_by_os.empty()) {
    auto it = pu_by_os.find(os_index);
    return it == pu_by_os.end() ? nullptr : &pus[static_cast<std::size_t>(it->second)];
  }
  for (const Pu& pu : pus) {
    if (pu.os_index == os_index) return &pu;
  }
  return nullptr;
}

std::vector<int> Topology::AllowedCpus() const {
  std::vector<int> out;
  for (const Pu& pu : pus) {
    if (pu.allowed) out.push_back(pu.os_index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> Topology::CpusetCpus() const {
  std::vector<int> out;
  for (const Pu& pu : pus) {
    if (pu.in_cpuset) out.push_back(pu.os_index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Topology::FormatCpuList(const std::vector<int>& cpus_in) {
  std::vector<int> cpus = cpus_in;
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : fmt::format("{}", cpus[i]);
    i = j + 1;
  }
  return out.empty() ? "(none)" : out;
}

Topology LoadTopology(const std::string& spec) {
  bool simulated = false;
  HwlocPtr hw = LoadHwloc(spec, &simulated);
  hwloc_topology_t h = hw.get();
  Topology t;
  t.spec = spec.empty() ? "this" : spec;
  t.simulated = simulated;

  // hwloc builds a malformed tree from some descriptions: a synthetic `indexes=` list that repeats
  // an OS index nests a package and a core inside a core (found by fuzz_topology; the lookup of a
  // PU's core then failed with an uncaught map::at). A type on several levels has no object count
  // (hwloc returns -1) and cannot be planned on.
  for (const auto& [type, name] :
       {std::pair{HWLOC_OBJ_PACKAGE, "packages"}, std::pair{HWLOC_OBJ_CORE, "cores"},
        std::pair{HWLOC_OBJ_PU, "PUs"}}) {
    if (hwloc_get_type_depth(h, type) == HWLOC_TYPE_DEPTH_MULTIPLE) {
      throw InputError(
          fmt::format("topology '{}' has {} on several levels of its tree", t.spec, name),
          "give every PU its own OS index (a synthetic `indexes=` list must not "
          "repeat one), or export the machine again with `lstopo --of xml`");
    }
  }
  const int npkg = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE);
  const int nnuma = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
  const int nl3 = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_L3CACHE);
  const int ncore = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE);
  const int npu = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU);
  if (npu <= 0) throw InputError(fmt::format("topology '{}' has no PUs (CPUs)", t.spec));
  if (npu > kMaxTopologyPus) {
    throw InputError(fmt::format("topology '{}' has {} PUs, more than the {} this build plans for",
                                 t.spec, npu, kMaxTopologyPus),
                     fmt::format("use a topology of at most {} hardware threads", kMaxTopologyPus));
  }

  // A machine without package objects (some VMs, some synthetic descriptions) is one package.
  if (npkg <= 0) {
    Package p;
    p.os_index = 0;
    p.cpus = CpusetToList(hwloc_topology_get_complete_cpuset(h));
    t.packages.push_back(p);
  }
  for (int i = 0; i < npkg; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_PACKAGE, i);
    Package p;
    p.os_index = static_cast<int>(o->os_index == HWLOC_UNKNOWN_INDEX ? i : o->os_index);
    p.cpus = CpusetToList(o->cpuset);
    t.packages.push_back(std::move(p));
  }
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, i);
    NumaNode n;
    n.os_index = static_cast<int>(o->os_index);
    n.memory_bytes = o->attr ? o->attr->numanode.local_memory : 0;
    n.cpus = CpusetToList(o->cpuset);
    t.numa_nodes.push_back(std::move(n));
  }
  for (int i = 0; i < nl3; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_L3CACHE, i);
    L3Cache c;
    c.size_bytes = o->attr ? o->attr->cache.size : 0;
    c.cpus = CpusetToList(o->cpuset);
    t.l3s.push_back(std::move(c));
  }

  // Allowed = what cgroups/cpusets allow (hwloc's allowed set) and, on the real machine, what
  // this process's affinity mask allows (taskset, mpirun --bind-to socket|core): a process
  // started per socket must plan only its socket.
  hwloc_bitmap_t allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(h));
  if (!simulated) {
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(h, bound, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(bound)) {
      hwloc_bitmap_and(allowed, allowed, bound);
    }
    hwloc_bitmap_free(bound);
  }
  struct BitmapFree {
    hwloc_bitmap_t b;
    ~BitmapFree() { hwloc_bitmap_free(b); }
  } free_allowed{allowed};
  AddCoresAndPus(h, allowed, hwloc_topology_get_allowed_cpuset(h), ncore, npu, t);
  LinkNumaNodesAndL3s(t);

  ReadNumaDistances(h, t);
  if (t.AllowedCpus().empty()) {
    throw InputError(fmt::format("topology '{}': this process may run on none of its CPUs", t.spec),
                     "check taskset/cgroup limits");
  }
  return t;
}

nlohmann::json TopologyToJson(const Topology& t) {
  nlohmann::json j;
  // The spec may hold any bytes (an "xml:" file name, a synthetic description hwloc accepted),
  // and dump() throws on a string that is not UTF-8: invalid bytes become U+FFFD here.
  j["source"] = nlohmann::json::parse(
      nlohmann::json(t.spec).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  j["simulated"] = t.simulated;
  j["packages"] = t.packages.size();
  j["numa_nodes"] = t.numa_nodes.size();
  j["l3_caches"] = t.l3s.size();
  j["cores"] = t.cores.size();
  j["pus"] = t.pus.size();
  j["allowed_cpus"] = t.AllowedCpus();
  j["cpuset_cpus"] = t.CpusetCpus();
  nlohmann::json numa = nlohmann::json::array();
  for (const NumaNode& n : t.numa_nodes) {
    numa.push_back({{"os_index", n.os_index},
                    {"package", n.package},
                    {"cpus", n.cpus},
                    {"memory_bytes", n.memory_bytes}});
  }
  j["numa"] = numa;
  j["distances"] = t.numa_distances;
  return j;
}

std::string DescribeTopology(const Topology& t) {
  std::string s = fmt::format(
      "machine '{}'{}: {} package(s), {} NUMA node(s), {} L3 cache(s), {} core(s), {} PU(s)\n",
      t.spec, t.simulated ? " (simulated: no pinning, no memory binding)" : "", t.packages.size(),
      t.numa_nodes.size(), t.l3s.size(), t.cores.size(), t.pus.size());
  s += fmt::format("  allowed CPUs: {}\n", Topology::FormatCpuList(t.AllowedCpus()));
  if (t.CpusetCpus() != t.AllowedCpus()) {
    s += fmt::format("  cpuset CPUs: {} (this process's binding is narrower)\n",
                     Topology::FormatCpuList(t.CpusetCpus()));
  }
  std::vector<int> cores_in(t.packages.size(), 0);  // one pass: packages x cores is quadratic
  for (const Core& c : t.cores) {
    if (c.package >= 0 && static_cast<std::size_t>(c.package) < cores_in.size())
      ++cores_in[c.package];
  }
  for (std::size_t p = 0; p < t.packages.size(); ++p) {
    const Package& pkg = t.packages[p];
    std::vector<int> nodes;
    for (int n : pkg.numa_nodes) nodes.push_back(t.numa_nodes[n].os_index);
    const int cores = cores_in[p];
    s += fmt::format("  package {}: {} cores, CPUs {}, NUMA node(s) {}\n", pkg.os_index, cores,
                     Topology::FormatCpuList(pkg.cpus), fmt::join(nodes, ","));
  }
  for (const NumaNode& n : t.numa_nodes) {
    s += fmt::format("  NUMA node {}: CPUs {}, {:.1f} GiB\n", n.os_index,
                     Topology::FormatCpuList(n.cpus),
                     static_cast<double>(n.memory_bytes) / (1024.0 * 1024 * 1024));
  }
  if (!t.numa_distances.empty()) {
    s += "  NUMA distances:\n";
    for (const auto& row : t.numa_distances) s += fmt::format("    {}\n", fmt::join(row, " "));
  } else {
    s += "  NUMA distances: not reported by this source\n";
  }
  return s;
}

}  // namespace cputrain::topo
