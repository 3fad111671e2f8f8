// Internal to alloc/: the mapping primitive both backends share, and the backend interface that
// numa_alloc.cc calls. Exactly one backend is compiled in (alloc/CMakeLists.txt):
// backend_jemalloc.cc normally, backend_direct.cc in sanitizer builds.
#pragma once

#include <cstddef>
#include <vector>

namespace cputrain::alloc::internal {

// How one node's memory is mapped. Created by numa_alloc.cc under its lock, never freed or
// changed afterwards (jemalloc's hooks keep a pointer to it for the life of the process), so
// reading it needs no synchronization once published.
struct NodePolicy {
  int os_node = -1;
  bool bind = true;
  // The arena for buffers of at least kHugePageBytes: mappings 2 MiB-aligned and MADV_HUGEPAGE.
  // Otherwise mappings are MADV_NOHUGEPAGE, so a small allocation never faults in a 2 MiB page
  // (which would also fill pages jemalloc believes untouched) whatever the system THP mode.
  bool huge_pages = false;
  // MAP_NORESERVE: the mapping is not counted against the kernel's overcommit heuristic, so a
  // reservation larger than what is free can be made; only the pages touched ever exist
  // (ReserveOnNode's, never an arena's).
  bool noreserve = false;
  // mbind's nodemask with only os_node set, and its maxnode argument.
  std::vector<unsigned long> nodemask;
  unsigned long maxnode = 0;
  // Set by the backend's Prepare(): the jemalloc arena index (0, an automatic arena, means none).
  unsigned arena = 0;
};

// Why MapOnNode failed: the call and its errno. Trivial, so the hooks can fill it without
// allocating.
struct MapError {
  const char* op = nullptr;  // "mmap", "mbind", nullptr for no error
  int error = 0;
};

// Maps `size` bytes (a multiple of the page size) aligned to `alignment` (a power of two, at least
// a page; raised to kHugePageBytes for a huge-page policy), applies MADV_HUGEPAGE or
// MADV_NOHUGEPAGE as the policy says, and binds
// it with mbind(MPOL_BIND) before returning, so no page of it can be faulted in elsewhere. With
// new_addr set the mapping must land exactly there. Returns nullptr and fills *error on failure.
// Async-signal-safe in spirit: only system calls, no allocation (it runs inside jemalloc hooks).
void* MapOnNode(void* new_addr, std::size_t size, std::size_t alignment, const NodePolicy& policy,
                MapError* error);

// True once a MADV_HUGEPAGE request was refused (kernel without THP); numa_alloc.cc says so once.
bool HugePageAdviceRefused();

// The backend. Allocate returns nullptr on failure with *error filled when a mapping failed
// (error->op == nullptr otherwise: the backend itself refused, e.g. an absurd size).
void Prepare(NodePolicy& policy);  // called once per policy, under numa_alloc.cc's lock
void* Allocate(const NodePolicy& policy, std::size_t bytes, std::size_t alignment, MapError* error);
void Free(void* p) noexcept;
std::size_t AllocatedBytes(const NodePolicy& policy);
void ReleaseUnused(const NodePolicy& policy);
const char* Name();

}  // namespace cputrain::alloc::internal
