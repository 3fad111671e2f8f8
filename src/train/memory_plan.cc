// train/memory_plan.h: the sizes train/replica_group.cc allocates, per node, before it does.
#include "train/memory_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>

#include "comm/comm.h"
#include "common/error.h"
#include "common/log.h"
#include "model/params.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/replica_group.h"

namespace cputrain::train {
namespace {

std::string Size(std::uint64_t bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0, kMiB = 1024.0 * 1024.0;
  return bytes >= (std::uint64_t{1} << 30) ? fmt::format("{:.2f} GiB", bytes / kGiB)
                                           : fmt::format("{:.1f} MiB", bytes / kMiB);
}

// Builds the per-node lines, merging the same kind of buffer of several groups on one node.
class Planner {
 public:
  void Add(int node, const std::string& what, std::uint64_t bytes, const std::string& note) {
    if (bytes == 0) return;
    NodeMemory& n = nodes_[node];
    n.node = node;
    for (MemoryLine& l : n.lines) {
      if (l.what == what) {
        l.bytes += bytes;
        ++counts_[{node, what}];
        return;
      }
    }
    n.lines.push_back({what, bytes, note});
    counts_[{node, what}] = 1;
  }
  void AddGroup(int node, int g) {
    nodes_[node].node = node;
    nodes_[node].groups.push_back(g);
  }
  std::vector<NodeMemory> Done() {
    std::vector<NodeMemory> out;
    for (auto& [node, n] : nodes_) {
      for (MemoryLine& l : n.lines) {
        const int c = counts_[{node, l.what}];
        if (c > 1) l.note += fmt::format(", {} groups", c);
      }
      out.push_back(std::move(n));
    }
    return out;
  }

 private:
  std::map<int, NodeMemory> nodes_;
  std::map<std::pair<int, std::string>, int> counts_;
};

int NodeOf(const topo::Group& g) { return g.numa_node >= 0 ? g.numa_node : 0; }

// The frozen base of a LoRA run, once per node (ReplicaGroups' NodeBase). A bf16 base keeps its
// block products in bf16 alone; loading holds one of them in fp32 at a time, on node 0.
void AddBases(const topo::Plan& plan, const MemoryRun& run, const model::Lora& lora, Planner* p) {
  const std::uint64_t base_floats = lora.base().total();
  std::vector<int> seen;
  for (const topo::Group& g : plan.groups) {
    const int node = NodeOf(g);
    if (std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    if (!run.lora->base_bf16) {
      p->Add(node, "frozen base", 4 * base_floats, "fp32, one copy per NUMA node");
    } else {
      p->Add(node, "frozen base", 4 * BaseFp32Floats(lora),
             "fp32: embeddings, norms, biases (the products are bf16 only)");
      if (seen.empty()) {
        p->Add(node, "frozen base, loading", 4 * BaseLoadingFp32Floats(lora),
               "fp32 of one product while it is converted, while loading");
      }
    }
    seen.push_back(node);
    if (run.bf16) p->Add(node, "frozen base, bf16 copy", 2 * base_floats, "what the products read");
  }
}

}  // namespace

std::uint64_t NodeMemory::total() const {
  std::uint64_t t = 0;
  for (const MemoryLine& l : lines) t += l.bytes;
  return t;
}

std::vector<NodeMemory> PlanMemory(const topo::Plan& plan, const MemoryRun& run) {
  const model::ParamLayout model_layout(run.shape);
  std::unique_ptr<model::Lora> lora;
  if (run.lora && run.lora->on()) lora = std::make_unique<model::Lora>(model_layout, *run.lora);
  const std::uint64_t trained = lora ? lora->layout().total() : model_layout.total();
  const int G = static_cast<int>(plan.groups.size());
  const bool shared = ShareReplica(plan);  // the groups' choice (train/replica_group.h)
  const std::string what = lora ? "the adapters'" : "the model's";
  const std::unique_ptr<optim::Optimizer> optimizer =
      optim::MakeOptimizer(run.optimizer, lora ? lora->layout() : model_layout);
  std::uint64_t state = 0;  // the optimizer's floats, all groups
  Planner p;
  for (int g = 0; g < G; ++g) {
    const topo::Group& pg = plan.groups[g];
    const int node = NodeOf(pg);
    const int threads = std::max<int>(1, static_cast<int>(pg.cpus.size()));
    p.AddGroup(node, g);
    if (!shared || g == 0) {
      p.Add(node, "parameters", 4 * trained,
            fmt::format("{} fp32{}", what, shared ? ", one replica the node's groups share" : ""));
    }
    p.Add(node, "gradients", 4 * trained, "fp32");
    const comm::Range shard = comm::ShardBounds(trained, G, g);
    const std::vector<optim::Slot> slots = optimizer->Slots(shard.lo, shard.hi);
    std::string names;
    std::uint64_t floats = 0;
    for (const optim::Slot& slot : slots) {
      names += (names.empty() ? "" : ", ") + slot.name;
      floats += slot.local;
    }
    state += floats;
    p.Add(node, "optimizer state", 4 * floats,
          fmt::format("{}: {}{}", optimizer->name(), names.empty() ? "none" : names,
                      G > 1 ? " of the group's ZeRO-1 shard" : ""));
    if (optimizer->ReduceFloats() > 0) {
      p.Add(node, "optimizer statistics", 4 * optimizer->ReduceFloats(),
            "per-tensor sums the shards add up");
    }
    const model::Activations act(run.shape, run.rows, run.T, threads, run.checkpoint);
    p.Add(node, "activations", 4 * act.floats(),
          fmt::format("{} rows x T={} a group, {}", run.rows, run.T,
                      run.checkpoint ? "one layer's and each block's input (gradient checkpointing)"
                                     : "every layer's, saved for the backward"));
    p.Add(node, "token rows", 4 * model::Activations::TokenInts(run.shape, run.rows, run.T),
          "inputs and targets");
    p.Add(node, "small buffers", 4 * 16, "reductions' scalars");
    if (lora) {
      p.Add(node, "adapter activations", 4 * lora->ActFloats(run.rows, run.T), "LoRA");
    }
    if (run.bf16) {
      if ((!shared || g == 0) && !lora) p.Add(node, "parameters, bf16 copy", 2 * trained, "");
      const std::uint64_t scratch = model::Bf16Operands::InElems(run.shape, run.rows, run.T) +
                                    model::Bf16Operands::DoutElems(run.shape, run.rows, run.T) +
                                    model::Bf16Operands::AttnElems(threads, run.T);
      p.Add(node, "bf16 operands", 2 * scratch, "the products' converted inputs");
    }
  }
  if (lora) AddBases(plan, run, *lora, &p);
  if (run.snapshot && G > 0) {
    p.Add(NodeOf(plan.groups[0]), "checkpoint snapshot", 4 * (trained + state),
          "parameters and optimizer state, copied for the background save");
  }
  return p.Done();
}

std::string DescribeMemory(const std::vector<NodeMemory>& nodes,
                           const std::function<std::uint64_t(int)>& available) {
  std::string out =
      "memory plan, per NUMA node (train/memory_plan.h; the program itself comes on top):";
  for (const NodeMemory& n : nodes) {
    const std::uint64_t a = available ? available(n.node) : 0;
    out += fmt::format("\n  node {}: {} planned{} (groups {})", n.node, Size(n.total()),
                       a ? fmt::format(", {} available", Size(a)) : std::string(),
                       fmt::join(n.groups, ", "));
    for (const MemoryLine& l : n.lines) {
      out += fmt::format("\n    {:<24} {:>10}  {}", l.what, Size(l.bytes), l.note);
    }
  }
  return out;
}

void CheckMemoryFits(const std::vector<NodeMemory>& nodes,
                     const std::function<std::uint64_t(int)>& available, const std::string& fixes) {
  for (const NodeMemory& n : nodes) {
    const std::uint64_t a = available ? available(n.node) : 0;
    if (a == 0 || n.total() <= a) continue;
    std::vector<MemoryLine> top = n.lines;
    std::sort(top.begin(), top.end(),
              [](const MemoryLine& x, const MemoryLine& y) { return x.bytes > y.bytes; });
    top.resize(std::min<std::size_t>(top.size(), 3));
    std::string largest;
    for (const MemoryLine& l : top)
      largest += fmt::format("{}{} {}", largest.empty() ? "" : ", ", l.what, Size(l.bytes));
    const std::string message =
        fmt::format("the run needs {} on NUMA node {} and the node can give {} (largest: {})",
                    Size(n.total()), n.node, Size(a), largest);
    const char* check = std::getenv("CPUTRAIN_MEMORY_CHECK");
    if (check && std::string_view(check) == "off") {
      log::Warn("{}; running anyway (CPUTRAIN_MEMORY_CHECK=off)", message);
      continue;
    }
    throw InputError(message, fmt::format("{}; or, to run anyway (the kernel may end the run when "
                                          "memory runs out), CPUTRAIN_MEMORY_CHECK=off",
                                          fixes));
  }
}

}  // namespace cputrain::train
