#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "optim/optim.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/batches.h"
#include "train/placement_check.h"
#include "train/replica_group.h"
#include "train/run_outputs.h"
#include "train/step.h"

namespace cputrain::train {
namespace {

// The model's shape: the checkpoint's when training starts from one, else the config's.
model::Shape ModelShape(const ModelConfig& m) {
  if (!m.init_from.empty()) return model::ReadCheckpointShape(m.init_from);
  return {m.max_seq_len, m.vocab_size, model::Shape::PadVocab(m.vocab_size),
          m.layers,      m.heads,      m.channels};
}

// The batch must split evenly over R processes x G groups, and a row must fit the model.
void CheckBatch(const DataConfig& d, const model::Shape& shape, int R, int G) {
  if (d.seq_len > shape.maxT) {
    throw InputError(fmt::format("data.seq_len ({}) is larger than the model's max_seq_len ({})",
                                 d.seq_len, shape.maxT),
                     "lower data.seq_len");
  }
  if (d.batch_size % (R * G) == 0) return;
  throw InputError(
      R == 1 ? fmt::format("data.batch_size ({}) is not divisible by the {} replica groups of "
                           "the placement plan",
                           d.batch_size, G)
             : fmt::format("data.batch_size ({}) is not divisible by {} processes x {} replica "
                           "groups",
                           d.batch_size, R, G),
      fmt::format("use a batch size that is a multiple of {}, or change placement.groups", R * G));
}

// data.val, if set, and how many of its windows an evaluation reads.
std::optional<TokenWindows> OpenVal(const Config& cfg, int vocab, int* eval_windows) {
  *eval_windows = 0;
  if (cfg.data.val.empty()) return std::nullopt;
  TokenWindows val =
      TokenWindows::Open(cfg.data.val, "data.val", vocab, cfg.data.batch_size, cfg.data.seq_len);
  *eval_windows = static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(cfg.train.eval_batches), val.windows()));
  if (*eval_windows < cfg.train.eval_batches) {
    log::NoticeOnce("eval-windows", fmt::format("data.val has {} windows of B*T tokens; "
                                                "evaluating on those instead of {}",
                                                *eval_windows, cfg.train.eval_batches));
  }
  return val;
}

// placement.json: what the plan asked for and where the memory actually is; under MPI every
// process's, after checking that no two pin one CPU.
nlohmann::json Placement(const ReplicaGroups& groups, const topo::Plan& plan,
                         const topo::Topology& topology, const Config& cfg, Distributed* dist) {
  nlohmann::json pj = {{"groups", groups.PlacementJson(plan)},
                       {"simulated", topology.simulated},
                       {"topology", cfg.topology},
                       {"threads_source", plan.threads_source},
                       {"allocator", alloc::BackendName()}};
  if (!dist) return pj;
  pj = GatherPlacement(*dist, std::move(pj));
  CheckNoSharedCpus(pj["ranks"]);
  return pj;
}

void LogStart(const model::Shape& shape, const ReplicaGroups& groups, const topo::Plan& plan,
              const DataConfig& d, int R, std::size_t windows) {
  const std::string procs = R > 1 ? fmt::format("{} processes x ", R) : "";
  log::Info("training {} on {}{} group(s) [{}], B={} T={}, {} parameters, {} train windows",
            shape.ToString(), procs, groups.size(), plan.threads_source, d.batch_size, d.seq_len,
            groups.layout().total(), windows);
}

// Any process asked to stop: every process stops after the same step (a signal reaches each at
// a slightly different time).
bool AgreeToStop(const StopToken* stop, Distributed* dist) {
  bool requested = stop != nullptr && stop->requested();
  if (dist) requested = dist->SumAcrossRanks(requested ? 1.0 : 0.0) > 0;
  return requested;
}

// Everything a run holds while it trains: the plan, the data, the groups and the step.
struct Run {
  Run(const Config& c, Distributed* d)
      : cfg(c),
        dist(d),
        R(d ? d->size() : 1),
        rank(d ? d->rank() : 0),
        B(c.data.batch_size),
        T(c.data.seq_len) {}
  const Config& cfg;
  Distributed* dist;
  int R, rank, B, T;
  topo::Topology topology;
  topo::Plan plan;
  model::Shape shape;
  std::optional<TokenWindows> train, val;
  int eval_windows = 0;
  std::unique_ptr<RunOutputs> out;
  std::unique_ptr<ReplicaGroups> groups;
  std::unique_ptr<Stepper> stepper;

  // Group g of this process reads `rows` rows of window w from row rank*(B/R) + g*rows.
  auto RowsOf(const TokenWindows& data, std::size_t w) const {
    return [&data, w, row0 = rank * (B / R)](ReplicaGroup& g) {
      data.LoadRows(w, row0 + g.index * g.rows, g.rows, g.act->inputs, g.act->targets);
    };
  }
};

// Plans the groups, reads the shape and opens the data (every check that can refuse the run
// comes before any memory is touched), then builds the groups and their initial parameters.
void SetUp(Run& run, Progress progress) {
  const Config& cfg = run.cfg;
  run.topology = topo::LoadTopology(cfg.topology);
  run.plan = topo::PlanPlacement(run.topology, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  for (const std::string& w : run.plan.warnings) log::Warn("{}", w);
  const int G = static_cast<int>(run.plan.groups.size());
  run.shape = ModelShape(cfg.model);
  CheckBatch(cfg.data, run.shape, run.R, G);
  run.train = TokenWindows::Open(cfg.data.train, "data.train", run.shape.V, run.B, run.T);
  run.val = OpenVal(cfg, run.shape.V, &run.eval_windows);
  run.out = std::make_unique<RunOutputs>(cfg, /*writer=*/run.rank == 0, progress);

  alloc::Configure(alloc::OptionsFor(run.topology));
  run.groups = std::make_unique<ReplicaGroups>(run.topology, run.plan, run.shape,
                                               run.B / (run.R * G), run.T, G > 1 || run.dist);
  const model::ParamLayout& layout = run.groups->layout();
  run.groups->InitParams([&](WorkerPool& pool, float* params) {
    if (cfg.model.init_from.empty()) {
      model::RandomInit(pool, layout, cfg.model.seed, params);
    } else {
      model::LoadCheckpoint(cfg.model.init_from, layout, params);
    }
  });
  run.out->WritePlacement(Placement(*run.groups, run.plan, run.topology, cfg, run.dist));
  run.stepper = std::make_unique<Stepper>(
      *run.groups, run.B, run.T, static_cast<std::size_t>(cfg.comm.bucket_mb * 1e6 / sizeof(float)),
      run.dist);
  if (run.dist) {  // every process must train the same thing from the same start
    const std::string effective = ConfigToYaml(cfg);
    run.dist->CheckConsistent(Hash64(effective.data(), effective.size()),
                              HashFloats((*run.groups)[0].params.data(), layout.total()), G);
  }
  LogStart(run.shape, *run.groups, run.plan, cfg.data, run.R, run.train->windows());
}

// Mean validation loss over eval_windows windows of data.val, on every group and process.
EvalRecord Evaluate(Run& run, int after_steps) {
  double sum = 0;
  for (int w = 0; w < run.eval_windows; ++w)
    run.stepper->AddForwardLoss(run.RowsOf(*run.val, w), &sum);
  if (run.dist) sum = run.dist->SumAcrossRanks(sum);
  return {after_steps, sum / (static_cast<double>(run.eval_windows) * run.B * run.T)};
}

// Step s (0-based) on window s mod n, timed from the main thread.
StepRecord TrainStep(Run& run, int s, const TrainOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const Config& cfg = run.cfg;
  const double lr = optim::LearningRate(cfg.optim, s, cfg.train.steps);
  const optim::AdamWStep update{
      lr, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay, s + 1};
  if (run.dist) run.dist->SetStep(s + 1);
  if (options.step_probe) options.step_probe(true);
  const StepResult r =
      run.stepper->Step(static_cast<uint64_t>(s),
                        run.RowsOf(*run.train, static_cast<std::size_t>(s) % run.train->windows()),
                        update, cfg.optim.grad_clip);
  if (options.step_probe) options.step_probe(false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {s + 1,
          r.loss,
          lr,
          r.grad_norm,
          run.B * run.T / secs,
          secs * 1e3,
          r.timings.forward_ms,
          r.timings.backward_ms,
          r.timings.comm_ms,
          r.timings.optimizer_ms};
}

bool Every(int n, int step) { return n > 0 && step % n == 0; }

}  // namespace

TrainResult Train(const Config& cfg, const TrainOptions& options) {
  kernels::InitBlas();
  Distributed* dist = options.dist;
  Run run(cfg, dist);
  SetUp(run, options.progress);
  RunOutputs& out = *run.out;
  const float* params = (*run.groups)[0].params.data();
  out.BeginTraining();

  TrainResult result;
  if (run.val) out.Eval(result.evals.emplace_back(Evaluate(run, 0)));
  for (int s = 0; s < cfg.train.steps; ++s) {
    const StepRecord& rec = result.steps.emplace_back(TrainStep(run, s, options));
    out.Step(rec);
    if (!std::isfinite(rec.loss)) {  // never overwrite the last good checkpoint with this model
      throw RuntimeError(
          fmt::format("the loss is {} at step {}: training diverged", rec.loss, rec.step),
          "lower optim.lr, raise optim.warmup_steps or set optim.grad_clip");
    }
    const bool last = rec.step == cfg.train.steps;
    if (run.val && (last || Every(cfg.train.eval_every, rec.step))) {
      out.Eval(result.evals.emplace_back(Evaluate(run, rec.step)));
    }
    if (!last && Every(cfg.train.checkpoint_every, rec.step)) {
      out.SaveCheckpoint(run.groups->layout(), params);
    }
    if (!last && AgreeToStop(options.stop, dist)) {
      out.Message(
          fmt::format("stop requested after step {}: saving {}/model.bin", rec.step, out.dir()));
      result.stopped = true;
      result.stop_reason = options.stop ? options.stop->reason() : 0;
      break;
    }
  }
  out.SaveCheckpoint(run.groups->layout(), params);
  out.Finish();
  return result;
}

}  // namespace cputrain::train
