// cli/ internal: what `train` and `qa train` share around train::Train() — the --progress flag's
// values, and running Train() as one process of a (possibly multi-node) job.
#pragma once

#include <string>

#include "config/config.h"
#include "mpi/bridge.h"
#include "train/trainer.h"

namespace cputrain::cli {

// --progress: auto (a bar on a terminal, else lines), bar, lines or quiet.
train::Progress ProgressFromFlag(const std::string& value);

// train::Train(cfg, o) with `bridge` (null: a single process) as o.dist. An error on this process
// ends every rank of the job with the error's exit code (the others would wait for this one)
// and is rethrown; the bridge is finished either way. A run stopped by a signal, here or on
// another rank, ends as StopExit(128 + signal) naming the step, the checkpoint and how to go on:
// `resume` (a single process), or the same mpirun command.
train::TrainResult TrainAsJob(const Config& cfg, train::TrainOptions o, mpi::Bridge* bridge,
                              const std::string& resume);

}  // namespace cputrain::cli
