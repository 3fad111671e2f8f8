// bench/train_suite.h (internal to bench/): `cputrain-numa bench train` in pieces, as the
// opening comment of train_bench.cc describes the suite. Per model the suite goes
//
//   measure -> rows       train_ours.cc (our placements), train_pytorch.cc (the peer's setups):
//                         each row measured in its own process, or skipped with the reason
//   print(rows)           train_table.cc: PrintTable, then the summaries against the targets
//   records(rows)         train_table.cc: AddRecords, each row's record in measuring order
//
// and train_bench.cc holds the options, the run's setup and that loop.
//
// Adding a row kind:
//  - a model (a preset in model/presets.h with its own data, e.g. a task's head): its training
//    rows come from RowProcess (which makes the data a head trains on; the token file otherwise),
//    and PytorchModelArgs passes the peer what it needs to train the same model on the same data;
//  - a peer setup (another PyTorch configuration, or another framework's script): one entry in
//    PytorchSetups (a label, the script's arguments, a note), run and parsed by RunPeerSetup;
//  - a placement of ours: PlacementSpec (ParseSpec / DefaultSpecs).
// A row is a Row: print and records read only the Row, never the code that measured it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "bench/lora_spec.h"
#include "bench/models.h"
#include "common/subprocess.h"
#include "model/shape.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace cputrain::bench::train_suite {

struct PlacementSpec {
  std::string label;
  std::string note;               // why / how, for the table
  std::vector<std::string> sets;  // config overrides
};

// One row of a model's table: a placement of ours or a peer's setup, measured or skipped.
struct Row {
  std::string label, note;
  bool ours = true;       // our engine's row; false: a peer's (PyTorch)
  std::string skipped;    // why the row did not run; "" when it ran
  nlohmann::json record;  // the row's record (AddRecords adds it to the suite's records)
  double tokens_per_s = 0, step_ms = 0, fwd = 0, bwd = 0, comm = 0, opt = 0, other = 0;
  double sequences_per_s = 0;  // B (x k) / step time: padded rows count, as HF's Trainer counts
  double gflops = 0, mfu = 0;
  double others_pct = 0;          // CPU share other processes took meanwhile (OthersMeter)
  double slowest_core_pct = 100;  // slowest core's FMA speed before/after, % of its peak
  bool bf16 = false;              // train.precision: bf16, or PyTorch under bf16 autocast
  std::string kernel;             // our bf16 row's product kernel (kernels/bf16.h), else ""
  double peak_rss = 0;            // the row's process's peak resident set, bytes (0: unknown)
  // --lora: the parameters that train, and the bytes a step's gradient sync moves between the
  // row's groups or processes (GroupSyncBytes, DdpSyncBytes), and would move in a full fine-tune.
  double trainable = 0, sync_bytes = 0, sync_bytes_full = 0;
  // Ours: the kernels each class of products ran on, as the row's Train chose them
  // (train/kernel_setup.h KernelSetup::ToJson), with their measured rates.
  nlohmann::json kernels;
  bool forced = false;  // --kernels' twin: one kernel forced for every class (not auto's row)
  bool ran() const { return skipped.empty(); }
};

// A skipped row: its record with "skipped" set to `why`.
Row SkippedRow(const std::string& label, bool ours, nlohmann::json record, const std::string& why);

// The rows of one model, in measuring order: ours first, then the peer's.
struct ModelRows {
  std::vector<Row> all;
  // The rows that ran: ours, then the peer's.
  std::vector<const Row*> Ours() const;
  std::vector<const Row*> Peers() const;
  // Our (last) row that ran with this label, or null.
  const Row* FindOurs(const std::string& label) const;
};

// A peer's setup: one PyTorch configuration, a row of every model (PytorchSetups lists them).
struct PeerSetup {
  std::string label, mode, blas, config = "eager", note;
  std::vector<std::string> args, env;  // the script's setup arguments; its environment's extras
  bool bf16 = false;                   // under torch.autocast("cpu", torch.bfloat16)
  bool base_bf16 = false;              // LoRA: the frozen base in torch.bfloat16
};

// Which rows the run has besides the placements themselves: pairs of labels.
struct RowPlan {
  std::vector<PlacementSpec> specs;
  std::vector<std::pair<std::string, std::string>> accum_pairs;  // (k=1 label, k=K label)
  std::vector<std::pair<std::string, std::string>> bf16_pairs;   // (fp32 label, bf16 label)
  // --kernels: each auto row's label and its twins' with one kernel forced for every class.
  std::vector<std::pair<std::string, std::vector<std::string>>> kernel_rows;
};

// ---- helpers shared by the pieces (train_bench.cc)

// s without the leading and trailing characters in `space`.
std::string TrimSpace(const std::string& s, const char* space = " \t\r\n");
// The last n non-empty lines of a program's output, trimmed, joined with " | " (a failure's
// reason).
std::string LastLines(const std::string& text, std::size_t n);
// A "Key:   1234 kB" line's value in bytes from a /proc file (/proc/meminfo, /proc/self/status),
// or 0 when the file or the key is not there.
uint64_t ProcKb(const char* path, const std::string& key);
// What a new row may use: MemAvailable (the kernel's estimate of what can be allocated without
// swapping, reclaimable page cache included).
uint64_t MemAvailable();
// Runs argv as a row's process, the out-of-memory killer's first choice (so that a row whose
// estimate was wrong is what dies, not the bench or a neighbour's process), and waits for it.
SubprocessResult RunRowProcess(const std::vector<std::string>& argv, const SubprocessOptions& opts);
// Why a row's process failed: the signal that ended it (SIGKILL: most likely the out-of-memory
// killer), else its exit status and last words.
std::string ProcessFailure(const SubprocessResult& pr);
// The memory guard's verdict on a row estimated to need `need` bytes: "" if it fits in what is
// available now (with 5% to spare), else why it is skipped.
std::string MemoryVerdict(uint64_t need);
// "AMD EPYC (family 26 model 2)": the CPU a row ran on, for its record and the LoRA header.
std::string CpuName(const Machine& m);
// A LoRA row's "lora" record: the fine-tune as both sides configure it (PEFT's names).
nlohmann::json LoraRecord(const LoraRun& lora, bool base_bf16);
// "met", or "missed by N%" (how far below the target the ratio is): the summary's verdicts.
std::string Verdict(double ratio, double target);
// The target for ours / PyTorch's best in fp32: >= 1 for GPT-2 (its history in
// docs/benchmarks.md), >= 1.5 for the Llama family and the question-answering encoders.
double SpeedTarget(const ModelPreset& m);
std::string RssText(double bytes);
// "; peak RSS 2.5 GiB vs 3.4 GiB -> 0.74x (target <= 1: met)", or "" when one is unknown.
std::string RssRatioText(double ours, double torch);

// ---- placements (train_ours.cc)

// The first allowed PU of each core, in topology order.
std::vector<int> CoreCpus(const topo::Topology& t);
PlacementSpec ParseSpec(const std::string& text, const topo::Topology& topo);
// The placements worth comparing on this machine (docs/benchmarks.md explains the choice).
std::vector<std::string> DefaultSpecs(const topo::Topology& topo);

class TrainSuite : public Suite {
 public:
  std::string name() const override { return "train"; }
  std::string description() const override {
    return "training tokens/s, GFLOP/s, MFU and the step's time split for a list of placements; "
           "--pytorch: PyTorch on the same model in the same run";
  }
  void AddOptions(CLI::App* cmd) override;
  void Run(const BenchContext& ctx, SuiteRecords* report) override;

 private:
  // ---- the run's setup (train_bench.cc)
  // The models to run (--model, else the defaults), with --batch and --seq-len applied.
  std::vector<ModelPreset> ResolveModels(const BenchContext& ctx) const;
  // --lora: the adapters of each model, resolved now so that a bad spec or target is exit 2
  // before anything is measured (null entries without --lora).
  std::vector<std::unique_ptr<LoraRun>> ResolveLoras(const BenchContext& ctx,
                                                     const std::vector<ModelPreset>& models);
  // The placements, their accumulation and bf16 twins (and fp32_kernel_, bf16_kernel_: the lines
  // naming the kernels the rows run).
  RowPlan PlanRows(const BenchContext& ctx, const topo::Topology& topo, SuiteRecords* report);
  // The peaks every row's MFU divides by, on this machine's real cores.
  void MeasurePeaks(const topo::Topology& topo, SuiteRecords* report);
  // The run's header lines.
  void PrintHeader() const;
  // One model: its data, its rows measured, printed, recorded and summarized.
  void RunModel(const BenchContext& ctx, const ModelPreset& m, const LoraRun* lora,
                const RowPlan& plan, const std::string& scratch, SuiteRecords* report);
  // --check-auto: where an auto row ran below its best forced twin / R, both rows are measured
  // again, alternately, up to twice more, and each keeps its fastest run. A shared VM's core can
  // run at 70% for a whole row (the `core` column): a disturbance only ever slows a row, so the
  // best of a few runs is each side's undisturbed speed; a kernel choice that is really slower
  // stays slower in every run. The runs are printed.
  void RemeasureAutoMisses(const BenchContext& ctx, const ModelPreset& m, const LoraRun* lora,
                           const RowPlan& plan, const std::string& tokens,
                           const std::string& scratch, ModelRows* rows) const;

  // ---- our rows (train_ours.cc)
  // --row-process FILE: trains ctx.config in this process and writes FILE (RunOurs reads it).
  void RowProcess(const BenchContext& ctx) const;
  // Our run of model m on one placement, in a fresh process; a row the memory guard turns down
  // (or the out-of-memory killer ends) is a skipped row. lora: the LoRA fine-tune the row trains
  // (--lora), or null for a full one.
  Row RunOurs(const BenchContext& ctx, const ModelPreset& m, const PlacementSpec& spec,
              const std::string& tokens, const std::string& out_dir, const LoraRun* lora) const;

  // ---- the peer's rows (train_pytorch.cc)
  // Finds the Python (python_, else the peers' venv) and what it has: torch_version_, torch_blas_,
  // ipex_version_ / ipex_why_. Leaves torch_version_ empty, with a warning, when there is none.
  void ProbePytorch(SuiteRecords* report);
  // Debian's python3-torch 1.x (its OpenBLAS setups, no IPEX) rather than PyPI's 2.x.
  bool LegacyTorch() const { return torch_version_.rfind("1.", 0) == 0; }
  // PyTorch's setups on model m, one row each (appended to *rows), run or skipped. lora: the same
  // fine-tune with peft (and the bf16-base setups).
  void RunPytorch(const ModelPreset& m, const LoraRun* lora, std::vector<Row>* rows) const;
  // The setups: 2.x eager, compile, IPEX (1.x: its two OpenBLAS builds), gloo DDP; --pytorch-setup
  // keeps the ones asked for; --precision bf16 adds the autocast twins (AddAutocastSetups).
  std::vector<PeerSetup> PytorchSetups(const ModelPreset& m, const LoraRun* lora) const;
  // The FLOPs a row's step does per token of its tokens/s (B x T): a classifier's batches are
  // padded to their longest row (bench/cls_rows.h), so its work is that of the average padded
  // length, times that length's share of T; but our encoder classifier (ours) runs each row's
  // real positions alone (model::Activations::Unpad): the sum over rows of their lengths' work.
  // The others' model::TrainFlopsPerToken (or LoRA's).
  double WorkFlopsPerToken(const ModelPreset& m, const LoraRun* lora, bool ours) const;
  static void AddAutocastSetups(const LoraRun* lora, std::vector<PeerSetup>* setups);
  // The script's arguments that say which model it trains, on what, for how many steps.
  std::vector<std::string> PytorchModelArgs(const ModelPreset& m, const LoraRun* lora) const;
  // One setup's row: the script run in its own process, or skipped with the reason.
  Row RunPeerSetup(const ModelPreset& m, const LoraRun* lora, const PeerSetup& s) const;
  // The script's result line `out` into *row and its record.
  void ReadPeerResult(const ModelPreset& m, const LoraRun* lora, const PeerSetup& s,
                      const nlohmann::json& out, Row* row) const;

  // ---- print(rows) and records(rows) (train_table.cc)
  // Model m's table: the rows that ran (ours first, then PyTorch's) and the skipped ones. With
  // --lora it adds each row's ratio to PyTorch's best of its precision, the trainable parameters
  // and the gradient sync's bytes.
  void PrintTable(const ModelPreset& m, const ModelRows& rows) const;
  // The summaries under the table, against the targets (reported, not asserted), each
  // with its record: accumulation, bf16, the best rows, two groups against one.
  void PrintSummaries(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                      const LoraRun* lora, SuiteRecords* report) const;
  void PrintAccumulation(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                         SuiteRecords* report) const;
  // --precision bf16: each bf16 row against its fp32 twin, and our best bf16 row against
  // PyTorch's best autocast row. targets: print the targets beside them (full
  // fine-tunes; LoRA has none).
  static void PrintBf16Ratios(const ModelPreset& m, const ModelRows& rows,
                              const std::vector<std::pair<std::string, std::string>>& pairs,
                              bool targets, SuiteRecords* report);
  // The kernels auto chose per class (the first auto row of each precision), and with --kernels
  // each auto row against its best forced twin (target: within 5%); --check-auto R records a
  // failure where auto ran below the best forced row / R (Run then fails).
  void PrintKernels(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                    SuiteRecords* report) const;

  // Each row's record, in measuring order (skipped rows with their reason).
  static void AddRecords(const ModelRows& rows, SuiteRecords* report);

  // The peak a row's MFU divides by: the fp32 FMA loop's, or for a bf16 row the loop of the
  // instruction its products ran on (amx: TDPBF16PS, else VDPBF16PS), times the cores.
  double PeakFor(int cores, bool bf16 = false, bool amx = false) const {
    return (!bf16 ? peak_per_core_ : amx ? amx_peak_per_core_ : bf16_peak_per_core_) * cores;
  }
  // The slowest core's FMA rate right now, in % of the per-core peak (CoreRates on all cores).
  double SlowestCorePct() const;

  std::vector<std::string> models_, placements_;
  int steps_ = 0, warmup_ = -1;
  int accum_ = 8;
  std::string precision_ = "fp32";
  bool pytorch_ = false;
  std::string python_;  // "" = the peers' venv (scripts/peers-env.sh)
  std::string script_;
  std::vector<std::string> torch_setups_;  // --pytorch-setup; empty = all
  std::optional<std::string> lora_text_;   // --lora, as given (even "")
  // --gradient_checkpointing (or train.gradient_checkpointing in the config): every row, both
  // sides, recomputes each block in the backward.
  bool checkpoint_ = false;
  LoraSpec lora_;                // parsed (lora_.on(): every row is a LoRA fine-tune)
  int batch_ = 0, seq_len_ = 0;  // 0 = the preset's
  bool kernels_ = false;         // --kernels: forced-kernel twins of every row
  double check_auto_ = 0;        // --check-auto R (0: off)
  mutable std::vector<std::string> auto_failures_;  // --check-auto's misses
  uint64_t qa_seed_ = 0;    // a task head's random rows (RandomQaRows, RandomClassifyRows)
  std::string row_result_;  // --row-process
  // Run state.
  bool quick_ = false;  // --quick: shorter peak loops
  int steps_run_ = 0, warmup_run_ = 0;
  int real_cores_ = 0;
  double peak_per_core_ = 0;
  double peak_256_per_core_ = 0;   // the 256-bit FMA loop's, for SlowestCorePct
  double bf16_peak_per_core_ = 0;  // VDPBF16PS; 0 without AVX512_BF16
  double amx_peak_per_core_ = 0;   // TDPBF16PS; 0 where AMX is absent or refused
  std::string bf16_kernel_;        // the kernel our bf16 rows run (train.bf16_kernel resolved)
  std::string fp32_kernel_;        // the kernel every row's fp32 products run
  std::string peak_isa_;
  std::string torch_version_;  // "" = not available
  std::string torch_blas_;     // e.g. "MKL, oneDNN"
  std::string ipex_version_;   // "" = IPEX does not import (ipex_why_ says why)
  std::string ipex_why_;
  std::string peft_version_;  // "" = peft is not installed there
  std::string cpu_;           // this machine's CPU, for every row's record
  std::unique_ptr<topo::Binder> check_binder_;
  std::unique_ptr<WorkerPool> check_pool_;  // one pinned thread per core, for SlowestCorePct
};

}  // namespace cputrain::bench::train_suite
