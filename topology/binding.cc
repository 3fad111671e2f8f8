#include "topology/binding.h"

#include <fmt/format.h>
#include <hwloc.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace cputrain::topo {
namespace {

std::vector<int> BitmapToList(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  int i;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(i); }
  hwloc_bitmap_foreach_end();
  return out;
}

// Binds through hwloc on the machine we run on. Holds its own hwloc handle for this system;
// hwloc's binding calls are thread-safe on a loaded topology.
class HwlocBinder final : public Binder {
 public:
  HwlocBinder() {
    if (hwloc_topology_init(&topo_) != 0 || hwloc_topology_load(topo_) != 0) {
      throw RuntimeError("hwloc could not load this machine's topology for thread binding");
    }
  }
  ~HwlocBinder() override { hwloc_topology_destroy(topo_); }

  void BindThisThread(const std::vector<int>& cpus) override {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    for (int c : cpus) hwloc_bitmap_set(set, static_cast<unsigned>(c));
    int rc = hwloc_set_cpubind(topo_, set, HWLOC_CPUBIND_THREAD | HWLOC_CPUBIND_STRICT);
    if (rc != 0 && errno == ENOSYS) rc = hwloc_set_cpubind(topo_, set, HWLOC_CPUBIND_THREAD);
    int err = errno;
    hwloc_bitmap_free(set);
    if (rc != 0) {
      throw RuntimeError(fmt::format("binding a thread to CPU(s) {} failed: {}",
                                     Topology::FormatCpuList(cpus), std::strerror(err)),
                         "check that these CPUs are in the process's cpuset (taskset -p, cgroups)");
    }
  }

  std::vector<int> ThisThreadBinding() override {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    std::vector<int> out;
    if (hwloc_get_cpubind(topo_, set, HWLOC_CPUBIND_THREAD) == 0) out = BitmapToList(set);
    hwloc_bitmap_free(set);
    return out;
  }

  int CurrentCpu() override { return sched_getcpu(); }
  bool binds() const override { return true; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

// A simulated machine's CPU numbers are not this machine's: record nothing, bind nothing.
class SimulatedBinder final : public Binder {
 public:
  void BindThisThread(const std::vector<int>&) override {}
  std::vector<int> ThisThreadBinding() override { return {}; }
  int CurrentCpu() override { return sched_getcpu(); }
  bool binds() const override { return false; }
};

}  // namespace

std::unique_ptr<Binder> MakeBinder(const Topology& topology) {
  if (topology.simulated) {
    log::NoticeOnce("simulated-binding",
                    fmt::format("topology '{}' is simulated: worker threads are not pinned and "
                                "memory is not bound to NUMA nodes",
                                topology.spec));
    return std::make_unique<SimulatedBinder>();
  }
  return std::make_unique<HwlocBinder>();
}

}  // namespace cputrain::topo
