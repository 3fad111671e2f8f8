// train/: `cputrain-numa train` — data-parallel GPT-2 training over the replica groups of the
// placement plan, one pinned WorkerPool per group, each group's memory on its NUMA node.
//
// The pieces, each with its own header: batches.h (which rows each group reads), replica_group.h
// (a group's pool and NUMA-local buffers, replica sharing), step.h (one step: forward, backward
// with gradient sync, global norm, the optimizer on the owned shard, allgather), run_outputs.h
// (config, placement, metrics, checkpoints, progress), placement_check.h (CPUs pinned twice across
// ranks). Train() below is the main loop that calls them; docs/architecture.md draws them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/distributed.h"
#include "common/stop.h"
#include "config/config.h"
#include "model/shape.h"
#include "train/kernel_setup.h"
#include "train/memory_plan.h"
#include "train/rows.h"

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
  // train.on_nonfinite: skip_step skipped this step's update; skipped steps of the run so far.
  bool skipped = false;
  int skipped_steps = 0;
  // Global tokens trained on so far, this step's included (a resumed run counts from its
  // checkpoint's); the epoch of the train data this step's last micro-batch read (from 0);
  // wall-clock seconds since this process's Train() began.
  uint64_t tokens = 0;
  uint64_t epoch = 0;
  double time_s = 0;
};

struct EvalRecord {
  int step = 0;  // evaluated after this many updates
  double val_loss = 0;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  // The run stopped early on a StopToken request (on this process or, under MPI, any other),
  // after saving its checkpoint. stop_reason: this process's token's reason (a signal number),
  // or 0 if the request came from another process.
  bool stopped = false;
  int stop_reason = 0;
  int resumed_from = 0;    // the step of the checkpoint it resumed from (0: a fresh start)
  int last_step = 0;       // the step the model is at when Train returns
  std::string checkpoint;  // the step directory saved last ("" if none, or not rank 0)
  // The kernels the products ran on (train/kernel_setup.h KernelSetup::ToJson): per precision,
  // per class of products, the kernel chosen and every candidate's measured rate.
  nlohmann::json kernels;
};

enum class Progress { kAuto, kBar, kLines, kQuiet };

// How a run's messages name what the user set: train's config keys by default ("data.train",
// "start a new run: another train.out_dir, or train.resume: never"). A command that sets those
// keys from its own flags names the flags instead (qa train's --train_file, --max_seq_length,
// --output_dir), so that every message of a command speaks its command line's language.
struct Names {
  // Config key -> the command's words for it; a key not listed is named as it is.
  std::map<std::string, std::string> keys = {
      {"train.resume_fallback", "train --resume-fallback (train.resume_fallback: true)"}};
  // How to start afresh instead of resuming (a resume hint's end).
  std::string fresh_start = "start a new run: another train.out_dir, or train.resume: never";
  // The command's words for config key `key`.
  std::string Key(const std::string& key) const {
    const auto it = keys.find(key);
    return it == keys.end() ? key : it->second;
  }
};

struct TrainOptions {
  Progress progress = Progress::kAuto;  // auto: a bar when stderr is a terminal, else lines
  // Polled after every step: once a stop is requested (on any process), the run stops after
  // that step, saves its checkpoint and returns with `stopped` set. The CLI owns the token
  // and routes signals to it; null = never stop early.
  const StopToken* stop = nullptr;
  // The other processes of a multi-node run (src/mpi), or null. The global batch is split
  // across processes, then across each process's groups, in order; only rank 0 writes out_dir.
  comm::Distributed* dist = nullptr;
  // Called on the main thread right before (true) and after (false) the groups run each
  // training step: forward, backward, sync, optimizer, allgather — not the logging around it.
  // Tests use it to check that a step allocates nothing after the first.
  std::function<void(bool begin)> step_probe;
  // The rows to train on, for a model of `shape` and global micro-batches of B rows of T
  // positions: a task's (task/task.h). Null: data.train's token files (a language model;
  // data.val is evaluated only then).
  std::function<std::unique_ptr<RowSource>(const model::Shape& shape, int B, int T)> train_rows;
  // How messages name the settings (above): a task command's flags instead of train's keys.
  Names names;
  // Start afresh in an out_dir that holds a run instead of resuming it: its checkpoints and
  // metrics are removed once every check has passed, right before the first step (the task
  // commands' --overwrite_output_dir). false: train.resume decides.
  bool overwrite = false;
};

// Runs the configured training, resuming as train.resume says (train/resume.h); writes
// out_dir/{config.yaml, placement.json, metrics.jsonl, checkpoints/, latest}. Throws InputError
// for a bad config, data file, checkpoint or placement, or an out_dir another run holds, and
// RuntimeError when the loss or gradient norm stops being finite (under on_nonfinite: stop) —
// the last good checkpoint then stays the newest: a diverged model is never saved.
TrainResult Train(const Config& config, const TrainOptions& options);

// The kernels a run of `cfg` would choose here (train/kernel_setup.h): read from the calibration
// cache, or measured on the CPUs of its placement's first group, for the config's model at its
// batch (B / groups rows of T) over train.steps steps: what `topo` prints. Throws as Train would
// for a kernel that cannot run here.
KernelSetup KernelsFor(const Config& cfg);

// The memory plan's view of a run of cfg (train/memory_plan.h): a model of `shape`, `rows`
// sequences per group of T positions; writer: this process writes the checkpoints (rank 0).
MemoryRun MemoryRunOf(const Config& cfg, const model::Shape& shape, int rows, int T, bool writer);
// What the command can change when the plan does not fit, in its own words (names).
std::string MemoryFixes(const MemoryRun& m, const Names& names);

// The shape a random init of `m` has (model.arch and its dimensions); the family-specific keys
// of another family are ignored (GPT-2 has no kv_heads, ...: config validation refuses them).
model::Shape ShapeFromConfig(const ModelConfig& m);

struct EvalResult {
  double loss = 0;  // mean over the windows' positions
  int windows = 0;  // windows of B*T tokens read (the first ones, in shard order)
  std::size_t available_windows = 0, shards = 0;
  uint64_t tokens = 0;
  int groups = 0;
  double seconds = 0;
  std::string model_file;  // the model.bin the checkpoint path resolved to
};

// `cputrain-numa eval`: the mean loss of the checkpoint config.model.init_from (a model.bin, a
// step directory or an out_dir) over the first `batches` windows (0 = all) of `data` (paths,
// globs or a list, as data.val), B = data.batch_size, T = data.seq_len, forward only, on every
// group of config's placement (and process of `dist`, or null). Throws InputError for a bad
// checkpoint, data or placement.
EvalResult EvaluateCheckpoint(const Config& config, const std::vector<std::string>& data,
                              int batches, comm::Distributed* dist);

// Forward passes without a loss over every micro-batch of `rows` (rows.windows() of them, of
// B = data.batch_size rows of T = data.seq_len, or rows.Positions(0) with dynamic padding), on
// every group of config's placement, with the checkpoint config.model.init_from (its task head as
// model.head says): sink(j, row, logits) is called on the main thread for each row of micro-batch
// j with its logits (a span head's (T, 2) start, end; a classifier's (labels)). rows.Plan(j, 1)
// is called before micro-batch j runs.
// One process: prediction is cheap beside training, and each process of a multi-node run can
// run it whole (or rank 0 alone). Throws InputError for a bad checkpoint or placement.
void Infer(const Config& config, RowSource& rows,
           const std::function<void(std::size_t j, int row, const float* logits)>& sink);

}  // namespace cputrain::train
