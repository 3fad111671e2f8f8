// auto's choice of kernel per class of products, by measurement (kernels/calibrate.h); the cache
// and the JSON are in calibration_cache.cc.
#include "kernels/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/log.h"
#include "kernels/bf16.h"
#include "kernels/onednn.h"

namespace cputrain::kernels {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double SteadySeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

double TimeOnce(const std::function<void()>& run, const std::function<double()>& clock) {
  const double t0 = clock();
  run();
  return clock() - t0;
}
double TimeOnce(const std::function<void()>& run) { return TimeOnce(run, SteadySeconds); }

// The candidates' best times on one class's work: a warm-up run each, then up to `reps` timed
// rounds in turns, a round after the first only while `allowed` seconds are not spent; after the
// first round, candidates past kDropRatio of the best are not timed again.
std::vector<double> TimeClass(const ClassWork& w, const std::vector<Candidate>& cands, int reps,
                              double allowed, const std::function<double()>& clock) {
  const double t0 = clock();
  const std::size_t n = cands.size();
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  std::vector<bool> alive(n, true);
  for (const Candidate& c : cands) {
    c.select(w.cls);
    w.run();
  }
  for (int r = 0; r < std::max(1, reps); ++r) {
    if (r > 0 && clock() - t0 > allowed) break;
    for (std::size_t i = 0; i < n; ++i) {
      if (!alive[i]) continue;
      cands[i].select(w.cls);
      best[i] = std::min(best[i], TimeOnce(w.run, clock));
    }
    const double fastest = *std::min_element(best.begin(), best.end());
    for (std::size_t i = 0; i < n; ++i) alive[i] = alive[i] && best[i] <= kDropRatio * fastest;
  }
  return best;
}

// The class's choice from its candidates' times: the fastest, unless the prior (candidate 0) is
// within kTie of it.
ClassChoice Choose(const ClassWork& w, const std::vector<Candidate>& cands,
                   const std::vector<double>& best) {
  ClassChoice cc;
  cc.cls = w.cls;
  cc.flops = w.flops;
  cc.shapes = w.shapes;
  std::size_t f = 0;
  for (std::size_t i = 1; i < best.size(); ++i) {
    if (best[i] < best[f]) f = i;
  }
  if (best[0] <= (1 + kTie) * best[f]) f = 0;
  cc.chosen = cands[f].name;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    const bool timed = std::isfinite(best[i]) && best[i] > 0;
    cc.timings.push_back(
        {cands[i].name, timed ? best[i] : 0.0, timed ? w.flops / best[i] / 1e9 : 0.0});
  }
  // Fastest first, the chosen one at the top (a tie the prior kept).
  std::stable_sort(cc.timings.begin(), cc.timings.end(), [&](const auto& a, const auto& b) {
    if ((a.kernel == cc.chosen) != (b.kernel == cc.chosen)) return a.kernel == cc.chosen;
    return a.gflops > b.gflops;
  });
  return cc;
}

KernelChoice ChoiceOf(const std::string& precision, const std::vector<ClassWork>& works,
                      const std::vector<Candidate>& cands) {
  KernelChoice c;
  c.precision = precision;
  for (const ClassWork& w : works) {
    ClassChoice cc;
    cc.cls = w.cls;
    cc.flops = w.flops;
    cc.shapes = w.shapes;
    cc.chosen = cands.empty() ? "" : cands[0].name;
    c.classes.push_back(std::move(cc));
  }
  return c;
}

}  // namespace

double ClassChoice::ChosenGflops() const {
  for (const KernelTiming& t : timings) {
    if (t.kernel == chosen) return t.gflops;
  }
  return 0;
}

const KernelTiming* ClassChoice::RunnerUp() const {
  for (const KernelTiming& t : timings) {
    if (t.kernel != chosen && t.gflops > 0) return &t;
  }
  return nullptr;
}

const ClassChoice* KernelChoice::Find(GemmClass c) const {
  for (const ClassChoice& cc : classes) {
    if (cc.cls == c) return &cc;
  }
  return nullptr;
}

KernelChoice ChooseByTiming(const std::vector<ClassWork>& works,
                            const std::vector<Candidate>& candidates, int reps, double budget_s,
                            const std::function<double()>& clock_or_null) {
  const std::function<double()> clock = clock_or_null ? clock_or_null : SteadySeconds;
  const double t0 = clock();
  KernelChoice out;
  for (std::size_t i = 0; i < works.size(); ++i) {
    const double left = std::max(0.0, budget_s - (clock() - t0));
    const double allowed = left / static_cast<double>(works.size() - i);
    const std::vector<double> best = TimeClass(works[i], candidates, reps, allowed, clock);
    out.classes.push_back(Choose(works[i], candidates, best));
  }
  for (const ClassChoice& cc : out.classes) {
    for (const Candidate& c : candidates) {
      if (c.name == cc.chosen) c.select(cc.cls);
    }
  }
  out.seconds = clock() - t0;
  out.source = "measured";
  return out;
}

std::vector<Candidate> Fp32Candidates() {
  std::vector<Fp32Kernel> ks = Fp32Kernels();
  const Fp32Kernel prior = BestFp32Kernel();
  std::stable_partition(ks.begin(), ks.end(), [prior](Fp32Kernel k) { return k == prior; });
  std::vector<Candidate> out;
  for (Fp32Kernel k : ks) {
    out.push_back({Fp32KernelName(k), [k](GemmClass c) { SetFp32Kernel(c, k); }});
  }
  return out;
}

std::vector<Candidate> Bf16Candidates() {
  std::vector<Candidate> out;
  for (Bf16Kernel k : Bf16Kernels()) {
    out.push_back({Bf16KernelName(k), [k](GemmClass c) { SetBf16Kernel(c, k); }});
  }
  return out;
}

bool ApplyChoice(const KernelChoice& choice) {
  const bool fp32 = choice.precision == "fp32";
  for (const ClassChoice& cc : choice.classes) {
    if (fp32) {
      const auto k = ParseFp32Kernel(cc.chosen);
      if (!k || *k == Fp32Kernel::kAuto || !Fp32KernelMissing(*k).empty()) return false;
    } else {
      const auto k = ParseBf16Kernel(cc.chosen);
      if (!k || *k == Bf16Kernel::kAuto || !Bf16KernelMissing(*k).empty()) return false;
    }
  }
  for (const ClassChoice& cc : choice.classes) {
    if (fp32) SetFp32Kernel(cc.cls, *ParseFp32Kernel(cc.chosen));
    if (!fp32) SetBf16Kernel(cc.cls, *ParseBf16Kernel(cc.chosen));
  }
  return true;
}

double Budget(double planned_flops, double gflops) {
  // 2% of the run's products at the prior's rate, within [kMinBudget, kMaxBudget] (calibrate.h).
  const double run_s = gflops > 0 ? planned_flops / (gflops * 1e9) : 0;
  return std::clamp(kRunShare * run_s, kMinBudget, kMaxBudget);
}

KernelChoice Calibrate(const CalibrationRequest& req, const CalibrationCache& cache,
                       bool recalibrate) {
  if (!recalibrate) {
    if (std::optional<KernelChoice> hit = cache.Find(req.workload, req.precision)) {
      if (ApplyChoice(*hit)) {
        hit->source = "cache";
        return *hit;
      }
    }
  }
  const std::vector<Candidate> cands =
      req.precision == "fp32" ? Fp32Candidates() : Bf16Candidates();
  const auto t0 = Clock::now();
  // The probe: the first class's work at ~2e8 flops (a few ms) on the prior, warm, then the best
  // of two timed runs, for the rate the works are sized by.
  std::vector<ClassWork> probe = req.works(2e8);
  if (probe.empty() || cands.empty()) return ChoiceOf(req.precision, probe, cands);
  cands[0].select(probe[0].cls);
  probe[0].run();
  const double t = std::min(TimeOnce(probe[0].run), TimeOnce(probe[0].run));
  const double rate = probe[0].flops / std::max(1e-6, t) / 1e9;
  const double budget = Budget(req.planned_flops, rate);
  if (cands.size() == 1) return ChoiceOf(req.precision, probe, cands);
  // Each run sized so that every candidate's warm-up and timed runs of every class fit in ~60% of
  // what is left (the rest: the rounds' spread, oneDNN's primitive creation).
  const double left = std::max(0.0, budget - Since(t0));
  const double runs = static_cast<double>(probe.size() * cands.size()) * (1 + req.reps);
  std::vector<ClassWork> works = req.works(0.6 * left * rate * 1e9 / runs);
  KernelChoice choice = ChooseByTiming(works, cands, req.reps, left);
  choice.precision = req.precision;
  choice.seconds = Since(t0);
  bool theirs = false;
  KernelChoice kept = cache.Publish(req.workload, choice, &theirs, /*replace=*/recalibrate);
  if (theirs && ApplyChoice(kept)) {
    kept.source = "cache";  // another process published first: every run takes that one
    return kept;
  }
  return choice;
}

std::string DescribeChoice(const KernelChoice& choice) {
  std::string s;
  if (choice.source == "measured" || choice.source.empty()) {
    s = fmt::format("{} products: kernels measured per class in {:.0f} ms (kernels/calibrate.h)",
                    choice.precision, choice.seconds * 1e3);
  } else {
    s = fmt::format("{} products: kernels per class from the {} (measured there in {:.0f} ms)",
                    choice.precision, choice.source, choice.seconds * 1e3);
  }
  for (const ClassChoice& cc : choice.classes) {
    s += fmt::format("\n  {:<13}{:<11}", GemmClassName(cc.cls), cc.chosen);
    if (cc.ChosenGflops() <= 0) {
      s += "(the only kernel here)";
      continue;
    }
    s += fmt::format("{:7.1f} GFLOP/s", cc.ChosenGflops());
    std::string others;
    for (const KernelTiming& t : cc.timings) {
      if (t.kernel == cc.chosen || t.gflops <= 0) continue;
      others += fmt::format("{}{} {:.1f}", others.empty() ? "" : ", ", t.kernel, t.gflops);
    }
    if (!others.empty()) s += "   runner-up " + others;
  }
  return s;
}

std::string LibraryDiagnosis(const KernelChoice* fp32) {
  std::string out;
  const OpenblasCore core = OpenblasCoreInfo();
  if (core.narrower()) {
    // The run's products on OpenBLAS against the kernels chosen, each class weighted by its flops.
    double t_blas = 0, t_best = 0;
    for (const ClassChoice& cc : fp32 ? fp32->classes : std::vector<ClassChoice>{}) {
      for (const KernelTiming& t : cc.timings) {
        if (t.kernel == "openblas" && t.gflops > 0 && cc.ChosenGflops() > 0) {
          t_blas += cc.flops / t.gflops;
          t_best += cc.flops / cc.ChosenGflops();
        }
      }
    }
    const std::string measured =
        t_blas > 0 ? fmt::format(" (measured: {:.2f}x the speed of the kernels auto chose)",
                                 t_best / t_blas)
                   : "";
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    out += fmt::format(
        "OpenBLAS runs its {} kernels ({}-bit) on this {}-bit CPU{}{}; auto runs the fastest "
        "kernel per class, and OPENBLAS_CORETYPE={} gives OpenBLAS its own {}-bit kernels",
        core.name, core.bits, core.cpu_bits,
        env && *env ? fmt::format(", as OPENBLAS_CORETYPE={} says", env) : std::string(), measured,
        core.better, core.cpu_bits);
  }
  const std::string isa = OnednnGemm::Available() ? OnednnGemm::Isa() : "";
  const bool cpu512 = core.cpu_bits == 512;
  if (cpu512 && !isa.empty() && isa.rfind("avx512", 0) != 0) {
    std::string cap;
    for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
      const char* v = std::getenv(var);
      if (v && *v) cap += fmt::format("{}{}={}", cap.empty() ? ", as " : " and ", var, v);
    }
    out += fmt::format(
        "{}oneDNN runs its {} kernels on this AVX-512 CPU{}: unset ONEDNN_MAX_CPU_ISA and "
        "DNNL_MAX_CPU_ISA for its AVX-512 ones",
        out.empty() ? "" : "\n", isa, cap);
  }
  return out;
}

}  // namespace cputrain::kernels
