// Small shapes of the decoder families Qwen2, Qwen3, Mistral, Gemma 3 and Phi-3 with their quirks
// switched on (tests/families_test.cc, tests/lora_test.cc): sliding windows shorter than the tests'
// T, local and global layers, q/k norms, biases, a head size apart from C/NH, pad tokens. maxT 16.
// And a small BERT or DistilBERT body (tests/lora_test.cc, tests/unpadded_test.cc).
#pragma once

#include "model/shape.h"

namespace cputrain::test {

// 3 layers, C=16, 4 heads over 2 KV heads, F=24, V=60 (padded 128).
inline model::Shape FamilyBase(model::Arch arch) {
  model::Shape s(16, 60, model::Shape::PadVocab(60), 3, 4, 16);
  s.arch = arch;
  s.NKV = 2;
  s.F = 24;
  s.norm_eps = 1e-6f;
  s.rope_theta = 1000.f;
  s.tied = false;
  s.attn_bias = s.mlp_bias = false;
  return s;
}

// q/k/v biases, tied, a window of 3 from layer 1 on (Qwen2's max_window_layers 1).
inline model::Shape SmallQwen2() {
  model::Shape s = FamilyBase(model::Arch::kQwen2);
  s.attn_bias = true;
  s.tied = true;
  s.window = 3;
  s.window_from = 1;
  return s;
}

// Head size 6 (C/NH is 4), q/k norms, q/k/v/o biases, a window of 3 on layer 2 only.
inline model::Shape SmallQwen3() {
  model::Shape s = FamilyBase(model::Arch::kQwen3);
  s.HD = 6;
  s.attn_bias = true;
  s.window = 3;
  s.window_from = 2;
  return s;
}

// A window of 3 on every layer, 1 KV head.
inline model::Shape SmallMistral() {
  model::Shape s = FamilyBase(model::Arch::kMistral);
  s.NKV = 1;
  s.window = 3;
  return s;
}

// Head size 8, local layers 0 and 2 (window 3, RoPE base 100) around a global one (base 1000,
// linear scaling 2), query_pre_attn_scalar 5, tied, pad token 0.
inline model::Shape SmallGemma3() {
  model::Shape s = FamilyBase(model::Arch::kGemma3);
  s.HD = 8;
  s.window = 3;
  s.global_every = 2;
  s.rope_local_theta = 100.f;
  s.rope_scaling.kind = model::RopeScaling::kLinear;
  s.rope_scaling.factor = 2.f;
  s.attn_scalar = 5.f;
  s.tied = true;
  s.pad_token = 0;
  return s;
}

// A window of 3 on every layer, untied, pad token 59 (the last id).
inline model::Shape SmallPhi3() {
  model::Shape s = FamilyBase(model::Arch::kPhi3);
  s.window = 3;
  s.pad_token = 59;
  return s;
}

// 2 layers, C=16, 2 heads, F=24, V=40 (padded 128), untied, pad token 0, BERT's 2 token types
// (DistilBERT none), hidden and attention dropout 0.1; the head is the caller's (span, no dropout).
inline model::Shape SmallEncoder(model::Arch arch) {
  model::Shape s(16, 40, model::Shape::PadVocab(40), 2, 2, 16);
  s.arch = arch;
  s.F = 24;
  s.norm_eps = 1e-12f;
  s.tied = false;
  s.head = model::Head::kSpan;
  s.types = arch == model::Arch::kBert ? 2 : 0;
  s.pad_token = 0;
  s.hidden_dropout = s.attn_dropout = 0.1f;
  return s;
}

// The same body with a 3-label classifier head (its dropout 0.1; tests/unpadded_test.cc,
// tests/gradient_checkpointing_test.cc).
inline model::Shape SmallEncoderClassifier(model::Arch arch) {
  model::Shape s = SmallEncoder(arch);
  s.head = model::Head::kClassify;
  s.labels = 3;
  s.head_dropout = 0.1f;
  return s;
}

}  // namespace cputrain::test
