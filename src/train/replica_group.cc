#include "train/replica_group.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

#include "common/error.h"
#include "kernels/bf16.h"

namespace cputrain::train {

void ReplicaGroup::Job::operator()() const {
  try {
    (*fn)(*group);
  } catch (const std::exception& e) {
    (*abort)(fmt::format("group {} failed: {}", group->index, e.what()));
    throw;
  }
}

bool ShareReplica(const topo::Plan& plan) {
  if (plan.groups.size() < 2 || plan.groups[0].numa_node < 0) return false;
  return std::all_of(plan.groups.begin(), plan.groups.end(),
                     [&](const topo::Group& g) { return g.numa_node == plan.groups[0].numa_node; });
}

ReplicaGroups::ReplicaGroups(const topo::Topology& topology, const topo::Plan& plan,
                             const model::Shape& shape, int rows, int T, const GroupOptions& o)
    : model_layout_(shape),
      lora_(o.lora && o.lora->on() ? std::make_unique<model::Lora>(model_layout_, *o.lora)
                                   : nullptr),
      optimizer_(optim::MakeOptimizer(o.optimizer, layout())),
      binder_(topo::MakeBinder(topology)),
      groups_(plan.groups.size()),
      shared_(ShareReplica(plan)) {
  CPUTRAIN_CHECK(!(lora_ && lora_->config().base_bf16) || o.bf16,
                 "a bf16 frozen base (base_dtype bf16) needs the bf16 products");
  const int G = size();
  const model::ParamLayout& trained = layout();
  for (int g = 0; g < G; ++g) {
    const topo::Group& pg = plan.groups[g];
    ReplicaGroup& grp = groups_[g];
    grp.index = g;
    grp.node = pg.numa_node >= 0 ? pg.numa_node : 0;
    grp.rows = rows;
    grp.pool = std::make_unique<WorkerPool>(pg.cpus, binder_.get(), fmt::format("g{}", g));
    if (o.comm_pools && !pg.comm_cpus.empty()) {
      grp.comm_pool =
          std::make_unique<WorkerPool>(pg.comm_cpus, binder_.get(), fmt::format("c{}", g));
    }
    grp.owned = comm::ShardBounds(trained.total(), G, g);  // all of it when G = 1
    grp.act = std::make_unique<model::Activations>(shape, rows, T, grp.pool->size(), o.checkpoint);
    grp.replica = shared_ ? 0 : g;
    if (grp.replica == g) grp.params = alloc::NodeBuffer<float>(grp.node, trained.total());
    grp.grads = alloc::NodeBuffer<float>(grp.node, trained.total());
    grp.slots = optimizer_->Slots(grp.owned.lo, grp.owned.hi);
    for (const optim::Slot& slot : grp.slots) {
      grp.state.emplace_back(grp.node, slot.local);
      grp.state_ptrs.push_back(grp.state.back().data());
    }
    grp.optim_scratch = alloc::NodeBuffer<float>(grp.node, optimizer_->ReduceFloats());
    grp.acts = alloc::NodeBuffer<float>(grp.node, grp.act->floats());
    grp.tokens = alloc::NodeBuffer<int>(grp.node, model::Activations::TokenInts(shape, rows, T));
    grp.scalars = alloc::NodeBuffer<float>(grp.node, 16);
    grp.act->Bind(grp.acts.data(), grp.tokens.data());
    if (lora_) {
      auto it = std::find_if(bases_.begin(), bases_.end(),
                             [&](const NodeBase& b) { return b.node == grp.node; });
      if (it == bases_.end()) {
        NodeBase nb;
        nb.node = grp.node;
        nb.first_group = g;
        // A bf16 base's fp32 buffer is a reservation: its bf16-only tensors' pages are never
        // resident together (InitBase).
        nb.params = lora_->config().base_bf16
                        ? alloc::NodeBuffer<float>(grp.node, model_layout_.total(),
                                                   alloc::NodeBuffer<float>::Reserved{})
                        : alloc::NodeBuffer<float>(grp.node, model_layout_.total());
        if (o.bf16) nb.bf16 = alloc::NodeBuffer<uint16_t>(grp.node, model_layout_.total());
        bases_.push_back(std::move(nb));
        it = bases_.end() - 1;
      }
      it->groups.push_back(g);
      grp.lora_acts = alloc::NodeBuffer<float>(grp.node, lora_->ActFloats(rows, T));
      grp.lora_pass.lora = lora_.get();
      grp.lora_pass.acts = grp.lora_acts.data();
    }
    if (o.bf16) {
      // The trainable buffer of a LoRA run has no bf16 copy: the adapters and saved modules run
      // in fp32 (model/lora.h); the base's bf16 copy is its node's.
      if (grp.replica == g && !lora_)
        grp.params_bf16 = alloc::NodeBuffer<uint16_t>(grp.node, trained.total());
      const std::size_t in = model::Bf16Operands::InElems(shape, rows, T),
                        dout = model::Bf16Operands::DoutElems(shape, rows, T);
      grp.scratch_bf16 = alloc::NodeBuffer<uint16_t>(
          grp.node, in + dout + model::Bf16Operands::AttnElems(grp.pool->size(), T));
      grp.bf16ops.in = grp.scratch_bf16.data();
      grp.bf16ops.dout = grp.bf16ops.in + in;
      grp.bf16ops.attn = grp.bf16ops.dout + dout;
    }
  }
  for (ReplicaGroup& grp : groups_) {
    grp.weights = groups_[grp.replica].params.data();
    if (o.bf16) grp.bf16ops.weights = grp.weights_bf16 = groups_[grp.replica].params_bf16.data();
    grp.lora_pass.params = grp.weights;
  }
  for (const NodeBase& nb : bases_) {
    for (int g : nb.groups) {
      groups_[g].base = nb.params.data();
      if (o.bf16) {
        groups_[g].weights_bf16 = nullptr;
        groups_[g].bf16ops.weights = nb.bf16.data();
      }
    }
  }
  FirstTouch();
}

void ReplicaGroups::FirstTouch() {
  OnAll(
      [&](ReplicaGroup& grp) {
        std::vector<alloc::NodeBuffer<float>*> buffers = {
            &grp.params, &grp.grads, &grp.acts, &grp.scalars, &grp.lora_acts, &grp.optim_scratch};
        for (alloc::NodeBuffer<float>& b : grp.state) buffers.push_back(&b);
        for (alloc::NodeBuffer<float>* b : buffers) {
          // The other groups' own replicas are first touched by the copy of group 0's in
          // InitParams (the same workers, the same split); a group without one has none.
          if (b == &grp.params && grp.index != 0) continue;
          float* p = b->data();
          grp.pool->ParallelFor(b->size(), [&](std::size_t lo, std::size_t hi, int) {
            std::fill(p + lo, p + hi, 0.f);
          });
        }
        std::fill(grp.tokens.begin(), grp.tokens.end(), 0);
        for (alloc::NodeBuffer<uint16_t>* b : {&grp.params_bf16, &grp.scratch_bf16}) {
          uint16_t* p = b->data();
          grp.pool->ParallelFor(b->size(), [&](std::size_t lo, std::size_t hi, int) {
            std::fill(p + lo, p + hi, uint16_t{0});
          });
        }
        // A node's base (fp32 and bf16) is first touched by InitBase's fill, copy and conversion,
        // on the node's first group's workers.
      },
      [](const std::string&) {});
}

void ReplicaGroups::OnAll(FunctionRef<void(ReplicaGroup&)> fn,
                          FunctionRef<void(const std::string&)> abort) {
  for (ReplicaGroup& g : groups_) {
    g.job = {&fn, &abort, &g};
    g.pool->Start(g.job);
  }
  std::exception_ptr first;
  for (ReplicaGroup& g : groups_) {
    try {
      g.pool->Wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void ReplicaGroups::InitBase(FunctionRef<void(WorkerPool&, float*, model::TensorDone)> init) {
  CPUTRAIN_CHECK(lora_ != nullptr, "InitBase without LoRA");
  NodeBase& first = bases_[0];
  ReplicaGroup& g0 = groups_[first.first_group];
  // Node 0's base, tensor by tensor: a bf16-only tensor (base_dtype bf16) is converted and its
  // fp32 pages given back as soon as the loader has written it, so the fp32 copies of the block
  // products never exist together (the fp32 buffer is a reservation: untouched pages cost
  // nothing).
  g0.pool->Run([&] {
    init(*g0.pool, first.params.data(), [&](model::Tensor t, int l) {
      if (Bf16Only(t)) ConvertTensor(*g0.pool, first, t, l);
    });
  });
  // Every other node copies node 0's base: the fp32 tensors it keeps, and the bf16 copies of
  // the bf16-only ones (whose fp32 pages are gone).
  OnAll(
      [&](ReplicaGroup& grp) {
        for (NodeBase& nb : bases_) {
          if (nb.first_group != grp.index || &nb == &first) continue;
          for (const model::TensorInfo& info : model_layout_.tensors()) {
            for (int l = 0; l < (info.per_layer ? model_layout_.shape().L : 1); ++l) {
              const std::size_t off = model_layout_.offset(info.t, l), n = info.numel;
              if (Bf16Only(info.t)) {
                grp.pool->ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
                  std::copy(first.bf16.data() + off + lo, first.bf16.data() + off + hi,
                            nb.bf16.data() + off + lo);
                });
                continue;
              }
              grp.pool->ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
                std::copy(first.params.data() + off + lo, first.params.data() + off + hi,
                          nb.params.data() + off + lo);
              });
            }
          }
        }
      },
      [](const std::string&) {});
  // The bf16 copies of the tensors kept in fp32 too, each node's by its first group.
  OnAll(
      [&](ReplicaGroup& grp) {
        for (NodeBase& nb : bases_) {
          if (nb.first_group != grp.index || nb.bf16.size() == 0) continue;
          for (const model::TensorInfo& info : model_layout_.tensors())
            for (int l = 0; l < (info.per_layer ? model_layout_.shape().L : 1); ++l)
              if (!Bf16Only(info.t)) ConvertTensor(*grp.pool, nb, info.t, l);
        }
      },
      [](const std::string&) {});
}

bool BaseBf16Only(const model::Lora& lora, model::Tensor t) {
  const bool product = t == model::kQkvw || t == model::kAttprojw || t == model::kFcw ||
                       t == model::kFcprojw || t == model::kLmHead;
  return product && lora.config().base_bf16 && !lora.Saves(t);
}

std::size_t BaseFp32Floats(const model::Lora& lora) {
  const model::ParamLayout& base = lora.base();
  std::size_t n = base.total();
  for (const model::TensorInfo& info : base.tensors())
    if (BaseBf16Only(lora, info.t)) n -= info.numel * (info.per_layer ? base.shape().L : 1);
  return n;
}

std::size_t BaseLoadingFp32Floats(const model::Lora& lora) {
  // The loaders write the tensors outside the blocks first (model/params.h, TensorDone): while
  // the largest of those is in fp32, no block's bf16 copy exists yet.
  const int L = lora.base().shape().L;
  std::size_t block = 0, outside = 0, block_bf16 = 0;
  for (const model::TensorInfo& info : lora.base().tensors()) {
    if (!BaseBf16Only(lora, info.t)) continue;
    (info.per_layer ? block : outside) = std::max(info.per_layer ? block : outside, info.numel);
    if (info.per_layer) block_bf16 += info.numel * L;
  }
  // In floats: the block copies' bf16 take half a float each.
  return std::max(block, outside > block_bf16 / 2 ? outside - block_bf16 / 2 : 0);
}

// Tensor t of layer l of nb's base into its bf16 copy; a bf16-only tensor's fp32 pages are then
// given back to the kernel (MADV_DONTNEED: unmapped from the process, zero if ever read again).
void ReplicaGroups::ConvertTensor(WorkerPool& pool, NodeBase& nb, model::Tensor t, int l) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t off = model_layout_.offset(t, l), n = model_layout_.info(t).numel;
  float* w = nb.params.data() + off;
  kernels::ConvertToBf16(pool, nb.bf16.data() + off, w, n);
  if (!Bf16Only(t)) return;
  const auto b = reinterpret_cast<std::uintptr_t>(w);
  const std::uintptr_t e = b + n * sizeof(float);
  const std::uintptr_t lo = (b + page - 1) / page * page, hi = e / page * page;
  // A refusal only leaves the pages resident (the plan then under-counts them); nothing reads them.
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void ReplicaGroups::InitParams(FunctionRef<void(WorkerPool&, float*)> init) {
  const model::ParamLayout& trained = layout();
  ReplicaGroup& g0 = groups_[0];
  g0.pool->Run([&] { init(*g0.pool, g0.params.data()); });
  OnAll(
      [&](ReplicaGroup& grp) {
        if (grp.index == 0 || grp.replica != grp.index) return;
        const float* src = g0.params.data();
        float* dst = grp.params.data();
        grp.pool->ParallelFor(trained.total(), [&](std::size_t lo, std::size_t hi, int) {
          std::copy(src + lo, src + hi, dst + lo);
        });
      },
      [](const std::string&) {});
}

nlohmann::json ReplicaGroups::PlacementJson(const topo::Plan& plan) const {
  const model::ParamLayout& trained = layout();
  auto nodes = [](const void* p, std::size_t bytes) {
    return nlohmann::json(alloc::NodesBacking(p, bytes).nodes());
  };
  nlohmann::json groups = nlohmann::json::array();
  for (const ReplicaGroup& grp : groups_) {
    groups.push_back(
        {{"cpus", plan.groups[grp.index].cpus},
         {"comm_cpus", plan.groups[grp.index].comm_cpus},
         {"numa_node", grp.node},
         {"worker_bindings", grp.pool->BindingsReadBack()},
         {"worker_cpus_seen", grp.pool->CpusSeenAtStart()},
         {"param_replica", grp.replica},
         {"memory_nodes",
          {{"params", nodes(grp.weights, trained.total() * sizeof(float))},
           {"grads", nodes(grp.grads.data(), grp.grads.bytes())},
           {"optimizer", grp.state.empty() ? nlohmann::json::array()
                                           : nodes(grp.state[0].data(), grp.state[0].bytes())},
           {"activations", nodes(grp.acts.data(), grp.acts.bytes())}}}});
    if (lora_) {
      nlohmann::json& mem = groups.back()["memory_nodes"];
      mem["base"] = nodes(grp.base, model_layout_.total() * sizeof(float));
      mem["lora_activations"] = nodes(grp.lora_acts.data(), grp.lora_acts.bytes());
      const auto at = std::find_if(bases_.begin(), bases_.end(),
                                   [&](const NodeBase& b) { return b.params.data() == grp.base; });
      groups.back()["base_copy"] = at - bases_.begin();
    }
  }
  return groups;
}

nlohmann::json ReplicaGroups::LoraJson() const {
  nlohmann::json copies = nlohmann::json::array();
  for (const NodeBase& nb : bases_) {
    copies.push_back(
        {{"numa_node", nb.node},
         {"groups", nb.groups},
         {"fp32_bytes",
          lora_->config().base_bf16 ? BaseFp32Floats(*lora_) * sizeof(float) : nb.params.bytes()},
         {"bf16_bytes", nb.bf16.bytes()},
         {"memory_nodes", alloc::NodesBacking(nb.params.data(), nb.params.bytes()).nodes()}});
  }
  return {{"describe", lora_->Describe()},          {"rank", lora_->config().r},
          {"alpha", lora_->config().alpha},         {"target_modules", lora_->TargetNames()},
          {"modules_to_save", lora_->SavedNames()}, {"trainable_floats", lora_->layout().total()},
          {"base_floats", model_layout_.total()},   {"base_copies", copies}};
}

void ReplicaGroups::RefreshBf16Weights() {
  const model::ParamLayout& trained = layout();
  OnAll(
      [&](ReplicaGroup& grp) {
        if (grp.params_bf16.size() == 0) return;  // fp32, or another group's replica
        kernels::ConvertToBf16(*grp.pool, grp.params_bf16.data(), grp.params.data(),
                               trained.total());
      },
      [](const std::string&) {});
}

}  // namespace cputrain::train
