// What the pass tests (tests/unpadded_test.cc, tests/gradient_checkpointing_test.cc) set up
// around model::Forward / Backward: a bf16 pass's operands, and a LoRA adapter with every term
// live (random A and B, the adapters' dropout on).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/bf16.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain::test {

// The bf16 weight copy of `params` and the scratch of a pass over B rows of T positions.
struct Bf16Buffers {
  Bf16Buffers(WorkerPool& pool, const model::ParamLayout& layout, const std::vector<float>& params,
              int B, int T) {
    const model::Shape& s = layout.shape();
    weights.resize(layout.total());
    kernels::ConvertToBf16(pool, weights.data(), params.data(), params.size());
    in.resize(model::Bf16Operands::InElems(s, B, T));
    dout.resize(model::Bf16Operands::DoutElems(s, B, T));
    attn.resize(model::Bf16Operands::AttnElems(pool.size(), T));
    ops = {weights.data(), in.data(), dout.data(), attn.data()};
  }
  std::vector<uint16_t> weights, in, dout, attn;
  model::Bf16Operands ops;
};

// A LoRA r=4 (alpha 8, dropout 0.1) over `params` on the family's default targets, A and B drawn
// at random (B nonzero: every adapter term counts); its trainable buffer in *trainable.
inline std::unique_ptr<model::Lora> LiveLora(WorkerPool& pool, const model::ParamLayout& layout,
                                             const std::vector<float>& params,
                                             std::vector<float>* trainable) {
  model::LoraConfig cfg;
  cfg.r = 4;
  cfg.alpha = 8.f;
  cfg.dropout = 0.1f;
  cfg.init = model::LoraConfig::Init::kRandom;
  auto lora = std::make_unique<model::Lora>(layout, cfg);
  trainable->resize(lora->layout().total());
  model::LoraInit(pool, *lora, 17, params.data(), trainable->data());
  return lora;
}

}  // namespace cputrain::test
