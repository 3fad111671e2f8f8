// alloc/: NUMA-local memory. Each replica group keeps its parameters, gradients, optimizer state
// and activations on its own NUMA node; this is where that memory comes from.
//
// One jemalloc arena per NUMA node in use (created lazily with "arenas.create"), whose extent
// hooks mmap every range and bind it to the node with mbind(MPOL_BIND) before any page of it is
// touched, so every page the arena ever hands out lives on that node no matter which thread
// touches it first. Linking this library links jemalloc, which replaces malloc process-wide (on
// purpose: it replaces the LD_PRELOAD=libjemalloc.so users did before). Sanitizer builds
// (CPUTRAIN_SANITIZE=address|thread) cannot have jemalloc replace the sanitizer's malloc; there
// the same API maps each allocation directly (mmap + mbind, one mapping per allocation); under
// ASan everything past the requested size (at least 64 bytes) is poisoned, so an overrun of a
// buffer reports. See docs/numa-memory.md for the hooks, the measurements and how to check
// placement.
//
// Usage:
//   alloc::Configure(alloc::OptionsFor(topology));    // once, at startup
//   alloc::NodeBuffer<float> params(os_node, n);       // pages not yet touched
//   pool.RunOnGroup(g, [&](...) { zero-fill my slice of params });  // first touch, pinned
//
// First touch: nothing here writes to the memory it returns (jemalloc keeps its metadata
// elsewhere), so the caller initializes it. Do that on the owning group's pinned workers: with
// binding on the pages land on the node either way, but with binding off (simulated topology,
// one-node machine) first touch is the only thing that places them, and touching 4 KiB pages
// costs ~2.4 us each here, so spreading it over the group's threads also spreads that cost.
//
// Thread safety: every function below may be called from any thread concurrently. Configure()
// applies to allocations that start after it returns; memory allocated before keeps the policy it
// was mapped with. FreeOnNode() may free memory allocated by any thread. A NodeBuffer is like a
// std::unique_ptr: the object itself is not synchronized.
//
// Errors (common/error.h): a node id that does not exist -> InputError; running out of memory or
// the kernel refusing to bind -> RuntimeError naming the node and the size, with a hint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cache_line.h"
#include "topology/topology.h"

namespace cputrain::alloc {

// x86-64 transparent huge page (PMD) size.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

struct Options {
  // mbind(MPOL_BIND) every range to its node. Off for a simulated topology or a one-node machine:
  // the per-node arenas still keep groups' memory apart, and first touch places the pages.
  bool bind = true;
  // Why binding is off (required when bind is false); said once on stderr by Configure().
  std::string no_bind_reason;
  // OS ids of the nodes that may be asked for. Empty: the nodes this process may allocate on
  // (its cpuset's mems). With bind on, each must be such a node (else InputError).
  std::vector<int> nodes;
  // Buffers of at least kHugePageBytes come from a second arena per node whose mappings are
  // madvise(MADV_HUGEPAGE), 2 MiB-aligned and handed out in whole 2 MiB pages: first touch costs
  // ~0.4 us per 4 KiB with huge pages against ~1.7-2.4 us without (docs/numa-memory.md). Only a
  // request: the kernel may still use 4 KiB pages. Smaller buffers, and all of them when this is
  // off, come from mappings marked MADV_NOHUGEPAGE.
  bool huge_pages = true;
};

// The options for a topology: bind when it is this machine and has at least two NUMA nodes;
// otherwise binding is off with the reason (simulated topology, one node); nodes are its nodes.
Options OptionsFor(const topo::Topology& topology);

// Sets the process-wide options. Call it once at startup, before the first allocation (tests call
// it again to switch modes; each (node, mode) gets its own arena). Throws InputError if a node in
// options.nodes cannot be bound to, RuntimeError if bind is off without a reason.
void Configure(const Options& options);

// `bytes` of memory from os_node's arena, not touched by this library (memory reused after a free
// may already be resident). Alignment: 64 bytes; page-aligned from 4 KiB; kHugePageBytes-aligned
// (and rounded up to a multiple of it) from kHugePageBytes when huge_pages is on.
// bytes == 0 returns nullptr (after checking the node). Throws InputError for a node that is not
// configured, RuntimeError if Configure() was not called or the memory cannot be had (out of
// memory, mbind refused).
void* AllocateOnNode(int os_node, std::size_t bytes);

// Frees memory from AllocateOnNode (nullptr is ignored). Like free(): anything else is undefined
// (the direct backend aborts with a message).
void FreeOnNode(void* p) noexcept;

// `bytes` of address space on os_node (bound as AllocateOnNode's, never huge pages), mapped with
// MAP_NORESERVE and not from an arena: no page exists until it is touched, and the kernel's
// overcommit heuristic does not count the untouched rest, so a buffer of which only parts are
// ever used may be larger than the memory free (train/replica_group.cc: a bf16 frozen base's
// fp32 buffer, whose block products are never written). Pages given back with
// madvise(MADV_DONTNEED) read as zeros again. Not counted by AllocatedBytesOnNode. Throws as
// AllocateOnNode; bytes == 0 returns nullptr.
void* ReserveOnNode(int os_node, std::size_t bytes);
// Unmaps a ReserveOnNode of `bytes` (nullptr is ignored).
void UnreserveOnNode(void* p, std::size_t bytes) noexcept;

// Where the pages of [p, p + bytes) are, from move_pages(2) in query mode (every page, in batches).
// Ranges are rounded out to whole pages (the base page size, also inside a huge page).
struct PageBacking {
  std::size_t pages = 0;            // pages in the rounded range
  std::size_t untouched_pages = 0;  // no memory behind them yet: never written (or only read,
                                    // which maps the kernel's shared zero page)
  std::map<int, std::size_t> pages_on_node;  // OS node -> touched pages there

  // The nodes holding touched pages, ascending ({} if none is touched).
  std::vector<int> nodes() const;
  // "512 pages: node 0: 256, untouched: 256"
  std::string ToString() const;
};
// Throws RuntimeError if part of the range is not mapped. On a kernel without NUMA support
// (move_pages fails with ENOSYS) resident pages count as node 0, said once on stderr.
PageBacking NodesBacking(const void* p, std::size_t bytes);

// Bytes currently allocated on os_node through AllocateOnNode, over all its arenas (jemalloc's
// stats.arenas.<i>.{small,large}.allocated, refreshed; the direct backend counts whole pages).
// For leak checks and reports; 0 for a node nothing was allocated on.
std::size_t AllocatedBytesOnNode(int os_node);

// Gives freed-but-cached memory of the node arenas back to the OS now (jemalloc "arena.<i>.purge";
// it would otherwise decay within ~10 s). Reused memory is then untouched again.
void ReleaseUnusedMemory();

// "jemalloc" or "direct" (sanitizer builds), for logs.
const char* BackendName();

// What NUMA node os_node can still give this process, in bytes, as the kernel estimates it
// (memory_info.cc): /proc/meminfo's MemAvailable (free pages plus the page cache and slab it can
// reclaim), split over the nodes in proportion to each node's free and reclaimable pages
// (/sys/devices/system/node/node<N>/meminfo) where there are several; and at most what the
// process's cgroup leaves under its limit (memory.max - memory.current, cgroup v2: a container's
// or a Kubernetes pod's limit, where the out-of-memory killer would act first). 0 if the kernel
// says nothing (no /proc). Thread-safe; reads the files on every call.
std::uint64_t AvailableOnNode(int os_node);

// count elements of T on a NUMA node: owns memory from AllocateOnNode, frees it on destruction.
// It does NOT touch the pages and constructs nothing: the caller zero-fills or initializes the
// elements, on the owning group's pinned workers (see "First touch" above). Hence T must be a
// trivially copyable, trivially destructible type (floats, ints, PODs).
template <class T>
class NodeBuffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "NodeBuffer holds raw, uninitialized memory: T must be trivial");

 public:
  NodeBuffer() = default;
  // Throws like AllocateOnNode; RuntimeError if count * sizeof(T) overflows.
  NodeBuffer(int os_node, std::size_t count)
      : data_(static_cast<T*>(AllocateOnNode(os_node, BytesFor(os_node, count, sizeof(T))))),
        size_(count),
        node_(os_node) {}
  // A reservation (ReserveOnNode): only the elements touched take memory.
  struct Reserved {};
  NodeBuffer(int os_node, std::size_t count, Reserved)
      : data_(static_cast<T*>(ReserveOnNode(os_node, BytesFor(os_node, count, sizeof(T))))),
        size_(count),
        node_(os_node),
        reserved_(true) {}
  ~NodeBuffer() { Free(); }

  NodeBuffer(NodeBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        node_(std::exchange(other.node_, -1)),
        reserved_(std::exchange(other.reserved_, false)) {}
  NodeBuffer& operator=(NodeBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      node_ = std::exchange(other.node_, -1);
      reserved_ = std::exchange(other.reserved_, false);
    }
    return *this;
  }
  NodeBuffer(const NodeBuffer&) = delete;
  NodeBuffer& operator=(const NodeBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  int node() const { return node_; }  // -1 for a default-constructed or moved-from buffer
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  // count * element_bytes, or RuntimeError naming the node if that overflows.
  static std::size_t BytesFor(int os_node, std::size_t count, std::size_t element_bytes);
  void Free() noexcept {
    if (reserved_) {
      UnreserveOnNode(data_, size_ * sizeof(T));
    } else {
      FreeOnNode(data_);
    }
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  int node_ = -1;
  bool reserved_ = false;
};

namespace internal {
[[noreturn]] void ThrowSizeOverflow(int os_node, std::size_t count, std::size_t element_bytes);
}  // namespace internal

template <class T>
std::size_t NodeBuffer<T>::BytesFor(int os_node, std::size_t count, std::size_t element_bytes) {
  if (element_bytes != 0 && count > static_cast<std::size_t>(-1) / element_bytes) {
    internal::ThrowSizeOverflow(os_node, count, element_bytes);
  }
  return count * element_bytes;
}

}  // namespace cputrain::alloc
