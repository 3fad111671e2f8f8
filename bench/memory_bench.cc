// `cputrain-numa bench memory`: what the memory system gives each NUMA node — the numbers every
// other figure is read against (a collective's bound, a memory-bound kernel, remote vs local).
//
//  1. Bandwidth per node, 1..all cores: STREAM copy and triad (plain and non-temporal stores) by
//     k = 1, 2, 4, ..., all cores of node i (one worker per physical core, pinned through
//     WorkerPool + topo::MakeBinder) on three arrays from alloc::AllocateOnNode(i), first touched
//     by node i's threads.
//  2. The node x node matrix: all cores of CPU node i run copy and triad on arrays of memory
//     node j (bound to j by the allocator; first touched by node j's own threads, so that the
//     pages are on j even where nothing binds them).
//  3. Latency: one thread of CPU node i chases pointers through a random cyclic permutation of
//     the cache lines of a buffer on node j (larger than the last-level cache, so each load
//     misses it); ns per load = time / loads. Every load depends on the previous one, so neither
//     the out-of-order core nor the prefetchers can overlap them.
//
// Sizes: each array max(4 x L3, 64 MiB) (STREAM's rule: every array at least 4x the caches),
// --quick max(L3, 16 MiB); at most 1/12 of a node's memory (three arrays in a quarter of it).
// Bandwidth is the best of the repetitions after one warm-up (STREAM's convention: the best run
// is the one least disturbed), counted as STREAM does: copy moves 2 arrays, triad 3, no
// write-allocate traffic. Latency is the median of its repetitions.
//
// On a simulated topology nothing is pinned or bound: the threads run wherever this machine's
// scheduler puts them and all "nodes" are this machine's memory; the suite says so first.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "alloc/numa_alloc.h"
#include "bench/bench.h"
#include "bench/stream.h"
#include "common/error.h"
#include "common/log.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/topology.h"

namespace cputrain::bench {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The compute side of a NUMA node: one CPU per physical core (the first allowed PU of each).
struct CpuNode {
  int index = 0;    // into Topology::numa_nodes
  int os_node = 0;  // OS number
  std::vector<int> cpus;
};

std::vector<CpuNode> CpuNodes(const topo::Topology& t) {
  std::vector<CpuNode> out;
  for (std::size_t n = 0; n < t.numa_nodes.size(); ++n) {
    CpuNode cn;
    cn.index = static_cast<int>(n);
    cn.os_node = t.numa_nodes[n].os_index;
    for (const topo::Core& core : t.cores) {
      if (core.numa != static_cast<int>(n)) continue;
      for (int pu : core.pus) {
        const topo::Pu* p = t.FindPu(pu);
        if (p != nullptr && p->allowed) {
          cn.cpus.push_back(pu);
          break;
        }
      }
    }
    if (!cn.cpus.empty()) out.push_back(std::move(cn));
  }
  return out;
}

// 1, 2, 4, ... up to n, and n itself.
std::vector<int> ThreadSteps(int n) {
  std::vector<int> v;
  for (int k = 1; k < n; k *= 2) v.push_back(k);
  v.push_back(n);
  return v;
}

std::size_t RoundUp(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

// Memory from a node's arena, freed on destruction.
struct NodeMemory {
  NodeMemory(int node, std::size_t bytes) : p(alloc::AllocateOnNode(node, bytes)), bytes(bytes) {}
  ~NodeMemory() { alloc::FreeOnNode(p); }
  NodeMemory(const NodeMemory&) = delete;
  NodeMemory& operator=(const NodeMemory&) = delete;
  void* p;
  std::size_t bytes;
};

std::string NodesOf(const void* p, std::size_t bytes) {
  const alloc::PageBacking b = alloc::NodesBacking(p, bytes);
  std::string s;
  for (const auto& [node, pages] : b.pages_on_node) {
    s += fmt::format("{}{}: {:.0f}%", s.empty() ? "" : ", ", node,
                     100.0 * static_cast<double>(pages) / static_cast<double>(b.pages));
  }
  return s.empty() ? "untouched" : s;
}

// Writes a random cyclic permutation of the buffer's cache lines (Sattolo's algorithm: one cycle
// through every line), each line's first 8 bytes holding the index (in uint64s) of the next line.
void BuildChase(uint64_t* buf, std::size_t lines, uint64_t seed) {
  std::vector<uint32_t> order(lines);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(seed);
  for (std::size_t i = lines - 1; i > 0; --i) {
    std::uniform_int_distribution<std::size_t> pick(0, i - 1);
    std::swap(order[i], order[pick(rng)]);
  }
  constexpr std::size_t kWords = 64 / sizeof(uint64_t);
  for (std::size_t i = 0; i < lines; ++i) {
    const std::size_t from = order[i], to = order[(i + 1) % lines];
    buf[from * kWords] = to * kWords;
    for (std::size_t w = 1; w < kWords; ++w) buf[from * kWords + w] = 0;
  }
}

std::atomic<uint64_t> g_chase_sink{0};

// ns per dependent load over `loads` loads from element 0.
double Chase(const uint64_t* buf, std::size_t loads) {
  uint64_t p = 0;
  const double t0 = NowSeconds();
  for (std::size_t i = 0; i < loads; ++i) p = buf[p];
  const double t = NowSeconds() - t0;
  // Keep the chain alive: p is the last index reached.
  g_chase_sink.store(p, std::memory_order_relaxed);
  return t / static_cast<double>(loads) * 1e9;
}

// What the three measurements share: the machine, its CPU nodes and their pools.
struct MemoryRun {
  const topo::Topology* topo = nullptr;
  topo::Binder* binder = nullptr;
  std::vector<CpuNode> cpu_nodes;
  // All cores of each CPU node (kept for the whole run); smaller pools are made as needed.
  std::vector<std::unique_ptr<WorkerPool>> node_pools;
  std::size_t array_bytes = 0, chase_bytes = 0;
  int reps = 0;
  // The pool that first-touches memory of node os_node: the node's own, or the first node's for
  // a node without CPUs (its pages are bound to it anyway).
  WorkerPool& Toucher(int os_node) const {
    for (std::size_t i = 0; i < cpu_nodes.size(); ++i) {
      if (cpu_nodes[i].os_node == os_node) return *node_pools[i];
    }
    return *node_pools[0];
  }
};

struct Cell {
  double copy = 0, triad = 0;
};

// A table of CPU node rows x memory node columns.
template <class Value>
void PrintMatrix(const MemoryRun& run, const std::string& title, Value value) {
  const std::size_t M = run.topo->numa_nodes.size();
  std::printf("\n%s\n%10s", title.c_str(), "");
  for (std::size_t j = 0; j < M; ++j)
    std::printf(" %9s", fmt::format("mem {}", run.topo->numa_nodes[j].os_index).c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < run.cpu_nodes.size(); ++i) {
    std::printf("%10s", fmt::format("cpu {}", run.cpu_nodes[i].os_node).c_str());
    for (std::size_t j = 0; j < M; ++j) std::printf(" %9.1f", value(i, j));
    std::printf("\n");
  }
}

// The array sizes (--array-mib, --latency-mib, else by the rule in the opening comment), in
// run->array_bytes and run->chase_bytes; l3: the machine's L3 bytes.
void Sizes(MemoryRun* run, int array_mib, int latency_mib, bool quick, uint64_t l3) {
  const topo::Topology& topo = *run->topo;
  std::size_t array_bytes =
      array_mib > 0 ? static_cast<std::size_t>(array_mib) * kMiB
                    : std::max<std::size_t>(quick ? l3 : 4 * l3, (quick ? 16 : 64) * kMiB);
  std::size_t chase_bytes =
      latency_mib > 0 ? static_cast<std::size_t>(latency_mib) * kMiB : array_bytes;
  uint64_t smallest_node = 0;
  for (const topo::NumaNode& n : topo.numa_nodes) {
    if (n.memory_bytes > 0 && (smallest_node == 0 || n.memory_bytes < smallest_node)) {
      smallest_node = n.memory_bytes;
    }
  }
  if (!topo.simulated && smallest_node > 0 && array_mib == 0) {
    const std::size_t cap = std::max<std::size_t>(kMiB, smallest_node / 12 / kMiB * kMiB);
    if (array_bytes > cap) {
      log::Info("bench memory: arrays capped at {} (1/12 of the smallest node's {})",
                FormatBytes(cap), FormatBytes(smallest_node));
      array_bytes = cap;
      if (latency_mib == 0) chase_bytes = cap;
    }
  }
  run->array_bytes = RoundUp(array_bytes, alloc::kHugePageBytes);
  run->chase_bytes = RoundUp(chase_bytes, alloc::kHugePageBytes);
}

// 1 + 2 for memory node j: the scaling on its own cores, then every CPU node's row of the matrix
// (into matrix[i][j]).
void NodeBandwidth(const MemoryRun& run, std::size_t j, std::vector<std::vector<Cell>>* matrix,
                   SuiteRecords* report) {
  const int mem_node = run.topo->numa_nodes[j].os_index;
  const std::size_t array_bytes = run.array_bytes, elems = array_bytes / sizeof(float);
  NodeMemory a(mem_node, array_bytes), b(mem_node, array_bytes), c(mem_node, array_bytes);
  float* fa = static_cast<float*>(a.p);
  float* fb = static_cast<float*>(b.p);
  float* fc = static_cast<float*>(c.p);
  TouchStreamArrays(run.Toucher(mem_node), fa, fb, fc, elems);
  const std::string pages = NodesOf(a.p, a.bytes);
  for (std::size_t i = 0; i < run.cpu_nodes.size(); ++i) {
    const CpuNode& cn = run.cpu_nodes[i];
    if (cn.os_node != mem_node) continue;
    for (int k : ThreadSteps(static_cast<int>(cn.cpus.size()))) {
      std::unique_ptr<WorkerPool> small;
      WorkerPool* pool = run.node_pools[i].get();
      if (k < static_cast<int>(cn.cpus.size())) {
        small = std::make_unique<WorkerPool>(std::vector<int>(cn.cpus.begin(), cn.cpus.begin() + k),
                                             run.binder, fmt::format("mem{}k{}", cn.os_node, k));
        pool = small.get();
      }
      const StreamResult r = MeasureStreamOn(*pool, fa, fb, fc, elems, run.reps, true);
      std::printf("%5d %8d | %8.1f %8.1f %8.1f %8.1f | %s\n", cn.os_node, k, r.copy_gbs,
                  r.triad_gbs, r.copy_nt_gbs, r.triad_nt_gbs, pages.c_str());
      for (auto [op, secs, gbs] : {std::tuple{"copy", r.copy_seconds, r.copy_gbs},
                                   std::tuple{"triad", r.triad_seconds, r.triad_gbs},
                                   std::tuple{"copy_nt", r.copy_nt_seconds, r.copy_nt_gbs},
                                   std::tuple{"triad_nt", r.triad_nt_seconds, r.triad_nt_gbs}}) {
        report->Add({{"kind", "bandwidth"},
                     {"test", "scaling"},
                     {"op", op},
                     {"cpu_node", cn.os_node},
                     {"mem_node", mem_node},
                     {"threads", k},
                     {"cpus", pool->cpus()},
                     {"array_bytes", array_bytes},
                     {"seconds", secs},
                     {"gbs", gbs},
                     {"pages", pages}});
      }
    }
  }
  for (std::size_t i = 0; i < run.cpu_nodes.size(); ++i) {
    const StreamResult r = MeasureStreamOn(*run.node_pools[i], fa, fb, fc, elems, run.reps, false);
    (*matrix)[i][j] = {r.copy_gbs, r.triad_gbs};
    for (auto [op, secs, gbs] : {std::tuple{"copy", r.copy_seconds, r.copy_gbs},
                                 std::tuple{"triad", r.triad_seconds, r.triad_gbs}}) {
      report->Add({{"kind", "bandwidth"},
                   {"test", "matrix"},
                   {"op", op},
                   {"cpu_node", run.cpu_nodes[i].os_node},
                   {"mem_node", mem_node},
                   {"threads", run.node_pools[i]->size()},
                   {"array_bytes", array_bytes},
                   {"seconds", secs},
                   {"gbs", gbs},
                   {"pages", pages}});
    }
  }
}

// 3: latency, every CPU node against every memory node.
void Latency(const MemoryRun& run, bool quick, SuiteRecords* report) {
  const std::size_t M = run.topo->numa_nodes.size(), chase_bytes = run.chase_bytes;
  const std::size_t lines = chase_bytes / 64;
  const std::size_t loads = quick ? std::min<std::size_t>(lines, std::size_t{1} << 20) : lines;
  const int lreps = quick ? 2 : 4;  // the first is a warm-up
  std::vector<std::vector<double>> lat(run.cpu_nodes.size(), std::vector<double>(M, 0));
  for (std::size_t j = 0; j < M; ++j) {
    const int mem_node = run.topo->numa_nodes[j].os_index;
    NodeMemory buf(mem_node, chase_bytes);
    uint64_t* words = static_cast<uint64_t*>(buf.p);
    // Built (first touched) by one thread of the memory's own node.
    WorkerPool& owner = run.Toucher(mem_node);
    owner.Run([&] { BuildChase(words, lines, 0x5eed + j); });
    for (std::size_t i = 0; i < run.cpu_nodes.size(); ++i) {
      WorkerPool one({run.cpu_nodes[i].cpus[0]}, run.binder, "chase");
      std::vector<double> ns;
      one.Run([&] {
        for (int r = 0; r < lreps; ++r) {
          const double v = Chase(words, loads);
          if (r > 0) ns.push_back(v);
        }
      });
      lat[i][j] = Median(ns);
      report->Add({{"kind", "latency"},
                   {"cpu_node", run.cpu_nodes[i].os_node},
                   {"mem_node", mem_node},
                   {"cpu", run.cpu_nodes[i].cpus[0]},
                   {"bytes", chase_bytes},
                   {"loads", loads},
                   {"ns_per_load", lat[i][j]},
                   {"pages", NodesOf(buf.p, buf.bytes)}});
    }
  }
  PrintMatrix(run,
              fmt::format("load latency (ns per dependent load, 1 thread, random cycle over {} "
                          "in 64-byte lines, median of {})",
                          FormatBytes(chase_bytes), lreps - 1),
              [&](std::size_t i, std::size_t j) { return lat[i][j]; });
}

class MemorySuite : public Suite {
 public:
  std::string name() const override { return "memory"; }
  std::string description() const override {
    return "STREAM copy/triad per NUMA node with 1..all cores, the node x node bandwidth matrix, "
           "and load latency local vs remote (pointer chase)";
  }
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--array-mib", array_mib_,
                    "size of each STREAM array in MiB (default: max(4 x L3, 64), --quick "
                    "max(L3, 16))")
        ->check(CLI::Range(1, 1 << 20))
        ->default_str("");
    cmd->add_option("--latency-mib", latency_mib_,
                    "pointer-chase buffer in MiB (default: like --array-mib)")
        ->check(CLI::Range(1, 1 << 20))
        ->default_str("");
    cmd->add_flag("--no-latency", no_latency_, "skip the latency measurement");
  }
  void Run(const BenchContext& ctx, SuiteRecords* report) override;

 private:
  int array_mib_ = 0;
  int latency_mib_ = 0;
  bool no_latency_ = false;
};

void MemorySuite::Run(const BenchContext& ctx, SuiteRecords* report) {
  const topo::Topology topo = topo::LoadTopology(ctx.config.topology);
  const topo::Topology real = topo.simulated ? topo::LoadTopology("this") : topo;
  const alloc::Options aopts = alloc::OptionsFor(topo);
  alloc::Configure(aopts);
  std::unique_ptr<topo::Binder> binder = topo::MakeBinder(topo);
  MemoryRun run;
  run.topo = &topo;
  run.binder = binder.get();
  run.cpu_nodes = CpuNodes(topo);
  if (run.cpu_nodes.empty()) {
    throw RuntimeError("the topology has no NUMA node with an allowed CPU");
  }
  run.reps = ctx.quick ? 2 : 5;
  uint64_t l3 = 0;
  for (const topo::L3Cache& c : real.l3s) l3 += c.size_bytes;
  Sizes(&run, array_mib_, latency_mib_, ctx.quick, l3);

  // ---- header
  std::printf("memory: topology '%s', %zu NUMA node(s), %zu with CPUs\n", topo.spec.c_str(),
              topo.numa_nodes.size(), run.cpu_nodes.size());
  if (topo.simulated) {
    std::printf(
        "  SIMULATED topology: nothing is pinned and nothing is bound. The threads run wherever "
        "this machine's scheduler puts them and every 'node' is this machine's memory: the "
        "numbers are this machine's, labelled with the simulated nodes.\n");
  } else {
    std::printf("  threads pinned (one per physical core); memory %s\n",
                aopts.bind ? "bound to its node (mbind) before first touch"
                           : ("placed by first touch (" + aopts.no_bind_reason + ")").c_str());
  }
  std::printf(
      "  arrays 3 x %s (L3 %s); bandwidth = best of %d after a warm-up, STREAM byte counting "
      "(copy 2 arrays, triad 3)\n\n",
      FormatBytes(run.array_bytes).c_str(), l3 > 0 ? FormatBytes(l3).c_str() : "unknown", run.reps);
  report->Add({{"kind", "setup"},
               {"topology", topo.spec},
               {"simulated", topo.simulated},
               {"pinned", binder->binds()},
               {"bound", aopts.bind},
               {"array_bytes", run.array_bytes},
               {"chase_bytes", run.chase_bytes},
               {"l3_bytes", l3},
               {"reps", run.reps}});
  for (const CpuNode& cn : run.cpu_nodes) {
    run.node_pools.push_back(
        std::make_unique<WorkerPool>(cn.cpus, binder.get(), fmt::format("mem{}", cn.os_node)));
  }

  // ---- 1 + 2: per memory node j, the scaling on its own cores, then every CPU node on it.
  const std::size_t M = topo.numa_nodes.size();
  std::vector<std::vector<Cell>> matrix(run.cpu_nodes.size(), std::vector<Cell>(M));
  std::printf("bandwidth per node, memory local to the threads (GB/s)\n");
  std::printf("%5s %8s | %8s %8s %8s %8s | %s\n", "node", "threads", "copy", "triad", "copy-nt",
              "triad-nt", "pages on node(s)");
  for (std::size_t j = 0; j < M; ++j) NodeBandwidth(run, j, &matrix, report);
  PrintMatrix(run,
              "node x node triad (GB/s; rows: the CPU node's cores, all; columns: the memory node)",
              [&](std::size_t i, std::size_t j) { return matrix[i][j].triad; });
  PrintMatrix(run, "node x node copy (GB/s)",
              [&](std::size_t i, std::size_t j) { return matrix[i][j].copy; });

  // ---- 3: latency
  if (!no_latency_) Latency(run, ctx.quick, report);
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<Suite> MakeMemorySuite() { return std::make_unique<MemorySuite>(); }

}  // namespace cputrain::bench
