// `cputrain-numa bench train`: training throughput of whole steps, for a list of placements in
// one run, and (--pytorch) the same model trained by PyTorch in the same run.
//
// For each model and placement: train::Train on a temporary token file of random ids (speed does
// not depend on the data) — or, for a span-head encoder (bert-base-qa, distilbert-qa), on random
// question-answering features through TrainOptions::train_rows (bench/qa_rows.h: SQuAD-like
// padded rows, what `qa train` feeds Train()) — outputs in a temporary directory, `--warmup` steps
// then `--steps` timed steps; the medians of the timed steps' StepRecords give tokens/s (B*T /
// median step time; an encoder's rows also in sequences/s, B / step time), and the step's split
// into forward, backward, communication (gradient buckets reduced or waited for, the norm's
// allreduce, the parameter allgather), optimizer and "other" (the rest: loading the batch, joining
// the groups). Achieved GFLOP/s = model::TrainFlopsPerToken x tokens/s (the same formula for
// PyTorch); MFU = that over the measured FMA peak of the cores the run occupies (bench/peak.h:
// per-core peak, measured with all cores busy, times the cores used).
//
// PyTorch (bench/pytorch/train_gpt2.py), by default PyTorch 2.x from PyPI in the peers' venv
// (the python `bash scripts/peers-env.sh` prints, asked at run time; --python overrides; without
// the venv the rows are skipped, naming `bash scripts/install-deps.sh --peers`). Each setup is a
// row, measured in the same run: 1 process x N threads eager; the same under torch.compile
// (inductor; its warm-up steps absorb the compilation); the same after ipex.optimize where
// intel_extension_for_pytorch imports; and gloo DDP with N processes x 1 thread; N = the
// machine's allowed physical cores. A setup that cannot run here (torch.compile fails, IPEX does
// not import) is skipped with the reason. DDP is gloo only: oneccl_bind_pt (the ccl backend) is
// not on PyPI. With Debian's python3-torch 1.x (--python /usr/bin/python3) the setups are the
// 1.x ones instead: eager with the default (pthread) OpenBLAS and with the OpenMP OpenBLAS
// (LD_LIBRARY_PATH), and gloo DDP. Same model, batch, warm-up and timed steps; its tokens/s from
// the median step; the torch and IPEX versions are in the records.
//
// Placements (--placement, repeatable; default: derived from the topology, see DefaultSpecs):
//   GxT        G groups of T worker threads: explicit CPU lists, one CPU per physical core,
//              dealt out in topology order (so on a 2-socket box 2x<cores per socket> is one
//              group per socket)
//   GxT+cK     the same with K communication threads per group (placement.comm_threads); when
//              the machine has fewer than G*(T+K) cores, a simulated topology
//              "pack:G core:T+K" runs it unpinned, oversubscribed, and the row says so
//   socket | numa | l3 [+cK]   the planner's own plan for that domain kind
//   [LABEL:] key=value; key=value ...   any config overrides (as --set), e.g.
//              "mine: placement.cpus=[[0],[1]]; comm.bucket_mb=5"
//
// Precision (--precision bf16): every placement also runs with train.precision: bf16, right after
// its fp32 row, and every PyTorch setup also runs under torch.autocast("cpu", torch.bfloat16)
// (IPEX's: ipex.optimize(..., dtype=torch.bfloat16) and autocast);
// the summary puts our best bf16 row beside PyTorch's best autocast row (target >= 1.5x) and each
// bf16 row beside its fp32 twin (target >= 1.6x). A bf16 row's MFU is over the measured
// VDPBF16PS peak (bench/peak.h), an fp32 row's over the FMA peak. Without AVX512_BF16 the bf16
// rows are skipped with a warning.
//
// Gradient accumulation (--accum K, default 8; 0 = off): the first two placements also run with
// train.grad_accum_steps=K, each right after its k=1 row, and the summary prints the per-token
// ratio (tokens/s counts all K micro-batches; the sync runs once per K).
//
// LoRA (--lora r=R[,alpha=A][,targets=...][,base=bf16], bench/lora_spec.h): every row, ours and
// PyTorch's, fine-tunes the same adapters over a frozen base instead of training every weight:
// ours with train.lora.*, PyTorch with transformers + peft (get_peft_model, AdamW over the
// trainable parameters; GPT-2 too then runs transformers' model, whose module names PEFT knows),
// in the same setups, plus with --precision bf16 a "bf16-base" setup per setup (the base loaded
// in torch.bfloat16, adapters fp32, autocast). Each row also prints its tokens/s over PyTorch's
// best of its precision, the trainable parameters, and the bytes its gradient sync moves per
// step beside a full fine-tune's; GFLOP/s and MFU count the LoRA step's FLOPs (LoraRun). A
// trainer that ignores train.lora (its checkpoint's AdamW state covers the whole model) makes
// our rows skipped, saying so, rather than full fine-tunes under a LoRA label.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <fstream>
#include <random>
#include <sstream>

#include "bench/cls_rows.h"
#include "bench/peak.h"
#include "bench/qa_rows.h"
#include "bench/train_suite.h"
#include "common/error.h"
#include "common/log.h"
#include "data/token_file.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/family.h"
#include "model/transformer.h"

namespace cputrain::bench {
namespace train_suite {

std::string TrimSpace(const std::string& s, const char* space) {
  const std::size_t b = s.find_first_not_of(space);
  return b == std::string::npos ? std::string() : s.substr(b, s.find_last_not_of(space) - b + 1);
}

std::string LastLines(const std::string& text, std::size_t n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (std::string t = TrimSpace(line); !t.empty()) lines.push_back(std::move(t));
  }
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
  return fmt::format("{}", fmt::join(lines, " | "));
}

uint64_t ProcKb(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

uint64_t MemAvailable() { return ProcKb("/proc/meminfo", "MemAvailable"); }

SubprocessResult RunRowProcess(const std::vector<std::string>& argv,
                               const SubprocessOptions& opts) {
  Subprocess p(argv, opts);
  std::ofstream(fmt::format("/proc/{}/oom_score_adj", p.pid())) << "1000\n";
  return p.Wait();
}

std::string ProcessFailure(const SubprocessResult& pr) {
  if (pr.term_signal == SIGKILL) {
    return "killed by SIGKILL (out of memory? `dmesg` says; the estimate was too low)";
  }
  if (pr.term_signal != 0) return fmt::format("killed by signal {}", pr.term_signal);
  return fmt::format("exit status {}: {}", pr.exit_code, LastLines(pr.err, 3));
}

std::string MemoryVerdict(uint64_t need) {
  const uint64_t avail = MemAvailable();
  if (avail == 0 || static_cast<double>(need) * 1.05 <= static_cast<double>(avail)) return "";
  return fmt::format(
      "needs ~{} by the estimate, {} available (MemAvailable): skipped so as not to "
      "run out of memory",
      FormatBytes(need), FormatBytes(avail));
}

std::string CpuName(const Machine& m) {
  return m.cpu_family >= 0
             ? fmt::format("{} (family {} model {})", m.cpu_model, m.cpu_family, m.cpu_model_number)
             : m.cpu_model;
}

nlohmann::json LoraRecord(const LoraRun& lora, bool base_bf16) {
  const model::LoraConfig& c = lora.lora().config();
  return {{"r", c.r},
          {"alpha", c.alpha},
          {"dropout", c.dropout},
          {"target_modules", lora.lora().TargetNames()},
          {"modules_to_save", lora.lora().SavedNames()},
          {"base_dtype", base_bf16 ? "bf16" : "fp32"}};
}

std::string Verdict(double ratio, double target) {
  return ratio >= target ? std::string("met")
                         : fmt::format("missed by {:.0f}%", 100 * (1 - ratio / target));
}

double SpeedTarget(const ModelPreset& m) {
  return model::FamilyOf(m.shape.arch).bench.speed_target;
}

std::string RssText(double bytes) {
  return bytes > 0 ? FormatBytes(static_cast<uint64_t>(bytes)) : std::string("-");
}

std::string RssRatioText(double ours, double torch) {
  if (ours <= 0 || torch <= 0) return "";
  const double r = ours / torch;
  return fmt::format("; peak RSS {} vs {} -> {:.2f}x (target <= 1: {})", RssText(ours),
                     RssText(torch), r,
                     r <= 1 ? "met" : fmt::format("missed by {:.0f}%", 100 * (r - 1)));
}

Row SkippedRow(const std::string& label, bool ours, nlohmann::json record, const std::string& why) {
  Row row;
  row.label = label;
  row.ours = ours;
  row.skipped = why;
  row.record = std::move(record);
  row.record["skipped"] = why;
  return row;
}

std::vector<const Row*> ModelRows::Ours() const {
  std::vector<const Row*> v;
  for (const Row& r : all)
    if (r.ours && r.ran()) v.push_back(&r);
  return v;
}

std::vector<const Row*> ModelRows::Peers() const {
  std::vector<const Row*> v;
  for (const Row& r : all)
    if (!r.ours && r.ran()) v.push_back(&r);
  return v;
}

const Row* ModelRows::FindOurs(const std::string& label) const {
  const Row* found = nullptr;
  for (const Row* r : Ours())
    if (r->label == label) found = r;
  return found;
}

void TrainSuite::AddOptions(CLI::App* cmd) {
  cmd->add_option(
      "--model", models_,
      "model (repeatable): " + ModelNames() + " (default: small and gpt2-124M; --quick: tiny)");
  cmd->add_option("--placement", placements_,
                  "placement (repeatable): GxT, GxT+cK, socket, numa, l3[+cK], or "
                  "'label: key=value; ...' (default: derived from the topology)");
  cmd->add_option("--steps", steps_, "timed steps (default 6; --quick 3)")
      ->check(CLI::Range(1, 100000))
      ->default_str("");
  cmd->add_option("--warmup", warmup_, "untimed steps first (default 2; --quick 1)")
      ->check(CLI::Range(0, 100000))
      ->default_str("");
  cmd->add_option("--accum", accum_,
                  "also run the first two placements with this many micro-batches per step "
                  "(gradient accumulation; default 8, 0 = off)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--precision", precision_,
                  "bf16: also run every placement in train.precision: bf16 and PyTorch under "
                  "bf16 autocast, with the ratios (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--lora", lora_text_,
                  "LoRA instead of full fine-tunes, both sides: r=R[,alpha=A (default 2R)]"
                  "[,targets=NAME+NAME (default PEFT's for the family)][,base=bf16 (our bf16 "
                  "rows' frozen base)]; PyTorch runs transformers + peft");
  cmd->add_flag("--gradient_checkpointing", checkpoint_,
                "every row recomputes each block in the backward from its input, both sides "
                "(ours: train.gradient_checkpointing; PyTorch: transformers' "
                "gradient_checkpointing_enable, non-reentrant)");
  cmd->add_flag("--kernels", kernels_,
                "also run every placement with each kernel that runs here forced for every class "
                "(train.fp32_kernel, and train.bf16_kernel for the bf16 rows), beside auto's "
                "choice by measurement");
  cmd->add_option("--check-auto", check_auto_,
                  "with --kernels implied: fail (exit 1) where an auto row ran slower than the "
                  "best forced-kernel row / R (CI's check on a foreign CPU: R = 1.2)")
      ->check(CLI::Range(1.0, 10.0))
      ->default_str("");
  cmd->add_flag("--pytorch", pytorch_, "also train the same model with PyTorch");
  cmd->add_option("--python", python_,
                  "Python with torch (default: the peers' venv, `bash scripts/peers-env.sh`; "
                  "/usr/bin/python3 runs Debian's PyTorch 1.x setups)");
  cmd->add_option("--pytorch-script", script_,
                  "bench/pytorch/train_gpt2.py (default: the source tree's)");
  cmd->add_option("--pytorch-setup", torch_setups_,
                  "only these PyTorch setups (repeatable): eager, compile, ipex, ddp (default: "
                  "all; PyTorch 1.x: its own)")
      ->check(CLI::IsMember({"eager", "compile", "ipex", "ddp"}));
  cmd->add_option("--batch", batch_,
                  "sequences per step for every model, instead of the preset's B (smoke runs)")
      ->check(CLI::Range(1, 1 << 20))
      ->default_str("");
  cmd->add_option("--seq-len", seq_len_,
                  "positions per sequence for every model, instead of the preset's T")
      ->check(CLI::Range(1, 1 << 20))
      ->default_str("");
  // Internal: how the suite runs each of its own rows in a fresh process (RunOurs) — train
  // with --config's config here, then write the steps and this process's peak RSS to FILE.
  cmd->add_option("--row-process", row_result_, "")->group("");
}

double TrainSuite::SlowestCorePct() const {
  // CoreRates runs the 256-bit loop: compare with that loop's peak, not the best width's (on a
  // CPU with full-width 512-bit FMAs, Zen 5 say, the 256-bit loop reaches half of that).
  const std::vector<double> r = CoreRates(*check_pool_, 0.03);
  return 100 * *std::min_element(r.begin(), r.end()) / peak_256_per_core_;
}

std::vector<ModelPreset> TrainSuite::ResolveModels(const BenchContext& ctx) const {
  const std::vector<std::string> names =
      !models_.empty() ? models_
                       : (ctx.quick ? std::vector<std::string>{"tiny"}
                                    : std::vector<std::string>{"small", "gpt2-124M"});
  std::vector<ModelPreset> models;
  for (const std::string& n : names) {
    ModelPreset m = ResolveModel(n, ctx.config);
    if (batch_ > 0) m.B = batch_;
    if (seq_len_ > 0) {
      m.T = seq_len_;
      m.shape.maxT = std::max(m.shape.maxT, m.T);
    }
    models.push_back(m);
  }
  return models;
}

std::vector<std::unique_ptr<LoraRun>> TrainSuite::ResolveLoras(
    const BenchContext& ctx, const std::vector<ModelPreset>& models) {
  std::vector<std::unique_ptr<LoraRun>> loras(models.size());
  if (!lora_text_) {
    if (ctx.config.train.lora.on()) {
      throw InputError(
          "bench train: the config sets train.lora (a LoRA fine-tune) but --lora is not given",
          "pass --lora r=R[,alpha=A][,targets=...] instead, so that every row, PyTorch's too, "
          "trains the same adapters");
    }
    return loras;
  }
  lora_ = ParseLoraSpec(*lora_text_);
  if (lora_.base_bf16 && precision_ != "bf16") {
    throw InputError(fmt::format("--lora '{}': base=bf16 needs --precision bf16", *lora_text_),
                     "a bf16 base feeds bf16 products: add --precision bf16 (the fp32 rows keep "
                     "an fp32 base)");
  }
  for (std::size_t i = 0; i < models.size(); ++i) {
    try {
      loras[i] = std::make_unique<LoraRun>(models[i].shape, lora_);
    } catch (const InputError& e) {
      throw InputError(
          fmt::format("--lora '{}' on model {}: {}", *lora_text_, models[i].name, e.what()),
          e.hint());
    }
  }
  return loras;
}

namespace {

// Twins of every row of `precision` (bf16 rows are labelled "... bf16") that ran on auto: one per
// kernel that runs here, forced for every class, right after it.
void AddKernelRows(RowPlan* plan, const std::string& precision) {
  std::vector<std::string> names;
  if (precision == "fp32") {
    for (kernels::Fp32Kernel k : kernels::Fp32Kernels())
      names.push_back(kernels::Fp32KernelName(k));
  } else {
    for (kernels::Bf16Kernel k : kernels::Bf16Kernels())
      names.push_back(kernels::Bf16KernelName(k));
  }
  if (names.size() < 2) return;  // one kernel: auto has nothing to choose
  std::vector<PlacementSpec> with;
  for (const PlacementSpec& sp : plan->specs) {
    with.push_back(sp);
    const bool bf16 =
        std::find(sp.sets.begin(), sp.sets.end(), "train.precision=bf16") != sp.sets.end();
    if (bf16 != (precision == "bf16")) continue;
    std::vector<std::string> labels;
    for (const std::string& k : names) {
      PlacementSpec f = sp;
      f.label += " " + k;
      f.note += fmt::format("; train.{}_kernel: {} for every class", precision, k);
      f.sets.push_back(fmt::format("train.{}_kernel={}", precision, k));
      labels.push_back(f.label);
      with.push_back(f);
    }
    plan->kernel_rows.emplace_back(sp.label, labels);
  }
  plan->specs = std::move(with);
}

}  // namespace

RowPlan TrainSuite::PlanRows(const BenchContext& ctx, const topo::Topology& topo,
                             SuiteRecords* report) {
  RowPlan plan;
  std::vector<PlacementSpec>& specs = plan.specs;
  for (const std::string& p : placements_.empty() ? DefaultSpecs(topo) : placements_) {
    specs.push_back(ParseSpec(p, topo));
  }
  // Accumulation rows: the first two placements again with k micro-batches, each after its own.
  for (std::size_t i = 0; accum_ > 1 && i < specs.size() && plan.accum_pairs.size() < 2; i += 2) {
    PlacementSpec k = specs[i];
    k.label += fmt::format(" k={}", accum_);
    k.note = fmt::format("{} micro-batches per step", accum_);
    k.sets.push_back(fmt::format("train.grad_accum_steps={}", accum_));
    plan.accum_pairs.emplace_back(specs[i].label, k.label);
    specs.insert(specs.begin() + static_cast<std::ptrdiff_t>(i) + 1, k);
  }
  // The fp32 kernel every row runs (each row's process resolves the same config again).
  const kernels::Fp32Kernel fp32 =
      kernels::ParseFp32Kernel(ctx.config.train.fp32_kernel).value_or(kernels::Fp32Kernel::kAuto);
  fp32_kernel_ = kernels::Fp32KernelLine(kernels::UseFp32Kernel(fp32), fp32);
  if (check_auto_ > 0) kernels_ = true;
  const bool fp32_twins = kernels_ && fp32 == kernels::Fp32Kernel::kAuto;
  if (precision_ != "bf16") {
    if (fp32_twins) AddKernelRows(&plan, "fp32");
    return plan;
  }
  // bf16 twins: every placement again in train.precision: bf16, right after its fp32 row. Where
  // the CPU has no bf16 instructions, only on the tile model named (train.bf16_kernel:
  // tile-model: a test backend, whose speed means nothing; its memory figures hold).
  const bool tile_model = ctx.config.train.bf16_kernel == "tile-model";
  if (tile_model && !kernels::DetectBf16().trains()) {
    log::Warn(
        "bench train: the bf16 rows run on the tile model (train.bf16_kernel: tile-model), "
        "a portable model of AMX: their memory is what a bf16 CPU's would be, their speed "
        "is not");
  }
  if (!kernels::DetectBf16().trains() && !tile_model) {
    log::Warn("bench train: --precision bf16 needs AVX512_BF16 ({}); the bf16 rows are skipped",
              kernels::DetectBf16().Describe());
    report->Add({{"kind", "bf16_unavailable"}, {"cpu", kernels::DetectBf16().Describe()}});
    return plan;
  }
  // The kernel our bf16 rows will run (each row's process resolves the same config again).
  const kernels::Bf16Kernel requested =
      kernels::ParseBf16Kernel(ctx.config.train.bf16_kernel).value_or(kernels::Bf16Kernel::kAuto);
  bf16_kernel_ = kernels::Bf16KernelLine(kernels::UseBf16Kernel(requested), requested);
  std::vector<PlacementSpec> with;
  for (const PlacementSpec& sp : specs) {
    with.push_back(sp);
    PlacementSpec b = sp;
    b.label += " bf16";
    b.note += "; train.precision: bf16";
    b.sets.push_back("train.precision=bf16");
    plan.bf16_pairs.emplace_back(sp.label, b.label);
    with.push_back(b);
  }
  specs = std::move(with);
  if (fp32_twins) AddKernelRows(&plan, "fp32");
  if (kernels_ && requested == kernels::Bf16Kernel::kAuto) AddKernelRows(&plan, "bf16");
  return plan;
}

void TrainSuite::MeasurePeaks(const topo::Topology& topo, SuiteRecords* report) {
  // This machine's allowed cores (one per physical core), all busy at once, and one alone
  // (bench/peak.h: the larger of the two readings counts).
  const topo::Topology real = topo.simulated ? topo::LoadTopology("this") : topo;
  const std::vector<int> cores = CoreCpus(real);
  real_cores_ = static_cast<int>(cores.size());
  check_binder_ = topo::MakeBinder(real);
  check_pool_ = std::make_unique<WorkerPool>(cores, check_binder_.get(), "check");
  const PeakResult p = MeasurePeak(*check_pool_, check_binder_.get(), /*quick=*/quick_);
  peak_per_core_ = p.group() / real_cores_;
  bf16_peak_per_core_ = p.group_bf16_peak() / real_cores_;
  amx_peak_per_core_ = p.group_amx_peak() / real_cores_;
  peak_isa_ = p.best_isa();
  peak_256_per_core_ = std::max(p.group_256 / real_cores_, p.core_256);
  report->Add({{"kind", "peak"},
               {"cores", real_cores_},
               {"isa", peak_isa_},
               {"gflops", peak_per_core_ * real_cores_},
               {"per_core_gflops", peak_per_core_},
               {"bf16_per_core_gflops", bf16_peak_per_core_},
               {"amx_per_core_gflops", amx_peak_per_core_}});
}

void TrainSuite::PrintHeader() const {
  std::string bf16_peaks;
  if (bf16_peak_per_core_ > 0) {
    bf16_peaks += fmt::format(", bf16 {:.1f} (VDPBF16PS loop)", bf16_peak_per_core_);
  }
  if (amx_peak_per_core_ > 0) {
    bf16_peaks += fmt::format(", AMX {:.1f} (TDPBF16PS loop)", amx_peak_per_core_);
  }
  std::printf(
      "train: %d timed step(s) after %d warm-up, medians; peak %.1f GFLOP/s per core "
      "(%s FMA loop, %d cores busy)%s%s\n",
      steps_run_, warmup_run_, peak_per_core_, peak_isa_.c_str(), real_cores_, bf16_peaks.c_str(),
      pytorch_ ? (torch_version_.empty() ? "; PyTorch: not available"
                                         : fmt::format("; PyTorch {}", torch_version_).c_str())
               : "; PyTorch: not run (--pytorch)");
  std::printf("%s\n", fp32_kernel_.c_str());
  if (!bf16_kernel_.empty()) std::printf("%s\n", bf16_kernel_.c_str());
  if (lora_.on()) {
    std::printf(
        "LoRA (--lora %s): every row fine-tunes adapters over a frozen base (ours: train.lora.*; "
        "PyTorch: transformers + peft %s); CPU: %s\n",
        lora_.Text().c_str(), peft_version_.empty() ? "(not installed)" : peft_version_.c_str(),
        cpu_.c_str());
  }
  if (checkpoint_) {
    std::printf(
        "gradient checkpointing: every row (ours: train.gradient_checkpointing; PyTorch: "
        "gradient_checkpointing_enable(use_reentrant=False))\n");
  }
  if (pytorch_ && !torch_version_.empty()) {
    std::printf("PyTorch: %s; torch %s (%s); IPEX %s\n", python_.c_str(), torch_version_.c_str(),
                torch_blas_.c_str(),
                ipex_version_.empty() ? fmt::format("not available ({})", ipex_why_).c_str()
                                      : ipex_version_.c_str());
    std::printf(
        "PyTorch DDP: gloo only; the ccl backend row is not available (oneccl_bind_pt is not on "
        "PyPI)\n");
  }
}

void TrainSuite::Run(const BenchContext& ctx, SuiteRecords* report) {
  if (!row_result_.empty()) {
    RowProcess(ctx);
    return;
  }
  steps_run_ = steps_ > 0 ? steps_ : (ctx.quick ? 3 : 6);
  qa_seed_ = ctx.config.data.Seed(ctx.config.model.seed);  // as RowProcess seeds them
  warmup_run_ = warmup_ >= 0 ? warmup_ : (ctx.quick ? 1 : 2);
  quick_ = ctx.quick;
  checkpoint_ = checkpoint_ || ctx.config.train.gradient_checkpointing;
  const std::vector<ModelPreset> models = ResolveModels(ctx);
  const std::vector<std::unique_ptr<LoraRun>> loras = ResolveLoras(ctx, models);
  cpu_ = CpuName(MachineInfo());
  const topo::Topology topo = topo::LoadTopology(ctx.config.topology);
  const RowPlan plan = PlanRows(ctx, topo, report);
  MeasurePeaks(topo, report);
  if (pytorch_) {
    if (script_.empty())
      script_ = std::string(CPUTRAIN_SOURCE_DIR) + "/bench/pytorch/train_gpt2.py";
    if (access(script_.c_str(), R_OK) != 0) {
      throw InputError(fmt::format("--pytorch: the script '{}' is not readable", script_),
                       "pass --pytorch-script PATH/bench/pytorch/train_gpt2.py");
    }
    ProbePytorch(report);
  }
  ScratchDir scratch("cputrain-bench-train");
  PrintHeader();
  for (std::size_t mi = 0; mi < models.size(); ++mi) {
    RunModel(ctx, models[mi], loras[mi].get(), plan, scratch.path(), report);
  }
  std::fflush(stdout);
  if (!auto_failures_.empty()) {
    throw RuntimeError(fmt::format("bench train --check-auto {:g}: {}", check_auto_,
                                   fmt::join(auto_failures_, "; ")),
                       "auto ran a kernel slower than the best it could have: see the kernels' "
                       "table above (kernels/calibrate.h chooses them)");
  }
}

void TrainSuite::RunModel(const BenchContext& ctx, const ModelPreset& m, const LoraRun* lora,
                          const RowPlan& plan, const std::string& scratch, SuiteRecords* report) {
  // Random token ids below V: four windows of B*T (+1) tokens (a span head: random QA
  // features instead, made in each row's process, bench/qa_rows.h).
  const bool span = m.shape.head == model::Head::kSpan;
  const bool task = m.shape.head != model::Head::kLm;  // a task head: rows of its own
  const std::string tokens = fmt::format("{}/{}.bin", scratch, m.name);
  if (!task) {
    data::TokenFileWriter w(tokens);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int> id(0, m.shape.V - 1);
    std::vector<uint16_t> buf(static_cast<std::size_t>(4 * m.B * m.T + 1));
    for (uint16_t& t : buf) t = static_cast<uint16_t>(id(rng));
    w.Append(buf.data(), buf.size());
    w.Commit();
  }
  const double fpt = lora ? lora->FlopsPerToken(m.T) : model::TrainFlopsPerToken(m.shape, m.T);
  std::printf(
      "\nmodel %s: %s, %.1f MFLOP per token (%s)\n"
      "  others = CPU share other processes took during the row; core = the slowest "
      "core's FMA speed just before and after it, %% of peak (a shared VM's core can "
      "run at half speed for a while): a few %% / below ~90%% mean a disturbed row\n",
      m.name.c_str(), m.Describe().c_str(), fpt / 1e6,
      lora ? "LoRA: the frozen base's products 4 per weight, the adapters' 6"
           : "model::TrainFlopsPerToken");
  if (lora) {
    std::printf(
        "  %s; sync/step = bytes the gradient sync moves between the row's groups (reduce-"
        "scatter, + allgather with a replica per group) or DDP's processes (allreduce), beside "
        "a full fine-tune's\n",
        lora->lora().Describe().c_str());
  }
  if (task) {
    const std::string rows = span ? RandomQaRows(m.shape, m.B, m.T, qa_seed_).Describe()
                                  : RandomClassifyRows(m.shape, m.B, m.T, qa_seed_).Describe();
    std::printf(
        "  rows: %s; tokens/s counts B x T (the preset's T) per step for both sides, seq/s the "
        "sequences%s\n",
        rows.c_str(),
        span ? ""
        : m.shape.encoder()
            ? "; GFLOP/s and MFU count the work each side runs: PyTorch's on the padded lengths, "
              "ours on the real tokens alone (our encoder classifier skips the padding)"
            : "; GFLOP/s and MFU count the work of the padded lengths (on both sides)");
  }
  // measure -> rows (a failure keeps the records of the rows measured before it)
  ModelRows rows;
  try {
    for (std::size_t i = 0; i < plan.specs.size(); ++i) {
      rows.all.push_back(RunOurs(ctx, m, plan.specs[i], tokens,
                                 fmt::format("{}/run-{}-{}", scratch, m.name, i), lora));
    }
    if (check_auto_ > 0) RemeasureAutoMisses(ctx, m, lora, plan, tokens, scratch, &rows);
    if (pytorch_ && !torch_version_.empty()) RunPytorch(m, lora, &rows.all);
  } catch (...) {
    AddRecords(rows, report);
    throw;
  }
  // print(rows), records(rows), then the summaries (each with its own record)
  PrintTable(m, rows);
  AddRecords(rows, report);
  PrintKernels(m, rows, plan, report);
  PrintSummaries(m, rows, plan, lora, report);
}

void TrainSuite::RemeasureAutoMisses(const BenchContext& ctx, const ModelPreset& m,
                                     const LoraRun* lora, const RowPlan& plan,
                                     const std::string& tokens, const std::string& scratch,
                                     ModelRows* rows) const {
  // Our rows are in plan.specs' order: the index of a label among them.
  const auto index_of = [&](const std::string& label) -> int {
    for (std::size_t i = 0; i < plan.specs.size() && i < rows->all.size(); ++i) {
      if (rows->all[i].label == label && rows->all[i].ran()) return static_cast<int>(i);
    }
    return -1;
  };
  for (const auto& [auto_label, forced] : plan.kernel_rows) {
    const int a = index_of(auto_label);
    int best = -1;
    for (const std::string& f : forced) {
      const int i = index_of(f);
      if (i >= 0 && (best < 0 || rows->all[i].tokens_per_s > rows->all[best].tokens_per_s))
        best = i;
    }
    if (a < 0 || best < 0) continue;
    for (int again = 1; again <= 2; ++again) {
      Row& ra = rows->all[a];
      const Row& rb = rows->all[best];
      if (ra.tokens_per_s * check_auto_ >= rb.tokens_per_s) break;
      std::printf(
          "  --check-auto: auto on %s %.1f tokens/s vs %s %.1f; measuring both again (%d/2)\n",
          auto_label.c_str(), ra.tokens_per_s, rb.label.c_str(), rb.tokens_per_s, again);
      for (const int i : {best, a}) {
        Row r = RunOurs(ctx, m, plan.specs[i], tokens,
                        fmt::format("{}/run-{}-{}-again{}", scratch, m.name, i, again), lora);
        std::printf("    %s: %.1f tokens/s (core %.0f%%)\n", r.label.c_str(), r.tokens_per_s,
                    r.slowest_core_pct);
        if (r.ran() && r.tokens_per_s > rows->all[i].tokens_per_s) rows->all[i] = std::move(r);
      }
    }
  }
  std::fflush(stdout);
}

}  // namespace train_suite

std::unique_ptr<Suite> MakeTrainSuite() { return std::make_unique<train_suite::TrainSuite>(); }

}  // namespace cputrain::bench
