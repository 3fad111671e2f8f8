// alloc/numa_alloc.h: placement (move_pages and the mappings' mbind policy), sizes and
// alignment, no leaks (the arenas' allocated bytes return to where they started), concurrent use
// on several nodes, binding off, and errors.
//
// Tests that need two or more NUMA nodes skip on a one-node machine; they run for real when this
// binary runs inside the 2- and 4-node QEMU guests (tests/numa-vm/run.sh -- ./tests/alloc_test).
#include <gtest/gtest.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "topology/topology.h"

#if CPUTRAIN_ALLOC_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

namespace cputrain::alloc {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr char kNeedsNodes[] =
    "needs >= 2 NUMA nodes; this machine has fewer. Covered by the multi-node VM run of this "
    "binary: tests/numa-vm/run.sh --nodes 2 (and --nodes 4) -- ./tests/alloc_test";

// OS ids of the nodes this process may allocate on, ascending.
std::vector<int> MachineNodes() {
  std::vector<int> nodes;
  if (numa_available() < 0) return {0};
  bitmask* mask = numa_get_mems_allowed();
  for (unsigned i = 0; i < mask->size; ++i) {
    if (numa_bitmask_isbitset(mask, i)) nodes.push_back(static_cast<int>(i));
  }
  numa_bitmask_free(mask);
  return nodes;
}

Options BindOn(bool huge_pages = true) {
  Options o;
  o.bind = true;
  o.huge_pages = huge_pages;
  return o;
}

Options BindOff(std::string reason = "alloc_test: binding off on purpose") {
  Options o;
  o.bind = false;
  o.no_bind_reason = std::move(reason);
  return o;
}

// Writes one byte in every 4 KiB page of [p, p + bytes), and the last byte.
void Touch(void* p, std::size_t bytes) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t off = 0; off < bytes; off += 4096) c[off] = 1;
  c[bytes - 1] = 1;
}

// The mbind policy of the mapping holding p: {mode, nodes in its mask}.
std::pair<int, std::vector<int>> PolicyAt(void* p) {
  std::vector<unsigned long> mask(1024 / (8 * sizeof(unsigned long)) + 1, 0);
  const unsigned long maxnode = mask.size() * 8 * sizeof(unsigned long);
  int mode = -1;
  if (get_mempolicy(&mode, mask.data(), maxnode, p, MPOL_F_ADDR) != 0) {
    ADD_FAILURE() << "get_mempolicy: " << std::strerror(errno);
  }
  std::vector<int> nodes;
  for (unsigned long i = 0; i < maxnode; ++i) {
    if (mask[i / (8 * sizeof(unsigned long))] >> (i % (8 * sizeof(unsigned long))) & 1) {
      nodes.push_back(static_cast<int>(i));
    }
  }
  return {mode, nodes};
}

// Pins the calling thread to one node's CPUs for the scope, then restores its affinity.
class PinnedToNode {
 public:
  explicit PinnedToNode(int node) {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    EXPECT_EQ(numa_run_on_node(node), 0) << "numa_run_on_node(" << node << ")";
  }
  ~PinnedToNode() { sched_setaffinity(0, sizeof(saved_), &saved_); }

 private:
  cpu_set_t saved_{};
};

class AllocTest : public ::testing::Test {
 protected:
  void SetUp() override { Configure(BindOn()); }
};

// ------------------------------------------------------------------ placement

TEST_F(AllocTest, PagesAreUntouchedUntilWrittenThenOnTheNode) {
  for (bool huge : {false, true}) {
    SCOPED_TRACE(huge ? "huge pages" : "4 KiB pages");
    Configure(BindOn(huge));
    ReleaseUnusedMemory();  // so the 8 MiB below are fresh, not reused dirty pages
    const std::size_t bytes = 8 * kMiB;
    void* p = AllocateOnNode(0, bytes);
    PageBacking before = NodesBacking(p, bytes);
    EXPECT_EQ(before.pages, bytes / static_cast<std::size_t>(getpagesize()));
    EXPECT_EQ(before.untouched_pages, before.pages) << before.ToString();
    EXPECT_TRUE(before.nodes().empty()) << before.ToString();

    // Half, in whole 2 MiB units so huge pages fault in exactly the same pages.
    Touch(p, bytes / 2);
    PageBacking half = NodesBacking(p, bytes);
    EXPECT_EQ(half.untouched_pages, half.pages / 2) << half.ToString();
    EXPECT_EQ(half.nodes(), std::vector<int>{0}) << half.ToString();

    Touch(p, bytes);
    PageBacking all = NodesBacking(p, bytes);
    EXPECT_EQ(all.untouched_pages, 0u) << all.ToString();
    EXPECT_EQ(all.nodes(), std::vector<int>{0}) << all.ToString();
    EXPECT_EQ(all.pages_on_node[0], all.pages);
    FreeOnNode(p);
  }
}

TEST_F(AllocTest, EveryMappingCarriesTheBindPolicy) {
  // Small sizes come from slabs, large ones from their own extents: all of them were mapped by
  // the arena's hook, so all must carry MPOL_BIND to exactly the node.
  for (std::size_t bytes :
       {std::size_t{64}, std::size_t{4096}, 100 * std::size_t{1024}, 8 * kMiB}) {
    SCOPED_TRACE(bytes);
    void* p = AllocateOnNode(0, bytes);
    auto [mode, nodes] = PolicyAt(p);
    EXPECT_EQ(mode, MPOL_BIND);
    EXPECT_EQ(nodes, std::vector<int>{0});
    FreeOnNode(p);
  }
}

TEST_F(AllocTest, MemoryRequestedOnEachNodeIsOnThatNode) {
  const std::vector<int> nodes = MachineNodes();
  if (nodes.size() < 2) GTEST_SKIP() << kNeedsNodes;
  // Touch everything from a thread on the first node: only the binding can put pages elsewhere.
  PinnedToNode pin(nodes.front());
  for (bool huge : {false, true}) {
    Configure(BindOn(huge));
    for (int node : nodes) {
      SCOPED_TRACE(testing::Message() << "node " << node << (huge ? ", huge pages" : ""));
      const std::size_t bytes = 16 * kMiB + 12345;
      void* p = AllocateOnNode(node, bytes);
      Touch(p, bytes);
      PageBacking b = NodesBacking(p, bytes);
      EXPECT_EQ(b.nodes(), std::vector<int>{node}) << b.ToString();
      EXPECT_EQ(b.untouched_pages, 0u) << b.ToString();
      EXPECT_EQ(PolicyAt(p).second, std::vector<int>{node});
      FreeOnNode(p);

      NodeBuffer<float> small(node, 100);  // a slab, not a large extent
      std::fill(small.begin(), small.end(), 1.0f);
      EXPECT_EQ(NodesBacking(small.data(), small.bytes()).nodes(), std::vector<int>{node});
    }
  }
}

TEST_F(AllocTest, WithoutBindingFirstTouchDecides) {
  const std::vector<int> nodes = MachineNodes();
  if (nodes.size() < 2) GTEST_SKIP() << kNeedsNodes;
  // Why buffers must be first touched by their group's threads when binding is off: memory
  // requested for the last node but touched from the first lands on the first.
  Configure(BindOff());
  PinnedToNode pin(nodes.front());
  const std::size_t bytes = 8 * kMiB;
  void* p = AllocateOnNode(nodes.back(), bytes);
  EXPECT_EQ(PolicyAt(p).first, MPOL_DEFAULT);
  Touch(p, bytes);
  EXPECT_EQ(NodesBacking(p, bytes).nodes(), std::vector<int>{nodes.front()});
  FreeOnNode(p);
}

// ------------------------------------------------------------------ sizes and leaks

TEST_F(AllocTest, SizesAndAlignment) {
  const std::vector<std::size_t> sizes = {
      1, 3, 63, 64, 65, 4095, 4096, 4097, 65537, kMiB + 1, 2 * kMiB, 3 * kMiB + 7, 8 * kMiB + 4097};
  EXPECT_EQ(AllocateOnNode(0, 0), nullptr);
  FreeOnNode(nullptr);
  std::vector<unsigned char*> ptrs;
  for (std::size_t n : sizes) {
    auto* p = static_cast<unsigned char*>(AllocateOnNode(0, n));
    ASSERT_NE(p, nullptr);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    EXPECT_EQ(addr % kCacheLine, 0u) << n;
    if (n >= 4096) {
      EXPECT_EQ(addr % 4096, 0u) << n;
    }
    if (n >= kHugePageBytes) {
      EXPECT_EQ(addr % kHugePageBytes, 0u) << n;
    }
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 31 + n);
    ptrs.push_back(p);
  }
  // Only after all were written: any overlap would have overwritten another's pattern.
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t n = sizes[k];
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += ptrs[k][i] != static_cast<unsigned char>(i * 31 + n);
    EXPECT_EQ(bad, 0u) << "size " << n;
    EXPECT_EQ(NodesBacking(ptrs[k], n).nodes(), std::vector<int>{0}) << n;
    FreeOnNode(ptrs[k]);
  }
}

TEST_F(AllocTest, ManySmallAndLargeAllocationsReturnEveryByte) {
  const std::size_t start = AllocatedBytesOnNode(0);
  std::mt19937_64 rng(20240611);
  struct Live {
    std::uint64_t* p;
    std::size_t bytes;
    std::uint64_t tag;
  };
  std::vector<Live> live;
  std::size_t live_bytes = 0, allocs = 0, frees = 0;
  auto free_one = [&](std::size_t i) {
    Live l = live[i];
    // The tag at both ends proves no other allocation overlapped this one while it lived.
    ASSERT_EQ(l.p[0], l.tag);
    ASSERT_EQ(l.p[l.bytes / 8 - 1], l.tag);
    FreeOnNode(l.p);
    live_bytes -= l.bytes;
    live[i] = live.back();
    live.pop_back();
    ++frees;
  };
  for (int op = 0; op < 20000; ++op) {
    if (live.size() < 300 && (live.empty() || rng() % 2 == 0)) {
      const std::uint64_t r = rng() % 100;
      std::size_t bytes = r < 70   ? 8 + rng() % 512
                          : r < 97 ? 4096 + rng() % (256 * 1024)
                                   : kMiB + rng() % (12 * kMiB);
      bytes = bytes / 8 * 8;
      auto* p = static_cast<std::uint64_t*>(AllocateOnNode(0, bytes));
      const std::uint64_t tag = rng();
      p[0] = tag;
      p[bytes / 8 - 1] = tag;
      live.push_back({p, bytes, tag});
      live_bytes += bytes;
      ++allocs;
    } else {
      free_one(rng() % live.size());
    }
    if (op == 10000) {
      EXPECT_GE(AllocatedBytesOnNode(0) - start, live_bytes);
    }
  }
  while (!live.empty()) free_one(live.size() - 1);
  EXPECT_EQ(allocs, frees);
  EXPECT_GT(allocs, 9000u);
  EXPECT_EQ(AllocatedBytesOnNode(0), start) << "bytes leaked by the node arena";
}

TEST_F(AllocTest, NodeBufferDoesNotTouchAndFreesOnDestruction) {
  ReleaseUnusedMemory();
  const std::size_t start = AllocatedBytesOnNode(0);
  {
    NodeBuffer<float> a(0, 3 * kMiB);  // 12 MiB
    EXPECT_EQ(a.size(), 3 * kMiB);
    EXPECT_EQ(a.bytes(), 12 * kMiB);
    EXPECT_EQ(a.node(), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % kHugePageBytes, 0u);
    PageBacking b = NodesBacking(a.data(), a.bytes());
    EXPECT_EQ(b.untouched_pages, b.pages) << "NodeBuffer touched its pages: " << b.ToString();
    EXPECT_GE(AllocatedBytesOnNode(0), start + a.bytes());

    float* data = a.data();
    NodeBuffer<float> c(std::move(a));
    EXPECT_EQ(c.data(), data);
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
    EXPECT_EQ(a.size(), 0u);
    NodeBuffer<float> d(0, 10);
    d = std::move(c);  // frees d's 10 floats, takes c's buffer
    EXPECT_EQ(d.data(), data);
    EXPECT_EQ(d.size(), 3 * kMiB);
    std::fill(d.begin(), d.end(), 2.0f);
    EXPECT_EQ(NodesBacking(d.data(), d.bytes()).nodes(), std::vector<int>{0});
  }
  EXPECT_EQ(AllocatedBytesOnNode(0), start);

  NodeBuffer<int> empty(0, 0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_THROW(NodeBuffer<double>(0, SIZE_MAX / 4), RuntimeError);
}

// ------------------------------------------------------------------ concurrency

class AllocStressTest : public AllocTest, public ::testing::WithParamInterface<int> {};

// Invariant: with T threads allocating and freeing on the machine's nodes (thread t on node
// t % nodes) at once, (1) no allocation overlaps another while both live (each carries its
// owner's <thread, sequence> tag at both ends, checked before it is freed), (2) every large one
// is backed only by its node once touched, and (3) each node's allocated bytes return to where
// they started, so every allocation went to, and was freed from, its own node's arena.
TEST_P(AllocStressTest, ConcurrentAllocationOnEveryNode) {
  const int threads = GetParam();
  const std::vector<int> nodes = MachineNodes();
  std::vector<std::size_t> start;
  for (int n : nodes) start.push_back(AllocatedBytesOnNode(n));
  std::atomic<long> allocs{0}, frees{0}, misplaced{0}, corrupted{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int node = nodes[static_cast<std::size_t>(t) % nodes.size()];
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
      struct Live {
        std::uint64_t* p;
        std::size_t words;
        std::uint64_t tag;
      };
      std::vector<Live> live;
      auto release = [&](std::size_t i) {
        const Live& l = live[i];
        if (l.p[0] != l.tag || l.p[l.words - 1] != l.tag) ++corrupted;
        if (l.words * 8 >= kMiB) {
          const PageBacking b = NodesBacking(l.p, l.words * 8);
          if (b.nodes() != std::vector<int>{node}) ++misplaced;
        }
        FreeOnNode(l.p);
        ++frees;
        live[i] = live.back();
        live.pop_back();
      };
      for (std::uint64_t seq = 0; seq < 3000; ++seq) {
        if (live.size() < 40 && (live.empty() || rng() % 3 != 0)) {
          const std::uint64_t r = rng() % 100;
          const std::size_t bytes = r < 80   ? 8 + rng() % 2048
                                    : r < 98 ? 4096 + rng() % 65536
                                             : kMiB + rng() % (3 * kMiB);
          const std::size_t words = bytes / 8 + 1;
          auto* p = static_cast<std::uint64_t*>(AllocateOnNode(node, words * 8));
          const std::uint64_t tag = (static_cast<std::uint64_t>(t) << 32) | seq;
          if (words * 8 >= kMiB) Touch(p, words * 8);
          p[0] = tag;
          p[words - 1] = tag;
          live.push_back({p, words, tag});
          ++allocs;
        } else {
          release(rng() % live.size());
        }
      }
      while (!live.empty()) release(live.size() - 1);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(allocs.load(), frees.load());
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(misplaced.load(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(AllocatedBytesOnNode(nodes[i]), start[i]) << "node " << nodes[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, AllocStressTest, ::testing::Values(2, 4, 8));

// ------------------------------------------------------------------ binding off

TEST_F(AllocTest, SimulatedTopologyKeepsNodesApartWithoutBinding) {
  const topo::Topology t = topo::LoadTopology("synthetic:pack:2 numa:1 core:1 pu:1");
  const Options o = OptionsFor(t);
  EXPECT_FALSE(o.bind);
  EXPECT_NE(o.no_bind_reason.find("simulated"), std::string::npos) << o.no_bind_reason;
  EXPECT_EQ(o.nodes, (std::vector<int>{0, 1}));
  Configure(o);

  // Node 1 exists in the simulated machine only; it still gets its own arena.
  const std::size_t node0 = AllocatedBytesOnNode(0), node1 = AllocatedBytesOnNode(1);
  const std::size_t bytes = 4 * kMiB;
  void* p = AllocateOnNode(1, bytes);
  EXPECT_EQ(AllocatedBytesOnNode(1), node1 + bytes);
  EXPECT_EQ(AllocatedBytesOnNode(0), node0);
  EXPECT_EQ(PolicyAt(p).first, MPOL_DEFAULT);
  Touch(p, bytes);
  const std::vector<int> machine = MachineNodes();
  for (int n : NodesBacking(p, bytes).nodes()) {
    EXPECT_TRUE(std::binary_search(machine.begin(), machine.end(), n)) << n;
  }
  FreeOnNode(p);
  EXPECT_EQ(AllocatedBytesOnNode(1), node1);
  EXPECT_THROW(AllocateOnNode(2, 64), InputError);
}

TEST_F(AllocTest, BindingOffIsSaidOnceOnStderr) {
  static int run = 0;  // a reason never said before in this process, also under --gtest_repeat
  const std::string reason = "alloc_test reason " + std::to_string(++run);
  testing::internal::CaptureStderr();
  Configure(BindOff(reason));
  Configure(BindOff(reason));
  const std::string err = testing::internal::GetCapturedStderr();
  const auto first = err.find(reason);
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(reason, first + 1), std::string::npos) << "said twice:\n" << err;
  // Never silently: turning binding off without saying why is refused.
  EXPECT_THROW(Configure(BindOff("")), RuntimeError);
}

TEST_F(AllocTest, OptionsForThisMachine) {
  const topo::Topology t = topo::LoadTopology("this");
  const Options o = OptionsFor(t);
  if (t.numa_nodes.size() >= 2) {
    EXPECT_TRUE(o.bind);
  } else {
    EXPECT_FALSE(o.bind);
    EXPECT_NE(o.no_bind_reason.find("one NUMA node"), std::string::npos) << o.no_bind_reason;
  }
  EXPECT_NO_THROW(Configure(o));
  NodeBuffer<char> b(t.numa_nodes.front().os_index, 1000);
  EXPECT_NE(b.data(), nullptr);
}

// ------------------------------------------------------------------ errors

TEST_F(AllocTest, NodeThatDoesNotExistIsInputError) {
  const std::vector<int> nodes = MachineNodes();
  for (int bad : {-1, nodes.back() + 1, 100000}) {
    try {
      AllocateOnNode(bad, 64);
      ADD_FAILURE() << "node " << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("node " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
  Options o = BindOn();
  o.nodes = {nodes.front(), 4095};
  try {
    Configure(o);
    ADD_FAILURE() << "binding to node 4095 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("4095"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  o.nodes = {-3};
  EXPECT_THROW(Configure(o), InputError);
}

TEST_F(AllocTest, OutOfMemoryNamesTheNodeAndTheSize) {
  // 1 PiB: more than RAM + swap, so mmap refuses it (overcommit heuristic) inside the hook.
  const std::size_t huge = std::size_t{1} << 50;
  try {
    AllocateOnNode(0, huge);
    ADD_FAILURE() << "1 PiB was allocated";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NUMA node 0"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(huge) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("mmap failed"), std::string::npos) << what;
    EXPECT_NE(e.hint().find("numactl -H"), std::string::npos) << e.hint();
  }
  EXPECT_THROW(AllocateOnNode(0, SIZE_MAX), RuntimeError);
  // The arena is still usable afterwards.
  NodeBuffer<char> ok(0, 100);
  EXPECT_NE(ok.data(), nullptr);
}

// ------------------------------------------------------------------ the query

TEST(NodesBackingTest, OrdinaryMemoryRoundingAndErrors) {
  const auto page = static_cast<std::size_t>(getpagesize());
  std::vector<char> v(kMiB, 1);
  const std::vector<int> machine = MachineNodes();
  PageBacking b = NodesBacking(v.data(), v.size());
  EXPECT_EQ(b.untouched_pages, 0u) << b.ToString();
  for (int n : b.nodes()) EXPECT_TRUE(std::binary_search(machine.begin(), machine.end(), n)) << n;
  if (machine.size() == 1) {
    EXPECT_EQ(b.nodes(), machine);
  }

  char* base = static_cast<char*>(
      mmap(nullptr, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  EXPECT_EQ(NodesBacking(base + 100, 10).pages, 1u);
  EXPECT_EQ(NodesBacking(base + page - 6, 10).pages, 2u);
  EXPECT_EQ(NodesBacking(base, 0).pages, 0u);
  // Read but never written: the shared zero page, no memory on any node.
  long sum = 0;
  for (std::size_t i = 0; i < 8; ++i) sum += static_cast<volatile char*>(base)[i * page];
  EXPECT_EQ(sum, 0);
  EXPECT_EQ(NodesBacking(base, 8 * page).untouched_pages, 8u);
  base[3 * page] = 1;
  b = NodesBacking(base, 8 * page);
  EXPECT_EQ(b.untouched_pages, 7u) << b.ToString();
  EXPECT_EQ(b.pages_on_node.size(), 1u) << b.ToString();
  munmap(base, 8 * page);
  EXPECT_THROW(NodesBacking(base, 8 * page), RuntimeError);
}

#if CPUTRAIN_ALLOC_JEMALLOC
unsigned ArenaOf(const void* p) {
  unsigned arena = 0;
  std::size_t len = sizeof(arena);
  EXPECT_EQ(mallctl("arenas.lookup", &arena, &len, &p, sizeof(p)), 0);
  return arena;
}

// Regression: the arenas' hooks once unmapped freed extents. Freeing oversize buffers (above
// jemalloc's 8 MiB oversize_threshold, which it purges at once) on several arenas in turn then
// let jemalloc merge one arena's extent into another's and mallocx crashed (2-node QEMU guest;
// see backend_jemalloc.cc). A freed extent must stay mapped, so no address range ever moves
// between arenas, and be purged, so its memory still goes back to the OS.
TEST_F(AllocTest, FreedOversizeBuffersStayMappedAndArePurged) {
  const std::size_t bytes = 16 * kMiB + 12345;
  void* p = AllocateOnNode(0, bytes);
  Touch(p, bytes);
  FreeOnNode(p);
  PageBacking b;
  ASSERT_NO_THROW(b = NodesBacking(p, bytes)) << "the freed extent was unmapped";
  EXPECT_EQ(b.untouched_pages, b.pages) << "the freed extent was not purged: " << b.ToString();

  // The sequence that crashed, on four arenas: (simulated) nodes 0 and 1, huge pages off and on.
  for (int rep = 0; rep < 4; ++rep) {
    for (bool huge : {false, true}) {
      Options o = BindOff();
      o.nodes = {0, 1};
      o.huge_pages = huge;
      Configure(o);
      for (int node : {0, 1}) {
        void* q = AllocateOnNode(node, bytes);
        Touch(q, bytes);
        FreeOnNode(q);
        NodeBuffer<float> small(node, 100);
        std::fill(small.begin(), small.end(), 1.0f);
      }
    }
  }
}

// jemalloc's thread cache is shared by all arenas: had AllocateOnNode used it, a freed node
// region would be handed to the next plain malloc of that size class (and vice versa).
TEST_F(AllocTest, NodeMemoryNeverPassesThroughTheThreadCache) {
  void* node_p = AllocateOnNode(0, 64);
  const unsigned node_arena = ArenaOf(node_p);
  void* plain = std::malloc(64);
  EXPECT_NE(ArenaOf(plain), node_arena) << "malloc served from a node arena";
  std::free(plain);
  FreeOnNode(node_p);
  std::vector<void*> ps;
  for (int i = 0; i < 1000; ++i) {
    ps.push_back(std::malloc(64));
    EXPECT_NE(ps.back(), node_p);
    EXPECT_NE(ArenaOf(ps.back()), node_arena);
  }
  for (void* p : ps) std::free(p);
  // And the other way: a region malloc freed is not handed to AllocateOnNode.
  void* q = std::malloc(64);
  std::free(q);
  void* r = AllocateOnNode(0, 64);
  EXPECT_EQ(ArenaOf(r), node_arena);
  FreeOnNode(r);
}
#endif

}  // namespace
}  // namespace cputrain::alloc
