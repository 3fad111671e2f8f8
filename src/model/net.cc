// Net (net.h): the tensors a pass reads and the gradients it writes, with or without LoRA, and
// the linear layers both passes run: the base product, then each LoRA site's term in its rows.
#include "model/net.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/bf16.h"

namespace cputrain::model {
namespace {

// The seed of the adapters' input dropout of one site kind in one layer, from the step's seed
// (SplitMix64's finalizer over the pair, salted apart from the encoder's hidden sites): PEFT
// drops each adapted module's input with its own nn.Dropout.
uint64_t LoraSeed(uint64_t seed, int layer, int kind) {
  constexpr uint64_t kSalt = 0x4C6F524144726F70ull;  // "LoRADrop"
  uint64_t z = (seed ^ kSalt) + 0x9E3779B97F4A7C15ull *
                                    (static_cast<uint64_t>(layer + 1) * kLoraSiteKinds + kind + 1);
  return kernels::DropoutMask::Mix64(z);
}

}  // namespace

Net::Net(const ParamLayout& layout, int B, int T, const float* params, float* grads,
         const LoraPass* lora, const Activations::Dropout& dropout,
         const Activations::Packed* packed)
    : layout(layout),
      s(layout.shape()),
      kind(FamilyOf(s.arch).kind),
      C(s.C),
      NH(s.NH),
      KV(s.kv_heads()),
      hs(s.head_size()),
      Q(s.qkv_width()),
      A(s.attn_width()),
      F(s.ffn()),
      Fin(s.mlp_in_width()),
      norm_offset(kind.norm_plus_one ? 1.f : 0.f),
      attn_scale(s.attn_scalar > 0
                     ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.attn_scalar)))
                     : 0.f),
      B(B),
      T(T),
      N(packed ? static_cast<std::size_t>(packed->row_start[B]) : static_cast<std::size_t>(B) * T),
      row_start(packed ? packed->row_start.data() : nullptr),
      row_index(packed ? packed->row_index.data() : nullptr),
      params_(params),
      grads_(grads),
      lora_(lora),
      trained_(lora ? lora->lora->layout() : layout),
      dropout_(dropout) {
  if (lora_) {
    CPUTRAIN_CHECK(lora_->lora != nullptr && lora_->params != nullptr && lora_->acts != nullptr,
                   "a LoraPass needs its Lora, trainable buffer and activation memory");
    CPUTRAIN_CHECK(
        lora_->lora->base().total() == layout.total() && lora_->lora->base().shape() == s,
        "the LoRA was resolved against another model");
  }
}

const float* Net::P(Tensor t, int l) const {
  if (t >= kNumTensors || !layout.has(t)) return nullptr;
  if (lora_ && lora_->lora->Saves(t)) return lora_->params + trained_.offset(t, l);
  return params_ + layout.offset(t, l);
}

float* Net::G(Tensor t, int l) const {
  if (t >= kNumTensors || grads_ == nullptr || !trained_.has(t)) return nullptr;
  return grads_ + trained_.offset(t, l);
}

float* Net::LoraH(int l, const LoraSite& site) const {
  const std::vector<LoraSite>& sites = lora_->lora->sites();
  const std::size_t i = static_cast<std::size_t>(&site - sites.data());
  const std::size_t r = lora_->lora->config().r;
  return lora_->acts + (static_cast<std::size_t>(l) * sites.size() + i) * N * r;
}

float* Net::LoraDh() const {
  const std::size_t r = lora_->lora->config().r;
  return lora_->acts + static_cast<std::size_t>(s.L) * lora_->lora->sites().size() * N * r;
}

float* Net::LoraXd() const { return LoraDh() + N * lora_->lora->config().r; }

kernels::LoraDropout Net::LoraDrop(int l, const LoraSite& site) const {
  kernels::LoraDropout d;
  const float p = lora_->lora->config().dropout;
  if (!dropout_.on || !(p > 0.f)) return d;
  d.p = p;
  d.seed = LoraSeed(dropout_.seed, l, site.kind);
  d.offset = dropout_.row0 * static_cast<uint64_t>(T) * site.in;  // x's global element index
  d.row_index = row_index;
  return d;
}

kernels::GemmSite Net::Site(Tensor w) {
  const bool head = w == kWte || w == kLmHead || w == kPoolw || w == kHeadw;
  return head ? kernels::GemmSite::kHead : kernels::GemmSite::kBlock;
}

void Net::Linear(WorkerPool& pool, const Bf16Operands* bf16, float* out, const float* inp, Tensor w,
                 Tensor b, int l, int IC, int OC, int ldo) const {
  const bool saved = lora_ && lora_->lora->Saves(w);
  if (bf16 && !saved) {
    kernels::MatmulForwardBf16(pool, out, inp, bf16->in, bf16->weights + layout.offset(w, l),
                               P(b, l), N, IC, OC, ldo, Site(w));
  } else {
    kernels::MatmulForward(pool, out, inp, P(w, l), P(b, l), N, IC, OC, ldo, Site(w));
  }
  if (!lora_) return;
  const ParamLayout& LL = trained_;
  for (const LoraSite* site : lora_->lora->SitesOf(w)) {
    // out[:, row0 : row0 + rows] += scale * dropout(inp) A^T B^T
    kernels::LoraForward(pool, out + site->row0, LoraH(l, *site), LoraXd(), inp,
                         lora_->params + LL.offset(site->a, l),
                         lora_->params + LL.offset(site->b, l), N, IC, lora_->lora->config().r,
                         site->rows, ldo, lora_->lora->scale(), LoraDrop(l, *site));
  }
}

void Net::LinearBack(WorkerPool& pool, const Bf16Operands* bf16, float* dinp, Tensor w, Tensor b,
                     int l, const float* dout, const float* inp, int IC, int OC, int ldd,
                     bool accumulate) const {
  const bool saved = lora_ && lora_->lora->Saves(w);
  if (bf16 && !saved) {
    kernels::MatmulBackwardBf16(pool, dinp, G(w, l), G(b, l), dout, bf16->dout, inp, bf16->in,
                                bf16->weights + layout.offset(w, l), N, IC, OC, ldd, accumulate,
                                Site(w));
  } else {
    kernels::MatmulBackward(pool, dinp, G(w, l), G(b, l), dout, inp, P(w, l), N, IC, OC, ldd,
                            accumulate, Site(w));
  }
  if (!lora_) return;
  const ParamLayout& LL = trained_;
  for (const LoraSite* site : lora_->lora->SitesOf(w)) {
    // dA, dB of the site; dinp += its share (dout's columns row0 : row0 + rows)
    kernels::LoraBackward(pool, dinp, grads_ + LL.offset(site->a, l),
                          grads_ + LL.offset(site->b, l), LoraDh(), LoraXd(), dout + site->row0,
                          inp, LoraH(l, *site), lora_->params + LL.offset(site->a, l),
                          lora_->params + LL.offset(site->b, l), N, IC, lora_->lora->config().r,
                          site->rows, ldd, lora_->lora->scale(), LoraDrop(l, *site), accumulate);
  }
}

void ZeroFill(WorkerPool& pool, float* x, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) { std::fill(x + b, x + e, 0.f); });
}

}  // namespace cputrain::model
