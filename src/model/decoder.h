// Decoder: text generation with a KV cache. Feed(token) runs one new position through the model,
// appending that position's keys and values to the cache, so each generated token costs one
// position (not the whole prefix again). Its logits equal Forward's at that position (tested).
//
// Thread safety: one thread drives a Decoder; it uses the pool it was given.
#pragma once

#include <random>
#include <vector>

#include "model/gpt2.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

class Decoder {
 public:
  // params: layout.total() floats, kept by reference (must outlive the decoder).
  Decoder(WorkerPool& pool, const ParamLayout& layout, const float* params);

  // Runs `token` at position position() and returns the logits (V floats) for the next token.
  // Throws InputError past maxT positions or for a token outside [0, V).
  const float* Feed(int token);
  int position() const { return pos_; }
  int max_positions() const { return layout_.shape().maxT; }
  void Reset() { pos_ = 0; }

 private:
  WorkerPool& pool_;
  const ParamLayout& layout_;
  const float* params_;
  int pos_ = 0;
  std::vector<float> k_cache_, v_cache_;  // (L, maxT, C) each
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, y_, proj_, fc_, fc_gelu_, att_, logits_;
};

// Picks the next token from logits: greedy for temperature 0, else a sample from
// softmax(logits / temperature) over the top_k most likely tokens (top_k 0 = all), narrowed to
// the nucleus when top_p < 1: the fewest most likely of those whose probabilities (renormalized
// over the top_k) sum to at least top_p (Holtzman et al. 2019; ties broken by lower id). The
// same seed draws the same tokens.
class Sampler {
 public:
  Sampler(float temperature, int top_k, uint64_t seed, float top_p = 1.0f);
  int Next(const float* logits, int V);

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  std::mt19937_64 rng_;
  std::vector<float> probs_;
  std::vector<int> order_;
};

}  // namespace cputrain::model
