// Thread binding, behind an interface so the worker pools and their tests run the same on the
// real machine (hwloc binds) and on a simulated one (binding is skipped, and said once).
//
// Thread safety: Binder methods may be called from any thread concurrently; each acts on the
// calling thread only.
#pragma once

#include <memory>
#include <vector>

#include "topology/topology.h"

namespace cputrain::topo {

class Binder {
 public:
  virtual ~Binder() = default;
  // Binds the calling thread to the given OS CPUs (one CPU for a worker, a set for a comm
  // thread). Throws RuntimeError if the OS refuses (e.g. the CPU left our cpuset).
  virtual void BindThisThread(const std::vector<int>& cpus) = 0;
  // The OS CPUs the calling thread is allowed to run on (its binding, read back from the OS).
  virtual std::vector<int> ThisThreadBinding() = 0;
  // The OS CPU the calling thread last ran on.
  virtual int CurrentCpu() = 0;
  // False for a simulated machine: calls above do not touch the OS binding.
  virtual bool binds() const = 0;
};

// hwloc binder for a real topology ("this"); a no-op binder for a simulated one, which says
// once on stderr that threads are not pinned.
std::unique_ptr<Binder> MakeBinder(const Topology& topology);

}  // namespace cputrain::topo
