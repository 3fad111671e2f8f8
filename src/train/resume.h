// train/resume: where a run starts, from train.resume —
//   auto  (default) the newest complete checkpoint of out_dir, or a fresh start if it has none;
//   never a fresh start, refused if out_dir already holds a run (checkpoints or metrics);
//   PATH  that checkpoint (a step directory or another run's out_dir).
// A resumed config may change the placement (groups, processes: the moments re-shard) and the
// optimizer settings and train.grad_accum_steps (the data position counts windows, whatever k),
// not what the checkpoint's numbers mean: the model shape, data.train (its shards, their
// lengths), data.batch_size, data.seq_len, data.shuffle and the shuffle's seed (exit 2 naming
// the key).
#pragma once

#include <optional>
#include <string>

#include "config/config.h"
#include "model/transformer.h"
#include "train/rows.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace cputrain::train {

struct ResumePoint {
  std::string dir;   // the step directory
  TrainState state;  // its state.bin's meta
};

// Decides the start. `writer`: this process writes out_dir (the never check is its alone).
// Throws InputError for a refused start or a PATH that is not a checkpoint; `names` words its
// messages (trainer.h).
std::optional<ResumePoint> FindResumePoint(const Config& cfg, bool writer, const Names& names = {});

// Throws InputError naming the first config key that differs from the checkpoint's, as `names`
// names it. `train`: the data as opened now.
void CheckResumable(const ResumePoint& from, const Config& cfg, const model::Shape& shape,
                    const RowSource& train, const Names& names = {});

// Where the data stands after a step: windows read so far and global tokens trained on.
struct DataPosition {
  uint64_t next_window = 0;
  uint64_t tokens = 0;
};

// The state to save after `step` steps of this config, trained on `train`.
TrainState StateAt(const Config& cfg, const model::Shape& shape, int step, int skipped_steps,
                   const RowSource& train, DataPosition pos, double lr);

}  // namespace cputrain::train
