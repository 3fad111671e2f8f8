#include "alloc/numa_alloc.h"

#include <fmt/format.h>
#include <numa.h>
#include <numaif.h>
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "alloc/backend.h"
#include "common/error.h"
#include "common/log.h"

namespace cputrain::alloc {
namespace {

using internal::MapError;
using internal::NodePolicy;

std::size_t PageBytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::string FormatBytes(std::size_t bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (bytes >= (std::size_t{1} << 30))
    return fmt::format("{:.2f} GiB ({} bytes)", bytes / kGiB, bytes);
  if (bytes >= (std::size_t{1} << 20))
    return fmt::format("{:.2f} MiB ({} bytes)", bytes / 1048576.0, bytes);
  return fmt::format("{} bytes", bytes);
}

std::string Gib(std::size_t bytes) { return fmt::format("{:.2f} GiB", bytes / 1073741824.0); }

std::string NodeList(const std::vector<int>& nodes) {
  return nodes.empty() ? std::string("none") : topo::Topology::FormatCpuList(nodes);
}

// The nodes this process may allocate on (its cpuset's mems), ascending; {} without NUMA support.
std::vector<int> AllowedMemoryNodes() {
  std::vector<int> nodes;
  if (numa_available() < 0) return nodes;
  bitmask* mask = numa_get_mems_allowed();
  for (unsigned long i = 0; i < mask->size; ++i) {
    if (numa_bitmask_isbitset(mask, static_cast<unsigned>(i))) nodes.push_back(static_cast<int>(i));
  }
  numa_bitmask_free(mask);
  return nodes;
}

// Process-wide state. Leaked on purpose: jemalloc's hooks point at the policies, and buffers may
// be freed by static destructors after this file's statics would have been destroyed.
struct State {
  // Guards everything below. Taken once per AllocateOnNode to find the node's arena: cheap next
  // to the allocation itself (>= 150 ns without a thread cache, docs/numa-memory.md), and the
  // buffers this serves are allocated once.
  std::mutex mu;
  bool configured = false;
  Options options;  // nodes sorted and unique
  // Every policy ever created; never removed or changed once pushed, so a `const NodePolicy&`
  // handed out stays valid without the lock.
  std::vector<std::unique_ptr<NodePolicy>> policies;
};
State& GetState() {
  static auto* state = new State;
  return *state;
}

// The policy (and so the arena) for a buffer of `bytes` on os_node under the current options,
// created on first use: per node, one arena for buffers of kHugePageBytes and more when huge pages
// are on, one for everything else.
const NodePolicy& PolicyFor(int os_node, std::size_t bytes) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.configured) {
    throw RuntimeError(
        fmt::format("NUMA memory requested on node {} before alloc::Configure() was called",
                    os_node),
        "call alloc::Configure(alloc::OptionsFor(topology)) once at startup");
  }
  const Options& o = s.options;
  if (!std::binary_search(o.nodes.begin(), o.nodes.end(), os_node)) {
    throw InputError(
        fmt::format("NUMA node {} does not exist here (the nodes are {})", os_node,
                    NodeList(o.nodes)),
        "node ids are the OS numbers `cputrain-numa topo` shows for the topology in use");
  }
  const bool huge = o.huge_pages && bytes >= kHugePageBytes;
  for (const auto& p : s.policies) {
    if (p->os_node == os_node && p->bind == o.bind && p->huge_pages == huge) return *p;
  }
  auto policy = std::make_unique<NodePolicy>();
  policy->os_node = os_node;
  policy->bind = o.bind;
  policy->huge_pages = huge;
  constexpr int kBits = 8 * sizeof(unsigned long);
  policy->nodemask.assign(static_cast<std::size_t>(os_node / kBits + 1), 0);
  policy->nodemask[static_cast<std::size_t>(os_node / kBits)] = 1UL << (os_node % kBits);
  // The kernel reads maxnode - 1 bits (libnuma passes mask bits + 1 the same way).
  policy->maxnode = policy->nodemask.size() * kBits + 1;
  internal::Prepare(*policy);
  s.policies.push_back(std::move(policy));
  return *s.policies.back();
}

// The policies for one node (all of them without a node).
std::vector<const NodePolicy*> Policies(std::optional<int> os_node) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<const NodePolicy*> out;
  for (const auto& p : s.policies) {
    if (!os_node || p->os_node == *os_node) out.push_back(p.get());
  }
  return out;
}

[[noreturn]] void ThrowAllocationFailed(const NodePolicy& policy, std::size_t bytes,
                                        const MapError& error) {
  const int node = policy.os_node;
  std::string cause;
  if (error.op == nullptr) {
    cause = "the allocator refused the size";
  } else if (std::strcmp(error.op, "mbind") == 0) {
    cause = fmt::format("mbind(MPOL_BIND) failed: {}", std::strerror(error.error));
  } else {
    cause = fmt::format("{} failed: {}", error.op, std::strerror(error.error));
  }
  std::string hint;
  long long free_bytes = 0;
  const long long total = numa_available() >= 0 ? numa_node_size64(node, &free_bytes) : -1;
  if (error.op != nullptr && std::strcmp(error.op, "mbind") == 0) {
    hint = fmt::format(
        "node {} may have left this process's allowed memory nodes (cpuset.mems); `numactl "
        "--show` lists them",
        node);
  } else if (total > 0) {
    hint = fmt::format(
        "node {} has {} in total, {} free (`numactl -H`); lower the batch size or the number of "
        "groups on the node, and check `ulimit -v` and vm.overcommit_memory",
        node, Gib(static_cast<std::size_t>(total)), Gib(static_cast<std::size_t>(free_bytes)));
  } else {
    hint =
        "lower the batch size or the number of groups, and check `ulimit -v` and "
        "vm.overcommit_memory";
  }
  throw RuntimeError(
      fmt::format("could not allocate {} on NUMA node {}: {}", FormatBytes(bytes), node, cause),
      hint);
}

}  // namespace

Options OptionsFor(const topo::Topology& topology) {
  Options o;
  for (const auto& n : topology.numa_nodes) o.nodes.push_back(n.os_index);
  if (topology.simulated) {
    o.bind = false;
    o.no_bind_reason = fmt::format(
        "the topology \"{}\" is simulated, so its nodes are not this machine's", topology.spec);
  } else if (topology.numa_nodes.size() < 2) {
    o.bind = false;
    o.no_bind_reason = "this machine has one NUMA node, so there is nothing to bind to";
  }
  return o;
}

void Configure(const Options& options) {
  if (!options.bind && options.no_bind_reason.empty()) {
    throw RuntimeError("alloc::Configure: binding is off but Options::no_bind_reason is empty",
                       "say why memory is not bound; it is printed once on stderr");
  }
  Options o = options;
  const std::vector<int> allowed = AllowedMemoryNodes();
  if (o.nodes.empty()) o.nodes = allowed.empty() ? std::vector<int>{0} : allowed;
  std::sort(o.nodes.begin(), o.nodes.end());
  o.nodes.erase(std::unique(o.nodes.begin(), o.nodes.end()), o.nodes.end());
  if (o.nodes.front() < 0) {
    throw InputError(
        fmt::format("NUMA node {} does not exist (node ids start at 0)", o.nodes.front()));
  }
  if (o.bind) {
    if (allowed.empty()) {
      throw RuntimeError("memory binding was requested but this kernel has no NUMA support",
                         "run with binding off (a simulated topology, or one node)");
    }
    for (int node : o.nodes) {
      if (std::binary_search(allowed.begin(), allowed.end(), node)) continue;
      const bool exists = node <= numa_max_node() &&
                          numa_bitmask_isbitset(numa_nodes_ptr, static_cast<unsigned>(node));
      throw InputError(
          exists ? fmt::format("NUMA node {} is not one this process may allocate on (allowed: {})",
                               node, NodeList(allowed))
                 : fmt::format("NUMA node {} does not exist on this machine (nodes with memory "
                               "this process may use: {})",
                               node, NodeList(allowed)),
          exists ? "the cpuset (cgroup cpuset.mems, mpirun's binding) excludes it; see `numactl "
                   "--show`"
                 : "use the nodes `cputrain-numa topo` shows, or a simulated topology");
    }
  } else {
    log::NoticeOnce("alloc-no-bind:" + o.no_bind_reason,
                    fmt::format("memory is not bound to NUMA nodes: {}. Each node still has its "
                                "own arena; pages land where they are first touched.",
                                o.no_bind_reason));
  }
  log::Debug("alloc: {} backend, binding {}, huge pages {}, nodes {}", internal::Name(),
             o.bind ? "on" : "off", o.huge_pages ? "requested" : "off", NodeList(o.nodes));
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  s.options = std::move(o);
  s.configured = true;
}

void* AllocateOnNode(int os_node, std::size_t bytes) {
  const NodePolicy& policy = PolicyFor(os_node, bytes);
  if (bytes == 0) return nullptr;
  MapError error;
  void* p = nullptr;
  if (bytes <= static_cast<std::size_t>(PTRDIFF_MAX)) {
    std::size_t alignment = bytes >= PageBytes() ? PageBytes() : kCacheLine;
    std::size_t request = bytes;
    if (policy.huge_pages) {
      // Whole huge pages: the buffer then owns every 2 MiB region it touches, so no huge-page
      // fault fills pages jemalloc will later hand out as fresh, and purging it frees them all.
      alignment = kHugePageBytes;
      request = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    }
    p = internal::Allocate(policy, request, alignment, &error);
    // Under ASan (the direct backend) the rounding up to whole huge pages is not the caller's:
    // poisoned, like the backend's own tail past the request, so an overrun reports.
    if (p != nullptr) ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, request - bytes);
  }
  if (policy.huge_pages && internal::HugePageAdviceRefused()) {
    log::NoticeOnce("alloc-no-thp",
                    "madvise(MADV_HUGEPAGE) was refused (kernel without transparent huge "
                    "pages?): NUMA buffers use 4 KiB pages, whose first touch costs ~6x more");
  }
  if (p == nullptr) ThrowAllocationFailed(policy, bytes, error);
  return p;
}

void FreeOnNode(void* p) noexcept {
  if (p != nullptr) internal::Free(p);
}

namespace {
std::size_t PageRounded(std::size_t bytes) {
  return (bytes + PageBytes() - 1) / PageBytes() * PageBytes();
}
}  // namespace

void* ReserveOnNode(int os_node, std::size_t bytes) {
  NodePolicy policy = PolicyFor(os_node, 0);  // the node's binding, without huge pages
  if (bytes == 0) return nullptr;
  policy.noreserve = true;
  MapError error;
  void* p = nullptr;
  if (bytes <= static_cast<std::size_t>(PTRDIFF_MAX) - PageBytes())
    p = internal::MapOnNode(nullptr, PageRounded(bytes), PageBytes(), policy, &error);
  if (p == nullptr) ThrowAllocationFailed(policy, bytes, error);
  return p;
}

void UnreserveOnNode(void* p, std::size_t bytes) noexcept {
  if (p != nullptr) munmap(p, PageRounded(bytes));
}

std::vector<int> PageBacking::nodes() const {
  std::vector<int> out;
  for (const auto& [node, count] : pages_on_node) out.push_back(node);
  return out;
}

std::string PageBacking::ToString() const {
  std::string s = fmt::format("{} pages:", pages);
  for (const auto& [node, count] : pages_on_node) s += fmt::format(" node {}: {},", node, count);
  s += fmt::format(" untouched: {}", untouched_pages);
  return s;
}

PageBacking NodesBacking(const void* p, std::size_t bytes) {
  PageBacking out;
  if (bytes == 0) return out;
  const std::size_t page = PageBytes();
  const auto first = reinterpret_cast<std::uintptr_t>(p) / page * page;
  const std::uintptr_t last = (reinterpret_cast<std::uintptr_t>(p) + bytes - 1) / page * page;
  out.pages = (last - first) / page + 1;

  // move_pages takes an array of page addresses; query them in batches.
  constexpr std::size_t kBatch = 4096;
  std::vector<void*> addrs(kBatch);
  std::vector<int> status(kBatch);
  std::vector<unsigned char> resident(kBatch);
  for (std::size_t done = 0; done < out.pages; done += kBatch) {
    const std::size_t n = std::min(kBatch, out.pages - done);
    auto* base = reinterpret_cast<void*>(first + done * page);
    // move_pages reports an unmapped page and the zero page alike (-EFAULT); mincore fails on an
    // unmapped range, so it tells them apart.
    if (mincore(base, n * page, resident.data()) != 0) {
      const int e = errno;
      throw RuntimeError(fmt::format("NodesBacking: [{}, +{} bytes) is {}", p, bytes,
                                     e == ENOMEM
                                         ? "not entirely mapped"
                                         : fmt::format("not queryable: {}", std::strerror(e))));
    }
    for (std::size_t i = 0; i < n; ++i) addrs[i] = static_cast<char*>(base) + i * page;
    if (move_pages(0, static_cast<unsigned long>(n), addrs.data(), nullptr, status.data(), 0) !=
        0) {
      const int e = errno;
      if (e != ENOSYS) {
        throw RuntimeError(fmt::format("NodesBacking: move_pages failed: {}", std::strerror(e)));
      }
      log::NoticeOnce("alloc-no-move-pages",
                      "this kernel has no NUMA support (move_pages: ENOSYS): resident pages are "
                      "reported on node 0");
      for (std::size_t i = 0; i < n; ++i) status[i] = (resident[i] & 1) ? 0 : -ENOENT;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (status[i] >= 0) {
        ++out.pages_on_node[status[i]];
      } else if (status[i] == -ENOENT || status[i] == -EFAULT) {
        ++out.untouched_pages;  // not faulted in, or only the shared zero page (mapped: mincore)
      } else {
        throw RuntimeError(fmt::format("NodesBacking: move_pages says {} for page {}",
                                       std::strerror(-status[i]), addrs[i]));
      }
    }
  }
  return out;
}

std::size_t AllocatedBytesOnNode(int os_node) {
  std::size_t total = 0;
  for (const NodePolicy* p : Policies(os_node)) total += internal::AllocatedBytes(*p);
  return total;
}

void ReleaseUnusedMemory() {
  for (const NodePolicy* p : Policies(std::nullopt)) internal::ReleaseUnused(*p);
}

const char* BackendName() { return internal::Name(); }

namespace internal {
void ThrowSizeOverflow(int os_node, std::size_t count, std::size_t element_bytes) {
  throw RuntimeError(
      fmt::format("could not allocate {} elements of {} bytes on NUMA node {}: the size overflows",
                  count, element_bytes, os_node),
      "this is a bug in the caller's size computation");
}
}  // namespace internal

}  // namespace cputrain::alloc
