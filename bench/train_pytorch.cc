// `bench train`'s peer rows (bench/train_suite.h): PyTorch's setups on the same model, each
// bench/pytorch/train_gpt2.py in its own process, in the Python the suite found (ProbePytorch).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "bench/cls_rows.h"
#include "bench/peak.h"
#include "bench/qa_rows.h"
#include "bench/train_suite.h"
#include "common/log.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/transformer.h"

namespace cputrain::bench::train_suite {
namespace {

// One PyTorch process's memory at its peak (bench/pytorch/train_gpt2.py on B sequences): weights,
// gradients and AdamW's two moments (16 B/param); the single-tensor AdamW torch runs on CPU (no
// foreach kernels there) makes two temporaries of each tensor in turn, the largest (the
// embedding, Vp x C) counting; what the allocator keeps of the smaller ones, ~3 B/param; the
// activations autograd keeps, roughly B T (L (12 C + 4 F + 2 NH T) + 3 V) floats (attention,
// MLP, logits with their softmax and gradient; a span head's 2 outputs instead of V); under
// autocast the bf16 copies of the weights that backward holds (2 B/param); under DDP its
// reducer's gradient buckets, a copy of the gradients (4 B/param); 0.75 GiB for torch,
// transformers and their libraries (1 GiB more under torch.compile: inductor and its compiler
// workers). Measured (VmHWM, 1 thread, B=1,
// T=32, eager fp32, transformers' Llama): smollm2-135m 3.49 GB (estimate 3.60), the same with one
// layer 1.45 GB (1.61), a 2-layer C=64 model 0.69 GB (import and runtime alone).
uint64_t TorchBytes(const model::Shape& s, int B, int T, bool bf16, bool compile, bool ddp,
                    const LoraRun* lora = nullptr, bool base_bf16 = false) {
  const double P = static_cast<double>(s.ParamCount());
  const double L = s.L, C = s.C, F = s.ffn(), NH = s.NH, V = s.Vp;
  // The head's outputs per position: V logits for a language model, 2 for a span head.
  const double out = s.head == model::Head::kLm ? V : s.head_width();
  const double acts = static_cast<double>(B) * T * (L * (12 * C + 4 * F + 2 * NH * T) + 3 * out);
  const double gib = 1024.0 * 1024 * 1024;
  const double libs = (compile ? 1.75 : 0.75) * gib;
  if (lora) {
    // LoRA (PEFT): the base's weights (4 B/param, a bf16 base 2), under autocast over an fp32
    // base the bf16 copies backward holds (2 B/param); the adapters' weights, gradients and
    // moments (16 B each) and under DDP its buckets (4 B each); no full-size optimizer
    // temporaries.
    const double n = static_cast<double>(lora->trainable());
    return static_cast<uint64_t>(P * (base_bf16 ? 2 : 4) + (bf16 && !base_bf16 ? 2 * P : 0) +
                                 n * (16 + (ddp ? 4 : 0)) + 4 * acts + libs);
  }
  return static_cast<uint64_t>(P * (19 + (bf16 ? 2 : 0) + (ddp ? 4 : 0)) + 2 * 4 * V * C +
                               4 * acts + libs);
}

}  // namespace

std::vector<PeerSetup> TrainSuite::PytorchSetups(const ModelPreset& m, const LoraRun* lora) const {
  const int N = real_cores_;
  const bool legacy = LegacyTorch();
  const std::string threads = std::to_string(N);
  std::vector<PeerSetup> setups;
  if (legacy) {
    // Debian's torch 1.x links the system OpenBLAS: its pthread build, and its OpenMP build
    // through LD_LIBRARY_PATH.
    const std::string openmp_dir = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
    setups.push_back({fmt::format("PyTorch 1x{} pthread-BLAS", N),
                      "threads",
                      "pthread",
                      "eager",
                      "default BLAS",
                      {"--threads", threads},
                      {}});
    if (access(openmp_dir.c_str(), R_OK) == 0) {
      const char* old = std::getenv("LD_LIBRARY_PATH");
      const std::string ld =
          "LD_LIBRARY_PATH=" + openmp_dir + (old && *old ? ":" + std::string(old) : "");
      setups.push_back({fmt::format("PyTorch 1x{} openmp-BLAS", N),
                        "threads",
                        "openmp",
                        "eager",
                        ld,
                        {"--threads", threads},
                        {ld}});
    }
  } else {
    // PyPI's torch 2.x brings its own MKL and oneDNN: no BLAS to choose.
    setups.push_back({fmt::format("PyTorch 1x{} eager", N),
                      "threads",
                      torch_blas_,
                      "eager",
                      fmt::format("torch {}, {}", torch_version_, torch_blas_),
                      {"--threads", threads, "--config", "eager"},
                      {}});
    setups.push_back({fmt::format("PyTorch 1x{} compile", N),
                      "threads",
                      torch_blas_,
                      "compile",
                      "torch.compile, inductor",
                      {"--threads", threads, "--config", "compile"},
                      {}});
    setups.push_back({fmt::format("PyTorch 1x{} IPEX", N),
                      "threads",
                      torch_blas_,
                      "ipex",
                      fmt::format("ipex.optimize, IPEX {}", ipex_version_),
                      {"--threads", threads, "--config", "ipex"},
                      {}});
  }
  if (N >= 2 && m.B % N == 0) {
    setups.push_back({fmt::format("PyTorch DDP {}x1", N),
                      "ddp",
                      legacy ? "pthread" : torch_blas_,
                      "eager",
                      "gloo; ccl not available (oneccl_bind_pt is not on PyPI)",
                      {"--ddp", std::to_string(N)},
                      {}});
  }
  if (!torch_setups_.empty() && !legacy) {  // --pytorch-setup: the ones asked for
    std::erase_if(setups, [&](const PeerSetup& s) {
      const std::string name = s.mode == "ddp" ? "ddp" : s.config;
      return std::find(torch_setups_.begin(), torch_setups_.end(), name) == torch_setups_.end();
    });
  }
  if (precision_ == "bf16") AddAutocastSetups(lora, &setups);
  return setups;
}

void TrainSuite::AddAutocastSetups(const LoraRun* lora, std::vector<PeerSetup>* setups) {
  // each setup again under autocast, right after its fp32 row
  for (std::size_t i = 0; i < setups->size(); i += 2) {
    PeerSetup a = (*setups)[i];
    a.label += " autocast-bf16";
    a.note = a.config == "ipex"      ? "ipex.optimize(dtype=bf16) + autocast"
             : a.config == "compile" ? "torch.compile + autocast bf16"
                                     : a.note + "; autocast bf16";
    a.args.insert(a.args.end(), {"--autocast", "bf16"});
    a.bf16 = true;
    setups->insert(setups->begin() + static_cast<std::ptrdiff_t>(i) + 1, a);
    if (lora) {  // and LoRA's usual recipe: the base loaded in bf16, adapters fp32, autocast
      PeerSetup b = a;
      b.label = (*setups)[i].label + " bf16-base";
      b.note = (a.config == "ipex" ? std::string("ipex.optimize(dtype=bf16)") : (*setups)[i].note) +
               "; base torch.bfloat16, adapters fp32; autocast bf16";
      b.args.insert(b.args.end(), {"--base-dtype", "bf16"});
      b.base_bf16 = true;
      setups->insert(setups->begin() + static_cast<std::ptrdiff_t>(i) + 2, b);
      ++i;
    }
  }
}

std::vector<std::string> TrainSuite::PytorchModelArgs(const ModelPreset& m,
                                                      const LoraRun* lora) const {
  std::vector<std::string> argv = {
      "--layers",  std::to_string(m.shape.L),  "--channels", std::to_string(m.shape.C),
      "--heads",   std::to_string(m.shape.NH), "--vocab",    std::to_string(m.shape.V),
      "--seq-len", std::to_string(m.T),        "--batch",    std::to_string(m.B),
      "--steps",   std::to_string(steps_run_), "--warmup",   std::to_string(warmup_run_)};
  // transformers' model from the config.json our export writes for this shape, so both sides
  // train the same model; sdpa attention, PyTorch's fast one. A family whose bench trains the
  // script's own model (GPT-2's nanoGPT, its recorded history: docs/benchmarks.md) keeps it,
  // except under LoRA: PEFT names the modules of transformers' models (c_attn).
  // transformers' gradient checkpointing needs its model too.
  if (!model::FamilyOf(m.shape.arch).bench.script_model || lora || checkpoint_) {
    argv.insert(argv.end(),
                {"--hf-config", nlohmann::json::parse(model::HfConfigJson(m.shape)).dump(),
                 "--attn", "sdpa"});
  }
  // A span head (transformers' *ForQuestionAnswering): the same rows' lengths as ours, so both
  // sides pad the same share of every batch.
  if (m.shape.head == model::Head::kSpan) {
    const RandomQaRows qa(m.shape, m.B, m.T, qa_seed_);
    std::string lengths;
    for (std::size_t f = 0; f < qa.windows() * static_cast<std::size_t>(m.B); ++f) {
      lengths += (f ? "," : "") + std::to_string(qa.length(f));
    }
    argv.insert(argv.end(), {"--qa-lengths", lengths});
  }
  // A classifier (transformers' *ForSequenceClassification): the same sentences' lengths, each
  // batch padded to its longest on both sides.
  if (m.shape.head == model::Head::kClassify) {
    const RandomClassifyRows cls(m.shape, m.B, m.T, qa_seed_);
    std::string lengths;
    for (std::size_t f = 0; f < cls.windows() * static_cast<std::size_t>(m.B); ++f) {
      lengths += (f ? "," : "") + std::to_string(cls.length(f));
    }
    argv.insert(argv.end(), {"--cls-lengths", lengths});
  }
  if (lora) {
    const std::vector<std::string> la = lora->PytorchArgs();
    argv.insert(argv.end(), la.begin(), la.end());
  }
  if (checkpoint_) argv.push_back("--gradient-checkpointing");
  return argv;
}

void TrainSuite::RunPytorch(const ModelPreset& m, const LoraRun* lora,
                            std::vector<Row>* rows) const {
  for (const PeerSetup& s : PytorchSetups(m, lora)) rows->push_back(RunPeerSetup(m, lora, s));
}

Row TrainSuite::RunPeerSetup(const ModelPreset& m, const LoraRun* lora, const PeerSetup& s) const {
  const int N = real_cores_;
  nlohmann::json rec = {{"impl", "pytorch"},
                        {"model", m.name},
                        {"model_shape", m.Describe()},
                        {"placement", s.label},
                        {"mode", s.mode},
                        {"blas", s.blas},
                        {"config", s.config},
                        {"cores_used", N},
                        {"B", m.B},
                        {"T", m.T},
                        {"gradient_checkpointing", checkpoint_},
                        {"python", python_},
                        {"torch", torch_version_},
                        {"ipex", s.config == "ipex" ? ipex_version_ : ""},
                        {"precision", s.bf16 ? "bf16" : "fp32"},
                        {"cpu", cpu_}};
  if (lora) rec["lora"] = LoraRecord(*lora, s.base_bf16);
  auto skip = [&](const std::string& why) {
    log::Warn("bench train: {}: skipped, {}", s.label, why);
    return SkippedRow(s.label, false, rec, why);
  };
  if (lora && peft_version_.empty()) {
    return skip("peft is not installed in " + python_ +
                " (bash scripts/install-deps.sh --peers installs it)");
  }
  if (s.config == "ipex" && ipex_version_.empty()) {
    return skip("intel_extension_for_pytorch does not import: " + ipex_why_);
  }
  std::vector<std::string> argv = {python_, script_};
  const std::vector<std::string> model_args = PytorchModelArgs(m, lora);
  argv.insert(argv.end(), model_args.begin(), model_args.end());
  argv.insert(argv.end(), s.args.begin(), s.args.end());
  // The memory guard: DDP runs P whole copies, each on B/P sequences.
  const int procs = s.mode == "ddp" ? N : 1;
  const uint64_t need = procs * TorchBytes(m.shape, m.B / procs, m.T, s.bf16, s.config == "compile",
                                           procs > 1, lora, s.base_bf16);
  rec["mem_estimate_bytes"] = need;
  rec["mem_available_bytes"] = MemAvailable();
  if (const std::string why = MemoryVerdict(need); !why.empty()) return skip(why);
  log::Info("bench train: {} {}{}", s.label, s.env.empty() ? "" : s.env[0] + " ",
            fmt::format("{}", fmt::join(argv, " ")));
  const double speed0 = SlowestCorePct();
  const OthersMeter others;
  SubprocessOptions opts;
  opts.err = SubprocessOptions::Output::kCapture;  // shown when the setup fails
  opts.env = s.env;
  const SubprocessResult pr = RunRowProcess(argv, opts);
  const double others_pct = others.Percent();
  const double slowest = std::min(speed0, SlowestCorePct());
  nlohmann::json out;
  std::istringstream lines(pr.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && (j.contains("tokens_per_s") || j.contains("skipped"))) out = j;
    }
  }
  if (pr.exit_code != 0 || out.is_null() || !out.contains("tokens_per_s")) {
    // The script's own reason (a configuration that cannot run here), else its last words.
    return skip(out.is_object() && out.contains("skipped") ? out["skipped"].get<std::string>()
                                                           : ProcessFailure(pr));
  }
  if (!pr.err.empty()) log::Debug("bench train: {}: stderr: {}", s.label, LastLines(pr.err, 5));
  Row row;
  row.label = s.label;
  row.note = s.note;
  row.ours = false;
  row.record = std::move(rec);
  row.others_pct = others_pct;
  row.slowest_core_pct = slowest;
  ReadPeerResult(m, lora, s, out, &row);
  return row;
}

void TrainSuite::ReadPeerResult(const ModelPreset& m, const LoraRun* lora, const PeerSetup& s,
                                const nlohmann::json& out, Row* row) const {
  const int N = real_cores_;
  const int procs = s.mode == "ddp" ? N : 1;
  const double fpt = WorkFlopsPerToken(m, lora, false);
  const nlohmann::json warm_ms = out.value("warmup_ms", nlohmann::json::array());
  double warm_s = 0;
  for (const nlohmann::json& w : warm_ms) warm_s += w.get<double>() / 1e3;
  if (s.config == "compile") row->note += fmt::format("; warm-up {:.0f} s untimed", warm_s);
  row->tokens_per_s = out["tokens_per_s"].get<double>();
  row->step_ms = static_cast<double>(m.B) * m.T / row->tokens_per_s * 1e3;
  row->sequences_per_s = row->tokens_per_s / m.T;
  row->fwd = out.value("forward_ms", 0.0);
  row->bwd = out.value("backward_ms", 0.0);
  row->opt = out.value("optimizer_ms", 0.0);
  row->other = std::max(0.0, row->step_ms - row->fwd - row->bwd - row->opt);
  row->gflops = fpt * row->tokens_per_s / 1e9;
  row->bf16 = s.bf16;
  // oneDNN picks its AMX kernels where AMX runs: PyTorch's bf16 rows then count against AMX's peak.
  const bool amx = amx_peak_per_core_ > 0;
  const double peak = PeakFor(N, s.bf16, amx);
  row->mfu = peak > 0 ? row->gflops / peak : 0;  // no peak: bf16 without its instructions
  row->peak_rss = out.value("peak_rss_bytes", 0.0);
  nlohmann::json& rec = row->record;
  if (lora) {
    // What PEFT made trainable (the same adapters as ours: LoraRun passes it our modules), and
    // DDP's allreduce of those gradients; a full fine-tune's of the base's parameters.
    const std::size_t trainable = out.value("trainable_params", std::size_t{0});
    const uint64_t sync = DdpSyncBytes(trainable, procs);
    const uint64_t sync_full = DdpSyncBytes(out.value("params", std::size_t{0}), procs);
    row->trainable = static_cast<double>(trainable);
    row->sync_bytes = static_cast<double>(sync);
    row->sync_bytes_full = static_cast<double>(sync_full);
    if (trainable != lora->trainable()) {
      log::Warn("bench train: {}: PEFT trains {} parameters, ours {}: not the same adapters",
                s.label, trainable, lora->trainable());
    }
    rec.update({{"trainable_params", trainable},
                {"grad_sync_bytes", sync},
                {"grad_sync_bytes_full", sync_full},
                {"grad_sync", procs > 1 ? "gloo allreduce (DDP)" : "none (one process)"}});
    for (const char* k : {"peft", "base_dtype"}) {
      if (out.contains(k)) rec[k] = out[k];
    }
    if (out.contains("lora")) rec["peft_lora"] = out["lora"];
  }
  rec.update({{"steps", steps_run_},
              {"warmup", out.value("warmup", warmup_run_)},
              {"warmup_ms", warm_ms},
              {"step_ms", row->step_ms},
              {"step_ms_all", out.value("step_ms", nlohmann::json::array())},
              {"tokens_per_s", row->tokens_per_s},
              {"sequences_per_s", row->sequences_per_s},
              {"forward_ms", row->fwd},
              {"backward_ms", row->bwd},
              {"comm_ms", 0.0},
              {"optimizer_ms", row->opt},
              {"other_ms", row->other},
              {"flops_per_token", fpt},
              {"gflops", row->gflops},
              {"peak_gflops", PeakFor(N, s.bf16, amx)},
              {"mfu", row->mfu},
              {"others_cpu_pct", row->others_pct},
              {"slowest_core_pct", row->slowest_core_pct},
              {"peak_rss_bytes", row->peak_rss}});
  for (const char* k : {"model_type", "architecture", "attn_implementation", "params"}) {
    if (out.contains(k)) rec[k] = out[k];
  }
  if (out.contains("torch")) rec["torch"] = out["torch"];
  if (s.config == "ipex" && out.contains("ipex")) rec["ipex"] = out["ipex"];
}

void TrainSuite::ProbePytorch(SuiteRecords* report) {
  if (python_.empty()) {
    // The peers' venv, asked at run time: scripts/peers-env.sh knows where it lives
    // ($CPUTRAIN_PEERS_VENV, the cache directory) and whether it is current.
    const std::string env_sh = std::string(CPUTRAIN_SOURCE_DIR) + "/scripts/peers-env.sh";
    std::string why;
    if (access(env_sh.c_str(), R_OK) != 0) {
      why = fmt::format("{} is not there", env_sh);
    } else {
      const SubprocessResult pr = RunSubprocess({"bash", env_sh});
      const std::string path = TrimSpace(pr.out);
      if (pr.exit_code == 0 && !path.empty() && access(path.c_str(), X_OK) == 0) {
        python_ = path;
      } else {
        why = pr.err.empty() ? fmt::format("scripts/peers-env.sh: exit status {}", pr.exit_code)
                             : LastLines(pr.err, 2);
      }
    }
    if (python_.empty()) {
      log::Warn(
          "bench train: the peers' Python environment (PyTorch 2.x from PyPI) is not available "
          "({}); the PyTorch rows are skipped: run `bash scripts/install-deps.sh --peers`, or pass "
          "--python",
          why);
      report->Add({{"kind", "pytorch_unavailable"},
                   {"python", ""},
                   {"reason", why},
                   {"fix", "bash scripts/install-deps.sh --peers"}});
      return;
    }
  }
  SubprocessOptions opts;
  opts.timeout_seconds = 300;
  // The script's own probe: {"torch": version, "blas": "MKL, oneDNN"}, as its rows report them.
  const SubprocessResult pr = RunSubprocess({python_, script_, "--probe"}, opts);
  const nlohmann::json probe = nlohmann::json::parse(LastLines(pr.out, 1), nullptr, false);
  if (pr.exit_code == 0 && probe.is_object()) {
    torch_version_ = probe.value("torch", "");
    torch_blas_ = probe.value("blas", "");
    peft_version_ = probe.value("peft", "");
  }
  if (pr.exit_code != 0 || torch_version_.empty()) {
    torch_version_.clear();
    log::Warn(
        "bench train: '{}' cannot import torch (exit status {}: {}); the PyTorch rows are "
        "skipped (the peers' venv: bash scripts/install-deps.sh --peers; Debian's 1.x: apt-get "
        "install python3-torch)",
        python_, pr.exit_code, LastLines(pr.err, 1));
    report->Add({{"kind", "pytorch_unavailable"}, {"python", python_}});
    return;
  }
  if (!LegacyTorch()) {
    // IPEX in its own process: a mismatched one exits, an unsupported CPU can kill it.
    const SubprocessResult ip = RunSubprocess(
        {python_, "-c", "import intel_extension_for_pytorch as i; print(i.__version__)"}, opts);
    ipex_version_ = ip.exit_code == 0 ? TrimSpace(LastLines(ip.out, 1)) : "";
    if (ipex_version_.empty()) {
      ipex_why_ = ip.timed_out ? std::string("import timed out")
                               : fmt::format("exit status {}: {}", ip.exit_code,
                                             LastLines(ip.err.empty() ? ip.out : ip.err, 1));
    }
  } else {
    ipex_why_ = "not used with PyTorch 1.x";
  }
  report->Add({{"kind", "pytorch_env"},
               {"python", python_},
               {"torch", torch_version_},
               {"blas", torch_blas_},
               {"ipex", ipex_version_},
               {"ipex_unavailable", ipex_why_},
               {"peft", peft_version_},
               {"ccl", "not available: oneccl_bind_pt is not on PyPI"}});
}

}  // namespace cputrain::bench::train_suite
