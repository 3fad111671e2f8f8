#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "alloc/backend.h"
#include "alloc/numa_alloc.h"

namespace cputrain::alloc::internal {
namespace {

// Set from inside jemalloc's hooks, read by numa_alloc.cc after the allocation returns; relaxed
// is enough: it only decides whether a notice is printed, and nothing else is published with it.
std::atomic<bool> g_huge_page_advice_refused{false};

std::size_t PageBytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

bool HugePageAdviceRefused() { return g_huge_page_advice_refused.load(std::memory_order_relaxed); }

void* MapOnNode(void* new_addr, std::size_t size, std::size_t alignment, const NodePolicy& policy,
                MapError* error) {
  constexpr int kProt = PROT_READ | PROT_WRITE;
  const int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | (policy.noreserve ? MAP_NORESERVE : 0);
  const bool huge = policy.huge_pages;
  // A huge page can only back a 2 MiB-aligned 2 MiB range: align the mappings so all of them can.
  if (huge && alignment < kHugePageBytes) alignment = kHugePageBytes;

  char* addr = nullptr;
  if (new_addr != nullptr) {
    // jemalloc asks for an exact address only to grow an extent in place; never replace a mapping.
    void* got = mmap(new_addr, size, kProt, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == MAP_FAILED) {
      *error = {"mmap", errno};
      return nullptr;
    }
    if (got != new_addr) {  // a kernel older than 4.17 treats the flag as a hint
      munmap(got, size);
      *error = {"mmap", EEXIST};
      return nullptr;
    }
    addr = static_cast<char*>(got);
  } else {
    // Over-map by alignment - page, then cut the unaligned head and the tail off.
    const std::size_t page = PageBytes();
    if (size > SIZE_MAX - alignment) {
      *error = {"mmap", ENOMEM};
      return nullptr;
    }
    const std::size_t span = size + alignment - page;
    void* raw = mmap(nullptr, span, kProt, kFlags, -1, 0);
    if (raw == MAP_FAILED) {
      *error = {"mmap", errno};
      return nullptr;
    }
    const auto raw_start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t start = (raw_start + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
    const std::size_t head = start - raw_start;
    const std::size_t tail = span - head - size;
    if (head != 0) munmap(raw, head);
    if (tail != 0) munmap(reinterpret_cast<char*>(start) + size, tail);
    addr = reinterpret_cast<char*>(start);
  }

  if (huge) {
    if (madvise(addr, size, MADV_HUGEPAGE) != 0) {
      g_huge_page_advice_refused.store(true, std::memory_order_relaxed);
    }
  } else {
    madvise(addr, size, MADV_NOHUGEPAGE);  // fails only without THP, where it holds anyway
  }
  // No page of the range exists yet, so the policy governs every page that will: whichever
  // thread touches it first, the kernel allocates it on policy.os_node (or fails the fault).
  if (policy.bind && mbind(addr, size, MPOL_BIND, policy.nodemask.data(), policy.maxnode, 0) != 0) {
    const int e = errno;
    munmap(addr, size);
    *error = {"mbind", e};
    return nullptr;
  }
  return addr;
}

}  // namespace cputrain::alloc::internal
