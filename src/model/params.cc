#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/family.h"
#include "model/head.h"

namespace cputrain::model {

TensorInfo MakeTensor(Tensor t, const char* name, bool per_layer, bool decay, Init init,
                      std::vector<std::size_t> shape, std::size_t real_rows) {
  TensorInfo info{t, name, per_layer, decay, init, std::move(shape), 1, real_rows};
  for (std::size_t d : info.shape) {
    CPUTRAIN_CHECK(!__builtin_mul_overflow(info.numel, d, &info.numel),
                   fmt::format("the size of tensor {} overflows", name));
  }
  return info;
}

ParamLayout::ParamLayout(const Shape& shape) : ParamLayout(shape, {}) {}

ParamLayout::ParamLayout(const Shape& shape, std::vector<TensorInfo> table) : shape_(shape) {
  // Checkpoint headers are checked before this; a config's dimensions are each bounded, but
  // their product (the parameter count) is first judged here.
  const std::string problem = shape_.Problem();
  if (!problem.empty()) {
    throw InputError(fmt::format("the model {} cannot be built: {}", shape_.ToString(), problem),
                     "use a smaller model (model.layers, model.channels; docs/config.md gives "
                     "the limits)");
  }
  table_ = table.empty() ? ModelTensors(shape_) : std::move(table);
  index_.fill(-1);
  // Input tensors, then the per-layer ones (one block), then the output tensors.
  std::size_t off = 0;
  bool seen_block = false;
  for (std::size_t i = 0; i < table_.size(); ++i) {
    const TensorInfo& info = table_[i];
    CPUTRAIN_CHECK(index_[info.t] < 0, fmt::format("tensor {} listed twice", info.name));
    CPUTRAIN_CHECK(!(info.per_layer && seen_block && !table_[i - 1].per_layer),
                   fmt::format("{}: per-layer tensors must be listed together", info.name));
    index_[info.t] = static_cast<int>(i);
    if (info.per_layer) {
      if (!seen_block) block_begin_ = off, seen_block = true;
      where_[info.t] = block_size_;
      block_size_ += info.numel;
    } else {
      if (seen_block && off == block_begin_) off += block_size_ * shape_.L;
      where_[info.t] = off;
      off += info.numel;
    }
  }
  if (!seen_block) block_begin_ = off;
  if (off == block_begin_) off += block_size_ * shape_.L;  // no output tensors
  total_ = off;
  // Checkpoint order: each tensor's copies for all layers, tensors in table order.
  std::size_t c = 0;
  for (const TensorInfo& info : table_) {
    ckpt_[info.t] = c;
    c += info.numel * (info.per_layer ? shape_.L : 1);
  }
  CPUTRAIN_CHECK(c == total_, "checkpoint and flat layouts disagree on the size");
  // Decay segments in buffer order, merging neighbours with the same flag.
  auto add = [&](std::size_t b, std::size_t n, bool decay) {
    if (!segments_.empty() && segments_.back().decay == decay && segments_.back().end == b) {
      segments_.back().end = b + n;
    } else {
      segments_.push_back({b, b + n, decay});
    }
  };
  for (const TensorInfo& info : table_)
    if (!info.per_layer && where_[info.t] < block_begin_)
      add(where_[info.t], info.numel, info.decay);
  for (int l = 0; l < shape_.L; ++l) {
    for (const TensorInfo& info : table_)
      if (info.per_layer) add(offset(info.t, l), info.numel, info.decay);
  }
  for (const TensorInfo& info : table_)
    if (!info.per_layer && where_[info.t] >= block_begin_)
      add(where_[info.t], info.numel, info.decay);
}

const TensorInfo& ParamLayout::info(Tensor t) const {
  CPUTRAIN_CHECK(index_[t] >= 0, fmt::format("tensor {} is not in this family", int(t)));
  return table_[index_[t]];
}

std::size_t FirstNonFinite(const float* p, std::size_t n) {
  return static_cast<std::size_t>(
      std::find_if(p, p + n, [](float x) { return !std::isfinite(x); }) - p);
}

std::string DescribeParam(const ParamLayout& layout, std::size_t i) {
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      const std::size_t at = layout.offset(info.t, l);
      if (i < at || i - at >= info.numel) continue;
      return info.per_layer ? fmt::format("tensor {}, layer {}, element {}", info.name, l, i - at)
                            : fmt::format("tensor {}, element {}", info.name, i - at);
    }
  }
  return "beyond the model's tensors";
}

std::size_t ParamLayout::offset(Tensor t, int layer) const {
  return info(t).per_layer ? block_begin(layer) + where_[t] : where_[t];
}

std::size_t ParamLayout::checkpoint_offset(Tensor t, int layer) const {
  const TensorInfo& i = info(t);
  return ckpt_[t] + (i.per_layer ? i.numel * layer : 0);
}

std::vector<std::size_t> ParamLayout::ReadyPoints() const {
  std::vector<std::size_t> points = {output_begin()};
  for (int l = shape_.L - 1; l >= 0; --l) points.push_back(block_begin(l));
  points.push_back(0);
  return points;
}

namespace {

// splitmix64: a counter-based generator, so element i of a tensor gets the same value whatever
// thread computes it.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Standard normal from two 53-bit uniforms (Box-Muller), keyed by (seed, stream, index).
double Normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t a = Mix(seed ^ Mix(stream * 0x100000001b3ULL + index));
  const uint64_t b = Mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Uniform in [0, 1), keyed as Normal (53 bits).
double Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(Mix(seed ^ Mix(stream * 0x100000001b3ULL + index)) >> 11) * 0x1.0p-53;
}

}  // namespace

namespace {

// Tensor `row` of the table, copy l: its elements [b, e) as RandomInit makes them.
void InitRange(const ParamLayout& layout, std::size_t row, int l, uint64_t seed, float* p,
               std::size_t b, std::size_t e) {
  const TensorInfo& info = layout.tensors()[row];
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.shape().L);
  // Real elements: all, except padding rows (the vocabulary's), which stay 0.
  const std::size_t real =
      info.real_rows ? info.real_rows * (info.numel / info.shape[0]) : info.numel;
  const uint64_t stream = static_cast<uint64_t>(row) * 4096 + l;
  for (std::size_t i = b; i < e; ++i) {
    double v = 0;
    switch (info.init) {
      case Init::kNormal:
        v = i < real ? 0.02 * Normal(seed, stream, i) : 0.0;
        break;
      case Init::kResidualNormal:
        v = i < real ? residual_std * Normal(seed, stream, i) : 0.0;
        break;
      case Init::kZeros:
        v = 0;
        break;
      case Init::kOnes:
        v = 1;
        break;
      case Init::kKaimingUniform:  // (2u - 1) / sqrt(in), u uniform in [0, 1)
        v = (2.0 * Uniform(seed, stream, i) - 1.0) / std::sqrt(static_cast<double>(info.shape[1]));
        break;
      case Init::kNormalInvRows:
        v = Normal(seed, stream, i) / static_cast<double>(info.shape[0]);
        break;
    }
    p[i] = static_cast<float>(v);
  }
}

}  // namespace

void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params) {
  RandomInit(pool, layout, seed, params, [](Tensor, int) {});
}

void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params,
                TensorDone done) {
  // The tensors outside the blocks first, then the blocks' (TensorDone: a loader's order); each
  // value a function of (seed, tensor, layer, index) only, so the order changes none.
  const std::vector<TensorInfo>& table = layout.tensors();
  for (const bool blocks : {false, true}) {
    for (std::size_t row = 0; row < table.size(); ++row) {
      const TensorInfo& info = table[row];
      if (info.per_layer != blocks) continue;
      for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
        float* p = params + layout.offset(info.t, l);
        pool.ParallelFor(info.numel, [&](std::size_t b, std::size_t e, int) {
          InitRange(layout, row, l, seed, p, b, e);
        });
        done(info.t, l);
      }
    }
  }
}

void RandomInitTensor(const ParamLayout& layout, Tensor t, uint64_t seed, float* params) {
  const std::vector<TensorInfo>& table = layout.tensors();
  for (std::size_t row = 0; row < table.size(); ++row) {
    if (table[row].t != t) continue;
    for (int l = 0; l < (table[row].per_layer ? layout.shape().L : 1); ++l)
      InitRange(layout, row, l, seed, params + layout.offset(t, l), 0, table[row].numel);
  }
}

}  // namespace cputrain::model
