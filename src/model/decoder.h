// Decoder: text generation with a KV cache. Feed(token) runs one new position through the model
// (model::Forward with a KvCache: the same block training runs, for any family), appending that
// position's keys and values to the cache, so each generated token costs one position (not the
// whole prefix again). Its logits equal Forward's over the whole prefix at that position (tested).
//
// Thread safety: one thread drives a Decoder; it uses the pool it was given.
#pragma once

#include <random>
#include <vector>

#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

class Decoder {
 public:
  // params: layout.total() floats, kept by reference (must outlive the decoder).
  Decoder(WorkerPool& pool, const ParamLayout& layout, const float* params);

  // Runs `token` at position position() and returns the logits (V floats) for the next token.
  // Throws InputError past maxT positions or for a token outside [0, V).
  const float* Feed(int token);
  int position() const { return cache_.positions; }
  int max_positions() const { return layout_.shape().maxT; }
  void Reset() { cache_.positions = 0; }

 private:
  WorkerPool& pool_;
  const ParamLayout& layout_;
  const float* params_;
  Activations acts_;        // one row of one position
  std::vector<float> buf_;  // acts_'s memory
  int tokens_[2] = {0, 0};  // the input and an unused target
  KvCache cache_;
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
