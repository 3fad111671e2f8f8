// `cputrain-numa bench mpi-sync`: syncing a GPT-2 gradient across processes, the trainer's way
// against the flat way, in the same run between the same ranks.
//
//  hierarchical  the trainer's own path (train::GradSync over mpi::Bridge): each process's G
//                groups reduce-scatter every bucket through shared memory, each owner allreduces
//                its part with the same group of the other processes (reduce-scatter +
//                allgatherv, one communicator per group), then the groups allgather the summed
//                shards, so every group of every process ends with the full summed gradient;
//  flat          what one process per socket with DDP does: one MPI_Allreduce of the whole
//                gradient per process.
// Both leave the same state (the full sum everywhere); the hierarchical result is checked
// against the closed-form sum. Time per repetition: the slowest rank's, after a barrier; median.
//
// Without mpirun around it, the suite starts itself under `mpirun -n RANKS` (shared memory
// between the local ranks) and reads rank 0's result; under mpirun (or a hostfile of real
// hosts) it measures directly.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "alloc/numa_alloc.h"
#include "bench/bench.h"
#include "bench/models.h"
#include "comm/comm.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "model/transformer.h"
#include "mpi/bridge.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/grad_sync.h"

namespace cputrain::bench {
namespace {

class MpiSyncSuite final : public Suite {
 public:
  std::string name() const override { return "mpi-sync"; }
  std::string description() const override {
    return "GPT-2 gradient sync across processes: the trainer's hierarchical sync vs a flat "
           "MPI_Allreduce (starts mpirun itself when needed)";
  }
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--ranks", ranks_, "processes to start when not under mpirun (default 2)");
    cmd->add_option("--model", model_,
                    "gradient of this model: " + ModelNames() + " (default gpt2-124M)");
    cmd->add_option("--reps", reps_, "timed repetitions of each method (default 5; --quick 2)");
    cmd->add_option("--worker-json", worker_json_, "internal: where rank 0 writes its records")
        ->group("");  // hidden
  }

  void Run(const BenchContext& ctx, SuiteRecords* report) override {
    if (!mpi::LaunchedByMpi()) {
      Launch(ctx, report);
      return;
    }
    Measure(ctx, report);
  }

 private:
  void Launch(const BenchContext& ctx, SuiteRecords* report);
  void Measure(const BenchContext& ctx, SuiteRecords* report);

  int ranks_ = 2;
  std::string model_ = "gpt2-124M";
  int reps_ = 0;
  std::string worker_json_;
};

void MpiSyncSuite::Launch(const BenchContext& ctx, SuiteRecords* report) {
  if (FindInPath("mpirun").empty()) {
    throw RuntimeError("mpirun is not installed", "run scripts/install-deps.sh (openmpi-bin)");
  }
  const std::string exe = ExecutableDir() + "/cputrain-numa";
  // Removed with its files however this ends (a failed run, a parse error).
  const ScratchDir dir("cputrain-mpi-sync");
  const std::string json = dir.path() + "/records.json";
  // The ranks get this run's effective config (file + --set) as a file of their own.
  const std::string cfg = dir.path() + "/config.yaml";
  WriteFileAtomic(cfg, ConfigToYaml(ctx.config));
  // Each rank gets its own share of the machine (a socket each when there are enough, else a
  // core each), as a multi-node launch gives each process its own machine: two ranks that
  // plan the whole box would pin their workers to the same CPUs.
  const topo::Topology here = topo::LoadTopology("this");
  const bool by_socket = static_cast<int>(here.packages.size()) >= ranks_;
  std::vector<std::string> argv = {"mpirun",
                                   "-n",
                                   std::to_string(ranks_),
                                   "--oversubscribe",
                                   "--mca",
                                   "btl",
                                   "self,vader",
                                   "--map-by",
                                   by_socket ? "socket" : "core",
                                   "--bind-to",
                                   by_socket ? "socket" : "core",
                                   exe,
                                   "bench",
                                   "mpi-sync",
                                   "--worker-json",
                                   json,
                                   "--model",
                                   model_,
                                   "--config",
                                   cfg};
  if (ctx.quick) argv.push_back("--quick");
  if (reps_ > 0) argv.insert(argv.end(), {"--reps", std::to_string(reps_)});
  std::fprintf(stderr, "bench mpi-sync: starting %d processes: mpirun -n %d ... bench mpi-sync\n",
               ranks_, ranks_);
  SubprocessOptions opts;
  opts.err = SubprocessOptions::Output::kInherit;
  opts.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  const SubprocessResult r = RunSubprocess(argv, opts);
  std::fwrite(r.out.data(), 1, r.out.size(), stdout);
  if (r.exit_code != 0) {
    throw RuntimeError(fmt::format("the mpirun run of bench mpi-sync exited with {}", r.exit_code));
  }
  nlohmann::json recs = nlohmann::json::parse(ReadFile(json));
  for (auto& rec : recs) report->Add(rec);
}

// Rank 0's table and records: the medians of the hierarchical and the flat sync, mh and mf.
void PrintResult(const std::string& model, std::size_t n, int R, int G, double bucket_mb, double mh,
                 double mf, const std::string& worker_json, SuiteRecords* report) {
  const double bytes = static_cast<double>(n) * sizeof(float);
  std::printf("gradient of %s: %zu floats (%s), %d process(es) x %d group(s), buckets of %.1f MB\n",
              model.c_str(), n, FormatBytes(static_cast<uint64_t>(bytes)).c_str(), R, G, bucket_mb);
  std::printf("%-14s %12s %14s %10s\n", "method", "time", "algbw GB/s", "vs flat");
  std::printf("%-14s %12s %14.2f %9.2fx\n", "hierarchical", FormatSeconds(mh).c_str(),
              bytes / mh / 1e9, mf / mh);
  std::printf("%-14s %12s %14.2f %9.2fx\n", "flat MPI", FormatSeconds(mf).c_str(), bytes / mf / 1e9,
              1.0);
  nlohmann::json recs = nlohmann::json::array();
  for (auto [method, t] :
       {std::pair<const char*, double>{"hierarchical", mh}, {"flat_mpi_allreduce", mf}}) {
    recs.push_back({{"method", method},
                    {"model", model},
                    {"floats", n},
                    {"bytes", bytes},
                    {"ranks", R},
                    {"groups_per_rank", G},
                    {"seconds", t},
                    {"algbw_gbs", bytes / t / 1e9}});
  }
  if (!worker_json.empty()) WriteFileAtomic(worker_json, recs.dump(2));
  for (auto& rec : recs) report->Add(rec);
}

void MpiSyncSuite::Measure(const BenchContext& ctx, SuiteRecords* report) {
  MpiConfig mc;
  mc.enabled = MpiMode::kOn;
  mc.watchdog_seconds = 600;
  std::unique_ptr<mpi::Bridge> bridge =
      mpi::Bridge::Start(mc, [](int exit_code) { std::_Exit(exit_code); });
  const int R = bridge->size(), rank = bridge->rank();
  const topo::Topology topology = topo::LoadTopology(ctx.config.topology);
  const topo::Plan plan =
      topo::PlanPlacement(topology, ctx.config.placement, std::getenv("OMP_NUM_THREADS"));
  const int G = static_cast<int>(plan.groups.size());
  const ModelPreset preset = ResolveModel(ctx.quick ? "tiny" : model_, ctx.config);
  const model::ParamLayout layout(preset.shape);
  const std::size_t n = layout.total();
  const int reps = reps_ > 0 ? reps_ : (ctx.quick ? 2 : 5);
  alloc::Configure(alloc::OptionsFor(topology));
  auto binder = topo::MakeBinder(topology);

  std::vector<std::unique_ptr<WorkerPool>> pools;
  std::vector<alloc::NodeBuffer<float>> grads;
  std::vector<WorkerPool*> pool_ptrs;
  std::vector<float*> grad_ptrs;
  for (int g = 0; g < G; ++g) {
    pools.push_back(
        std::make_unique<WorkerPool>(plan.groups[g].cpus, binder.get(), fmt::format("s{}", g)));
    grads.emplace_back(std::max(plan.groups[g].numa_node, 0), n);
    pool_ptrs.push_back(pools.back().get());
    grad_ptrs.push_back(grads.back().data());
  }
  // Group g of rank r holds (r*G + g + 1) + (i mod 7): exact in fp32, with a closed-form sum.
  auto fill = [&](int g) {
    float* p = grad_ptrs[g];
    const float base = static_cast<float>(rank * G + g + 1);
    pools[g]->ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t i = b; i < e; ++i) p[i] = base + static_cast<float>(i % 7);
    });
  };
  const double replicas = static_cast<double>(R) * G;
  const double base_sum = replicas * (replicas + 1) / 2;

  const std::size_t bucket_floats = static_cast<std::size_t>(ctx.config.comm.bucket_mb * 1e6 / 4);
  train::GradSync sync(layout, pool_ptrs, {}, grad_ptrs, bucket_floats, bridge.get());
  bridge->CheckConsistent(0, 0, G);  // also creates the per-group communicators
  std::unique_ptr<comm::Communicator> shm;
  if (G > 1) {
    std::vector<int> threads;
    for (auto& p : pools) threads.push_back(p->size());
    shm = std::make_unique<comm::Communicator>(threads);
  }
  // Backward's report points (model/params.h): the output tensors, blocks L-1..0, embeddings.
  const std::vector<std::size_t> points = layout.ReadyPoints();

  auto slowest = [&](double seconds) {  // the slowest rank's time, on every rank
    double mx = 0;
    MPI_Allreduce(&seconds, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx;
  };
  std::vector<double> hier, flat;
  uint64_t step = 0;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is a warm-up
    // ---- hierarchical, through the trainer's GradSync
    std::vector<std::function<void()>> jobs;
    for (int g = 0; g < G; ++g) {
      jobs.emplace_back([&, g] {
        WorkerPool& pool = *pools[g];
        sync.BeginStep(g, step);
        for (std::size_t from : points) sync.OnBackwardReady(g, step, from);
        sync.FinishStep(g, step);
        if (shm) {
          const comm::Range own = sync.Owned(g);
          pool.ForEachThread(
              [&](int t) { shm->Allgather(g, t, grad_ptrs[g] + own.lo, grad_ptrs[g], n); });
        }
      });
    }
    for (int g = 0; g < G; ++g) pools[g]->Run([&] { fill(g); });
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = NowSeconds();
    for (int g = 0; g < G; ++g) pools[g]->Start(jobs[g]);
    for (int g = 0; g < G; ++g) pools[g]->Wait();
    const double th = slowest(NowSeconds() - t0);
    ++step;
    for (int g = 0; g < G; ++g) {  // every group of every rank has the full sum
      for (std::size_t i : {std::size_t{0}, n / 3, n - 1}) {
        const double want = base_sum + replicas * static_cast<double>(i % 7);
        if (grad_ptrs[g][i] != static_cast<float>(want)) {
          throw RuntimeError(
              fmt::format("hierarchical sync gave {} at element {} of group {} on "
                          "rank {}, expected {}",
                          grad_ptrs[g][i], i, g, rank, want));
        }
      }
    }
    // ---- flat: one MPI_Allreduce of the whole gradient per process
    fill(0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = NowSeconds();
    MPI_Allreduce(MPI_IN_PLACE, grad_ptrs[0], static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double tf = slowest(NowSeconds() - t0);
    if (rep > 0) hier.push_back(th), flat.push_back(tf);
  }
  if (rank == 0) {
    PrintResult(preset.name, n, R, G, ctx.config.comm.bucket_mb, Median(hier), Median(flat),
                worker_json_, report);
  }
  bridge->Finish();
}

}  // namespace

std::unique_ptr<Suite> MakeMpiSyncSuite() { return std::make_unique<MpiSyncSuite>(); }

}  // namespace cputrain::bench
