// `cputrain-numa bench collectives`: our reduce-scatter, allgather and allreduce between G groups
// (src/comm), side by side in the same run with Open MPI's MPI_Reduce_scatter_block,
// MPI_Allgather and MPI_Allreduce between G processes of this machine (mpirun, shared memory),
// and with a STREAM copy/triad measurement from which it derives the memory-bandwidth bound of
// each op (traffic model in docs/collectives.md).
//
// Timing (both sides the same): buffers allocated and touched once; per (op, size) two warm-up
// calls and one calibration call choose the repetition count (~0.25 s per point, 5..100 reps;
// --quick: ~0.02 s, 3..10); each repetition starts after a barrier, and its time is the last
// participant's end minus the first one's start; the median is reported. Out-of-place forms.
// Bus bandwidth follows nccl-tests: allreduce 2(G-1)/G * bytes / time, reduce-scatter and
// allgather (G-1)/G * bytes / time, bytes = the full buffer (n floats * 4).
//
// Variants: besides the default store policy (CommOptions: non-temporal stores from 16 MiB), the
// same size sweep runs with cached stores only and with non-temporal stores only (records
// impl "cputrain-cached" / "cputrain-streaming"), so the threshold can be checked on any machine
// in one run (--no-variants skips them).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "bench/bench.h"
#include "bench/stream.h"
#include "comm/comm.h"
#include "common/error.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "mpi/bridge.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace cputrain::bench {
namespace {

enum class Op { kReduceScatter, kAllgather, kAllreduce };
constexpr Op kOps[] = {Op::kReduceScatter, Op::kAllgather, Op::kAllreduce};

const char* OpKey(Op op) {  // JSON "op" and the MPI worker's op names
  switch (op) {
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllgather:
      return "allgather";
    case Op::kAllreduce:
      return "allreduce";
  }
  return "?";
}

// nccl-tests' bus bandwidth factor.
double BusFactor(Op op, int G) {
  const double g = G;
  return op == Op::kAllreduce ? 2.0 * (g - 1) / g : (g - 1) / g;
}

// Bytes of DRAM traffic (STREAM counting: reads + writes, no write-allocate) of the out-of-place
// op on a buffer of N bytes, split into the part that streams like STREAM triad (G reads, one
// write) and the part that streams like STREAM copy. docs/collectives.md derives these.
struct Traffic {
  double sum_bytes = 0;   // at triad bandwidth
  double copy_bytes = 0;  // at copy bandwidth
};
Traffic TrafficModel(Op op, int G, double N) {
  switch (op) {
    case Op::kReduceScatter:  // each group reads its shard from G buffers, writes it once
      return {(G + 1) * N, 0};
    case Op::kAllgather:  // each group copies N (its own shard included: out of place)
      return {0, 2.0 * G * N};
    case Op::kAllreduce:  // reduce-scatter, then each group copies the G-1 other shards
      return {(G + 1) * N, 2.0 * (G - 1) * N};
  }
  return {};
}

struct RepPolicy {
  double target_seconds;
  int min_reps, max_reps;
};

// How the groups sit on the machine.
struct GroupLayout {
  std::vector<std::vector<int>> cpus;  // per group, one worker each
  bool pin = true;
  std::string how;  // one line for the report
};

class CollectivesSuite : public Suite {
 public:
  std::string name() const override { return "collectives"; }
  std::string description() const override {
    return "reduce-scatter / allgather / allreduce between groups: ours vs Open MPI (mpirun) vs "
           "the memory-bandwidth bound (STREAM), 4 KiB..256 MiB";
  }

  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--groups", groups_,
                    "number of groups G (default: the placement plan's groups; 2 when the plan "
                    "has only one)")
        ->check(CLI::Range(1, 1024))
        ->default_str("");
    cmd->add_option("--threads-per-group", threads_,
                    "worker threads per group (default: the plan's; 1 when G was made up)")
        ->check(CLI::Range(1, 4096))
        ->default_str("");
    cmd->add_option("--max-bytes", max_bytes_, "largest buffer size (default 256 MiB)");
    cmd->add_flag("--no-mpi", no_mpi_, "skip the Open MPI side");
    cmd->add_option("--mpi-worker", mpi_worker_,
                    "path of cputrain-bench-mpi (default: next to this executable, else the "
                    "build tree's)");
    cmd->add_option("--streaming-stores", streaming_,
                    "non-temporal stores in the allgather copies: default (CommOptions' "
                    "threshold), on (always), off (never); for side-by-side measurements")
        ->check(CLI::IsMember({"default", "on", "off"}));
    cmd->add_flag("--no-variants", no_variants_,
                  "skip the sweeps with cached-only and streaming-only stores");
  }

  void Run(const BenchContext& ctx, SuiteRecords* report) override;

 private:
  GroupLayout ResolveLayout(const Config& cfg, const topo::Topology& topo);
  std::vector<uint64_t> Sizes(bool quick) const;
  // Times op at n floats per group on the pools; returns the median and the reps used.
  std::pair<double, int> TimeOurs(Op op, std::size_t n, const RepPolicy& policy);
  void RunRepetitions(Op op, std::size_t n, int reps, std::vector<double>* times);
  // Runs the MPI worker; fills mpi_[(op, bytes)] = seconds. Returns a note for the report.
  std::string RunMpi(int G, const std::vector<uint64_t>& sizes, const RepPolicy& policy);
  // STREAM on the real machine, all allowed CPUs, pinned: the bound's bandwidths (recorded).
  static StreamResult MeasureMachineStream(const topo::Topology& topo, bool quick, int G,
                                           SuiteRecords* report);
  // Ours at every op and size, then the store-policy variants: ours_, variant_secs_, tpg_.
  // Returns the groups' CPUs for the header.
  std::string MeasureOurs(const GroupLayout& layout, const topo::Topology& topo,
                          const std::vector<uint64_t>& sizes, const RepPolicy& policy);
  // The table (ours, Open MPI, the bound) and its records; then the variants'.
  void PrintTable(int G, const std::vector<uint64_t>& sizes, const StreamResult& stream,
                  SuiteRecords* report) const;
  void PrintVariants(int G, const std::vector<uint64_t>& sizes, SuiteRecords* report) const;

  int groups_ = 0;
  int threads_ = 0;
  uint64_t max_bytes_ = uint64_t{256} << 20;
  bool no_mpi_ = false;
  std::string mpi_worker_;
  std::string streaming_ = "default";
  bool no_variants_ = false;

  // Run state.
  std::vector<std::unique_ptr<WorkerPool>> pools_;
  std::unique_ptr<comm::Communicator> comm_;
  std::vector<MappedBuffer> send_, recv_;
  std::map<std::pair<std::string, uint64_t>, double> mpi_;
  struct Variant {
    const char* impl;
    std::size_t streaming_store_bytes;
  };
  std::vector<Variant> variants_;  // the store-policy variants (none with --no-variants)
  std::vector<int> tpg_;           // threads per group
  std::map<std::pair<std::string, uint64_t>, std::pair<double, int>> ours_;  // seconds, reps
  std::map<std::tuple<std::string, std::string, uint64_t>, double> variant_secs_;
};

GroupLayout CollectivesSuite::ResolveLayout(const Config& cfg, const topo::Topology& topo) {
  const topo::Plan plan = topo::PlanPlacement(topo, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  const int planned = static_cast<int>(plan.groups.size());
  GroupLayout L;
  int G = groups_;
  if (G == 0) {
    G = planned >= 2 ? planned : 2;
    if (planned < 2) {
      log::Info(
          "bench collectives: the placement plan has {} group; benchmarking G=2 groups of {} "
          "thread{} on its CPUs instead (--groups overrides)",
          planned, threads_ > 0 ? threads_ : 1, threads_ > 1 ? "s" : "");
    }
  }
  if (G <= planned && (groups_ != 0 || planned >= 2)) {
    // The plan's groups, optionally trimmed or padded to --threads-per-group.
    for (int g = 0; g < G; ++g) {
      std::vector<int> cpus = plan.groups[static_cast<std::size_t>(g)].cpus;
      if (threads_ > 0) {
        if (threads_ > static_cast<int>(cpus.size())) L.pin = false;
        std::vector<int> t;
        for (int i = 0; i < threads_; ++i)
          t.push_back(cpus[static_cast<std::size_t>(i) % cpus.size()]);
        cpus = t;
      }
      L.cpus.push_back(cpus);
    }
    L.how = fmt::format("the placement plan's first {} group{}", G, G > 1 ? "s" : "");
  } else {
    // Made-up groups: the plan's CPUs dealt out in contiguous runs of T.
    std::vector<int> all;
    for (const topo::Group& g : plan.groups) all.insert(all.end(), g.cpus.begin(), g.cpus.end());
    CPUTRAIN_CHECK(!all.empty(), "the placement plan has no CPU");
    const int T = threads_ > 0 ? threads_ : 1;
    const std::size_t need = static_cast<std::size_t>(G) * static_cast<std::size_t>(T);
    L.pin = need <= all.size();
    for (int g = 0; g < G; ++g) {
      std::vector<int> cpus;
      for (int t = 0; t < T; ++t) {
        cpus.push_back(all[(static_cast<std::size_t>(g) * static_cast<std::size_t>(T) +
                            static_cast<std::size_t>(t)) %
                           all.size()]);
      }
      L.cpus.push_back(cpus);
    }
    L.how = fmt::format("{} groups of {} thread{} on the plan's CPUs", G, T, T > 1 ? "s" : "");
  }
  if (topo.simulated) L.pin = false;
  return L;
}

std::vector<uint64_t> CollectivesSuite::Sizes(bool quick) const {
  std::vector<uint64_t> sizes;
  if (quick) {
    sizes = {4 << 10, 64 << 10, 1 << 20};
  } else {
    for (uint64_t b = 4 << 10; b <= (uint64_t{256} << 20); b *= 4) sizes.push_back(b);
    sizes.push_back(uint64_t{32} << 20);  // the size of the stated 70%-of-bound target
    std::sort(sizes.begin(), sizes.end());
  }
  std::erase_if(sizes, [&](uint64_t b) { return b > max_bytes_; });
  if (sizes.empty()) throw InputError("--max-bytes is below the smallest size (4 KiB)");
  return sizes;
}

void CollectivesSuite::RunRepetitions(Op op, std::size_t n, int reps, std::vector<double>* times) {
  const int G = static_cast<int>(pools_.size());
  // starts/ends[r][g][t], filled by the workers; allocated here, outside the timed calls.
  std::vector<std::vector<std::vector<double>>> starts(static_cast<std::size_t>(reps)),
      ends(static_cast<std::size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    for (int g = 0; g < G; ++g) {
      starts[static_cast<std::size_t>(r)].emplace_back(
          static_cast<std::size_t>(pools_[static_cast<std::size_t>(g)]->size()));
      ends[static_cast<std::size_t>(r)].emplace_back(
          static_cast<std::size_t>(pools_[static_cast<std::size_t>(g)]->size()));
    }
  }
  std::vector<std::function<void()>> jobs;
  for (int g = 0; g < G; ++g) {
    jobs.push_back([&, g] {
      const std::size_t gi = static_cast<std::size_t>(g);
      float* send = send_[gi].floats();
      float* recv = recv_[gi].floats();
      pools_[gi]->ForEachThread([&](int t) {
        const std::size_t ti = static_cast<std::size_t>(t);
        for (int r = 0; r < reps; ++r) {
          comm_->Barrier(g, t);
          const double t0 = NowSeconds();
          switch (op) {
            case Op::kReduceScatter:
              comm_->ReduceScatter(g, t, send, recv, n);
              break;
            case Op::kAllgather:
              comm_->Allgather(g, t, send, recv, n);
              break;
            case Op::kAllreduce:
              comm_->Allreduce(g, t, send, recv, n);
              break;
          }
          const double t1 = NowSeconds();
          starts[static_cast<std::size_t>(r)][gi][ti] = t0;
          ends[static_cast<std::size_t>(r)][gi][ti] = t1;
        }
      });
    });
  }
  for (int g = 0; g < G; ++g)
    pools_[static_cast<std::size_t>(g)]->Start(jobs[static_cast<std::size_t>(g)]);
  for (int g = 0; g < G; ++g) pools_[static_cast<std::size_t>(g)]->Wait();
  times->clear();
  for (int r = 0; r < reps; ++r) {
    double first = 1e300, last = -1e300;
    for (const auto& v : starts[static_cast<std::size_t>(r)])
      first = std::min(first, *std::min_element(v.begin(), v.end()));
    for (const auto& v : ends[static_cast<std::size_t>(r)])
      last = std::max(last, *std::max_element(v.begin(), v.end()));
    times->push_back(last - first);
  }
}

std::pair<double, int> CollectivesSuite::TimeOurs(Op op, std::size_t n, const RepPolicy& policy) {
  std::vector<double> times;
  RunRepetitions(op, n, 3, &times);  // 2 warm-up calls + 1 calibration call
  const double est = std::max(times.back(), 1e-7);
  const int reps =
      std::clamp(static_cast<int>(policy.target_seconds / est), policy.min_reps, policy.max_reps);
  RunRepetitions(op, n, reps, &times);
  return {Median(times), reps};
}

std::string CollectivesSuite::RunMpi(int G, const std::vector<uint64_t>& sizes,
                                     const RepPolicy& policy) {
  if (no_mpi_) return "Open MPI: skipped (--no-mpi)";
  if (!mpi::BuiltWithMpi()) return "Open MPI: skipped (built without MPI: CPUTRAIN_MPI)";
  const std::string mpirun = FindInPath("mpirun");
  if (mpirun.empty()) {
    log::Warn(
        "bench collectives: mpirun is not in PATH; the Open MPI columns are left empty "
        "(Debian: apt-get install openmpi-bin)");
    return "Open MPI: mpirun not found, skipped";
  }
  std::string worker = mpi_worker_;
  if (worker.empty()) {
    const std::string here = ExecutableDir() + "/cputrain-bench-mpi";
    worker = access(here.c_str(), X_OK) == 0 ? here : CPUTRAIN_BENCH_MPI_WORKER;
  }
  if (access(worker.c_str(), X_OK) != 0) {
    log::Warn(
        "bench collectives: the MPI worker '{}' is missing (build the cputrain-bench-mpi "
        "target, or pass --mpi-worker); the Open MPI columns are left empty",
        worker);
    return "Open MPI: worker program not found, skipped";
  }
  std::vector<std::string> argv = {mpirun};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  for (const char* a : {"--oversubscribe", "--mca", "btl", "self,vader", "--bind-to"})
    argv.push_back(a);
  argv.push_back(G <= ncpu ? "core" : "none");
  argv.push_back("-np");
  argv.push_back(std::to_string(G));
  argv.push_back(worker);
  std::string sizes_arg, ops_arg;
  for (uint64_t b : sizes) sizes_arg += (sizes_arg.empty() ? "" : ",") + std::to_string(b);
  for (Op op : kOps) ops_arg += (ops_arg.empty() ? "" : ",") + std::string(OpKey(op));
  for (const std::string& a :
       {std::string("--sizes"), sizes_arg, std::string("--ops"), ops_arg,
        std::string("--target-seconds"), fmt::format("{}", policy.target_seconds),
        std::string("--min-reps"), std::to_string(policy.min_reps), std::string("--max-reps"),
        std::to_string(policy.max_reps)}) {
    argv.push_back(a);
  }
  std::string cmdline;
  for (const std::string& a : argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  log::Info("bench collectives: {}", cmdline);
  SubprocessOptions opts;
  opts.err = SubprocessOptions::Output::kInherit;  // mpirun's complaints reach the terminal
  const SubprocessResult res = RunSubprocess(argv, opts);
  std::istringstream lines(res.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("op")) continue;
    mpi_[{j["op"].get<std::string>(), j["bytes"].get<uint64_t>()}] = j["seconds"].get<double>();
  }
  if (res.exit_code != 0) {
    log::Warn(
        "bench collectives: mpirun exited with status {} (its messages are above); "
        "{} Open MPI results kept",
        res.exit_code, mpi_.size());
    return fmt::format("Open MPI: mpirun failed (status {})", res.exit_code);
  }
  return fmt::format("Open MPI: {} ranks, `{}`", G, cmdline);
}

StreamResult CollectivesSuite::MeasureMachineStream(const topo::Topology& topo, bool quick, int G,
                                                    SuiteRecords* report) {
  const topo::Topology real = topo.simulated ? topo::LoadTopology("this") : topo;
  const std::vector<int> all_cpus = real.AllowedCpus();
  StreamResult stream;
  {
    std::unique_ptr<topo::Binder> binder = topo::MakeBinder(real);
    WorkerPool pool(all_cpus, binder.get(), "stream");
    // 64 MiB arrays even when quick: the three must not fit in the last-level cache, or the
    // "bound" would be a cache bandwidth.
    stream = MeasureStream(
        pool, (quick ? (std::size_t{64} << 20) : (std::size_t{256} << 20)) / sizeof(float),
        quick ? 3 : 5);
  }
  for (auto [op, secs, gbs] :
       {std::tuple{"stream_copy", stream.copy_seconds, stream.copy_gbs},
        std::tuple{"stream_triad", stream.triad_seconds, stream.triad_gbs},
        std::tuple{"stream_copy_nt", stream.copy_nt_seconds, stream.copy_nt_gbs},
        std::tuple{"stream_triad_nt", stream.triad_nt_seconds, stream.triad_nt_gbs}}) {
    report->Add({{"op", op},
                 {"impl", "stream"},
                 {"groups", G},
                 {"threads", stream.threads},
                 {"bytes", stream.array_bytes},
                 {"seconds", secs},
                 {"busbw_gbs", gbs}});
  }
  return stream;
}

std::string CollectivesSuite::MeasureOurs(const GroupLayout& layout, const topo::Topology& topo,
                                          const std::vector<uint64_t>& sizes,
                                          const RepPolicy& policy) {
  // One pool per group, buffers first-touched by their group's threads. Oversubscription (more
  // worker threads than CPUs) needs no action here: the pools register their threads and
  // WaitWord shortens its spin by itself (common/wait.h).
  const int G = static_cast<int>(layout.cpus.size());
  const uint64_t max_size = sizes.back();
  tpg_.clear();
  for (const auto& c : layout.cpus) tpg_.push_back(static_cast<int>(c.size()));
  comm::CommOptions opts;
  if (streaming_ == "on") opts.streaming_store_bytes = 1;
  if (streaming_ == "off") opts.streaming_store_bytes = 0;
  std::unique_ptr<topo::Binder> binder = layout.pin ? topo::MakeBinder(topo) : nullptr;
  for (int g = 0; g < G; ++g) {
    pools_.push_back(std::make_unique<WorkerPool>(layout.cpus[static_cast<std::size_t>(g)],
                                                  binder.get(), fmt::format("g{}", g)));
    send_.emplace_back(max_size);
    recv_.emplace_back(max_size);
    float* s = send_.back().floats();
    float* r = recv_.back().floats();
    // Index-dependent values rather than a constant, so that no two pages have the same content
    // (a host that merges identical pages would otherwise serve a large buffer from a few
    // cached pages; not observed here, but cheap to rule out).
    const float base = static_cast<float>(g + 1);
    pools_.back()->ParallelFor(max_size / sizeof(float), [&](std::size_t lo, std::size_t hi, int) {
      for (std::size_t i = lo; i < hi; ++i) {
        s[i] = base + static_cast<float>(i);
        r[i] = -static_cast<float>(i);
      }
    });
  }
  std::string placement;
  for (int g = 0; g < G; ++g) {
    placement +=
        (g ? " | " : "") + topo::Topology::FormatCpuList(layout.cpus[static_cast<std::size_t>(g)]);
  }
  comm_ = std::make_unique<comm::Communicator>(tpg_, opts);
  for (Op op : kOps) {
    for (uint64_t bytes : sizes) {
      ours_[{OpKey(op), bytes}] = TimeOurs(op, bytes / sizeof(float), policy);
    }
  }
  // The store-policy variants: the same sweep with each policy forced.
  for (const Variant& v : variants_) {
    comm::CommOptions vo;
    vo.streaming_store_bytes = v.streaming_store_bytes;
    comm_ = std::make_unique<comm::Communicator>(tpg_, vo);
    for (Op op : kOps) {
      for (uint64_t bytes : sizes) {
        variant_secs_[{v.impl, OpKey(op), bytes}] =
            TimeOurs(op, bytes / sizeof(float), policy).first;
      }
    }
  }
  pools_.clear();  // give the CPUs back before mpirun starts its ranks
  comm_.reset();
  send_.clear();
  recv_.clear();
  return placement;
}

void CollectivesSuite::PrintTable(int G, const std::vector<uint64_t>& sizes,
                                  const StreamResult& stream, SuiteRecords* report) const {
  std::printf("%-15s %9s | %10s %9s | %10s %9s | %8s | %9s %7s\n", "op", "size", "ours time",
              "busbw", "mpi time", "busbw", "ours/mpi", "bound", "% bound");
  std::printf("%-15s %9s | %10s %9s | %10s %9s | %8s | %9s %7s\n", "", "", "", "GB/s", "", "GB/s",
              "", "GB/s", "");
  for (Op op : kOps) {
    for (uint64_t bytes : sizes) {
      const auto [secs, reps] = ours_.at({OpKey(op), bytes});
      const double factor = BusFactor(op, G);
      const double busbw = factor * static_cast<double>(bytes) / secs / 1e9;
      report->Add({{"op", OpKey(op)},
                   {"impl", "cputrain"},
                   {"groups", G},
                   {"threads_per_group", tpg_},
                   {"bytes", bytes},
                   {"seconds", secs},
                   {"busbw_gbs", busbw},
                   {"reps", reps}});
      const Traffic tr = TrafficModel(op, G, static_cast<double>(bytes));
      const double t_bound = tr.sum_bytes / (stream.best_triad_gbs() * 1e9) +
                             tr.copy_bytes / (stream.best_copy_gbs() * 1e9);
      const double bound_busbw = factor * static_cast<double>(bytes) / t_bound / 1e9;
      report->Add({{"op", OpKey(op)},
                   {"impl", "membound"},
                   {"groups", G},
                   {"bytes", bytes},
                   {"seconds", t_bound},
                   {"busbw_gbs", bound_busbw},
                   {"traffic_bytes", tr.sum_bytes + tr.copy_bytes}});
      std::string mpi_time = "-", mpi_bw = "-", ratio = "-";
      auto it = mpi_.find({OpKey(op), bytes});
      if (it == mpi_.end() && op != Op::kAllreduce) {
        // MPI's block forms move floor(n / G) * G elements; match them by that size.
        const uint64_t moved = bytes / sizeof(float) / static_cast<uint64_t>(G) *
                               static_cast<uint64_t>(G) * sizeof(float);
        it = mpi_.find({OpKey(op), moved});
      }
      if (it != mpi_.end()) {
        const double mbw = factor * static_cast<double>(it->first.second) / it->second / 1e9;
        mpi_time = FormatSeconds(it->second);
        mpi_bw = fmt::format("{:.2f}", mbw);
        if (mbw > 0) ratio = fmt::format("{:.1f}x", busbw / mbw);  // G=1: no bus traffic
        report->Add({{"op", OpKey(op)},
                     {"impl", "mpi"},
                     {"groups", G},
                     {"bytes", it->first.second},
                     {"seconds", it->second},
                     {"busbw_gbs", mbw}});
      }
      std::printf("%-15s %9s | %10s %9.2f | %10s %9s | %8s | %9.2f %6.0f%%\n", OpKey(op),
                  FormatBytes(bytes).c_str(), FormatSeconds(secs).c_str(), busbw, mpi_time.c_str(),
                  mpi_bw.c_str(), ratio.c_str(), bound_busbw, 100.0 * t_bound / secs);
    }
  }
}

void CollectivesSuite::PrintVariants(int G, const std::vector<uint64_t>& sizes,
                                     SuiteRecords* report) const {
  if (variants_.empty()) return;
  std::printf(
      "\nstore-policy variants (busbw GB/s): default = non-temporal stores from %s, cached = "
      "never, streaming = always\n",
      FormatBytes(comm::kDefaultStreamingStoreBytes).c_str());
  std::printf("%-15s %9s | %9s %9s %9s\n", "op", "size", "default", "cached", "streaming");
  for (Op op : kOps) {
    for (uint64_t bytes : sizes) {
      const double factor = BusFactor(op, G);
      const double bw = factor * static_cast<double>(bytes) / 1e9;
      std::printf("%-15s %9s | %9.2f", OpKey(op), FormatBytes(bytes).c_str(),
                  bw / ours_.at({OpKey(op), bytes}).first);
      for (const Variant& v : variants_) {
        const double secs = variant_secs_.at({v.impl, OpKey(op), bytes});
        std::printf(" %9.2f", bw / secs);
        report->Add({{"op", OpKey(op)},
                     {"impl", v.impl},
                     {"groups", G},
                     {"threads_per_group", tpg_},
                     {"bytes", bytes},
                     {"seconds", secs},
                     {"busbw_gbs", bw / secs}});
      }
      std::printf("\n");
    }
  }
}

void CollectivesSuite::Run(const BenchContext& ctx, SuiteRecords* report) {
  // WaitWord's automatic spin limit counts the CPUs of the first thread that asks, once; ask
  // from this (unpinned) thread before any pinned worker exists, or a worker's single-CPU mask
  // would make every wait sleep after 64 pauses (seen: 4 KiB reduce-scatter at ~50 us instead
  // of 0.3 us in some runs).
  (void)SpinLimit();
  const topo::Topology topo = topo::LoadTopology(ctx.config.topology);
  const GroupLayout layout = ResolveLayout(ctx.config, topo);
  const int G = static_cast<int>(layout.cpus.size());
  const std::vector<uint64_t> sizes = Sizes(ctx.quick);
  const RepPolicy policy = ctx.quick ? RepPolicy{0.02, 3, 10} : RepPolicy{0.25, 5, 100};
  if (!no_variants_) variants_ = {{"cputrain-cached", 0}, {"cputrain-streaming", 1}};

  // 1. STREAM on the real machine, all allowed CPUs, pinned.
  const StreamResult stream = MeasureMachineStream(topo, ctx.quick, G, report);
  // 2. Ours, with the store-policy variants.
  const std::string placement = MeasureOurs(layout, topo, sizes, policy);
  // 3. Open MPI on the same machine.
  const std::string mpi_note = RunMpi(G, sizes, policy);

  // 4. Table and records.
  std::printf(
      "collectives: G=%d group%s (%s), threads per group %s, CPUs %s, %s\n", G, G > 1 ? "s" : "",
      layout.how.c_str(), fmt::format("{}", fmt::join(tpg_, ",")).c_str(), placement.c_str(),
      layout.pin
          ? "pinned"
          : (topo.simulated ? "simulated topology: not pinned" : "oversubscribed: not pinned"));
  std::printf("%s\n", mpi_note.c_str());
  std::printf(
      "memory: STREAM copy %.1f GB/s, triad %.1f GB/s; with non-temporal stores copy %.1f, "
      "triad %.1f (%d threads, 3 x %s arrays, best of %d)%s\n",
      stream.copy_gbs, stream.triad_gbs, stream.copy_nt_gbs, stream.triad_nt_gbs, stream.threads,
      FormatBytes(stream.array_bytes).c_str(), ctx.quick ? 3 : 5,
      topo.simulated ? " on the real machine" : "");
  std::printf(
      "bound = bytes moved (docs/collectives.md) / the better STREAM bandwidth of each kernel "
      "kind; %% bound = ours / bound busbw (above 100%% = part of the data was in cache)\n\n");
  PrintTable(G, sizes, stream, report);
  PrintVariants(G, sizes, report);
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<Suite> MakeCollectivesSuite() { return std::make_unique<CollectivesSuite>(); }

}  // namespace cputrain::bench
