// alloc_bench: the measurements behind docs/numa-memory.md.
//
//   alloc_bench [--node N] [--touch-mib M] [--reps R]
//
// 1. First touch: a fresh NodeBuffer of M MiB on node N (binding on), one write per 4 KiB page,
//    with and without huge pages, by 1 thread and by 2 threads (halves); plus the same through
//    plain malloc for comparison. Reports ns per 4 KiB page and how much of the range the kernel
//    backed with huge pages (AnonHugePages in /proc/self/smaps).
// 2. Allocation cost: AllocateOnNode + FreeOnNode pairs by size (nothing touched), against
//    malloc/free and against a raw mmap + mbind + munmap (what the sanitizer builds' direct
//    backend does per allocation).
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alloc/numa_alloc.h"
#include "bench/stats.h"
#include "common/error.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace alloc = cputrain::alloc;
using cputrain::bench::Median;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Writes one byte into every 4 KiB page of [p, p + bytes), split over `threads` threads.
void TouchPages(char* p, std::size_t bytes, int threads) {
  auto touch = [](char* b, std::size_t n) {
    for (std::size_t off = 0; off < n; off += 4096) *(volatile char*)(b + off) = 1;
  };
  if (threads == 1) {
    touch(p, bytes);
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t chunk = bytes / static_cast<std::size_t>(threads) / 4096 * 4096;
  for (int t = 0; t < threads; ++t) {
    char* b = p + static_cast<std::size_t>(t) * chunk;
    std::size_t n = t + 1 == threads ? bytes - static_cast<std::size_t>(t) * chunk : chunk;
    pool.emplace_back(touch, b, n);
  }
  for (auto& th : pool) th.join();
}

// kB of AnonHugePages in the mapping that contains p, from /proc/self/smaps.
long AnonHugeKb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_vma = false;
  const auto addr = reinterpret_cast<unsigned long>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in_vma = lo <= addr && addr < hi;
      continue;
    }
    if (in_vma && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtol(line.c_str() + 14, nullptr, 10);
    }
  }
  return -1;
}

struct TouchResult {
  double ns_per_page = 0;
  long huge_kb = 0;
};

TouchResult TouchFresh(int node, std::size_t bytes, int threads, bool use_malloc) {
  char* p = use_malloc ? static_cast<char*>(std::malloc(bytes))
                       : static_cast<char*>(alloc::AllocateOnNode(node, bytes));
  auto t0 = Clock::now();
  TouchPages(p, bytes, threads);
  auto t1 = Clock::now();
  TouchResult r;
  r.ns_per_page = Seconds(t0, t1) * 1e9 / static_cast<double>(bytes / 4096);
  r.huge_kb = AnonHugeKb(p);
  const auto backing = alloc::NodesBacking(p, bytes);
  if (backing.untouched_pages != 0)
    std::fprintf(stderr, "warning: %s\n", backing.ToString().c_str());
  if (use_malloc) {
    std::free(p);
  } else {
    alloc::FreeOnNode(p);
  }
  alloc::ReleaseUnusedMemory();  // the next round gets fresh pages again
  return r;
}

// ns per AllocateOnNode + FreeOnNode pair of `bytes`, nothing touched (warm: the arena reuses its
// extents).
double AllocPairNs(int node, std::size_t bytes, int iters) {
  void* p = alloc::AllocateOnNode(node, bytes);  // warm the arena for this size
  alloc::FreeOnNode(p);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    p = alloc::AllocateOnNode(node, bytes);
    alloc::FreeOnNode(p);
  }
  return Seconds(t0, Clock::now()) * 1e9 / iters;
}

double MallocPairNs(std::size_t bytes, int iters) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    void* p = std::malloc(bytes);
    asm volatile("" : : "r"(p) : "memory");  // keep the pair from being optimized away
    std::free(p);
  }
  return Seconds(t0, Clock::now()) * 1e9 / iters;
}

double MmapBindPairNs(int node, std::size_t bytes, int iters) {
  std::vector<unsigned long> mask(static_cast<std::size_t>(node / 64 + 1), 0);
  mask[static_cast<std::size_t>(node / 64)] = 1UL << (node % 64);
  const std::size_t len = (bytes + 4095) / 4096 * 4096;
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mbind(p, len, MPOL_BIND, mask.data(), mask.size() * 64 + 1, 0) != 0) std::abort();
    munmap(p, len);
  }
  return Seconds(t0, Clock::now()) * 1e9 / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int node = 0;
  std::size_t touch_mib = 256;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--node")) node = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--touch-mib")) touch_mib = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  try {
    const std::size_t bytes = touch_mib << 20;
    std::printf("backend %s, node %d, %zu MiB, median of %d\n", alloc::BackendName(), node,
                touch_mib, reps);
    std::printf("\n%-34s %8s %14s %12s\n", "first touch (1 write / 4 KiB)", "threads", "ns / 4 KiB",
                "THP share");
    for (int mode = 0; mode < 3; ++mode) {
      alloc::Options o;
      o.bind = true;
      o.nodes = {node};
      o.huge_pages = mode == 1;
      alloc::Configure(o);
      const char* name = mode == 0   ? "AllocateOnNode, 4 KiB pages"
                         : mode == 1 ? "AllocateOnNode, MADV_HUGEPAGE"
                                     : "malloc (jemalloc default arena)";
      for (int threads : {1, 2}) {
        std::vector<double> ns;
        long huge_kb = 0;
        for (int r = 0; r < reps; ++r) {
          TouchResult t = TouchFresh(node, bytes, threads, mode == 2);
          ns.push_back(t.ns_per_page);
          huge_kb = t.huge_kb;
        }
        std::printf("%-34s %8d %14.0f %11.0f%%\n", name, threads, Median(ns),
                    100.0 * static_cast<double>(huge_kb) * 1024.0 / static_cast<double>(bytes));
      }
    }

    alloc::Options o;
    o.bind = true;
    o.nodes = {node};
    alloc::Configure(o);
    std::printf("\n%-12s %20s %14s %20s\n", "size", "AllocateOnNode+Free", "malloc+free",
                "mmap+mbind+munmap");
    for (std::size_t size : {std::size_t{64}, std::size_t{4096}, std::size_t{65536},
                             std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20}) {
      const int iters = size >= (std::size_t{16} << 20) ? 200 : 20000;
      std::vector<double> a, m, d;
      for (int r = 0; r < reps; ++r) {
        a.push_back(AllocPairNs(node, size, iters));
        m.push_back(MallocPairNs(size, iters));
        d.push_back(MmapBindPairNs(node, size, iters));
      }
      std::printf("%-12zu %17.0f ns %11.0f ns %17.0f ns\n", size, Median(a), Median(m), Median(d));
    }
  } catch (const cputrain::Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return e.exit_code();
  }
  return 0;
}
