// model/products.h: a run's matrix products by class (kernels.h GemmClass), as the calibration
// times them (kernels/calibrate.h): the block's linears (qkv, attention output, MLP input and
// output), the LM head, attention's per-head products and LoRA's, each class run through the very
// kernels a pass calls (kernels::MatmulForward, AttentionBackwardBf16, ...) on the group's pool,
// so the split between workers is the pass's own.
//
// Sizes: the run's own shapes, except that each weight is capped at kMaxWeight floats (its output
// columns cut; a 7B model's 4096 x 14336 MLP becomes 4096 x 1024) and attention at kMaxT positions,
// and the work is scaled to the target flops the calibration asks for by cutting the linears'
// output columns (at least 16 a worker; the rows and the input width stay the run's: timed at 16
// rows a worker, the kernels ranked by how they pack a weight, not by how they multiply) and, for
// attention, the number of heads. The buffers (filled with small random values, first touched by
// the pool) are made on the first Works(), for the largest run: a choice read from the cache
// allocates nothing.
//
// Thread safety: one thread calls Works and the works' run(); they drive the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/calibrate.h"
#include "model/shape.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

struct ProductRun {
  Shape shape;
  int rows = 0;       // token rows of one pass of the group (its B/G * T)
  int T = 0;          // positions per row
  bool train = true;  // forward and backward; false: the forward's classes alone
  bool bf16 = false;  // train.precision: bf16 (the block, head and attention products in bf16)
  int lora_r = 0;     // LoRA's rank (0: none): its products, and a frozen base (no weight
                      // gradients of the base's linears or head)
};

class ProductWorks {
 public:
  static constexpr std::size_t kMaxWeight = std::size_t{4} << 20;  // floats (16 MB)
  static constexpr int kMaxT = 512;

  ProductWorks(WorkerPool& pool, const ProductRun& run);
  ~ProductWorks();
  ProductWorks(const ProductWorks&) = delete;
  ProductWorks& operator=(const ProductWorks&) = delete;

  // The classes `precision` ("fp32" or "bf16") runs in this run, each sized to about
  // `target_flops` per run (between one row per worker's 16-row slice and the run's own rows).
  // The works refer to this object: they must not outlive it.
  std::vector<kernels::ClassWork> Works(const std::string& precision, double target_flops);
  // The run's own shapes, workers and precision, in words: the calibration cache's key.
  std::string Workload(const std::string& precision) const;
  // Whether `precision` has any class to choose in this run.
  bool Runs(const std::string& precision) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cputrain::model
