// kernels/calibrate.h: auto's choice of kernel for each class of matrix products, by measurement.
//
// A run's products fall into classes (kernels.h: GemmClass: a block linear's forward, input
// gradient and weight gradient, the head's three, attention's forward and backward, LoRA's). For
// each class the calibration times every kernel that runs here (fp32: OpenBLAS, oneDNN, our own
// AVX2 kernel; bf16: AMX, VDPBF16PS, oneDNN) on the run's own shapes, on the group's own pinned
// workers, and the class runs on the fastest. Nothing is chosen from a table of CPU names: the
// prior (BestFp32Kernel, BestBf16Kernel) only breaks near-ties (within kTie) and runs before the
// calibration. Why: a CPU newer than the distribution's OpenBLAS runs its SSE3 "Prescott"
// kernels (an Emerald Rapids Xeon: fp32 at 0.22x PyTorch), which no table of names foresees.
//
// Timing: each candidate runs a class's work once to warm up (oneDNN creates its primitives,
// caches fill), then `reps` timed runs, the candidates in turns so that a disturbance hits them
// all alike; a candidate's time is its best run. A candidate over kDropRatio of the best after
// the first timed round is not timed again. The work's size is set from the budget (Budget):
// kMaxBudget, or kRunShare of a planned run shorter than kMaxBudget / kRunShare (at least
// kMinBudget), from the prior's own rate measured first. More time would choose no better: a tie
// within kTie goes to the prior, and the rounds of a quiet machine spread by 1-2%.
//
// The choice is cached per machine (CalibrationCache: CPU vendor, family, model, stepping and ISA
// flags, the binary's build id, the OpenBLAS and oneDNN versions and the variables that steer
// them), per workload (the classes' shapes and the workers), and a resumed run takes its
// checkpoint's choice where the machine is the same (the same kernels, the same numerics).
//
// Thread safety: a calibration runs on the thread that sets up a run, before its workers train;
// it sets the process's kernels (kernels.h SetFp32Kernel, bf16.h SetBf16Kernel). The cache file
// is shared by concurrent processes: the first to publish an entry wins and every later run uses
// that one (an flock around the read-merge-rename).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace cputrain::kernels {

// A class's products as a pass runs them: run() executes them once on the group's pool on
// whatever kernel the class has now. flops counts one run; shapes says what they are ("qkv
// 512x2304x768 ...", M x N x K each), for the cache key and the log.
struct ClassWork {
  GemmClass cls = GemmClass::kFwd;
  double flops = 0;
  std::string shapes;
  std::function<void()> run;
};

// A kernel a calibration may choose: select(c) makes it class c's kernel.
struct Candidate {
  std::string name;
  std::function<void(GemmClass)> select;
};

struct KernelTiming {
  std::string kernel;
  double seconds = 0;  // its best timed run (0: not timed)
  double gflops = 0;
};
struct ClassChoice {
  GemmClass cls = GemmClass::kFwd;
  std::string chosen;
  double flops = 0;
  std::string shapes;
  std::vector<KernelTiming> timings;  // every candidate, fastest first
  // The chosen kernel's rate, and the runner-up's (0 where there was none).
  double ChosenGflops() const;
  const KernelTiming* RunnerUp() const;
};
// One precision's choice for every class it measured; the classes it did not measure keep the
// prior.
struct KernelChoice {
  std::string precision;  // "fp32" or "bf16"
  std::vector<ClassChoice> classes;
  double seconds = 0;  // what measuring cost (0 when it came from the cache or a checkpoint)
  std::string source;  // "measured", "cache", "checkpoint"
  const ClassChoice* Find(GemmClass c) const;
};

inline constexpr double kTie = 0.03;        // the prior keeps a class it is within 3% of
inline constexpr double kDropRatio = 1.5;   // not timed again past 1.5x the best
inline constexpr double kMaxBudget = 1.0;   // seconds
inline constexpr double kMinBudget = 0.05;  // seconds
inline constexpr double kRunShare = 0.02;   // of the planned run

// Times every candidate on every work (above) and picks per class; `candidates`' first is the
// prior. Stops adding timed rounds once `budget_s` is spent (every candidate is timed at least
// once). The chosen kernels are selected (select) before it returns. `clock`: seconds, monotonic
// (null: the steady clock; tests pass a simulated one).
KernelChoice ChooseByTiming(const std::vector<ClassWork>& works,
                            const std::vector<Candidate>& candidates, int reps, double budget_s,
                            const std::function<double()>& clock = nullptr);

// The kernels auto chooses between, the prior first: every fp32 kernel that runs here; every bf16
// kernel but the tile model (none where bf16 does not run).
std::vector<Candidate> Fp32Candidates();
std::vector<Candidate> Bf16Candidates();
// Makes each class of `choice` run on its chosen kernel; false (nothing changed) where a kernel
// it names does not run here (a checkpoint or cache from another build).
bool ApplyChoice(const KernelChoice& choice);

// What a run asks of the calibration.
struct CalibrationRequest {
  std::string precision;  // "fp32" or "bf16"
  // The classes' works with each run sized to about `target_flops` (never above the run's own
  // shapes); the first work's class is the probe that measures the prior's rate.
  std::function<std::vector<ClassWork>(double target_flops)> works;
  std::string workload;      // the shapes and workers: the cache's key within a machine
  double planned_flops = 0;  // the products of the whole planned run (0: unknown)
  int reps = 2;
};

// The budget in seconds for a run of `planned_flops` at `gflops`: kRunShare of the run's time,
// within [kMinBudget, kMaxBudget].
double Budget(double planned_flops, double gflops);

// The machine's key (one line): CPU, ISA flags, build id, library versions and the variables that
// steer them. Two processes with the same key run the same kernels at the same speeds.
std::string MachineKey();

class CalibrationCache {
 public:
  // `dir` "": $CPUTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/cputrain-numa, else
  // $HOME/.cache/cputrain-numa (DefaultDir). The file is `dir`/kernels-<hash of MachineKey>.json.
  explicit CalibrationCache(std::string dir = "", std::string machine = MachineKey());
  static std::string DefaultDir();
  const std::string& path() const { return path_; }
  // The entry for `workload` and `precision`, or nullopt: none, or the file is unreadable,
  // corrupt (bad JSON, checksum, format) or another machine's (then a warning says so once, and
  // the file is not trusted).
  std::optional<KernelChoice> Find(const std::string& workload, const std::string& precision) const;
  // Adds `choice` unless another process published one for the same workload first (`replace`:
  // in its place: a recalibration); returns the entry the file holds afterwards (ours, or theirs:
  // then *theirs is set). Where the file cannot be written (a read-only home), says so once and
  // returns `choice`.
  KernelChoice Publish(const std::string& workload, const KernelChoice& choice,
                       bool* theirs = nullptr, bool replace = false) const;

 private:
  std::string dir_, machine_, path_;
};

// The whole of auto for one precision: the cache's entry (unless `recalibrate`), else a
// calibration within Budget, published. The kernels are set before it returns.
KernelChoice Calibrate(const CalibrationRequest& req, const CalibrationCache& cache,
                       bool recalibrate);

// JSON both ways (the cache's entries and the checkpoints' trainer_state.json "kernels").
std::string ChoiceToJson(const KernelChoice& choice);
// nullopt where `json` is not a choice of this format.
std::optional<KernelChoice> ChoiceFromJson(const std::string& json);

// The table the logs print: one line per class, "  fwd        openblas   151.2 GFLOP/s
// (runner-up own 120.4, onednn 98.0)", after a heading that says where the choice came from and
// what measuring it cost.
std::string DescribeChoice(const KernelChoice& choice);

// What the libraries run narrower than this CPU, with the measured ratio where `fp32` timed
// OpenBLAS beside the best, and the fix: "OpenBLAS runs its Prescott (SSE3, 128-bit) kernels on
// this AVX-512 CPU: 0.20x the fastest kernel measured here; OPENBLAS_CORETYPE=Cooperlake runs its
// own AVX-512 kernels". "" where nothing is narrower.
std::string LibraryDiagnosis(const KernelChoice* fp32);

}  // namespace cputrain::kernels
