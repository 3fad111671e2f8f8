#include "train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/peak.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/lora.h"
#include "model/peft.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "optim/optim.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/batches.h"
#include "train/kernel_setup.h"
#include "train/memory_plan.h"
#include "train/placement_check.h"
#include "train/replica_group.h"
#include "train/resume.h"
#include "train/run_outputs.h"
#include "train/step.h"
#include "train/train_state.h"

namespace cputrain::train {
namespace {

// A model key the user set (--set or a config file) that the init_from checkpoint contradicts
// is refused: the checkpoint decides the shape, and training another shape than the one asked
// for, silently, is worse than stopping. Keys left at their defaults are not compared.
// `source` names what set the shape: "model.init_from 'DIR'" or "model.preset 'NAME'".
void CheckExplicitShape(const Config& cfg, const model::Shape& s, const std::string& source) {
  struct Dim {
    const char* key;
    int ModelConfig::*configured;
    int model::Shape::*actual;
  };
  for (const Dim& d : {Dim{"model.layers", &ModelConfig::layers, &model::Shape::L},
                       Dim{"model.channels", &ModelConfig::channels, &model::Shape::C},
                       Dim{"model.heads", &ModelConfig::heads, &model::Shape::NH},
                       Dim{"model.vocab_size", &ModelConfig::vocab_size, &model::Shape::V},
                       Dim{"model.max_seq_len", &ModelConfig::max_seq_len, &model::Shape::maxT}}) {
    auto it = cfg.explicit_keys.find(d.key);
    if (it == cfg.explicit_keys.end() || cfg.model.*d.configured == s.*d.actual) continue;
    throw InputError(fmt::format("{} is {} ({}) but {} has {} = {}", d.key, cfg.model.*d.configured,
                                 it->second, source, d.key, s.*d.actual),
                     fmt::format("{} sets the model's shape: drop {} or set it to {}, or leave "
                                 "it empty",
                                 source, d.key, s.*d.actual));
  }
}

// The head model.head, model.num_labels and model.problem_type ask a checkpoint to be read with.
model::HeadSpec HeadSpecOf(const ModelConfig& m) {
  model::HeadSpec h(model::HeadFromName(m.head));
  h.labels = m.num_labels;
  if (!m.problem_type.empty()) h.problem = model::ProblemFromName(m.problem_type);
  h.pad_token = m.pad_token_id;
  return h;
}

// The model's shape: the checkpoint's when training starts from one, else the config's.
model::Shape ModelShape(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  if (!m.init_from.empty()) {
    const model::Shape s =
        model::ReadCheckpointShape(model::ResolveModelFile(m.init_from), HeadSpecOf(m));
    CheckExplicitShape(cfg, s, fmt::format("model.init_from '{}'", m.init_from));
    return s;
  }
  const model::Shape s = ShapeFromConfig(m);
  // A preset's dimensions replace the keys': one set that disagrees is refused, as above.
  if (!m.preset.empty()) CheckExplicitShape(cfg, s, fmt::format("model.preset '{}'", m.preset));
  return s;
}

// train.lora as the model's LoRA config: the keys, or the adapter directory's config when training
// continues from one (its r, alpha, dropout and modules decide; keys set beside it must agree).
std::optional<model::LoraConfig> LoraOf(const Config& cfg) {
  const LoraTrainConfig& l = cfg.train.lora;
  if (!l.on()) return std::nullopt;
  model::LoraConfig c;
  if (!l.adapter.empty()) {
    c = model::ReadAdapterConfig(l.adapter).cfg;
    if (cfg.explicit_keys.count("train.lora.r") && l.r != c.r) {
      throw InputError(
          fmt::format("train.lora.r is {} but the adapter '{}' has r = {}", l.r, l.adapter, c.r),
          "drop train.lora.r: the adapter sets its rank");
    }
  } else {
    c.r = l.r;
    c.alpha = static_cast<float>(l.alpha);
    c.dropout = static_cast<float>(l.dropout);
    c.target_modules = l.target_modules;
    c.modules_to_save = l.modules_to_save;
    c.init = model::LoraInitFromName(l.init);
  }
  c.base_bf16 = l.base_dtype == "bf16";
  if (c.base_bf16 && !cfg.train.bf16) {
    throw InputError("train.lora.base_dtype is bf16 but train.precision is fp32",
                     "set train.precision: bf16 (the products then read the bf16 base), or "
                     "train.lora.base_dtype: fp32");
  }
  return c;
}

// A resume continues what the checkpoint trained: adapters (a LoRA step directory) with the same
// rank, alpha and modules, or every weight (a model.bin) — refused by name otherwise, before any
// memory is touched.
void CheckLoraResumable(const ResumePoint& resume, const Config& cfg, const model::Shape& shape,
                        const Names& names) {
  const std::optional<model::LoraConfig> now = LoraOf(cfg);
  const bool adapter = model::IsAdapterDir(resume.dir);
  const std::string fresh = "or " + names.fresh_start;
  const std::string lora = names.Key("train.lora");
  if (!now && adapter) {
    throw InputError(fmt::format("checkpoint '{}' holds LoRA adapters, but this run trains every "
                                 "weight ({} is 0)",
                                 resume.dir, names.Key("train.lora.r")),
                     fmt::format("set {} as the run that wrote it did, {}", lora, fresh));
  }
  if (now && !adapter) {
    throw InputError(fmt::format("checkpoint '{}' holds a whole model (a full fine-tune), but "
                                 "this run trains LoRA adapters",
                                 resume.dir),
                     fmt::format("resume it without {}, {}; {} may name that checkpoint as the "
                                 "new run's base",
                                 lora, fresh, names.Key("model.init_from")));
  }
  if (!now) return;
  const model::ParamLayout base(shape);
  const model::Lora mine(base, *now);
  const std::unique_ptr<model::Lora> saved = model::OpenAdapter(resume.dir, base);
  const model::LoraConfig& was = saved->config();
  std::string what;
  if (was.r != now->r) what = fmt::format("r = {}, this run's {}", was.r, now->r);
  if (what.empty() && was.alpha != now->alpha)
    what = fmt::format("alpha = {:g}, this run's {:g}", was.alpha, now->alpha);
  if (what.empty() && saved->TargetNames() != mine.TargetNames())
    what = fmt::format("target_modules {}, this run's {}", fmt::join(saved->TargetNames(), ", "),
                       fmt::join(mine.TargetNames(), ", "));
  if (what.empty() && saved->SavedNames() != mine.SavedNames())
    what = fmt::format("modules_to_save {}, this run's {}", fmt::join(saved->SavedNames(), ", "),
                       fmt::join(mine.SavedNames(), ", "));
  if (what.empty()) return;
  throw InputError(fmt::format("checkpoint '{}' was trained with LoRA {}", resume.dir, what),
                   fmt::format("keep the run's {} settings to resume it, {}", lora, fresh));
}

// The batch must split evenly over R processes x G groups, and a row must fit the model.
void CheckBatch(const DataConfig& d, const model::Shape& shape, int R, int G, const Names& names) {
  if (d.seq_len > shape.maxT) {
    throw InputError(fmt::format("{} ({}) is larger than the model's max_seq_len ({})",
                                 names.Key("data.seq_len"), d.seq_len, shape.maxT),
                     "lower " + names.Key("data.seq_len"));
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
  // Reading the first eval_batches windows of data.val in shard order, never shuffled: the same
  // validation set at every evaluation.
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
                         const topo::Topology& topology, const Config& cfg,
                         comm::Distributed* dist) {
  nlohmann::json pj = {{"groups", groups.PlacementJson(plan)},
                       {"simulated", topology.simulated},
                       {"topology", cfg.topology},
                       {"threads_source", plan.threads_source},
                       {"allowed_cpus", topology.AllowedCpus()},
                       {"cpuset_cpus", topology.CpusetCpus()},
                       {"allocator", alloc::BackendName()}};
  if (groups.lora()) pj["lora"] = groups.LoraJson();
  if (!dist) return pj;
  pj = GatherPlacement(*dist, std::move(pj));
  CheckNoSharedCpus(pj["ranks"]);
  if (dist->rank() == 0) {
    for (const std::string& w : UnusedCpuWarnings(pj["ranks"])) log::Warn("{}", w);
  }
  return pj;
}

void LogStart(const model::Shape& shape, const ReplicaGroups& groups, const topo::Plan& plan,
              const Config& cfg, int R, const RowSource& train) {
  const DataConfig& d = cfg.data;
  const std::string procs = R > 1 ? fmt::format("{} processes x ", R) : "";
  const int k = cfg.train.grad_accum_steps;
  const std::string accum = k > 1
                                ? fmt::format(" x {} micro-batches = {} tokens per step", k,
                                              static_cast<long long>(k) * d.batch_size * d.seq_len)
                                : "";
  log::Info("training {} on {}{} group(s) [{}], B={} T={}{}, {} parameters, {}{}", shape.ToString(),
            procs, groups.size(), plan.threads_source, d.batch_size, d.seq_len, accum,
            groups.layout().total(), train.Describe(), d.shuffle ? ", shuffled" : "");
  if (const model::Lora* lora = groups.lora()) {
    log::Info("{}; the frozen base stored once per NUMA node ({} cop{}, {:.1f} MB each{})",
              lora->Describe(), groups.bases().size(), groups.bases().size() == 1 ? "y" : "ies",
              groups.model_layout().total() * sizeof(float) / 1e6,
              cfg.train.bf16 ? " + its bf16 copy" : "");
  }
}

// Any process asked to stop: every process stops after the same step (a signal reaches each at
// a slightly different time).
bool AgreeToStop(const StopToken* stop, comm::Distributed* dist) {
  bool requested = stop != nullptr && stop->requested();
  if (dist) requested = dist->SumAcrossRanks(requested ? 1.0 : 0.0) > 0;
  return requested;
}

// Everything a run holds while it trains: the plan, the data, the groups and the step.
struct Run {
  Run(const Config& c, comm::Distributed* d)
      : cfg(c),
        dist(d),
        R(d ? d->size() : 1),
        rank(d ? d->rank() : 0),
        B(c.data.batch_size),
        T(c.data.seq_len),
        k(c.train.grad_accum_steps),
        start(std::chrono::steady_clock::now()) {}
  const Config& cfg;
  comm::Distributed* dist;
  int R, rank, B, T, k;  // k micro-batches per step
  // The positions the activations are made for: the rows' longest under dynamic padding
  // (RowSource::LongestRow), else 0: T.
  int act_T = 0;
  std::chrono::steady_clock::time_point start;
  topo::Topology topology;
  topo::Plan plan;
  model::Shape shape;
  std::unique_ptr<RowSource> train;
  std::optional<TokenWindows> val;
  DataPosition pos;  // windows read and tokens trained on so far
  int eval_windows = 0;
  std::unique_ptr<RunOutputs> out;
  std::unique_ptr<ReplicaGroups> groups;
  std::unique_ptr<Stepper> stepper;
  std::optional<ResumePoint> resume;
  KernelSetup kernels;  // what the products run on (SetUpKernels)
  int skipped = 0;      // steps skipped so far (train.on_nonfinite: skip_step)
  int first_step = 0;   // the checkpoint's step when resuming: the Stepper counts from there

  // Group g of this process reads `rows` rows of window w from row rank*(B/R) + g*rows;
  // evaluation: no dropout.
  auto RowsOf(const TokenWindows& data, std::size_t w) const {
    return [&data, w, row0 = rank * (B / R)](ReplicaGroup& g) {
      data.LoadRows(w, row0 + g.index * g.rows, g.rows, g.act->inputs, g.act->targets);
      g.act->dropout.on = false;
    };
  }
  // The same for micro-batch j of step s (0-based) of train (as planned), with dropout on: its
  // masks a function of (model.seed, s, j) and the rows' global index, so every placement and a
  // resumed run drop the same elements.
  auto MicroRows(int s) const {
    return [this, s, row0 = rank * (B / R)](ReplicaGroup& g, int j) {
      const int first = row0 + g.index * g.rows;
      train->LoadRows(static_cast<std::size_t>(j), first, g.rows, *g.act);
      g.positions = train->Positions(static_cast<std::size_t>(j));
      g.act->dropout = {true, DropoutSeed(cfg.model.seed, s, j), static_cast<uint64_t>(first)};
    };
  }
  static uint64_t DropoutSeed(uint64_t seed, int step, int micro) {
    return comm::Hash64(&micro, sizeof(micro), comm::Hash64(&step, sizeof(step), seed));
  }
};

// The initial parameters (the checkpoint's when resuming, else init_from's or random) into every
// replica, and when resuming each group's shard of the optimizer's state.
void InitState(Run& run) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& m = run.cfg.model;
  const model::ParamLayout& layout = run.groups->layout();
  const std::string init = m.init_from.empty() ? "" : model::ResolveModelFile(m.init_from);
  if (const model::Lora* lora = run.groups->lora()) {
    // The base: always model.init_from's (or the seed's), resumed or not — a LoRA checkpoint
    // holds the adapters only. Then the adapters: the checkpoint's, the adapter to continue, or
    // a fresh init (saved modules copied from the base).
    run.groups->InitBase([&](WorkerPool& pool, float* params, model::TensorDone done) {
      if (init.empty()) {
        model::RandomInit(pool, run.groups->model_layout(), m.seed, params, done);
      } else {
        model::LoadCheckpoint(init, run.groups->model_layout(), params, m.seed, done);
      }
    });
    std::string adapter = run.cfg.train.lora.adapter;
    if (run.resume) adapter = run.resume->dir;
    const float* base_params = run.groups->bases()[0].params.data();
    run.groups->InitParams([&](WorkerPool& pool, float* params) {
      if (adapter.empty()) {
        model::LoraInit(pool, *lora, m.seed, base_params, params);
      } else {
        model::LoadAdapter(adapter, *lora, params);
      }
    });
  } else {
    const std::string source = run.resume ? model::StepModelFile(run.resume->dir) : init;
    run.groups->InitParams([&](WorkerPool& pool, float* params) {
      if (source.empty()) {
        model::RandomInit(pool, layout, m.seed, params);
      } else {
        // checksum and finite weights checked; a new task head initialized from the seed
        model::LoadCheckpoint(source, layout, params, m.seed);
      }
    });
  }
  if (!run.resume) return;
  TrainStateReader state(run.resume->dir + "/" + model::kStateFile);
  const optim::Optimizer& opt = run.groups->optimizer();
  // Each group takes its own shard of the whole vectors: any group count resumes any other's.
  for (ReplicaGroup& grp : run.groups->all()) {
    state.CheckSlots(opt.name(), grp.slots);
    state.ReadSlots(grp.slots, grp.state_ptrs);
  }
  const std::size_t floats = layout.total() + run.groups->StateFloats();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::Info("loaded {} in {:.2f} s ({:.0f} MB/s with its optimizer state)", run.resume->dir, secs,
            static_cast<double>(floats) * sizeof(float) / 1e6 / secs);
  run.skipped = run.resume->state.skipped_steps;
  run.first_step = run.resume->state.step;
  run.pos = {run.resume->state.next_window, run.resume->state.tokens};
}

// The kernels of the products (kernels/kernels.h: train.fp32_kernel; kernels/bf16.h:
// train.bf16_kernel with train.precision: bf16), resolved up front: one that cannot run here is
// refused before any memory is touched. A kernel named by the config or the environment is said
// here; auto's choice per class is measured once the groups are built (ChooseKernels). Where
// bf16's instruction measured slower than this core's fp32 FMAs, a warning says so with both
// rates.
void CheckPrecision(const Config& cfg) {
  const kernels::Fp32Kernel fp32 =
      kernels::ParseFp32Kernel(cfg.train.fp32_kernel).value_or(kernels::Fp32Kernel::kAuto);
  const kernels::Fp32Kernel active = kernels::UseFp32Kernel(fp32);
  const std::string fp32_line = kernels::Fp32KernelLine(active, fp32);
  if (kernels::Fp32KernelForced()) {
    log::Info("{}", fp32_line);
  } else {
    log::Debug("{}", fp32_line);
  }
  if (!cfg.train.bf16) return;
  const kernels::Bf16Kernel requested =
      kernels::ParseBf16Kernel(cfg.train.bf16_kernel).value_or(kernels::Bf16Kernel::kAuto);
  const kernels::Bf16Kernel k = kernels::UseBf16Kernel(requested);
  if (kernels::Bf16KernelForced()) log::Info("{}", kernels::Bf16KernelLine(k, requested));
  if (const std::string note = kernels::Bf16RateNote(k); !note.empty()) log::Warn("{}", note);
}

// The run's products by class, as its passes run them on one group (model/products.h).
model::ProductRun ProductsOf(const Config& cfg, const model::Shape& shape, int T, int group_rows,
                             bool train) {
  model::ProductRun p;
  p.shape = shape;
  p.T = T;
  p.rows = group_rows * T;
  p.train = train;
  p.bf16 = cfg.train.bf16;
  const std::optional<model::LoraConfig> lora = LoraOf(cfg);
  p.lora_r = lora ? lora->r : 0;
  return p;
}
model::ProductRun ProductsOf(const Run& run, bool train) {
  const int T = run.act_T > 0 ? std::min(run.act_T, run.T) : run.T;
  return ProductsOf(run.cfg, run.shape, T, (*run.groups)[0].rows, train);
}

// The kernels recorded in the state.bin of the checkpoint `init_from` names where they were
// chosen on this machine: the one beside its model.bin, else (an output directory holding a
// Hugging Face export, as the task commands write) its newest checkpoint's. Null otherwise, or
// where no state.bin is readable: the kernels are then chosen as for a fresh run. So evaluating
// or predicting with a trained model runs the products its training ran on, and a task's
// `evaluate` prints the loss its `train --do_eval` printed, to the last bit. Only the choice is
// borrowed: the weights are read and checked apart.
nlohmann::json CheckpointKernels(const std::string& init_from) {
  if (init_from.empty()) return nullptr;
  namespace fs = std::filesystem;
  std::vector<fs::path> states;
  try {
    const fs::path model = model::ResolveModelFile(init_from);
    if (model.filename() == "model.bin") states.push_back(model.parent_path() / "state.bin");
    if (fs::is_directory(init_from)) {
      if (const std::optional<std::string> d = model::LatestCheckpoint(init_from))
        states.push_back(fs::path(*d) / "state.bin");
    }
  } catch (const std::exception&) {
    return nullptr;  // Infer and EvaluateCheckpoint refuse the path themselves, naming it
  }
  for (const fs::path& state : states) {
    try {
      if (!fs::is_regular_file(state)) continue;
      const TrainStateReader reader(state.string());
      const nlohmann::json& k = reader.state().kernels;
      if (k.is_object() && k.value("machine", "") == kernels::MachineKey()) return k;
    } catch (const std::exception&) {
      // An unreadable state.bin only costs the choice.
    }
  }
  return nullptr;
}

// Sets the kernel of each class of the run's products (train/kernel_setup.h) for `steps` more
// steps (0: one pass, no training: the checkpoint's own kernels where it records them).
void ChooseKernels(Run& run, int steps) {
  const model::ProductRun p = ProductsOf(run, steps > 0);
  const double flops = model::TrainFlopsPerToken(run.shape, p.T) * p.rows * std::max(1, run.k) *
                       std::max(1, steps) / (steps > 0 ? 1.0 : 3.0);
  const nlohmann::json resumed = run.resume  ? run.resume->state.kernels
                                 : steps > 0 ? nlohmann::json(nullptr)
                                             : CheckpointKernels(run.cfg.model.init_from);
  run.kernels = SetUpKernels(*(*run.groups)[0].pool, p, flops, resumed);
}

// Plans the groups and reads the model's shape; checks the batch splits over them.
void PlanAndShape(Run& run, const Names& names = {}) {
  const Config& cfg = run.cfg;
  CheckPrecision(cfg);
  run.topology = topo::LoadTopology(cfg.topology);
  if (const std::string w = topo::AdoptLaunchBinding(run.topology); !w.empty()) log::Warn("{}", w);
  run.plan = topo::PlanPlacement(run.topology, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  for (const std::string& w : run.plan.warnings) log::Warn("{}", w);
  run.shape = ModelShape(cfg);
  CheckBatch(cfg.data, run.shape, run.R, static_cast<int>(run.plan.groups.size()), names);
}

// The memory plan of the groups BuildGroups makes (train/memory_plan.h), printed; the run is
// refused where a node of this machine cannot hold it (a simulated machine's nodes are not
// checked).
void CheckMemory(const Run& run, const Names& names) {
  const int G = static_cast<int>(run.plan.groups.size());
  const MemoryRun m =
      MemoryRunOf(run.cfg, run.shape, run.B / (run.R * G),
                  run.act_T > 0 ? std::min(run.act_T, run.T) : run.T, run.rank == 0);
  const std::vector<NodeMemory> nodes = PlanMemory(run.plan, m);
  const std::function<uint64_t(int)> available =
      run.topology.simulated ? std::function<uint64_t(int)>() : alloc::AvailableOnNode;
  const std::string text = DescribeMemory(nodes, available);
  for (std::size_t at = 0; at < text.size();) {  // a line each: every log line has its stamp
    const std::size_t end = std::min(text.find('\n', at), text.size());
    log::Info("{}", text.substr(at, end - at));
    at = end + 1;
  }
  CheckMemoryFits(nodes, available, MemoryFixes(m, names));
}

// Builds the groups on their nodes, their initial state, and the Stepper.
void BuildGroups(Run& run) {
  const Config& cfg = run.cfg;
  const int G = static_cast<int>(run.plan.groups.size());
  alloc::Configure(alloc::OptionsFor(run.topology));
  const std::optional<model::LoraConfig> lora = LoraOf(cfg);
  GroupOptions o;
  o.comm_pools = G > 1 || run.dist;
  o.bf16 = cfg.train.bf16;
  o.checkpoint = cfg.train.gradient_checkpointing;
  o.lora = lora ? &*lora : nullptr;
  o.optimizer = cfg.optim;
  run.groups =
      std::make_unique<ReplicaGroups>(run.topology, run.plan, run.shape, run.B / (run.R * G),
                                      run.act_T > 0 ? std::min(run.act_T, run.T) : run.T, o);
  InitState(run);
  run.stepper = std::make_unique<Stepper>(
      *run.groups, run.B, run.T, static_cast<std::size_t>(cfg.comm.bucket_mb * 1e6 / sizeof(float)),
      run.dist, run.k);
}

// Plans the groups, reads the shape and opens the data (every check that can refuse the run
// comes before any memory is touched), then builds the groups and their initial state.
// A task model (BERT's span head) trains on its task's rows, not on token files.
void CheckLanguageModel(const Run& run, const char* command) {
  if (run.shape.head == model::Head::kLm) return;
  throw InputError(
      fmt::format("model.init_from '{}' is a {} {} model, not a language model",
                  run.cfg.model.init_from, model::ArchName(run.shape.arch),
                  model::HeadName(run.shape.head)),
      fmt::format("{} runs the decoder families' language models; fine-tune and evaluate this "
                  "one with cputrain-numa qa or classify (train, predict)",
                  command));
}

void SetUp(Run& run, const TrainOptions& options) {
  const Config& cfg = run.cfg;
  PlanAndShape(run, options.names);
  if (!options.train_rows) CheckLanguageModel(run, "train");
  const int G = static_cast<int>(run.plan.groups.size());
  if (options.train_rows) {
    run.train = options.train_rows(run.shape, run.B, run.T);
    run.act_T = run.train->LongestRow();
  } else {
    run.train = std::make_unique<LmRows>(
        TokenWindows::Open(cfg.data.train, "data.train", run.shape.V, run.B, run.T),
        cfg.data.shuffle, cfg.data.Seed(cfg.model.seed));
    run.val = OpenVal(cfg, run.shape.V, &run.eval_windows);
  }
  run.out = std::make_unique<RunOutputs>(cfg, /*writer=*/run.rank == 0, options.progress);
  if (!options.overwrite) run.resume = FindResumePoint(cfg, run.rank == 0, options.names);
  if (run.resume) CheckResumable(*run.resume, cfg, run.shape, *run.train, options.names);
  if (run.resume) CheckLoraResumable(*run.resume, cfg, run.shape, options.names);
  CheckMemory(run, options.names);
  BuildGroups(run);
  ChooseKernels(run, cfg.train.steps - (run.resume ? run.resume->state.step : 0));
  if (cfg.train.checkpoint_every > 0) {
    run.out->ReserveSnapshot(run.groups->layout().total() + run.groups->StateFloats());
  }
  run.out->WritePlacement(Placement(*run.groups, run.plan, run.topology, cfg, run.dist));
  if (run.dist) {  // every process must train the same thing from the same start
    const std::string effective = ConfigToYaml(cfg);
    const int step = run.resume ? run.resume->state.step : 0;
    run.dist->CheckConsistent(
        comm::Hash64(effective.data(), effective.size()),
        comm::Hash64(&step, sizeof(step),
                     comm::HashFloats((*run.groups)[0].weights, run.groups->layout().total())),
        G);
  }
  LogStart(run.shape, *run.groups, run.plan, cfg, run.R, *run.train);
}

// Mean validation loss over eval_windows windows of data.val, on every group and process.
EvalRecord Evaluate(Run& run, int after_steps) {
  double sum = 0;
  for (int w = 0; w < run.eval_windows; ++w)
    run.stepper->AddForwardLoss(run.RowsOf(*run.val, w), &sum);
  if (run.dist) sum = run.dist->SumAcrossRanks(sum);
  return {after_steps, sum / (static_cast<double>(run.eval_windows) * run.B * run.T)};  // LM only
}

// Step s (0-based) on the next k windows of the order, timed from the main thread.
StepRecord TrainStep(Run& run, int s, const TrainOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const Config& cfg = run.cfg;
  // The update count (bias corrections, decay rates and relative steps of optim/) counts the
  // updates applied: a skipped step is none (as torch's GradScaler).
  const optim::StepArgs update{optim::LearningRate(cfg.optim, s, cfg.train.steps),
                               s + 1 - run.skipped};
  const double lr = run.groups->optimizer().StepLr(update.lr, update.t);
  if (run.dist) run.dist->SetStep(s + 1);
  run.train->Plan(run.pos.next_window, run.k);
  if (options.step_probe) options.step_probe(true);
  const StepResult r =
      run.stepper->Step(static_cast<uint64_t>(s - run.first_step), run.MicroRows(s), update,
                        cfg.optim.grad_clip, cfg.train.skip_nonfinite, run.train->LossCount());
  if (options.step_probe) options.step_probe(false);
  run.skipped += r.skipped ? 1 : 0;
  // Positions trained on: B x T per micro-batch, or its padded length (dynamic padding).
  uint64_t step_tokens = 0;
  for (int j = 0; j < run.k; ++j) {
    const int P = run.train->Positions(static_cast<std::size_t>(j));
    step_tokens += static_cast<uint64_t>(run.B) * (P > 0 ? P : run.T);
  }
  const uint64_t epoch = run.train->EpochOf(run.pos.next_window + run.k - 1);
  run.pos.next_window += static_cast<uint64_t>(run.k);
  run.pos.tokens += step_tokens;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - t0).count();
  StepRecord rec{s + 1,
                 r.loss,
                 lr,
                 r.grad_norm,
                 static_cast<double>(step_tokens) / secs,
                 secs * 1e3,
                 r.timings.forward_ms,
                 r.timings.backward_ms,
                 r.timings.comm_ms,
                 r.timings.optimizer_ms,
                 r.skipped,
                 run.skipped};
  rec.tokens = run.pos.tokens;
  rec.epoch = epoch;
  rec.time_s = std::chrono::duration<double>(now - run.start).count();
  return rec;
}

bool Every(int n, int step) { return n > 0 && step % n == 0; }

// adapter_config.json's base_model_name_or_path: model.init_from as an absolute path (peft and
// `--adapter` users find the base from it), or "" for a random init.
std::string BaseModelName(const Config& cfg) {
  if (cfg.model.init_from.empty()) return "";
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(cfg.model.init_from, ec);
  return ec ? cfg.model.init_from : p.lexically_normal().string();
}

// The checkpoint after `step` steps (background: written from a snapshot while training goes on):
// every group's shard of the optimizer's state, in order (under MPI rank 0's groups hold every
// shard, the same on every rank). Returns the step directory.
std::string Save(Run& run, int step, double lr, bool background) {
  CheckpointContents c;
  c.layout = &run.groups->layout();
  c.params = (*run.groups)[0].weights;
  c.lora = run.groups->lora();
  if (c.lora) c.base_model = BaseModelName(run.cfg);
  c.state = StateAt(run.cfg, run.shape, step, run.skipped, *run.train, run.pos, lr);
  c.state.kernels = run.kernels.ToJson();
  c.optimizer.name = run.groups->optimizer().name();
  for (const ReplicaGroup& grp : run.groups->all()) {
    OptimizerState::Group& part = c.optimizer.groups.emplace_back();
    part.slots = grp.slots;
    for (const alloc::NodeBuffer<float>& b : grp.state) part.data.emplace_back(b.data(), b.size());
  }
  return run.out->SaveCheckpoint(c, background);
}

// A non-finite loss or norm stops the run before anything is saved, unless the step was skipped.
void CheckFinite(const StepRecord& rec, bool skip_nonfinite) {
  if (rec.skipped) {
    log::Warn("step {}: gradient norm {}: update skipped ({} skipped so far)", rec.step,
              rec.grad_norm, rec.skipped_steps);
    return;
  }
  if (std::isfinite(rec.loss) && std::isfinite(rec.grad_norm)) return;
  throw RuntimeError(
      fmt::format("the loss is {} and the gradient norm {} at step {}: training diverged", rec.loss,
                  rec.grad_norm, rec.step),
      skip_nonfinite ? "lower optim.lr or set optim.grad_clip; the last good checkpoint is kept"
                     : "lower optim.lr, raise optim.warmup_steps or set optim.grad_clip; the last "
                       "good checkpoint is kept (train.on_nonfinite: skip_step skips such steps)");
}

}  // namespace

model::Shape ShapeFromConfig(const ModelConfig& m) {
  if (!m.preset.empty()) {  // a named shape: its family and dimensions, the config's positions
    const model::Preset* p = model::FindPreset(m.preset);
    if (!p) {
      throw InputError(fmt::format("model.preset is '{}', not a named shape", m.preset),
                       "use one of: " + model::PresetNames());
    }
    model::Shape s = p->shape;
    s.maxT = m.max_seq_len;
    return s;
  }
  const model::Family* family = model::FindFamily(m.arch);
  if (!family) {
    throw InputError(
        fmt::format("model.arch is '{}': the families are {}", m.arch, model::FamilyNames()),
        "fix the config or pass --set to override");
  }
  // Every key in its field; the family keeps what applies to it (model/family.h, from_config).
  model::Shape k{m.max_seq_len, m.vocab_size, model::Shape::PadVocab(m.vocab_size),
                 m.layers,      m.heads,      m.channels};
  k.arch = family->arch;
  k.head = model::HeadFromName(m.head);
  k.NKV = m.kv_heads;
  k.F = m.ffn_hidden;
  k.HD = m.head_dim;
  k.norm_eps = static_cast<float>(m.norm_eps);
  k.rope_theta = static_cast<float>(m.rope_theta);
  k.tied = m.tied_embeddings;
  k.types = m.token_types;
  k.hidden_dropout = static_cast<float>(m.hidden_dropout);
  k.attn_dropout = static_cast<float>(m.attention_dropout);
  if (m.rope_scaling == "linear") {
    k.rope_scaling.kind = model::RopeScaling::kLinear;
    k.rope_scaling.factor = static_cast<float>(m.rope_factor);
  } else if (m.rope_scaling == "llama3") {
    k.rope_scaling.kind = model::RopeScaling::kLlama3;
    k.rope_scaling.factor = static_cast<float>(m.rope_factor);
    k.rope_scaling.low_freq_factor = static_cast<float>(m.rope_low_freq_factor);
    k.rope_scaling.high_freq_factor = static_cast<float>(m.rope_high_freq_factor);
    k.rope_scaling.original_max_position = m.rope_original_max_position;
  }
  model::Shape s = model::ShapeFromConfigKeys(k);
  if (s.head == model::Head::kClassify) {  // a random classifier's outputs, loss, padding token
    s.labels = m.num_labels > 0 ? m.num_labels : 2;
    if (!m.problem_type.empty()) s.problem = model::ProblemFromName(m.problem_type);
    if (!s.encoder()) s.pad_token = m.pad_token_id;
  }
  return s;
}

TrainResult Train(const Config& cfg, const TrainOptions& options) {
  kernels::InitBlas();
  comm::Distributed* dist = options.dist;
  Run run(cfg, dist);
  SetUp(run, options);
  RunOutputs& out = *run.out;
  TrainResult result;
  const int first = run.first_step;
  result.resumed_from = result.last_step = first;
  result.kernels = run.kernels.ToJson();
  out.BeginTraining(run.resume ? first : -1, options.overwrite);
  if (run.resume) {
    out.Message(
        fmt::format("resuming from {} (step {} of {})", run.resume->dir, first, cfg.train.steps));
  }
  if (first >= cfg.train.steps) {
    out.Message(
        fmt::format("nothing to train: the run is at step {} and train.steps is {} "
                    "(raise train.steps, or use a new train.out_dir)",
                    first, cfg.train.steps));
    out.Finish();
    return result;
  }
  if (run.val && first == 0) out.Eval(result.evals.emplace_back(Evaluate(run, 0)));
  int saved = run.resume ? first : -1;
  double lr = 0;
  for (int s = first; s < cfg.train.steps; ++s) {
    const StepRecord& rec = result.steps.emplace_back(TrainStep(run, s, options));
    out.Step(rec);
    result.last_step = rec.step;
    lr = rec.lr;
    CheckFinite(rec, cfg.train.skip_nonfinite);
    const bool last = rec.step == cfg.train.steps;
    if (run.val && (last || Every(cfg.train.eval_every, rec.step))) {
      out.Eval(result.evals.emplace_back(Evaluate(run, rec.step)));
    }
    if (!last && Every(cfg.train.checkpoint_every, rec.step)) {
      result.checkpoint = Save(run, rec.step, lr, /*background=*/true);
      saved = rec.step;
    }
    if (!last && AgreeToStop(options.stop, dist)) {
      out.Message(fmt::format("stop requested after step {}: saving a checkpoint", rec.step));
      result.stopped = true;
      result.stop_reason = options.stop ? options.stop->reason() : 0;
      break;
    }
  }
  if (saved != result.last_step) result.checkpoint = Save(run, result.last_step, lr, false);
  out.Finish();
  return result;
}

MemoryRun MemoryRunOf(const Config& cfg, const model::Shape& shape, int rows, int T, bool writer) {
  MemoryRun m;
  m.shape = shape;
  m.rows = rows;
  m.T = T;
  m.bf16 = cfg.train.bf16;
  m.checkpoint = cfg.train.gradient_checkpointing;
  m.lora = LoraOf(cfg);
  m.snapshot = cfg.train.checkpoint_every > 0 && writer;
  m.optimizer = cfg.optim;
  return m;
}

std::string MemoryFixes(const MemoryRun& m, const Names& names) {
  std::string fixes =
      fmt::format("lower {} or {}", names.Key("data.batch_size"), names.Key("data.seq_len"));
  if (!m.checkpoint) {
    fixes += fmt::format(", recompute the activations in the backward ({})",
                         names.Key("train.gradient_checkpointing"));
  }
  if (!m.lora || !m.lora->on()) {
    fixes += fmt::format(", train a LoRA adapter ({}) instead of every weight",
                         names.Key("train.lora.r"));
  } else if (m.bf16 && !m.lora->base_bf16) {
    fixes += ", keep the frozen base in bf16 (train.lora.base_dtype: bf16)";
  }
  return fixes + ", or spread the groups over more NUMA nodes or machines (placement, mpirun)";
}

KernelSetup KernelsFor(const Config& cfg) {
  kernels::InitBlas();
  CheckPrecision(cfg);
  const topo::Topology topology = topo::LoadTopology(cfg.topology);
  const topo::Plan plan =
      topo::PlanPlacement(topology, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  const std::unique_ptr<topo::Binder> binder = topo::MakeBinder(topology);
  WorkerPool pool(plan.groups.front().cpus, binder.get(), "calibrate");
  const model::ProductRun p = ProductsOf(
      cfg, ModelShape(cfg), cfg.data.seq_len,
      std::max<int>(1, cfg.data.batch_size / static_cast<int>(plan.groups.size())), true);
  const double flops = model::TrainFlopsPerToken(p.shape, p.T) * p.rows *
                       std::max(1, cfg.train.grad_accum_steps) * std::max(1, cfg.train.steps);
  return SetUpKernels(pool, p, flops, nullptr, /*announce=*/false);  // topo prints the choice
}

void Infer(const Config& cfg, RowSource& rows,
           const std::function<void(std::size_t j, int row, const float* logits)>& sink) {
  kernels::InitBlas();
  if (cfg.model.init_from.empty()) {
    throw InputError("no model to predict with",
                     "pass a trained model (a run's output_dir, a "
                     "checkpoint or a Hugging Face directory)");
  }
  Run run(cfg, nullptr);
  run.k = 1;
  run.act_T = rows.LongestRow();
  PlanAndShape(run);
  BuildGroups(run);
  ChooseKernels(run, 0);
  if (cfg.train.bf16) run.groups->RefreshBf16Weights();
  const model::ParamLayout& layout = run.groups->model_layout();
  for (std::size_t j = 0; j < rows.windows(); ++j) {
    rows.Plan(j, 1);
    const int T = rows.Positions(0) > 0 ? rows.Positions(0) : run.T;  // dynamic padding
    // A classifier's logits are per row, the other heads' per position.
    const std::size_t per_row = static_cast<std::size_t>(run.shape.head_width()) *
                                (run.shape.head == model::Head::kClassify ? 1 : T);
    run.groups->OnAll(
        [&](ReplicaGroup& g) {
          rows.LoadRows(0, g.index * g.rows, g.rows, *g.act);
          g.act->dropout.on = false;
          model::Forward(*g.pool, layout, g.model_weights(), *g.act, g.rows, T, false, g.bf16(),
                         nullptr, g.lora());
        },
        [](const std::string&) {});
    for (const ReplicaGroup& g : run.groups->all())
      for (int r = 0; r < g.rows; ++r) sink(j, g.index * g.rows + r, g.act->logits + r * per_row);
  }
}

EvalResult EvaluateCheckpoint(const Config& cfg, const std::vector<std::string>& data, int batches,
                              comm::Distributed* dist) {
  kernels::InitBlas();
  if (cfg.model.init_from.empty()) {
    throw InputError("no checkpoint to evaluate",
                     "pass --checkpoint (a model.bin, a step "
                     "directory or a run's out_dir)");
  }
  Run run(cfg, dist);
  run.k = 1;  // evaluation only: one window at a time
  PlanAndShape(run);
  CheckLanguageModel(run, "eval");
  run.val = TokenWindows::Open(data, "--data", run.shape.V, run.B, run.T);
  run.eval_windows = static_cast<int>(std::min<std::size_t>(
      batches > 0 ? static_cast<std::size_t>(batches) : run.val->windows(), run.val->windows()));
  BuildGroups(run);
  ChooseKernels(run, 0);
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult r;
  r.loss = Evaluate(run, 0).val_loss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.windows = run.eval_windows;
  r.available_windows = run.val->windows();
  r.tokens = static_cast<uint64_t>(r.windows) * run.B * run.T;
  r.groups = run.groups->size();
  r.model_file = model::ResolveModelFile(cfg.model.init_from);
  r.shards = run.val->shard_count();
  return r;
}

}  // namespace cputrain::train
