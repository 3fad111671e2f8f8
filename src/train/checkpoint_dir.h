// train/checkpoint_dir: writing a run's checkpoint directories (model/checkpoint_path.h has the
// layout) so that a crash at any moment leaves the previous checkpoint whole:
//   1. model.bin and state.bin are written into checkpoints/step_N.tmp.<pid>/ and fsynced;
//   2. that directory is renamed to step_N and checkpoints/ is fsynced;
//   3. out_dir/latest is replaced atomically (temporary file, fsync, rename) — last;
//   4. only then are step directories beyond train.keep_checkpoints deleted, oldest first.
// The next start (holding the run lock, train/run_lock.h) removes any *.tmp.* left behind.
//
// Thread safety: main thread of the writer process (rank 0) only.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/transformer.h"
#include "train/train_state.h"

namespace cputrain::train {

struct CheckpointContents {
  const model::ParamLayout* layout = nullptr;
  const float* params = nullptr;  // layout->total() floats
  TrainState state;
  OptimizerState optimizer;  // the groups' shards of its slots, in group order
  // LoRA: params are the adapters (layout = lora->layout()), written in PEFT's format in
  // model.bin's place (model/checkpoint_path.h), with base_model as base_model_name_or_path.
  const model::Lora* lora = nullptr;
  std::string base_model;
};

// Writes out_dir/checkpoints/step_<state.step> (replacing one of that step from an earlier run)
// and points `latest` at it; then keeps only the newest `keep` step directories (0 = all).
// Returns the step directory. Throws RuntimeError naming the file on an I/O error; the previous
// checkpoint and `latest` are then untouched.
std::string SaveCheckpointDir(const std::string& out_dir, const CheckpointContents& c, int keep);

// Removes every temporary (*.tmp.*) in out_dir, out_dir/checkpoints and its step directories:
// the leftovers of a run that died while writing. Call with the run lock held.
void RemoveTemporaries(const std::string& out_dir);

// Removes the step directories newer than `step` (a run resumed from an older checkpoint:
// they belong to the abandoned continuation).
void RemoveCheckpointsAfter(const std::string& out_dir, int step);

}  // namespace cputrain::train
