#include "topology/placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "common/error.h"

namespace cputrain::topo {
namespace {

constexpr const char* kTopoHint = "run `cputrain-numa topo` to see this machine's CPUs and domains";

struct Domain {
  std::string name;
  std::vector<std::vector<int>> cores;  // per core: its allowed PUs in the domain (OS indexes)
};

// One domain per package, NUMA node or L3 that has allowed CPUs, each CPU in exactly one domain:
// the first (in hwloc's order) that contains it. NUMA nodes may share CPUs: KNL's MCDRAM and
// DDR nodes, a CXL or HBM node attached beside DRAM, or CoD nodes whose groups an old XML lost;
// a node whose CPUs all belong to an earlier node gets no group (it would pin a second group
// onto the same cores), and `warnings` says so.
std::vector<Domain> BuildDomains(const Topology& t, GroupBy by,
                                 std::vector<std::string>* warnings) {
  std::vector<std::pair<std::string, std::vector<int>>> raw;  // name, cpus
  switch (by) {
    case GroupBy::kSocket:
      for (const Package& p : t.packages)
        raw.push_back({fmt::format("package {}", p.os_index), p.cpus});
      break;
    case GroupBy::kNuma:
      for (const NumaNode& n : t.numa_nodes)
        raw.push_back({fmt::format("NUMA node {}", n.os_index), n.cpus});
      break;
    case GroupBy::kL3:
      if (t.l3s.empty()) {
        throw InputError(
            fmt::format("placement.group_by is 'l3' but machine '{}' reports no L3 caches", t.spec),
            "use group_by: socket or numa (or an XML/synthetic topology with L3 objects)");
      }
      for (std::size_t i = 0; i < t.l3s.size(); ++i)
        raw.push_back({fmt::format("L3 {}", i), t.l3s[i].cpus});
      break;
  }
  // Linear in the CPUs of all domains: each domain visits only its own CPUs' cores (visiting
  // every core for every domain was quadratic on a machine of many small packages).
  // A CPU's domain is the first that contains it: LoadTopology already gave each PU the index of
  // the first package, NUMA node and L3 holding it (topology.h).
  auto domain_of = [by](const Pu& pu) {
    return by == GroupBy::kSocket ? pu.package : by == GroupBy::kNuma ? pu.numa : pu.l3;
  };
  std::vector<Domain> out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const std::string& name = raw[i].first;
    std::vector<int> cpus;      // the domain's own CPUs
    std::optional<int> sharer;  // the first earlier domain that took some of its CPUs
    for (int os : raw[i].second) {
      const Pu* pu = t.FindPu(os);
      if (!pu) continue;
      const int d = domain_of(*pu);
      if (d == static_cast<int>(i)) {
        cpus.push_back(os);
      } else if (d >= 0 && (!sharer || d < *sharer)) {
        sharer = d;
      }
    }
    const std::unordered_set<int> in(cpus.begin(), cpus.end());
    std::vector<int> cores;  // cores with an allowed CPU of the domain, in topology order
    for (int os : cpus) {
      const Pu* pu = t.FindPu(os);
      if (pu && pu->allowed && pu->core >= 0) cores.push_back(pu->core);
    }
    if (cores.empty() && sharer) {
      warnings->push_back(fmt::format(
          "{} shares its CPUs with {} (e.g. KNL's MCDRAM, an HBM or CXL node): it gets no "
          "replica group of its own, the CPUs go to {}",
          name, raw[*sharer].first, raw[*sharer].first));
    }
    std::sort(cores.begin(), cores.end());
    cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
    Domain d;
    d.name = name;
    for (int c : cores) {
      std::vector<int> pus;
      for (int os : t.cores[c].pus) {
        const Pu* pu = t.FindPu(os);
        if (pu && pu->allowed && in.count(os)) pus.push_back(os);
      }
      d.cores.push_back(std::move(pus));
    }
    if (!d.cores.empty()) out.push_back(std::move(d));  // no allowed CPU: not ours to plan
  }
  return out;
}

void SetMemoryNode(const Topology& t, Group& g, std::vector<std::string>& warnings) {
  std::map<int, int> count;  // numa os index -> CPUs of the group on it
  std::vector<int> order;
  auto add = [&](int cpu) {
    const Pu* pu = t.FindPu(cpu);
    if (!pu || pu->numa < 0) return;
    int node = t.numa_nodes[pu->numa].os_index;
    if (count[node]++ == 0) order.push_back(node);
  };
  for (int c : g.cpus) add(c);
  g.numa_nodes_spanned = order;
  std::sort(g.numa_nodes_spanned.begin(), g.numa_nodes_spanned.end());
  g.numa_node = -1;
  int best = 0;
  for (int node : order) {  // the node holding most of its workers; first one on a tie
    if (count[node] > best) {
      best = count[node];
      g.numa_node = node;
    }
  }
  if (g.numa_nodes_spanned.size() > 1) {
    warnings.push_back(fmt::format(
        "group {} ({}) has CPUs on NUMA nodes {}: its memory goes to node {} and the other "
        "workers read it remotely; consider group_by: numa or per-node CPU lists",
        g.index, g.domain, fmt::join(g.numa_nodes_spanned, ","), g.numa_node));
  }
}

int ParseOmpThreads(const char* s) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  // OMP_NUM_THREADS may be a list ("4,2" for nested levels); the first level is the budget.
  if (end == s || (*end != '\0' && *end != ',') || v < 1 || v > 1 << 20) {
    throw InputError(fmt::format("OMP_NUM_THREADS='{}' is not a positive thread count", s),
                     "unset it or set it to the number of worker threads per group, or set "
                     "placement.threads_per_group");
  }
  return static_cast<int>(v);
}

Plan PlanExplicit(const Topology& t, const PlacementConfig& cfg) {
  Plan plan;
  plan.simulated = t.simulated;
  plan.threads_source = "cpus";
  const std::string allowed = Topology::FormatCpuList(t.AllowedCpus());
  std::map<int, std::size_t> owner;
  for (std::size_t gi = 0; gi < cfg.cpus.size(); ++gi) {
    const std::vector<int>& list = cfg.cpus[gi];
    for (int cpu : list) {
      const Pu* pu = t.FindPu(cpu);
      if (!pu) {
        std::vector<int> all;
        for (const Pu& p : t.pus) all.push_back(p.os_index);
        throw InputError(
            fmt::format("placement.cpus[{}] names CPU {}, which does not exist on machine '{}' "
                        "(its CPUs are {})",
                        gi, cpu, t.spec, Topology::FormatCpuList(all)),
            kTopoHint);
      }
      if (!pu->allowed) {
        throw InputError(
            fmt::format("placement.cpus[{}] names CPU {}, which is outside this process's "
                        "allowed cpuset ({})",
                        gi, cpu, allowed),
            "pick CPUs from the allowed set, or relax the taskset/cgroup/mpirun binding that "
            "restricts this process");
      }
      auto [it, fresh] = owner.emplace(cpu, gi);
      if (!fresh) {
        throw InputError(
            it->second == gi
                ? fmt::format("placement.cpus[{}] lists CPU {} twice", gi, cpu)
                : fmt::format("CPU {} is in two groups: placement.cpus[{}] and placement.cpus[{}]",
                              cpu, it->second, gi),
            "each CPU runs one worker thread: give every group its own CPUs");
      }
    }
    if (static_cast<int>(list.size()) <= cfg.comm_threads) {
      throw InputError(
          list.empty()
              ? fmt::format("placement.cpus[{}] is empty: a group needs at least one CPU", gi)
              : fmt::format("placement.cpus[{}] has {} CPU(s) and comm_threads is {}: that "
                            "leaves the group zero worker threads",
                            gi, list.size(), cfg.comm_threads),
          "give each group at least comm_threads + 1 CPUs");
    }
    Group g;
    g.index = static_cast<int>(gi);
    g.domain = fmt::format("cpus[{}]", gi);
    const std::size_t ncompute = list.size() - static_cast<std::size_t>(cfg.comm_threads);
    g.cpus.assign(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(ncompute));
    g.comm_cpus.assign(list.begin() + static_cast<std::ptrdiff_t>(ncompute), list.end());
    SetMemoryNode(t, g, plan.warnings);
    plan.groups.push_back(std::move(g));
  }
  if (cfg.threads_per_group) {
    plan.warnings.push_back(
        "placement.threads_per_group is ignored: placement.cpus gives each group's CPUs");
  }
  if (cfg.groups && *cfg.groups != static_cast<int>(cfg.cpus.size())) {
    plan.warnings.push_back(
        fmt::format("placement.groups ({}) is ignored: placement.cpus lists {} group(s)",
                    *cfg.groups, cfg.cpus.size()));
  }
  return plan;
}

}  // namespace

const char* GroupByName(GroupBy g) {
  switch (g) {
    case GroupBy::kSocket:
      return "socket";
    case GroupBy::kNuma:
      return "numa";
    case GroupBy::kL3:
      return "l3";
  }
  return "?";
}

int Plan::total_threads() const {
  int n = 0;
  for (const Group& g : groups) n += static_cast<int>(g.cpus.size());
  return n;
}

namespace {

// Group `index` on domain d: its worker CPUs (the budget's first cores, or hardware threads),
// and its comm CPUs (the domain's last comm_threads cores).
Group PlanGroup(const Topology& t, const Domain& d, int index, const PlacementConfig& cfg,
                std::optional<int> budget, bool omp_budget, const std::string& threads_source,
                std::vector<std::string>* warnings) {
  const int ncores = static_cast<int>(d.cores.size());
  if (cfg.comm_threads >= ncores) {
    throw InputError(
        fmt::format("placement.comm_threads is {} but {} has only {} usable core(s): no core "
                    "would be left for compute",
                    cfg.comm_threads, d.name, ncores),
        fmt::format("set comm_threads to at most {}", ncores - 1));
  }
  Group g;
  g.index = index;
  g.domain = d.name;
  const int ncompute_cores = ncores - cfg.comm_threads;
  std::vector<int> avail;
  for (int c = 0; c < ncompute_cores; ++c) {
    if (cfg.hyperthreads) {
      avail.insert(avail.end(), d.cores[c].begin(), d.cores[c].end());
    } else {
      avail.push_back(d.cores[c][0]);
    }
  }
  for (int c = ncompute_cores; c < ncores; ++c) g.comm_cpus.push_back(d.cores[c][0]);
  int want = budget ? *budget : static_cast<int>(avail.size());
  if (want > static_cast<int>(avail.size()) && omp_budget) {
    // OMP_NUM_THREADS is set for every library of a job, not for this plan: oversubscribing
    // pinned workers (two on a core wait for each other at every barrier) would help no one,
    // so the plan takes what there is and says so (PyTorch warns too, and oversubscribes).
    want = static_cast<int>(avail.size());
    g.cpus.assign(avail.begin(), avail.end());
    warnings->push_back(fmt::format(
        "{} asks for more worker threads than {} has usable {} ({}): group {} runs {} on CPUs "
        "{}, one pinned per {}; set placement.threads_per_group to choose",
        threads_source, d.name, cfg.hyperthreads ? "hardware threads" : "cores", avail.size(),
        index, want, Topology::FormatCpuList(g.cpus), cfg.hyperthreads ? "thread" : "core"));
  }
  if (want > static_cast<int>(avail.size())) {
    throw InputError(
        fmt::format("threads per group is {} (from {}) but {} has {} usable {}{}", want,
                    threads_source, d.name, avail.size(),
                    cfg.hyperthreads ? "hardware thread(s)" : "core(s)",
                    cfg.comm_threads ? fmt::format(" after {} comm core(s)", cfg.comm_threads)
                                     : std::string()),
        cfg.hyperthreads ? "lower the budget, or comm_threads"
                         : "lower the budget, or set placement.hyperthreads: true to use SMT "
                           "siblings too");
  }
  g.cpus.assign(avail.begin(), avail.begin() + want);
  SetMemoryNode(t, g, *warnings);
  return g;
}

}  // namespace

Plan PlanPlacement(const Topology& t, const PlacementConfig& cfg, const char* omp_num_threads) {
  if (cfg.comm_threads < 0) {
    throw InputError(
        fmt::format("placement.comm_threads is {}: it must be 0 or more", cfg.comm_threads));
  }
  if (!cfg.cpus.empty()) return PlanExplicit(t, cfg);

  Plan plan;
  plan.simulated = t.simulated;
  const char* kind = GroupByName(cfg.group_by);
  std::vector<Domain> domains = BuildDomains(t, cfg.group_by, &plan.warnings);
  if (domains.empty()) {
    throw InputError(
        fmt::format("no {} domain of machine '{}' has a CPU this process may use", kind, t.spec),
        "check taskset/cgroup limits");
  }
  std::size_t ngroups = domains.size();
  if (cfg.groups) {
    if (*cfg.groups < 1) {
      throw InputError(
          fmt::format("placement.groups is {}: it must be auto or at least 1", *cfg.groups));
    }
    if (static_cast<std::size_t>(*cfg.groups) > domains.size()) {
      throw InputError(
          fmt::format("placement.groups is {} but machine '{}' has only {} {} domain(s) this "
                      "process may use",
                      *cfg.groups, t.spec, domains.size(), kind),
          fmt::format("set placement.groups to auto or at most {}, or pick a finer "
                      "placement.group_by (numa, l3)",
                      domains.size()));
    }
    ngroups = static_cast<std::size_t>(*cfg.groups);
  }

  std::optional<int> budget;
  bool omp_budget = false;  // from OMP_NUM_THREADS: capped at the domain, with a warning
  if (cfg.threads_per_group_set) {
    budget = cfg.threads_per_group;
    plan.threads_source = budget ? "threads_per_group" : "threads_per_group: auto";
  } else if (omp_num_threads && *omp_num_threads) {
    budget = ParseOmpThreads(omp_num_threads);
    omp_budget = true;
    plan.threads_source = fmt::format("OMP_NUM_THREADS={}", *budget);
  } else {
    plan.threads_source =
        cfg.hyperthreads ? "auto (all hardware threads)" : "auto (all physical cores)";
  }
  if (budget && *budget < 1) {
    throw InputError(fmt::format("threads per group is {} (from {}): a group needs at least one "
                                 "worker thread",
                                 *budget, plan.threads_source),
                     "set placement.threads_per_group to auto or a positive number");
  }

  for (std::size_t gi = 0; gi < ngroups; ++gi) {
    plan.groups.push_back(PlanGroup(t, domains[gi], static_cast<int>(gi), cfg, budget, omp_budget,
                                    plan.threads_source, &plan.warnings));
  }
  return plan;
}

nlohmann::json PlanToJson(const Plan& plan) {
  nlohmann::json groups = nlohmann::json::array();
  for (const Group& g : plan.groups) {
    groups.push_back({{"index", g.index},
                      {"domain", g.domain},
                      {"cpus", g.cpus},
                      {"threads", g.cpus.size()},
                      {"numa_node", g.numa_node},
                      {"numa_nodes_spanned", g.numa_nodes_spanned},
                      {"comm_cpus", g.comm_cpus}});
  }
  return {{"groups", groups},
          {"threads_source", plan.threads_source},
          {"warnings", plan.warnings},
          {"simulated", plan.simulated}};
}

std::string DescribePlan(const Plan& plan) {
  std::string s = fmt::format(
      "placement: {} group(s), {} worker thread(s); threads per group from "
      "{}{}\n",
      plan.groups.size(), plan.total_threads(), plan.threads_source,
      plan.simulated ? " (simulated machine: not pinned)" : "");
  for (const Group& g : plan.groups) {
    s += fmt::format("  group {} [{}]: {} worker(s) on CPUs {}, memory on NUMA node {}", g.index,
                     g.domain, g.cpus.size(), Topology::FormatCpuList(g.cpus), g.numa_node);
    if (!g.comm_cpus.empty()) {
      s += fmt::format(", comm CPUs {}", Topology::FormatCpuList(g.comm_cpus));
    }
    s += '\n';
  }
  for (const std::string& w : plan.warnings) s += fmt::format("  warning: {}\n", w);
  return s;
}

}  // namespace cputrain::topo
