#include "train/replica_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

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
                             const model::Shape& shape, int rows, int T, bool comm_pools, bool bf16)
    : layout_(shape),
      binder_(topo::MakeBinder(topology)),
      groups_(plan.groups.size()),
      shared_(ShareReplica(plan)) {
  const int G = size();
  for (int g = 0; g < G; ++g) {
    const topo::Group& pg = plan.groups[g];
    ReplicaGroup& grp = groups_[g];
    grp.index = g;
    grp.node = pg.numa_node >= 0 ? pg.numa_node : 0;
    grp.rows = rows;
    grp.pool = std::make_unique<WorkerPool>(pg.cpus, binder_.get(), fmt::format("g{}", g));
    if (comm_pools && !pg.comm_cpus.empty()) {
      grp.comm_pool =
          std::make_unique<WorkerPool>(pg.comm_cpus, binder_.get(), fmt::format("c{}", g));
    }
    grp.owned = comm::ShardBounds(layout_.total(), G, g);  // all of it when G = 1
    grp.act = std::make_unique<model::Activations>(shape, rows, T, grp.pool->size());
    grp.replica = shared_ ? 0 : g;
    if (grp.replica == g) grp.params = alloc::NodeBuffer<float>(grp.node, layout_.total());
    grp.grads = alloc::NodeBuffer<float>(grp.node, layout_.total());
    grp.m = alloc::NodeBuffer<float>(grp.node, grp.owned.size());
    grp.v = alloc::NodeBuffer<float>(grp.node, grp.owned.size());
    grp.acts = alloc::NodeBuffer<float>(grp.node, grp.act->floats());
    grp.tokens = alloc::NodeBuffer<int>(grp.node, model::Activations::TokenInts(shape, rows, T));
    grp.scalars = alloc::NodeBuffer<float>(grp.node, 16);
    grp.act->Bind(grp.acts.data(), grp.tokens.data());
    if (bf16) {
      if (grp.replica == g)
        grp.params_bf16 = alloc::NodeBuffer<uint16_t>(grp.node, layout_.total());
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
    if (bf16) grp.bf16ops.weights = grp.weights_bf16 = groups_[grp.replica].params_bf16.data();
  }
  FirstTouch();
}

void ReplicaGroups::FirstTouch() {
  OnAll(
      [&](ReplicaGroup& grp) {
        for (alloc::NodeBuffer<float>* b :
             {&grp.params, &grp.grads, &grp.m, &grp.v, &grp.acts, &grp.scalars}) {
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

void ReplicaGroups::InitParams(FunctionRef<void(WorkerPool&, float*)> init) {
  ReplicaGroup& g0 = groups_[0];
  g0.pool->Run([&] { init(*g0.pool, g0.params.data()); });
  OnAll(
      [&](ReplicaGroup& grp) {
        if (grp.index == 0 || grp.replica != grp.index) return;
        const float* src = g0.params.data();
        float* dst = grp.params.data();
        grp.pool->ParallelFor(layout_.total(), [&](std::size_t lo, std::size_t hi, int) {
          std::copy(src + lo, src + hi, dst + lo);
        });
      },
      [](const std::string&) {});
}

nlohmann::json ReplicaGroups::PlacementJson(const topo::Plan& plan) const {
  auto nodes = [](const void* p, std::size_t bytes) {
    return nlohmann::json(alloc::NodesBacking(p, bytes).nodes());
  };
  nlohmann::json groups = nlohmann::json::array();
  for (const ReplicaGroup& grp : groups_) {
    groups.push_back({{"cpus", plan.groups[grp.index].cpus},
                      {"comm_cpus", plan.groups[grp.index].comm_cpus},
                      {"numa_node", grp.node},
                      {"worker_bindings", grp.pool->BindingsReadBack()},
                      {"worker_cpus_seen", grp.pool->CpusSeenAtStart()},
                      {"param_replica", grp.replica},
                      {"memory_nodes",
                       {{"params", nodes(grp.weights, layout_.total() * sizeof(float))},
                        {"grads", nodes(grp.grads.data(), grp.grads.bytes())},
                        {"optimizer", nodes(grp.m.data(), grp.m.bytes())},
                        {"activations", nodes(grp.acts.data(), grp.acts.bytes())}}}});
  }
  return groups;
}

void ReplicaGroups::RefreshBf16Weights() {
  OnAll(
      [&](ReplicaGroup& grp) {
        if (grp.params_bf16.size() == 0) return;  // fp32, or another group's replica
        kernels::ConvertToBf16(*grp.pool, grp.params_bf16.data(), grp.params.data(),
                               layout_.total());
      },
      [](const std::string&) {});
}

}  // namespace cputrain::train
