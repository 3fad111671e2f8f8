// train/memory_plan.h: the plan is what ReplicaGroups allocates, buffer by buffer and node by node
// (fp32 and bf16, full fine-tunes and LoRA, a replica per node or one shared), and a node that
// cannot hold it refuses the run naming both figures and the fixes.
#include "train/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "kernels/bf16.h"
#include "model/lora.h"
#include "model/params.h"
#include "runtime/worker_pool.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/replica_group.h"

namespace cputrain::train {
namespace {

struct Case {
  const char* name;
  const char* topology;
  topo::GroupBy by;
  bool bf16, lora;
  bool checkpoint = false;
  bool base_bf16 = false;
  const char* optim = "adamw";  // optim.name (issue 42: every optimizer's state is planned)
};

// Every buffer ReplicaGroups holds, summed per node under the plan's line names.
std::map<int, std::map<std::string, std::uint64_t>> Allocated(const ReplicaGroups& groups) {
  std::map<int, std::map<std::string, std::uint64_t>> out;
  for (int g = 0; g < groups.size(); ++g) {
    const ReplicaGroup& grp = groups[g];
    auto& n = out[grp.node];
    n["parameters"] += grp.params.bytes();
    n["gradients"] += grp.grads.bytes();
    for (const auto& b : grp.state) n["optimizer state"] += b.bytes();
    n["optimizer statistics"] += grp.optim_scratch.bytes();
    n["activations"] += grp.acts.bytes();
    n["token rows"] += grp.tokens.bytes();
    n["small buffers"] += grp.scalars.bytes();
    n["adapter activations"] += grp.lora_acts.bytes();
    n["parameters, bf16 copy"] += grp.params_bf16.bytes();
    n["bf16 operands"] += grp.scratch_bf16.bytes();
  }
  // A bf16 base's fp32 buffer is a reservation of which only the tensors kept in fp32 become
  // resident, and, on the first node while loading, one bf16-only tensor at a time.
  const model::Lora* lora = groups.lora();
  for (const ReplicaGroups::NodeBase& b : groups.bases()) {
    const bool bf16_base = lora && lora->config().base_bf16;
    out[b.node]["frozen base"] += bf16_base ? BaseFp32Floats(*lora) * 4 : b.params.bytes();
    if (bf16_base && &b == &groups.bases()[0])
      out[b.node]["frozen base, loading"] += BaseLoadingFp32Floats(*lora) * 4;
    out[b.node]["frozen base, bf16 copy"] += b.bf16.bytes();
  }
  return out;
}

class MemoryPlanMatches : public ::testing::TestWithParam<Case> {};

TEST_P(MemoryPlanMatches, WhatReplicaGroupsAllocates) {
  const Case& c = GetParam();
  const topo::Topology topology = topo::LoadTopology(c.topology);
  topo::PlacementConfig pc;
  pc.group_by = c.by;
  const topo::Plan plan = topo::PlanPlacement(topology, pc, nullptr);
  alloc::Configure(alloc::OptionsFor(topology));
  model::Shape shape{32, 50, model::Shape::PadVocab(50), 2, 2, 16};
  const int rows = 3, T = 12;
  model::LoraConfig lora;
  lora.r = c.lora ? 4 : 0;
  lora.base_bf16 = c.base_bf16;
  MemoryRun run;
  run.shape = shape;
  run.rows = rows;
  run.T = T;
  run.bf16 = c.bf16;
  run.checkpoint = c.checkpoint;
  if (c.lora) run.lora = lora;
  run.optimizer.name = c.optim;
  run.optimizer.momentum = 0.9;
  const std::vector<NodeMemory> planned = PlanMemory(plan, run);
  GroupOptions o;
  o.comm_pools = plan.groups.size() > 1;
  o.bf16 = c.bf16;
  o.checkpoint = c.checkpoint;
  o.lora = c.lora ? &lora : nullptr;
  o.optimizer = run.optimizer;
  ReplicaGroups groups(topology, plan, shape, rows, T, o);
  const auto allocated = Allocated(groups);
  std::size_t nodes_with_memory = 0;
  for (const auto& [node, lines] : allocated) {
    std::uint64_t sum = 0;
    for (const auto& [what, bytes] : lines) sum += bytes;
    nodes_with_memory += sum > 0;
  }
  ASSERT_EQ(planned.size(), nodes_with_memory);
  for (const NodeMemory& n : planned) {
    ASSERT_TRUE(allocated.count(n.node)) << "node " << n.node;
    const auto& have = allocated.at(n.node);
    std::uint64_t total = 0;
    for (const auto& [what, bytes] : have) total += bytes;
    for (const MemoryLine& l : n.lines) {
      ASSERT_TRUE(have.count(l.what)) << l.what;
      EXPECT_EQ(l.bytes, have.at(l.what)) << "node " << n.node << ": " << l.what;
    }
    EXPECT_EQ(n.total(), total) << "node " << n.node << "\n" << DescribeMemory(planned, {});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, MemoryPlanMatches,
    ::testing::Values(Case{"fp32_one_group", "synthetic:pack:1 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, false, false},
                      Case{"bf16_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, true, false},
                      Case{"fp32_shared_replica", "synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
                           topo::GroupBy::kL3, false, false},
                      Case{"lora_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, false, true},
                      Case{"lora_bf16_shared", "synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
                           topo::GroupBy::kL3, true, true},
                      Case{"checkpointed_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, false, false, true},
                      Case{"lora_bf16_checkpointed", "synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
                           topo::GroupBy::kL3, true, true, true},
                      Case{"lora_bf16_base_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, true, true, false, true},
                      Case{"adafactor_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, false, false, false, false, "adafactor"},
                      Case{"adafactor_lora_shared", "synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
                           topo::GroupBy::kL3, false, true, false, false, "adafactor"},
                      Case{"sgd_two_nodes", "synthetic:pack:2 numa:1 core:2 pu:1",
                           topo::GroupBy::kSocket, false, false, false, false, "sgd"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// A bf16 frozen base (train.lora.base_dtype: bf16) over two nodes, filled as a run fills it:
// the block products and the untied LM head exist in bf16 only, and while loading no more than
// one of them is ever resident in fp32 (measured page by page with move_pages, after each tensor
// the loader writes); every value is RandomInit's, the bf16 copy its rounding; the plan's lines
// are what is resident.
TEST(MemoryPlan, ABf16BaseNeverHoldsItsProductsInFp32Together) {
  const topo::Topology topology = topo::LoadTopology("synthetic:pack:2 numa:1 core:1 pu:1");
  const topo::Plan plan = topo::PlanPlacement(topology, topo::PlacementConfig{}, nullptr);
  alloc::Configure(alloc::OptionsFor(topology));
  model::Shape shape{512, 4000, model::Shape::PadVocab(4000), 6, 8, 64};
  shape.arch = model::Arch::kLlama;
  shape.F = 1408;
  shape.tied = false;
  model::LoraConfig lora;
  lora.r = 4;
  lora.base_bf16 = true;
  GroupOptions o;
  o.comm_pools = true;
  o.bf16 = true;
  o.lora = &lora;
  ReplicaGroups groups(topology, plan, shape, 1, 8, o);
  const model::ParamLayout& layout = groups.model_layout();
  std::vector<float> ref(layout.total());
  WorkerPool one({0}, nullptr, "ref");
  model::RandomInit(one, layout, 7, ref.data());
  const std::size_t page = 4096, kept = BaseFp32Floats(*groups.lora()) * 4;
  const std::size_t loading = BaseLoadingFp32Floats(*groups.lora()) * 4;
  const uint16_t* bf16 = groups.bases()[0].bf16.data();
  auto resident = [&](const void* p, std::size_t bytes) {
    const alloc::PageBacking b = alloc::NodesBacking(p, bytes);
    return (b.pages - b.untouched_pages) * page;
  };
  // The first base's fp32 and bf16 buffers, resident, right after each tensor the loader writes
  // (before it is converted and given back).
  std::size_t peak = 0, copies = 0;
  groups.InitBase([&](WorkerPool& pool, float* base, model::TensorDone done) {
    model::RandomInit(pool, layout, 7, base, [&](model::Tensor t, int l) {
      peak =
          std::max(peak, resident(base, layout.total() * 4) + resident(bf16, layout.total() * 2));
      ++copies;
      done(t, l);
    });
  });
  // Each tensor copy may share a page with its neighbours at both ends, in both buffers.
  const std::size_t slack = 4 * page * copies, planned = kept + loading + layout.total() * 2;
  std::printf(
      "[measured] base resident at most %zu bytes while loading; planned %zu (fp32 kept %zu, "
      "loading %zu, bf16 copy %zu); the fp32 base whole would be %zu\n",
      peak, planned, kept, loading, layout.total() * 2, layout.total() * 4);
  EXPECT_LE(peak, planned + slack) << "products resident in fp32 together";
  EXPECT_LT(peak + slack, layout.total() * 4) << "more than the whole base in fp32 alone";
  for (const ReplicaGroups::NodeBase& b : groups.bases()) {
    const alloc::PageBacking r = alloc::NodesBacking(b.params.data(), b.params.bytes());
    EXPECT_LE((r.pages - r.untouched_pages) * page, kept + slack) << "node " << b.node;
    for (const model::TensorInfo& info : layout.tensors()) {
      for (int l = 0; l < (info.per_layer ? shape.L : 1); ++l) {
        const std::size_t off = layout.offset(info.t, l);
        const bool only = groups.Bf16Only(info.t);
        for (std::size_t i = off; i < off + info.numel; i += 97) {
          ASSERT_EQ(b.bf16[i], kernels::FloatToBf16(ref[i])) << info.name << " " << l << " " << i;
          if (!only) {
            ASSERT_EQ(b.params[i], ref[i]) << info.name << " " << l << " " << i;
          }
        }
      }
    }
  }
  EXPECT_TRUE(groups.Bf16Only(model::kQkvw) && groups.Bf16Only(model::kLmHead));
  EXPECT_FALSE(groups.Bf16Only(model::kWte) || groups.Bf16Only(model::kLn1w));
  MemoryRun run;
  run.shape = shape;
  run.T = 8;
  run.bf16 = true;
  run.lora = lora;
  for (const NodeMemory& n : PlanMemory(plan, run)) {
    for (const MemoryLine& line : n.lines) {
      if (line.what == "frozen base") {
        EXPECT_EQ(line.bytes, kept);
      } else if (line.what == "frozen base, loading") {
        EXPECT_EQ(line.bytes, loading);
      }
    }
  }
}

TEST(MemoryPlan, TheSnapshotOfPeriodicSavesIsOnGroupZerosNode) {
  const topo::Plan plan = topo::PlanPlacement(
      topo::LoadTopology("synthetic:pack:2 numa:1 core:2 pu:1"), topo::PlacementConfig{}, nullptr);
  MemoryRun run;
  run.shape = model::Shape{32, 50, model::Shape::PadVocab(50), 2, 2, 16};
  run.snapshot = true;
  const std::vector<NodeMemory> nodes = PlanMemory(plan, run);
  ASSERT_EQ(nodes.size(), 2u);
  const std::uint64_t params = 4 * model::ParamLayout(run.shape).total();
  bool found = false;
  for (const MemoryLine& l : nodes[0].lines) {
    if (l.what == "checkpoint snapshot") found = l.bytes == 3 * params;
  }
  EXPECT_TRUE(found) << DescribeMemory(nodes, {});
  for (const MemoryLine& l : nodes[1].lines) EXPECT_NE(l.what, "checkpoint snapshot");
}

TEST(MemoryPlan, ANodeThatCannotHoldItsPlanRefusesTheRunNamingBothFiguresAndTheFixes) {
  const topo::Plan plan = topo::PlanPlacement(
      topo::LoadTopology("synthetic:pack:2 numa:1 core:2 pu:1"), topo::PlacementConfig{}, nullptr);
  MemoryRun run;
  run.shape = model::Shape{32, 50, model::Shape::PadVocab(50), 2, 2, 16};
  const std::vector<NodeMemory> nodes = PlanMemory(plan, run);
  ASSERT_EQ(nodes.size(), 2u);
  const std::uint64_t need1 = nodes[1].total();
  const auto tight = [&](int node) -> std::uint64_t { return node == 1 ? need1 - 1 : 1ull << 40; };
  unsetenv("CPUTRAIN_MEMORY_CHECK");
  try {
    CheckMemoryFits(nodes, tight, "lower --per_device_train_batch_size");
    FAIL() << "not refused";
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string what = e.what();
    EXPECT_NE(what.find("NUMA node 1"), std::string::npos) << what;
    EXPECT_NE(what.find("largest: "), std::string::npos) << what;
    EXPECT_NE(e.hint().find("--per_device_train_batch_size"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("CPUTRAIN_MEMORY_CHECK=off"), std::string::npos) << e.hint();
  }
  // Exactly enough fits; an unknown figure (0) never refuses.
  const std::uint64_t most = std::max(need1, nodes[0].total());
  EXPECT_NO_THROW(CheckMemoryFits(
      nodes, [&](int) { return most; }, ""));
  EXPECT_NO_THROW(CheckMemoryFits(
      nodes, [](int) -> std::uint64_t { return 0; }, ""));
  setenv("CPUTRAIN_MEMORY_CHECK", "off", 1);
  EXPECT_NO_THROW(CheckMemoryFits(nodes, tight, ""));
  unsetenv("CPUTRAIN_MEMORY_CHECK");
}

TEST(MemoryPlan, ThisMachineSaysWhatItsNodesCanGive) {
  // One node at least, and no more than the machine's memory (MemAvailable is at most MemTotal).
  const std::uint64_t a = alloc::AvailableOnNode(0);
  EXPECT_GT(a, 0u);
  EXPECT_LT(a, 1ull << 50);
}

}  // namespace
}  // namespace cputrain::train
