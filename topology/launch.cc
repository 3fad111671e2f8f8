// How a launcher's CPU binding is judged (topology.h: Launch, ReviewBinding). mpirun binds each
// rank by default (Open MPI 4: to a core with 2 ranks or fewer, to a socket above), which suits
// one single-threaded rank per core but confines this engine, which pins its own threads, to
// one core: `mpirun -n 1 cputrain-numa train` trained on CPU 0 of a 2-core box.
#include <fmt/format.h>
#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "topology/topology.h"

namespace cputrain::topo {
namespace {

// Every thread of this process bound to `cpus` (hwloc's process binding sets each thread's
// mask on Linux). Widening is allowed: the cpuset, not the binding, is the kernel's limit.
void BindProcess(const std::vector<int>& cpus) {
  hwloc_topology_t h;
  if (hwloc_topology_init(&h) != 0) throw RuntimeError("hwloc_topology_init failed");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (int c : cpus) hwloc_bitmap_set(set, static_cast<unsigned>(c));
  int rc = hwloc_topology_load(h);
  if (rc == 0) rc = hwloc_set_cpubind(h, set, HWLOC_CPUBIND_PROCESS);
  const int err = errno;
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(h);
  if (rc != 0) {
    throw RuntimeError(fmt::format("widening this process's CPU binding to {} failed: {}",
                                   Topology::FormatCpuList(cpus), std::strerror(err)),
                       "pass --bind-to none to mpirun (docs/multi-node.md)");
  }
}

}  // namespace

Launch LaunchFromEnv() {
  Launch l;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local == nullptr || *local == '\0') return l;
  l.launcher = "mpirun";
  char* end = nullptr;
  const long n = std::strtol(local, &end, 10);
  l.local_ranks = *end == '\0' && n > 0 && n < (1 << 24) ? static_cast<int>(n) : 0;
  if (const char* p = std::getenv("OMPI_MCA_hwloc_base_binding_policy")) l.binding_policy = p;
  return l;
}

BindingReview ReviewBinding(const Topology& t, const Launch& launch) {
  BindingReview r;
  const std::vector<int> bound = t.AllowedCpus(), cpuset = t.CpusetCpus();
  if (t.simulated || launch.launcher.empty() || bound == cpuset) return r;
  if (launch.local_ranks != 1) return r;  // each rank plans its own binding (the trainer checks)
  const std::string b = Topology::FormatCpuList(bound), c = Topology::FormatCpuList(cpuset);
  if (launch.binding_policy.empty()) {
    r.widen = true;
    r.warning = fmt::format(
        "{} bound this process to CPU(s) {} (its default binding), but it is the only rank on "
        "this host, whose cpuset is {}: planning over {} instead; pass `--bind-to none` to {} "
        "to say so (docs/multi-node.md)",
        launch.launcher, b, c, c, launch.launcher);
  } else {
    r.warning = fmt::format(
        "{} bound this process to CPU(s) {} (--bind-to {}), the only rank on this host, whose "
        "cpuset is {}: planning on {} as asked; pass `--bind-to none` to {} to use them all",
        launch.launcher, b, launch.binding_policy, c, b, launch.launcher);
  }
  return r;
}

void AllowWholeCpuset(Topology& t) {
  for (Pu& pu : t.pus) pu.allowed = pu.in_cpuset;
  if (!t.simulated) BindProcess(t.CpusetCpus());
}

std::string AdoptLaunchBinding(Topology& t) {
  const BindingReview r = ReviewBinding(t, LaunchFromEnv());
  if (r.widen) AllowWholeCpuset(t);
  return r.warning;
}

}  // namespace cputrain::topo
