// The sanitizer-build backend (CPUTRAIN_SANITIZE=address|thread): no jemalloc, since jemalloc
// replacing malloc conflicts with the sanitizer runtimes, which interpose malloc themselves.
// Every allocation is its own mapping from MapOnNode (mmap + MADV_HUGEPAGE + mbind), rounded up
// to whole pages, and FreeOnNode unmaps it. Slower (a system call pair per allocation, no reuse)
// but the placement guarantees are the same, and the sanitizers see every access.
//
// Under AddressSanitizer a mapping is not heap memory to ASan: nothing past the requested size
// would be reported until the next page that is not mapped, and the page after a new mapping is
// usually another one. So the mapping here is the request plus at least kTailRedZoneBytes,
// rounded up to whole pages, and everything past the request is poisoned; Free unpoisons the
// whole mapping before unmapping it (a later mapping may reuse the addresses). The red zone is
// not counted by AllocatedBytes, which stays "the request in whole pages" in every build.
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "alloc/backend.h"
#include "common/sanitizers.h"

namespace cputrain::alloc::internal {
namespace {

constexpr std::size_t kTailRedZoneBytes = kAsan ? 64 : 0;

struct Mapping {
  std::size_t mapped = 0;  // whole pages, the red zone included
  std::size_t bytes = 0;   // whole pages of the request, as AllocatedBytes counts them
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
  if (bytes > SIZE_MAX - page - kTailRedZoneBytes) return nullptr;
  const std::size_t counted = (bytes + page - 1) / page * page;
  const std::size_t mapped = (bytes + kTailRedZoneBytes + page - 1) / page * page;
  void* p = MapOnNode(nullptr, mapped, alignment < page ? page : alignment, policy, error);
  if (p == nullptr) return nullptr;
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, mapped - bytes);
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.emplace(p, Mapping{mapped, counted, &policy});
  r.allocated[&policy] += counted;
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
  ASAN_UNPOISON_MEMORY_REGION(p, m.mapped);
  munmap(p, m.mapped);
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
