// The normal backend: one explicitly created jemalloc arena per NodePolicy (node and mode), whose
// extent hooks map every extent with MapOnNode, so jemalloc's size classes, slabs, reuse and
// decay-based purging all operate on memory that is already bound to the node.
#include <fmt/format.h>
#include <jemalloc/jemalloc.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "alloc/backend.h"
#include "common/error.h"

namespace cputrain::alloc::internal {
namespace {

// jemalloc passes the extent_hooks_t* it was given back to every hook; it is the first member of
// this standard-layout struct, so the hook can recover the policy from it.
struct ArenaHooks {
  extent_hooks_t hooks;
  const NodePolicy* policy;
};
static_assert(std::is_standard_layout_v<ArenaHooks>);

const NodePolicy& PolicyOf(extent_hooks_t* hooks) {
  return *reinterpret_cast<ArenaHooks*>(hooks)->policy;
}

// Why the last extent allocation on this thread failed. jemalloc calls the alloc hook on the
// thread that called mallocx, so Allocate() reads it there right after mallocx returns.
thread_local MapError t_last_error;

// The hooks run inside jemalloc, possibly with its locks held: system calls only, no allocation.
void* HookAlloc(extent_hooks_t* hooks, void* new_addr, std::size_t size, std::size_t alignment,
                bool* zero, bool* commit, unsigned /*arena_ind*/) {
  MapError error;
  void* p = MapOnNode(new_addr, size, alignment, PolicyOf(hooks), &error);
  if (p == nullptr) {
    t_last_error = error;
    return nullptr;
  }
  *zero = true;    // a fresh anonymous mapping reads as zeros
  *commit = true;  // and is read-write; the kernel backs it on first touch
  return p;
}

// No dalloc hook: extents are never unmapped, only purged (their pages given back with
// MADV_DONTNEED, the mapping and its mbind policy kept). jemalloc with opt.retain (the Linux
// default) assumes a retained address range is never reused by another arena: it keeps
// extents of different arenas apart only by never merging into the head of another mapping.
// Unmapping the head part of an extent broke that: the kernel put another arena's next mapping
// right below the orphaned, headless rest, jemalloc merged the two across arenas, and mallocx
// crashed on a null pointer (2-node QEMU guest; regression test
// AllocTest.FreedOversizeBuffersStayMappedAndArePurged). destroy only runs at arena.destroy,
// which we never call. Any part of our mappings may be handled on its own, so split and merge
// are free (return false = done).
void HookDestroy(extent_hooks_t*, void* addr, std::size_t size, bool, unsigned) {
  munmap(addr, size);
}
// Never decommitted (decommit is opted out below), so there is nothing to commit.
bool HookCommit(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, unsigned) {
  return false;
}
// Purged pages keep the mapping's mbind policy: when touched again they come back on the node.
bool HookPurgeLazy(extent_hooks_t*, void* addr, std::size_t, std::size_t offset, std::size_t length,
                   unsigned) {
  return madvise(static_cast<char*>(addr) + offset, length, MADV_FREE) != 0;
}
bool HookPurgeForced(extent_hooks_t*, void* addr, std::size_t, std::size_t offset,
                     std::size_t length, unsigned) {
  return madvise(static_cast<char*>(addr) + offset, length, MADV_DONTNEED) != 0;
}
bool HookSplit(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, bool, unsigned) {
  return false;
}
bool HookMerge(extent_hooks_t*, void*, std::size_t, void*, std::size_t, bool, unsigned) {
  return false;
}

void Mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen) {
  const int rc = mallctl(name, oldp, oldlenp, newp, newlen);
  if (rc != 0) {
    throw RuntimeError(fmt::format("jemalloc mallctl(\"{}\") failed: {}", name, std::strerror(rc)));
  }
}

std::size_t ReadSize(const char* name) {
  std::size_t value = 0;
  std::size_t len = sizeof(value);
  Mallctl(name, &value, &len, nullptr, 0);
  return value;
}

}  // namespace

void Prepare(NodePolicy& policy) {
  // Leaked on purpose: jemalloc reads the hooks for the life of the arena, i.e. of the process.
  auto* arena_hooks = new ArenaHooks{
      extent_hooks_t{HookAlloc, /*dalloc=*/nullptr, HookDestroy, HookCommit, /*decommit=*/nullptr,
                     HookPurgeLazy, HookPurgeForced, HookSplit, HookMerge},
      &policy};
  extent_hooks_t* hooks = &arena_hooks->hooks;
  unsigned arena = 0;
  std::size_t len = sizeof(arena);
  t_last_error = {};
  const int rc = mallctl("arenas.create", &arena, &len, &hooks, sizeof(hooks));
  if (rc != 0 || len != sizeof(arena)) {
    const MapError e = t_last_error;
    throw RuntimeError(
        fmt::format("jemalloc could not create an arena for NUMA node {}: {}{}", policy.os_node,
                    std::strerror(rc != 0 ? rc : EINVAL),
                    e.op ? fmt::format(" ({} failed: {})", e.op, std::strerror(e.error)) : ""),
        "jemalloc allows at most 4096 arenas; check that Configure() is not called in a loop");
  }
  policy.arena = arena;
}

void* Allocate(const NodePolicy& policy, std::size_t bytes, std::size_t alignment,
               MapError* error) {
  // MALLOCX_TCACHE_NONE: the thread cache is shared by all arenas, so a cached region freed from
  // node 1 could be handed to a node-0 request (or to plain malloc) and vice versa.
  const int flags = MALLOCX_ARENA(policy.arena) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(alignment);
  t_last_error = {};
  void* p = mallocx(bytes, flags);
  if (p == nullptr) *error = t_last_error;
  return p;
}

void Free(void* p) noexcept { dallocx(p, MALLOCX_TCACHE_NONE); }

std::size_t AllocatedBytes(const NodePolicy& policy) {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof(epoch);
  Mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch));  // refresh the stats snapshot
  char name[96];
  std::snprintf(name, sizeof(name), "stats.arenas.%u.small.allocated", policy.arena);
  const std::size_t small = ReadSize(name);
  std::snprintf(name, sizeof(name), "stats.arenas.%u.large.allocated", policy.arena);
  return small + ReadSize(name);
}

void ReleaseUnused(const NodePolicy& policy) {
  char name[64];
  std::snprintf(name, sizeof(name), "arena.%u.purge", policy.arena);
  Mallctl(name, nullptr, nullptr, nullptr, 0);
}

const char* Name() { return "jemalloc"; }

}  // namespace cputrain::alloc::internal
