// `bench train`'s rows of ours (bench/train_suite.h): the placements, each run as a fresh
// process of this program (--row-process) that trains the row's config and writes its steps.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "bench/cls_rows.h"
#include "bench/peak.h"
#include "bench/qa_rows.h"
#include "bench/train_suite.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "kernels/bf16.h"
#include "model/transformer.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace cputrain::bench::train_suite {
std::vector<int> CoreCpus(const topo::Topology& t) {
  std::vector<int> out;
  for (const topo::Core& c : t.cores) {
    for (int pu : c.pus) {
      const topo::Pu* p = t.FindPu(pu);
      if (p != nullptr && p->allowed) {
        out.push_back(pu);
        break;
      }
    }
  }
  return out;
}

namespace {

int DomainsWithCpus(const topo::Topology& t, topo::GroupBy by) {
  std::set<int> seen;
  for (const topo::Pu& pu : t.pus) {
    if (!pu.allowed) continue;
    const int d = by == topo::GroupBy::kSocket ? pu.package
                  : by == topo::GroupBy::kNuma ? pu.numa
                                               : pu.l3;
    if (d >= 0) seen.insert(d);
  }
  return static_cast<int>(seen.size());
}

// The placement keys reset to the planner's defaults, so that the user's config does not leak
// into a named placement (its other sections do apply).
std::vector<std::string> ResetPlacement() {
  return {"placement.group_by=socket",        "placement.groups=auto",
          "placement.threads_per_group=auto", "placement.hyperthreads=false",
          "placement.comm_threads=0",         "placement.cpus=[]"};
}

// Groups that all sit on one known NUMA node share group 0's parameter replica (as
// train::ShareReplica decides, train/replica_group.h): no allgather, one copy of the weights.
bool SharedReplica(const topo::Plan& plan) {
  return plan.groups.size() > 1 && plan.groups[0].numa_node >= 0 &&
         std::all_of(plan.groups.begin(), plan.groups.end(),
                     [&](const topo::Group& g) { return g.numa_node == plan.groups[0].numa_node; });
}

// Our run's memory at its peak: the trainer's own plan of what its groups allocate
// (train/memory_plan.h, the same sizes as train/replica_group.cc's buffers, summed over the
// nodes) plus 256 MiB for the program, its pools and libraries.
uint64_t OursBytes(const Config& cfg, const ModelPreset& m, const topo::Plan& plan) {
  const int rows = std::max(1, m.B / static_cast<int>(plan.groups.size()));
  const train::MemoryRun run = train::MemoryRunOf(cfg, m.shape, rows, m.T, false);
  uint64_t bytes = uint64_t{256} << 20;
  for (const train::NodeMemory& n : train::PlanMemory(plan, run)) bytes += n.total();
  return bytes;
}

// A row's placement as its record says it: groups, threads per group, comm threads, simulated;
// *cores_used = the real cores the row occupies (a simulated placement: its threads, at most the
// machine's cores).
nlohmann::json PlanRecord(const topo::Topology& topo, const topo::Plan& plan, int real_cores,
                          int* cores_used) {
  const int G = static_cast<int>(plan.groups.size());
  std::vector<int> threads;
  std::set<int> cpus_used;
  int all_threads = 0, comm_threads = 0;
  for (const topo::Group& g : plan.groups) {
    threads.push_back(static_cast<int>(g.cpus.size()));
    comm_threads = static_cast<int>(g.comm_cpus.size());
    cpus_used.insert(g.cpus.begin(), g.cpus.end());
    cpus_used.insert(g.comm_cpus.begin(), g.comm_cpus.end());
    all_threads += static_cast<int>(g.cpus.size() + (G > 1 ? g.comm_cpus.size() : 0));
  }
  *cores_used =
      topo.simulated ? std::min(all_threads, real_cores) : static_cast<int>(cpus_used.size());
  return {{"groups", G},
          {"threads_per_group", threads},
          {"comm_threads", comm_threads},
          {"simulated", topo.simulated},
          {"cores_used", *cores_used}};
}

// A row's config: the run's config with the placement's overrides, the model, the LoRA
// fine-tune, warm-up + timed steps, no evaluation, no checkpoints, outputs in out_dir.
Config RowConfig(const BenchContext& ctx, const ModelPreset& m, const PlacementSpec& spec,
                 const std::string& tokens, const std::string& out_dir, const LoraRun* lora,
                 int steps) {
  std::vector<std::string> sets = spec.sets;
  Config cfg = ParseConfig(ConfigToYaml(ctx.config), "bench train (" + spec.label + ")", sets);
  m.ApplyTo(&cfg);
  if (lora) lora->ApplyTo(&cfg);  // after the row's train.precision: base_dtype follows it
  // A span head trains on the row process's random QA features (RowProcess), not on tokens.
  cfg.data.train.clear();
  if (m.shape.head == model::Head::kLm) cfg.data.train = {tokens};
  cfg.data.val.clear();
  cfg.train.steps = steps;
  cfg.train.eval_every = 0;
  cfg.train.checkpoint_every = 0;
  cfg.train.out_dir = out_dir;
  cfg.optim.schedule = Schedule::kConstant;
  cfg.mpi.enabled = MpiMode::kOff;
  return cfg;
}

// The medians of the timed steps (after `warmup`) of a row process's result into row, and the
// per-step figures into its record.
void ReadSteps(const nlohmann::json& res, int warmup, Row* row) {
  std::vector<double> ms, fwd, bwd, comm, opt, other;
  const nlohmann::json& steps = res.at("steps");
  for (std::size_t i = static_cast<std::size_t>(warmup); i < steps.size(); ++i) {
    const nlohmann::json& s = steps[i];
    ms.push_back(s.at("ms").get<double>());
    fwd.push_back(s.at("forward_ms").get<double>());
    bwd.push_back(s.at("backward_ms").get<double>());
    comm.push_back(s.at("comm_ms").get<double>());
    opt.push_back(s.at("optimizer_ms").get<double>());
    other.push_back(ms.back() - fwd.back() - bwd.back() - comm.back() - opt.back());
  }
  CPUTRAIN_CHECK(!ms.empty(), "no timed step");
  row->step_ms = Median(ms);
  row->fwd = Median(fwd);
  row->bwd = Median(bwd);
  row->comm = Median(comm);
  row->opt = Median(opt);
  row->other = Median(other);
  row->record.update({{"steps", ms.size()},
                      {"warmup", warmup},
                      {"step_ms", row->step_ms},
                      {"step_ms_min", *std::min_element(ms.begin(), ms.end())},
                      {"step_ms_max", *std::max_element(ms.begin(), ms.end())},
                      {"per_step",
                       {{"ms", ms},
                        {"forward_ms", fwd},
                        {"backward_ms", bwd},
                        {"comm_ms", comm},
                        {"optimizer_ms", opt}}}});
}

}  // namespace

PlacementSpec ParseSpec(const std::string& text, const topo::Topology& topo) {
  static const std::regex kGxT(R"(^\s*(\d+)x(\d+)(\+c(\d+))?\s*$)");
  static const std::regex kDomain(R"(^\s*(socket|numa|l3)(\+c(\d+))?\s*$)");
  std::smatch m;
  PlacementSpec spec;
  if (std::regex_match(text, m, kGxT)) {
    const int G = std::stoi(m[1]), T = std::stoi(m[2]), K = m[4].matched ? std::stoi(m[4]) : 0;
    if (G < 1 || T < 1)
      throw InputError(fmt::format("--placement '{}': G and T must be >= 1", text));
    spec.label = text;
    spec.sets = ResetPlacement();
    const std::vector<int> cores = CoreCpus(topo);
    const std::size_t need = static_cast<std::size_t>(G) * static_cast<std::size_t>(T + K);
    if (need <= cores.size()) {
      std::string lists;
      for (int g = 0; g < G; ++g) {
        std::string one;
        for (int i = 0; i < T + K; ++i) {
          one += (i ? "," : "") + std::to_string(cores[static_cast<std::size_t>(g * (T + K) + i)]);
        }
        lists += (g ? "," : "") + ("[" + one + "]");
      }
      spec.sets.push_back("placement.cpus=[" + lists + "]");
      spec.sets.push_back(fmt::format("placement.comm_threads={}", K));
      spec.note = K > 0 ? fmt::format("cpus [{}], last {} of each for comm", lists, K)
                        : fmt::format("cpus [{}]", lists);
    } else {
      // Not enough cores to pin it: plan it on a simulated machine of the right shape; it runs
      // unpinned on this machine's CPUs (oversubscribed).
      spec.sets.push_back(fmt::format("topology=synthetic:pack:{} numa:1 core:{} pu:1", G, T + K));
      spec.sets.push_back(fmt::format("placement.threads_per_group={}", T));
      spec.sets.push_back(fmt::format("placement.comm_threads={}", K));
      spec.note =
          fmt::format("SIMULATED pack:{} numa:1 core:{} pu:1: {} threads on {} core(s), unpinned",
                      G, T + K, need, cores.size());
    }
    return spec;
  }
  if (std::regex_match(text, m, kDomain)) {
    const int K = m[3].matched ? std::stoi(m[3]) : 0;
    spec.label = text;
    spec.sets = ResetPlacement();
    spec.sets.push_back("placement.group_by=" + m[1].str());
    spec.sets.push_back(fmt::format("placement.comm_threads={}", K));
    spec.note = fmt::format("planner: one group per {}{}", m[1].str(),
                            K ? fmt::format(", {} comm core(s) each", K) : "");
    return spec;
  }
  // [LABEL:] k=v; k=v
  std::string body = text;
  const std::size_t colon = text.find(':');
  const std::size_t eq = text.find('=');
  if (colon != std::string::npos && (eq == std::string::npos || colon < eq)) {
    spec.label = text.substr(0, colon);
    body = text.substr(colon + 1);
  }
  std::stringstream ss(body);
  for (std::string item; std::getline(ss, item, ';');) {
    item = TrimSpace(item, " \t");
    if (item.empty()) continue;
    if (item.find('=') == std::string::npos) {
      throw InputError(fmt::format("--placement '{}': '{}' is not key=value", text, item),
                       "use GxT, GxT+cK, socket, numa, l3, or 'label: key=value; key=value'");
    }
    spec.sets.push_back(item);
  }
  if (spec.sets.empty()) {
    throw InputError(fmt::format("--placement '{}' names no placement", text),
                     "use GxT, GxT+cK, socket, numa, l3, or 'label: key=value; key=value'");
  }
  if (spec.label.empty()) spec.label = body;
  spec.note = "config overrides";
  return spec;
}

std::vector<std::string> DefaultSpecs(const topo::Topology& topo) {
  const int n = static_cast<int>(CoreCpus(topo).size());
  const int sockets = DomainsWithCpus(topo, topo::GroupBy::kSocket);
  const int numas = DomainsWithCpus(topo, topo::GroupBy::kNuma);
  std::vector<std::string> v = {fmt::format("1x{}", n)};
  if (sockets > 1) v.push_back("socket");
  if (numas > sockets && numas > 1) v.push_back("numa");
  if (sockets == 1 && n >= 2) v.push_back(fmt::format("2x{}", n / 2));
  if (sockets > 1) {
    v.push_back("socket+c1");
  } else if (n >= 4) {
    v.push_back(fmt::format("2x{}+c1", n / 2 - 1));
  } else if (n >= 2) {
    v.push_back("2x1+c1");  // simulated: 4 threads on 2 cores
  }
  return v;
}

namespace {

// The kernels a row's products ran on (its Train's choice per class: train/kernel_setup.h), and
// whether the row forced one (a --kernels twin).
void ReadKernels(const nlohmann::json& res, const PlacementSpec& spec, Row* row) {
  row->kernel = res.value("bf16_kernel", "");
  if (res.contains("kernels")) row->kernels = res["kernels"];
  for (const std::string& set : spec.sets) {
    if (set.rfind("train.fp32_kernel=", 0) == 0 || set.rfind("train.bf16_kernel=", 0) == 0)
      row->forced = true;
  }
  row->record["kernels"] = row->kernels;
  if (!row->kernel.empty()) {
    row->note += " on " + row->kernel;
    row->record["bf16_kernel"] = row->kernel;
  }
}

}  // namespace

Row TrainSuite::RunOurs(const BenchContext& ctx, const ModelPreset& m, const PlacementSpec& spec,
                        const std::string& tokens, const std::string& out_dir,
                        const LoraRun* lora) const {
  Config cfg = RowConfig(ctx, m, spec, tokens, out_dir, lora, warmup_run_ + steps_run_);
  cfg.train.gradient_checkpointing = checkpoint_;
  const topo::Topology topo = topo::LoadTopology(cfg.topology);
  const topo::Plan plan = topo::PlanPlacement(topo, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  const int G = static_cast<int>(plan.groups.size());
  int cores_used = 0;
  nlohmann::json rec = PlanRecord(topo, plan, real_cores_, &cores_used);
  rec.update({{"impl", "cputrain"},
              {"model", m.name},
              {"model_shape", m.Describe()},
              {"placement", spec.label},
              {"note", spec.note},
              {"B", m.B},
              {"T", m.T},
              {"grad_accum_steps", cfg.train.grad_accum_steps},
              {"gradient_checkpointing", checkpoint_},
              {"cpu", cpu_}});
  const bool base_bf16 = lora && cfg.train.lora.base_dtype == "bf16";
  const bool shared = SharedReplica(plan);
  const std::size_t full = model::ParamLayout(m.shape).total();
  if (lora) {
    rec["lora"] = LoraRecord(*lora, base_bf16);
    rec["trainable_params"] = lora->trainable();
    rec["grad_sync_bytes"] = GroupSyncBytes(lora->trainable(), G, shared);
    rec["grad_sync_bytes_full"] = GroupSyncBytes(full, G, shared);
    rec["grad_sync"] = G < 2    ? "none (one group)"
                       : shared ? "reduce-scatter (one shared replica: no allgather)"
                                : "reduce-scatter + allgather";
  }
  auto skip = [&](const std::string& why) {
    log::Warn("bench train: {} on {}: {}", m.name, spec.label, why);
    return SkippedRow(spec.label, true, rec, why);
  };
  if (m.B % G != 0) return skip(fmt::format("B={} not divisible by G={}", m.B, G));
  // The memory guard: a row that would not fit in what is available now is skipped.
  const uint64_t need = OursBytes(cfg, m, plan);
  rec["mem_estimate_bytes"] = need;
  rec["mem_available_bytes"] = MemAvailable();
  if (const std::string why = MemoryVerdict(need); !why.empty()) return skip(why);
  // The run in a fresh process (this program's --row-process), so that its peak RSS is its own
  // and everything it allocated is gone before the next row; its checkpoint goes with out_dir.
  const std::string config_file = out_dir + ".yaml", result_file = out_dir + ".json";
  WriteFileAtomic(config_file, ConfigToYaml(cfg));
  SubprocessOptions po;
  po.out = SubprocessOptions::Output::kDiscard;
  po.err = SubprocessOptions::Output::kCapture;
  const double speed0 = SlowestCorePct();
  const OthersMeter others;
  const SubprocessResult pr =
      RunRowProcess({std::filesystem::read_symlink("/proc/self/exe"), "bench", "train", "--config",
                     config_file, "--row-process", result_file},
                    po);
  const double others_pct = others.Percent();
  const double slowest = std::min(speed0, SlowestCorePct());
  std::error_code ec;
  std::filesystem::remove_all(out_dir, ec);
  if (pr.exit_code != 0) {
    const std::string why = ProcessFailure(pr);
    // Killed for memory: a skipped row. Any other failure is the engine's: the suite fails.
    if (pr.term_signal != SIGKILL) {
      throw RuntimeError(fmt::format("bench train: {} on {}: {}", m.name, spec.label, why));
    }
    return skip(why);
  }
  if (!pr.err.empty()) log::Debug("bench train: {}: stderr: {}", spec.label, LastLines(pr.err, 5));
  const nlohmann::json res = nlohmann::json::parse(ReadFile(result_file));
  // A trainer that does not know train.lora trains every weight: its checkpoint's AdamW moments
  // (8 B per trained float, state.bin) then cover the whole model. Such a row would be a full
  // fine-tune under a LoRA label: skipped, saying so.
  const double state_bytes = res.value("state_bytes", -1.0);
  if (lora && state_bytes >= 8.0 * static_cast<double>(full)) {
    return skip(fmt::format(
        "this build's trainer ignores train.lora: its checkpoint holds AdamW moments for {} "
        "floats (state.bin {}), the whole model, not the {} of the adapters; the LoRA rows need "
        "the trainer's LoRA support",
        full, FormatBytes(static_cast<uint64_t>(state_bytes)), lora->trainable()));
  }
  Row row;
  row.label = spec.label;
  row.note = spec.note + (base_bf16 ? "; LoRA base bf16" : "");
  row.record = std::move(rec);
  ReadSteps(res, warmup_run_, &row);
  row.sequences_per_s = static_cast<double>(m.B) * cfg.train.grad_accum_steps / (row.step_ms / 1e3);
  row.tokens_per_s = row.sequences_per_s * m.T;
  const double fpt = WorkFlopsPerToken(m, lora, true);
  row.gflops = fpt * row.tokens_per_s / 1e9;
  row.bf16 = cfg.train.bf16;
  ReadKernels(res, spec, &row);
  if (lora) {
    row.trainable = static_cast<double>(lora->trainable());
    row.sync_bytes = row.record["grad_sync_bytes"].get<double>();
    row.sync_bytes_full = row.record["grad_sync_bytes_full"].get<double>();
  }
  const double peak = PeakFor(cores_used, row.bf16, row.kernel == "amx");
  row.mfu = peak > 0 ? row.gflops / peak : 0;  // no peak: bf16 on a CPU without its instructions
  row.others_pct = others_pct;
  row.slowest_core_pct = slowest;
  row.peak_rss = res.value("peak_rss_bytes", 0.0);
  row.record.update({{"tokens_per_s", row.tokens_per_s},
                     {"sequences_per_s", row.sequences_per_s},
                     {"forward_ms", row.fwd},
                     {"backward_ms", row.bwd},
                     {"comm_ms", row.comm},
                     {"optimizer_ms", row.opt},
                     {"other_ms", row.other},
                     {"flops_per_token", fpt},
                     {"gflops", row.gflops},
                     {"precision", row.bf16 ? "bf16" : "fp32"},
                     {"peak_gflops", peak},
                     {"mfu", row.mfu},
                     {"others_cpu_pct", others_pct},
                     {"slowest_core_pct", slowest},
                     {"peak_rss_bytes", row.peak_rss}});
  return row;
}

double TrainSuite::WorkFlopsPerToken(const ModelPreset& m, const LoraRun* lora, bool ours) const {
  const auto per_token = [&](int T) {
    return lora ? lora->FlopsPerToken(T) : model::TrainFlopsPerToken(m.shape, T);
  };
  if (m.shape.head != model::Head::kClassify) return per_token(m.T);
  const RandomClassifyRows rows(m.shape, m.B, m.T, qa_seed_);
  if (ours && m.shape.encoder()) {  // each row's real positions alone (Activations::Unpad)
    double sum = 0;
    for (std::size_t f = 0; f < rows.rows(); ++f) sum += rows.length(f) * per_token(rows.length(f));
    return sum / (static_cast<double>(rows.rows()) * m.T);
  }
  const double share = rows.PaddedShare();
  return share * per_token(std::max(1, static_cast<int>(std::lround(share * m.T))));
}

void TrainSuite::RowProcess(const BenchContext& ctx) const {
  train::TrainOptions opts;
  opts.progress = train::Progress::kQuiet;
  // A span-head encoder trains on random question-answering features, as `qa train` trains on
  // its SQuAD features (the rows, not the ids, decide the work: bench/qa_rows.h).
  // A classifier on random GLUE-like sentences, each batch padded to its longest row, as
  // `classify train` pads them (bench/cls_rows.h).
  const model::Head head = train::ShapeFromConfig(ctx.config.model).head;
  const uint64_t seed = ctx.config.data.Seed(ctx.config.model.seed);
  if (head == model::Head::kSpan) {
    opts.train_rows = [seed](const model::Shape& shape, int B, int T) {
      return std::make_unique<RandomQaRows>(shape, B, T, seed);
    };
  } else if (head == model::Head::kClassify) {
    opts.train_rows = [seed](const model::Shape& shape, int B, int T) {
      return std::make_unique<RandomClassifyRows>(shape, B, T, seed);
    };
  }
  const train::TrainResult res = train::Train(ctx.config, opts);
  nlohmann::json steps = nlohmann::json::array();
  for (const train::StepRecord& s : res.steps) {
    steps.push_back({{"ms", s.ms},
                     {"forward_ms", s.forward_ms},
                     {"backward_ms", s.backward_ms},
                     {"comm_ms", s.comm_ms},
                     {"optimizer_ms", s.optimizer_ms}});
  }
  // VmHWM, this process's own peak: getrusage's ru_maxrss would also count the spawning
  // bench's peak, which the kernel carries over at exec. state_bytes: the size of the last
  // checkpoint's state.bin (-1: none), which says how many floats trained (RunOurs checks it).
  std::error_code ec;
  const auto state = res.checkpoint.empty()
                         ? std::uintmax_t(0)
                         : std::filesystem::file_size(res.checkpoint + "/state.bin", ec);
  nlohmann::json out = {
      {"steps", steps},
      {"peak_rss_bytes", ProcKb("/proc/self/status", "VmHWM")},
      {"state_bytes", res.checkpoint.empty() || ec ? -1.0 : static_cast<double>(state)}};
  // The kernel the bf16 products ran on (Train resolved train.bf16_kernel; the block's forward
  // class names it), and every class's choice with its measured rates (train/kernel_setup.h).
  if (ctx.config.train.bf16)
    out["bf16_kernel"] =
        kernels::Bf16KernelName(kernels::ActiveBf16Kernel(kernels::GemmClass::kFwd));
  out["kernels"] = res.kernels;
  WriteFileAtomic(row_result_, out.dump());
}

}  // namespace cputrain::bench::train_suite
