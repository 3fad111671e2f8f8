// The sanitizer-build backend (CPUTRAIN_SANITIZE=address|thread): no jemalloc, since jemalloc
// replacing malloc conflicts with the sanitizer runtimes, which interpose malloc themselves.
// Every allocation is its own mapping from MapOnNode (mmap + MADV_HUGEPAGE + mbind), rounded up
// to whole pages, and FreeOnNode unmaps it. Slower (a system call pair per allocation, no reuse)
// but the placement guarantees are the same, and the sanitizers see every access.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "alloc/backend.h"

namespace cputrain::alloc::internal {
namespace {

struct Mapping {
  std::size_t bytes = 0;  // whole pages
  const NodePolicy* policy = nullptr;
};

// Live mappings, to know each one's length at free and to count bytes per policy. One mutex:
// this backend serves test builds, where simplicity beats scalability.
struct Registry {
  std::mutex mu;
  std::unordered_map<void*, Mapping> live;
  std::map<const NodePolicy*, std::size_t> allocated;
};
Registry& Reg() {
  static auto* registry = new Registry;  // leaked: buffers may be freed by static destructors
  return *registry;
}

}  // namespace

void Prepare(NodePolicy&) {}

void* Allocate(const NodePolicy& policy, std::size_t bytes, std::size_t alignment,
               MapError* error) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) return nullptr;
  const std::size_t mapped = (bytes + page - 1) / page * page;
  void* p = MapOnNode(nullptr, mapped, alignment < page ? page : alignment, policy, error);
  if (p == nullptr) return nullptr;
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.emplace(p, Mapping{mapped, &policy});
  r.allocated[&policy] += mapped;
  return p;
}

void Free(void* p) noexcept {
  Registry& r = Reg();
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.live.find(p);
    if (it == r.live.end()) {
      // What free() does with a pointer it never returned: stop before corrupting anything.
      std::fprintf(stderr,
                   "cputrain alloc: FreeOnNode(%p): not memory from AllocateOnNode, or freed "
                   "twice\n",
                   p);
      std::abort();
    }
    m = it->second;
    r.live.erase(it);
    r.allocated[m.policy] -= m.bytes;
  }
  munmap(p, m.bytes);
}

std::size_t AllocatedBytes(const NodePolicy& policy) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.allocated.find(&policy);
  return it == r.allocated.end() ? 0 : it->second;
}

void ReleaseUnused(const NodePolicy&) {}  // nothing is cached: Free unmaps

const char* Name() { return "direct"; }

}  // namespace cputrain::alloc::internal
