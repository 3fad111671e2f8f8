// train/: `cputrain-numa train` — data-parallel GPT-2 training over the replica groups of the
// placement plan, one pinned WorkerPool per group, each group's memory on its NUMA node.
//
// One step, on every group's driver at once:
//   1. forward and backward over the group's rows [g*B/G, (g+1)*B/G) of the step's window;
//      gradients sync bucket by bucket while backward runs (GradSync);
//   2. the group owning shard g of the flat buffer (ZeRO-1) has the summed gradient of its shard;
//      it computes the shard's sum of squares, the groups combine them (global norm, clipping);
//   3. AdamW updates the shard, with moments allocated for that shard only, on the group's node;
//   4. the shards are allgathered into every group's replica before the next forward.
// The loss logged is the mean over the global batch (group sums added in group order), so it
// equals the one-group loss up to rounding, and with a fixed plan every sum has a fixed order:
// two runs give bit-identical metrics.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/distributed.h"

namespace cputrain::train {

struct StepRecord {
  int step = 0;     // 1-based
  double loss = 0;  // mean over the global batch, before this step's update
  double lr = 0;
  double grad_norm = 0;  // global norm before clipping
  double tokens_per_s = 0;
  double ms = 0;
  // Where group 0's step went (ms): forward; backward compute; communication (gradient buckets
  // reduced or waited for, the norm's allreduce, the parameter allgather); optimizer update.
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, optimizer_ms = 0;
};

struct EvalRecord {
  int step = 0;  // evaluated after this many updates
  double val_loss = 0;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  bool interrupted = false;
};

enum class Progress { kAuto, kBar, kLines, kQuiet };

struct TrainOptions {
  Progress progress = Progress::kAuto;  // auto: a bar when stderr is a terminal, else lines
  bool handle_sigint = false;  // Ctrl-C stops after the current step and saves a checkpoint
  // The other processes of a multi-node run (src/mpi), or null. The global batch is split
  // across processes, then across each process's groups, in order; only rank 0 writes out_dir.
  Distributed* dist = nullptr;
  // Called on the main thread right before (true) and after (false) the groups run each
  // training step: forward, backward, sync, optimizer, allgather — not the logging around it.
  // Tests use it to check that a step allocates nothing after the first.
  std::function<void(bool begin)> step_probe;
};

// Runs the configured training; writes out_dir/{config.yaml, placement.json, metrics.jsonl,
// model.bin}. Throws InputError for a bad config, data file, checkpoint or placement.
TrainResult Train(const Config& config, const TrainOptions& options);

}  // namespace cputrain::train
